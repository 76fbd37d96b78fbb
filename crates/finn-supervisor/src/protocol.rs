//! The messages between the addon, the supervisor and the job reapers.
//!
//! Addon -> supervisor: [`ToSupervisor::NewReaper`]; the answer is
//! [`FromSupervisor::ReaperReady`] with the addon's end of a new socket to that reaper attached,
//! or [`FromSupervisor::ReaperFailed`] when no reaper could be made (a process limit a job's
//! command filled).
//! Addon -> reaper: [`ToReaper::Run`] (stdout and stderr write ends attached), then any number
//! of [`ToReaper::Terminate`]. Reaper -> addon, per job: `Spawned`, `SpawnFailed` or
//! `PrepareFailed` (an isolation layer could not be set up; nothing ran); after `Spawned`,
//! `Exited` once the leader is reaped and `TreeGone` once the reaper has no child left, with
//! `TimedOut` before them when the reaper stopped the job at its own deadline.
//! `Spawned` waits up to 1 ms to go out in the same write as those two (a short command then
//! wakes the addon's worker thread once); `Terminate` is only sent after it.

use std::ffi::CString;
use std::io;

use super::wire::{Reader, Writer};
use finn_exec::{ExitStatus, SpawnSpec};
use finn_isolate::{Layer, LayerFailed, Plan};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToSupervisor {
  /// `landlock`: the landlock ABI the reaper may use for a domain of its own around its
  /// commands (see `shield::confine`); for jobs without isolation, whose commands have no
  /// domain of their own. 0: none (an isolated job's ruleset is its domain).
  NewReaper { landlock: u8 },
  /// A channel to the pool's egress proxy for a job with a network allowlist (`network`: its
  /// `NetworkOptions` as JSON, `job`: its name in the audit). The supervisor starts the proxy
  /// at the first one.
  EgressJob { job: String, network: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromSupervisor {
  /// A reaper is ready; the addon's end of its socket is attached.
  ReaperReady { pid: i32 },
  /// No reaper could be made (`fork` or `socketpair` failed with `errno`); the supervisor
  /// goes on.
  ReaperFailed { errno: i32 },
  /// The job's end of its channel to the proxy is attached, and when `audit`, after it, the
  /// read end of the proxy's audit socket (sent once per proxy process: its audit entries,
  /// one JSON object a message).
  EgressReady { audit: bool },
  /// No channel: the proxy could not be started or refused the job.
  EgressFailed { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToReaper {
  /// Start `spec`; its stdout and stderr write ends are attached, in that order. Once the
  /// leader exits, whatever else of the tree is left is killed after `drain_ms`.
  /// `isolation`: the layers the reaper prepares and applies between fork and exec.
  Run {
    spec: Box<SpawnSpec>,
    drain_ms: u64,
    /// After the job, how long the reaper polls for the next `Run` before it sleeps: the
    /// addon asks for it when it sent the job from Node's thread (sequential use, where the
    /// next `Run` comes within a few hundred microseconds), never from a worker running a
    /// queue (there the polling would take the CPU from the thread about to send it).
    linger_us: u32,
    /// The job's deadline, kept by the reaper itself: the addon's side may be a thread that
    /// cannot run when it is due (Node's, busy with JS, for a job sent inline).
    timeout: Option<Timeout>,
    isolation: Option<Box<Plan>>,
    /// The plan's checked fds attached after the two pipes (`Plan::checked`).
    attached: Attached,
  },
  /// Terminate the tree: SIGTERM now, SIGKILL after `grace_ms` (zero: SIGKILL now). A second
  /// request can only bring the SIGKILL forward.
  Terminate { grace_ms: u64 },
  /// A session's command is over its time: SIGKILL every process of the tree except the
  /// leader (the session's shell), which lives on with its state. Escapees are found as for
  /// any job: the reaper is their subreaper.
  EndCommand,
  /// Send signal `signo` to every process of the running job's tree (frozen first, so a fork
  /// cannot slip past it, then resumed), without ending the job; ignored between jobs.
  Signal { signo: i32 },
}

/// A job's deadline as its reaper keeps it: `after_ms` from the `Run`, the tree gets SIGTERM,
/// and SIGKILL `grace_ms` later (zero: SIGKILL at once), unless the leader has exited first
/// (the drain bounds the rest then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
  pub after_ms: u64,
  pub grace_ms: u64,
}

impl Timeout {
  /// A job's time limit and grace (`None`: no time limit).
  pub fn of(limit: Option<std::time::Duration>, grace: std::time::Duration) -> Option<Timeout> {
    limit.map(|after| Timeout {
      after_ms: after.as_millis().min(u64::MAX as u128) as u64,
      grace_ms: grace.as_millis().min(u64::MAX as u128) as u64,
    })
  }
}

/// What follows a `Run`'s stdout and stderr write ends: the read end of the command's stdin
/// pipe (if it has one: else its stdin is `/dev/null`), then the checked fds, the cwd's (if
/// any), then the writable roots'.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attached {
  pub stdin: bool,
  pub cwd: bool,
  pub writable: u32,
}

impl Attached {
  pub fn of(plan: Option<&Plan>) -> Attached {
    plan.map_or_else(Attached::default, |p| Attached {
      stdin: false,
      cwd: p.checked.cwd.is_some(),
      writable: p.checked.writable.len() as u32,
    })
  }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromReaper {
  Spawned {
    pid: i32,
  },
  /// The errno of `posix_spawn` (or of the child's own setup before `exec`).
  SpawnFailed {
    errno: i32,
  },
  /// An isolation layer could not be set up, in the reaper before the fork or in the child
  /// before `exec`: the command did not run.
  PrepareFailed(LayerFailed),
  Exited(ExitStatus),
  /// The job's deadline passed with its leader running: the reaper is terminating the tree
  /// (sent after `Spawned`, before `Exited`).
  TimedOut,
  /// The reaper has no child left: every process of the job's tree is gone.
  TreeGone,
  /// The reaper was idle for too long and exits without reading anything more: a `Run` sent
  /// to it meanwhile was not started, and can go to another reaper.
  Retired,
  /// After `EndCommand`: every process of the tree but the leader is gone (or the reaper's
  /// bound passed: `all_gone` false).
  CommandEnded {
    all_gone: bool,
  },
}

const NEW_REAPER: u8 = 1;
const REAPER_READY: u8 = 2;
const RUN: u8 = 3;
const TERMINATE: u8 = 4;
const SPAWNED: u8 = 5;
const SPAWN_FAILED: u8 = 6;
const EXITED: u8 = 7;
const SIGNALED: u8 = 8;
const TREE_GONE: u8 = 9;
const RETIRED: u8 = 10;
const REAPER_FAILED: u8 = 11;
const TIMED_OUT: u8 = 12;
const PREPARE_FAILED: u8 = 13;
const END_COMMAND: u8 = 14;
const COMMAND_ENDED: u8 = 15;
const SIGNAL: u8 = 16;
const EGRESS_JOB: u8 = 17;
const EGRESS_READY: u8 = 18;
const EGRESS_FAILED: u8 = 19;

fn unknown(tag: u8) -> io::Error {
  io::Error::new(
    io::ErrorKind::InvalidData,
    format!("unknown message tag {tag}"),
  )
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
  CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in a string"))
}

fn c_strings(r: &mut Reader) -> io::Result<Vec<CString>> {
  let n = r.u32()? as usize;
  // Each entry takes at least its 4-byte length: a count beyond that is corrupt, and must not
  // reserve memory for it.
  if n > r.0.len() / 4 {
    return Err(io::Error::new(
      io::ErrorKind::InvalidData,
      "count too large",
    ));
  }
  let mut out = Vec::with_capacity(n);
  for _ in 0..n {
    out.push(c_string(r.bytes()?)?);
  }
  Ok(out)
}

impl ToSupervisor {
  pub fn encode(&self) -> Vec<u8> {
    match self {
      ToSupervisor::NewReaper { landlock } => vec![NEW_REAPER, *landlock],
      ToSupervisor::EgressJob { job, network } => {
        let mut w = Writer::default();
        w.u8(EGRESS_JOB)
          .bytes(job.as_bytes())
          .bytes(network.as_bytes());
        w.0
      }
    }
  }

  pub fn decode(frame: &[u8]) -> io::Result<Self> {
    let mut r = Reader(frame);
    let text = |b: &[u8]| {
      String::from_utf8(b.to_vec())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
    };
    let msg = match r.u8()? {
      NEW_REAPER => ToSupervisor::NewReaper { landlock: r.u8()? },
      EGRESS_JOB => ToSupervisor::EgressJob {
        job: text(r.bytes()?)?,
        network: text(r.bytes()?)?,
      },
      tag => return Err(unknown(tag)),
    };
    r.end()?;
    Ok(msg)
  }
}

impl FromSupervisor {
  pub fn encode(&self) -> Vec<u8> {
    let mut w = Writer::default();
    match self {
      FromSupervisor::ReaperReady { pid } => w.u8(REAPER_READY).i32(*pid),
      FromSupervisor::ReaperFailed { errno } => w.u8(REAPER_FAILED).i32(*errno),
      FromSupervisor::EgressReady { audit } => w.u8(EGRESS_READY).u8(*audit as u8),
      FromSupervisor::EgressFailed { reason } => w.u8(EGRESS_FAILED).bytes(reason.as_bytes()),
    };
    w.0
  }

  pub fn decode(frame: &[u8]) -> io::Result<Self> {
    let mut r = Reader(frame);
    let msg = match r.u8()? {
      REAPER_READY => FromSupervisor::ReaperReady { pid: r.i32()? },
      REAPER_FAILED => FromSupervisor::ReaperFailed { errno: r.i32()? },
      EGRESS_READY => FromSupervisor::EgressReady {
        audit: r.u8()? != 0,
      },
      EGRESS_FAILED => FromSupervisor::EgressFailed {
        reason: String::from_utf8_lossy(r.bytes()?).into_owned(),
      },
      tag => return Err(unknown(tag)),
    };
    r.end()?;
    Ok(msg)
  }
}

impl ToReaper {
  pub fn encode(&self) -> Vec<u8> {
    match self {
      ToReaper::Run {
        spec,
        drain_ms,
        linger_us,
        timeout,
        isolation,
        attached,
      } => Self::encode_run_with(
        spec,
        *drain_ms,
        *linger_us,
        *timeout,
        isolation.as_deref(),
        *attached,
      ),
      ToReaper::Terminate { grace_ms } => {
        let mut w = Writer::default();
        w.u8(TERMINATE).u64(*grace_ms);
        w.0
      }
      ToReaper::EndCommand => vec![END_COMMAND],
      ToReaper::Signal { signo } => {
        let mut w = Writer::default();
        w.u8(SIGNAL).i32(*signo);
        w.0
      }
    }
  }

  /// `Run` encoded straight from a borrowed spec (the hot path: no copy of argv and env).
  /// With the plan's own checked fds attached (`Plan::checked`, sent by the caller), and a
  /// stdin pipe's read end before them when `stdin`.
  pub fn encode_run(
    spec: &SpawnSpec,
    drain_ms: u64,
    linger_us: u32,
    timeout: Option<Timeout>,
    isolation: Option<&Plan>,
    stdin: bool,
  ) -> Vec<u8> {
    Self::encode_run_with(
      spec,
      drain_ms,
      linger_us,
      timeout,
      isolation,
      Attached {
        stdin,
        ..Attached::of(isolation)
      },
    )
  }

  fn encode_run_with(
    spec: &SpawnSpec,
    drain_ms: u64,
    linger_us: u32,
    timeout: Option<Timeout>,
    isolation: Option<&Plan>,
    attached: Attached,
  ) -> Vec<u8> {
    let size = 64
      + spec.program.as_bytes().len()
      + spec.cwd.as_bytes().len()
      + [&spec.argv, &spec.env]
        .iter()
        .flat_map(|l| l.iter())
        .map(|s| 4 + s.as_bytes().len())
        .sum::<usize>();
    let mut w = Writer(Vec::with_capacity(size));
    w.u8(RUN).u64(drain_ms).u32(linger_us);
    match timeout {
      Some(t) => w.u8(1).u64(t.after_ms).u64(t.grace_ms),
      None => w.u8(0),
    };
    w.bytes(spec.program.as_bytes()).bytes(spec.cwd.as_bytes());
    for list in [&spec.argv, &spec.env] {
      w.u32(list.len() as u32);
      for s in list {
        w.bytes(s.as_bytes());
      }
    }
    // The plan as JSON (empty: no isolation): it is small, and only isolated jobs pay for it.
    let plan = isolation.map(|p| serde_json::to_vec(p).expect("a plan always serializes"));
    w.bytes(plan.as_deref().unwrap_or_default());
    w.u8(attached.cwd as u8)
      .u32(attached.writable)
      .u8(attached.stdin as u8);
    w.0
  }

  pub fn decode(frame: &[u8]) -> io::Result<Self> {
    let mut r = Reader(frame);
    let msg = match r.u8()? {
      RUN => {
        let drain_ms = r.u64()?;
        let linger_us = r.u32()?;
        let timeout = match r.u8()? {
          0 => None,
          1 => Some(Timeout {
            after_ms: r.u64()?,
            grace_ms: r.u64()?,
          }),
          _ => {
            return Err(io::Error::new(
              io::ErrorKind::InvalidData,
              "bad timeout flag",
            ));
          }
        };
        let program = c_string(r.bytes()?)?;
        let cwd = c_string(r.bytes()?)?;
        let argv = c_strings(&mut r)?;
        let env = c_strings(&mut r)?;
        let plan = r.bytes()?;
        let isolation = if plan.is_empty() {
          None
        } else {
          Some(Box::new(serde_json::from_slice(plan).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("isolation plan: {e}"))
          })?))
        };
        let attached = Attached {
          cwd: r.u8()? != 0,
          writable: r.u32()?,
          stdin: r.u8()? != 0,
        };
        if attached.writable as usize > finn_isolate::MAX_WRITABLE_ROOTS {
          return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many checked fds",
          ));
        }
        ToReaper::Run {
          spec: Box::new(SpawnSpec {
            program,
            argv,
            env,
            cwd,
          }),
          drain_ms,
          linger_us,
          timeout,
          isolation,
          attached,
        }
      }
      TERMINATE => ToReaper::Terminate { grace_ms: r.u64()? },
      END_COMMAND => ToReaper::EndCommand,
      SIGNAL => ToReaper::Signal { signo: r.i32()? },
      tag => return Err(unknown(tag)),
    };
    r.end()?;
    Ok(msg)
  }
}

impl FromReaper {
  pub fn encode(&self) -> Vec<u8> {
    let mut w = Writer::default();
    match self {
      FromReaper::Spawned { pid } => w.u8(SPAWNED).i32(*pid),
      FromReaper::SpawnFailed { errno } => w.u8(SPAWN_FAILED).i32(*errno),
      FromReaper::PrepareFailed(f) => {
        use std::os::unix::ffi::OsStrExt;
        let path = f.path.as_ref().map(|p| p.as_os_str().as_bytes());
        w.u8(PREPARE_FAILED)
          .u8(f.layer.id())
          .i32(f.errno as i32)
          .bytes(path.unwrap_or_default())
      }
      FromReaper::Exited(ExitStatus::Exited(code)) => w.u8(EXITED).i32(*code),
      FromReaper::Exited(ExitStatus::Signaled(sig)) => w.u8(SIGNALED).i32(*sig),
      FromReaper::TimedOut => w.u8(TIMED_OUT),
      FromReaper::TreeGone => w.u8(TREE_GONE),
      FromReaper::Retired => w.u8(RETIRED),
      FromReaper::CommandEnded { all_gone } => w.u8(COMMAND_ENDED).u8(*all_gone as u8),
    };
    w.0
  }

  pub fn decode(frame: &[u8]) -> io::Result<Self> {
    let mut r = Reader(frame);
    let msg = match r.u8()? {
      SPAWNED => FromReaper::Spawned { pid: r.i32()? },
      SPAWN_FAILED => FromReaper::SpawnFailed { errno: r.i32()? },
      PREPARE_FAILED => {
        use std::os::unix::ffi::OsStrExt;
        let layer = r.u8()?;
        let layer = Layer::from_id(layer).ok_or_else(|| {
          io::Error::new(io::ErrorKind::InvalidData, format!("unknown layer {layer}"))
        })?;
        let errno = nix::errno::Errno::from_raw(r.i32()?);
        let path = r.bytes()?;
        FromReaper::PrepareFailed(LayerFailed {
          layer,
          errno,
          path: (!path.is_empty()).then(|| std::ffi::OsStr::from_bytes(path).into()),
        })
      }
      EXITED => FromReaper::Exited(ExitStatus::Exited(r.i32()?)),
      SIGNALED => FromReaper::Exited(ExitStatus::Signaled(r.i32()?)),
      TIMED_OUT => FromReaper::TimedOut,
      TREE_GONE => FromReaper::TreeGone,
      RETIRED => FromReaper::Retired,
      COMMAND_ENDED => FromReaper::CommandEnded {
        all_gone: r.u8()? != 0,
      },
      tag => return Err(unknown(tag)),
    };
    r.end()?;
    Ok(msg)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn every_message_round_trips() {
    let c = |s: &str| CString::new(s).unwrap();
    let run = ToReaper::Run {
      spec: Box::new(SpawnSpec {
        program: c("/bin/sh"),
        argv: vec![c("sh"), c("-c"), c("echo é")],
        env: vec![c("PATH=/bin"), c("EMPTY=")],
        cwd: c("/tmp"),
      }),
      drain_ms: 100,
      linger_us: 0,
      timeout: None,
      isolation: None,
      attached: Attached::default(),
    };
    let opts =
      finn_isolate::IsolationOptions::from_json(serde_json::json!({"mode": "auto"})).unwrap();
    let plan = Plan::resolve(&opts, std::path::Path::new("/tmp"), finn_isolate::probe())
      .unwrap()
      .unwrap();
    let ToReaper::Run { spec, .. } = &run else {
      unreachable!()
    };
    // The checked fds travel beside the frame: decoded, the plan has none, the counts stay.
    let attached = Attached::of(Some(&plan));
    assert_eq!(
      attached,
      Attached {
        stdin: false,
        cwd: true,
        writable: 1
      }
    );
    let attached = Attached {
      stdin: true,
      ..attached
    };
    let plan = Plan {
      checked: Default::default(),
      ..plan
    };
    let isolated = ToReaper::Run {
      spec: spec.clone(),
      drain_ms: 100,
      linger_us: 600,
      timeout: Some(Timeout {
        after_ms: 200,
        grace_ms: 0,
      }),
      isolation: Some(Box::new(plan)),
      attached,
    };
    for msg in [
      run,
      isolated,
      ToReaper::Terminate { grace_ms: 5 },
      ToReaper::EndCommand,
      ToReaper::Signal { signo: 2 },
    ] {
      assert_eq!(ToReaper::decode(&msg.encode()).unwrap(), msg);
    }
    for msg in [
      FromReaper::Spawned { pid: 42 },
      FromReaper::SpawnFailed { errno: 2 },
      FromReaper::PrepareFailed(LayerFailed::new(Layer::Landlock, nix::errno::Errno::EPERM)),
      FromReaper::PrepareFailed(LayerFailed {
        layer: Layer::Cgroup,
        errno: nix::errno::Errno::EACCES,
        path: Some("/sys/fs/cgroup/pids/finn-sandbox/job".into()),
      }),
      FromReaper::Exited(ExitStatus::Exited(3)),
      FromReaper::Exited(ExitStatus::Signaled(9)),
      FromReaper::TimedOut,
      FromReaper::TreeGone,
      FromReaper::Retired,
      FromReaper::CommandEnded { all_gone: true },
      FromReaper::CommandEnded { all_gone: false },
    ] {
      assert_eq!(FromReaper::decode(&msg.encode()).unwrap(), msg);
    }
    for msg in [
      FromSupervisor::ReaperReady { pid: 7 },
      FromSupervisor::ReaperFailed { errno: 11 },
      FromSupervisor::EgressReady { audit: true },
      FromSupervisor::EgressReady { audit: false },
      FromSupervisor::EgressFailed {
        reason: "network.allow[0]: \"*\"".into(),
      },
    ] {
      assert_eq!(FromSupervisor::decode(&msg.encode()).unwrap(), msg);
    }
    for landlock in [0, 1, 6, 255] {
      let new = ToSupervisor::NewReaper { landlock };
      assert_eq!(ToSupervisor::decode(&new.encode()).unwrap(), new);
    }
    let job = ToSupervisor::EgressJob {
      job: "j1".into(),
      network: r#"{"allow":["a.test"]}"#.into(),
    };
    assert_eq!(ToSupervisor::decode(&job.encode()).unwrap(), job);
  }

  #[test]
  fn corrupt_frames_are_refused() {
    assert!(FromReaper::decode(&[]).is_err());
    assert!(FromReaper::decode(&[99]).is_err());
    assert!(FromReaper::decode(&[TREE_GONE, 0]).is_err());
    // A failed layer: an id no layer has, and one cut before its errno.
    let mut w = Writer::default();
    w.u8(PREPARE_FAILED).u8(0).i32(1).bytes(b"");
    assert!(FromReaper::decode(&w.0).is_err());
    assert!(FromReaper::decode(&[PREPARE_FAILED, Layer::Seccomp.id(), 1]).is_err());
    // A huge argv count with nothing behind it.
    let mut w = Writer::default();
    w.u8(RUN)
      .u64(0)
      .u32(0)
      .u8(0)
      .bytes(b"/bin/true")
      .bytes(b"/")
      .u32(u32::MAX);
    assert!(ToReaper::decode(&w.0).is_err());
    // A whole `Run` frame with the given timeout flag, program, cwd flag and writable count.
    let run = |timeout: u8, program: &[u8], cwd: u8, writable: u32| {
      let mut w = Writer::default();
      w.u8(RUN)
        .u64(0)
        .u32(0)
        .u8(timeout)
        .bytes(program)
        .bytes(b"/")
        .u32(0)
        .u32(0)
        .bytes(b"")
        .u8(cwd)
        .u32(writable)
        .u8(0);
      w.0
    };
    // A NUL inside a string.
    assert!(ToReaper::decode(&run(0, b"/bin/t\0rue", 0, 0)).is_err());
    // More checked fds than a job may have.
    assert!(ToReaper::decode(&run(0, b"/bin/true", 1, 1000)).is_err());
    // A timeout flag other than 0 or 1.
    assert!(ToReaper::decode(&run(2, b"/bin/true", 0, 0)).is_err());
    // The same frame with no timeout decodes (the cases above fail for their own reason).
    assert!(ToReaper::decode(&run(0, b"/bin/true", 0, 0)).is_ok());
  }
}
