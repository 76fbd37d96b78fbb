//! Issue 17: "rules built from the fd that passed the cwd check (`O_PATH`), not from a path
//! re-resolved later". The addon checks the job's cwd and writable roots (`Plan::resolve`, the
//! jail check in `pool/job.rs`), then the job's reaper builds landlock's rules, the mounts and
//! bwrap's binds. A host thread that swaps the checked directory in between (renamed away, and
//! a different directory or a symlink to outside put at its name) must not get a single write
//! outside. Judged from the host, through an fd to the outside directory opened first (so a
//! rename cannot hide a write), never from the command's output.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use finn_sandbox::core::exec::{RunLimits, SpawnSpec, StopCell};
use finn_sandbox::core::isolate::{CheckedRoots, IsolationOptions, Plan, probe};
use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, RawJob};
use finn_sandbox::core::supervisor::{self, JobTerms, Supervisor};
use serde_json::{Value, json};

mod common;
use common::exchange;
use tokio::runtime::Handle;

fn can_ns() -> bool {
  probe().sys_admin || probe().userns
}

fn bwrap_runs() -> bool {
  probe().bwrap.is_some() && can_ns()
}

/// `<base>/jail/w` (the checked cwd and writable root), `<base>/jail/alt`, `<base>/out`.
struct Dirs {
  _t: tempfile::TempDir,
  jail: PathBuf,
  w: PathBuf,
  alt: PathBuf,
  out: PathBuf,
  /// The outside directory itself, wherever it is renamed to.
  out_fd: std::fs::File,
}

fn dirs() -> Dirs {
  let t = tempfile::Builder::new()
    .prefix("finn-race")
    .tempdir()
    .unwrap();
  let base = t.path().canonicalize().unwrap();
  let (jail, out) = (base.join("jail"), base.join("out"));
  let (w, alt) = (jail.join("w"), jail.join("alt"));
  for d in [&jail, &w, &out] {
    std::fs::create_dir(d).unwrap();
  }
  let out_fd = std::fs::File::open(&out).unwrap();
  Dirs {
    _t: t,
    jail,
    w,
    alt,
    out,
    out_fd,
  }
}

impl Dirs {
  /// Files written into the outside directory (whatever its name now).
  fn landed_outside(&self) -> usize {
    let p = format!(
      "/proc/self/fd/{}",
      std::os::fd::AsRawFd::as_raw_fd(&self.out_fd)
    );
    std::fs::read_dir(p).unwrap().count()
  }
}

/// The native plan of a job in `w` that may write `w` and `other`, with both checked fds.
fn two_root_plan(w: &Path, other: &Path) -> Plan {
  let o = IsolationOptions::from_json(json!({
    "mode": "native",
    "fs": {"writable": [w.to_str().unwrap(), other.to_str().unwrap()]}
  }))
  .unwrap();
  let plan = Plan::resolve(&o, w, probe()).unwrap().unwrap();
  assert_eq!(plan.checked.writable.len(), 2);
  plan
}

fn cstr(p: &Path) -> CString {
  CString::new(p.to_str().unwrap()).unwrap()
}

const SCRIPT: &str = "for i in 1 2 3 4 5; do echo pwn > f$i$RANDOM; done 2>/dev/null";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Swap {
  /// The checked root renamed away and the outside directory renamed to its name.
  Directory,
  /// The checked root renamed away and a symlink to outside put at its name.
  Symlink,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Rules {
  /// `mode: "off"`: the attack must land at all.
  Off,
  /// The plan without its checked fds: the reaper's fallback, by canonical path.
  Paths,
  /// The plan as the addon sends it: rules from the checked fds.
  Fds,
}

/// The swap placed in the window every time: the addon's check (`Plan::resolve`, which opens
/// the fds), then the swap, then `Run` to a reaper, which builds the rules. No timing involved:
/// every command meets the swapped directory.
fn swapped_between_check_and_run(opts: Value, backend: &str) {
  let sup = Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")));
  let limits = RunLimits {
    timeout: Some(Duration::from_secs(20)),
    max_output_bytes: 1 << 16,
    kill_grace: Duration::from_millis(100),
  };
  const COMMANDS: usize = 40;
  for swap in [Swap::Directory, Swap::Symlink] {
    for rules in [Rules::Off, Rules::Paths, Rules::Fds] {
      let (mut landed, mut ran) = (0, 0);
      let mut refused: Vec<String> = Vec::new();
      let mut mountns = false;
      for _ in 0..COMMANDS {
        let d = dirs();
        let mode = if rules == Rules::Off {
          json!({"mode": "off"})
        } else {
          opts.clone()
        };
        let o = IsolationOptions::from_json(mode).unwrap();
        // The check.
        let mut plan = Plan::resolve(&o, &d.w, probe()).unwrap();
        mountns = plan.as_ref().is_some_and(|p| p.layers.mountns);
        if rules == Rules::Paths
          && let Some(p) = &mut plan
        {
          p.checked = CheckedRoots::default();
        }
        // The swap, after the check and before the reaper builds anything.
        let held = d.jail.join("w-checked");
        std::fs::rename(&d.w, &held).unwrap();
        match swap {
          Swap::Directory => std::fs::rename(&d.out, &d.w).unwrap(),
          Swap::Symlink => std::os::unix::fs::symlink(&d.out, &d.w).unwrap(),
        }
        let spec = SpawnSpec {
          program: CString::new("/bin/bash").unwrap(),
          argv: ["bash", "-c", SCRIPT]
            .iter()
            .map(|s| CString::new(*s).unwrap())
            .collect(),
          env: vec![CString::new("PATH=/usr/bin:/bin").unwrap()],
          cwd: cstr(&d.w),
        };
        let stop = StopCell::<()>::new();
        let r = supervisor::run_blocking(
          &sup,
          JobTerms {
            spec: &spec,
            isolation: plan.as_ref(),
            limits: &limits,
          },
          Duration::from_millis(100),
          &stop,
          &mut finn_sandbox::core::exec::later::Nothing,
          |_| (),
        );
        match r {
          Ok(_) => ran += 1,
          Err(e) => refused.push(e.to_string()),
        }
        landed += d.landed_outside();
      }
      eprintln!("{backend} {swap:?} {rules:?}: {landed} writes outside in {ran} commands");
      match rules {
        Rules::Off => assert!(landed > 0, "{swap:?} off: the attack never landed"),
        Rules::Fds => assert_eq!(
          landed, 0,
          "{backend} {swap:?}: {landed} writes outside in {ran} commands"
        ),
        // Only recorded: the fallback's own strength (a symlink is refused, a directory is not).
        Rules::Paths => {}
      }
      if rules == Rules::Fds {
        if backend == "native" && mountns {
          // The native mount namespace binds each writable root back writable, checked against
          // the identity the addon's fd recorded: a root swapped since fails the mount layer
          // (ESTALE for another directory, ELOOP for a symlink), which refuses the job rather
          // than binding what now has its name.
          assert_eq!(ran, 0, "{backend} {swap:?}: a swapped root started");
          assert!(
            refused.iter().all(|e| e.contains("the mountns layer")
              && (e.contains("(ESTALE)") || e.contains("(ELOOP)"))),
            "{refused:?}"
          );
        } else {
          assert_eq!(
            ran, COMMANDS,
            "{backend} {swap:?}: some commands did not run: {refused:?}"
          );
        }
      }
    }
  }
}

/// Native backend: landlock's write grant, the cwd and the `.git`/protect checks from the fds.
#[test]
fn native_rules_come_from_the_checked_fds() {
  swapped_between_check_and_run(json!({"mode": "native"}), "native");
}

/// bwrap backend: the writable roots bound from the fds (`--bind-fd`).
#[test]
fn bwrap_binds_come_from_the_checked_fds() {
  if !bwrap_runs() {
    eprintln!("skipped: bwrap cannot run here");
    return;
  }
  swapped_between_check_and_run(json!({"mode": "bwrap"}), "bwrap");
}

/// The working directory swapped, after the check, for a symlink to another directory the
/// command may write (here inside the same writable root): the command must run in the checked
/// directory or not at all. The native backend enters it by its fd; bwrap by path (`--chdir`),
/// so the bind verifier checks inside the sandbox that it entered the checked object. The
/// directory the symlink names must get nothing.
#[test]
fn the_command_runs_only_in_the_checked_cwd() {
  let mut backends = vec!["native"];
  if bwrap_runs() {
    backends.push("bwrap");
  } else {
    eprintln!("bwrap: skipped (bwrap cannot run here)");
  }
  let sup = Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")));
  let limits = RunLimits {
    timeout: Some(Duration::from_secs(20)),
    max_output_bytes: 1 << 16,
    kill_grace: Duration::from_millis(100),
  };
  for backend in backends {
    let d = dirs();
    let (sub, elsewhere) = (d.w.join("sub"), d.w.join("elsewhere"));
    std::fs::create_dir(&sub).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let o = IsolationOptions::from_json(json!({
      "mode": backend,
      "fs": {"writable": [d.w.to_str().unwrap()]}
    }))
    .unwrap();
    // The check opens `sub` (the cwd) and `w` (the writable root).
    let plan = Plan::resolve(&o, &sub, probe()).unwrap().unwrap();
    let held = d.w.join("sub-checked");
    std::fs::rename(&sub, &held).unwrap();
    std::os::unix::fs::symlink("elsewhere", &sub).unwrap();
    let spec = SpawnSpec {
      program: CString::new("/usr/bin/touch").unwrap(),
      argv: vec![
        CString::new("touch").unwrap(),
        CString::new("made").unwrap(),
      ],
      env: vec![CString::new("PATH=/usr/bin:/bin").unwrap()],
      cwd: cstr(&sub),
    };
    let r = supervisor::run_blocking(
      &sup,
      JobTerms {
        spec: &spec,
        isolation: Some(&plan),
        limits: &limits,
      },
      Duration::from_millis(100),
      &StopCell::<()>::new(),
      &mut finn_sandbox::core::exec::later::Nothing,
      |_| (),
    );
    let shown = format!("{:?}", r.as_ref().map(|f| (f.exit_code(), &f.stderr)));
    assert!(
      !elsewhere.join("made").exists(),
      "{backend}: the command ran in the swapped-in directory: {shown}"
    );
    if held.join("made").exists() {
      assert_eq!(r.unwrap().exit_code(), 0, "{backend}");
    } else {
      // Refused before the command: the verifier names why.
      assert!(
        shown.contains("not the directory that was checked"),
        "{backend}: {shown}"
      );
    }
    eprintln!(
      "{backend}: ran in the checked directory: {}",
      held.join("made").exists()
    );
  }
}

fn pool() -> Pool {
  let config = PoolConfig {
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  Pool::new(config, Handle::current())
}

/// Through the pool, with a real race: a host thread swaps the job's cwd (a directory inside
/// `jailRoot`) with a symlink to outside, as fast as it can, while jobs with `jailRoot` run.
/// The pool's checks (the jail check, then the plan's fds, whose path is checked against the
/// jail again) and the reaper's rules must agree on one object: 0 writes outside. Off: the same
/// race lands writes outside (the jail check by path, then the command's chdir by path). The
/// bwrap backend, where it runs, enters the cwd by path too (`--chdir`): the object it entered
/// must be the checked one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cwd_swap_race_through_the_pool_never_escapes() {
  let modes: &[Option<&str>] = if bwrap_runs() {
    &[None, Some("auto"), Some("bwrap")]
  } else {
    eprintln!("bwrap: skipped (bwrap cannot run here)");
    &[None, Some("auto")]
  };
  for &mode in modes {
    let isolated = mode.is_some();
    let d = dirs();
    std::os::unix::fs::symlink(&d.out, &d.alt).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
      let (stop, a, b) = (stop.clone(), cstr(&d.w), cstr(&d.alt));
      std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
          exchange(&a, &b);
          exchange(&a, &b);
          std::thread::yield_now();
        }
      })
    };
    let p = pool();
    let iso = mode.map(|m| IsolationOptions::from_json(json!({ "mode": m })).unwrap());
    // Isolated: 300 jobs, none may land outside. Off, the control: jobs until the race is won
    // once, which takes a handful on an idle machine; on a loaded one the swapper may miss the
    // window for hundreds in a row, so the control gets ten times as many before it fails.
    let bound = if isolated { 300 } else { 3000 };
    let mut tries = 0;
    while tries < bound && (isolated || d.landed_outside() == 0) {
      tries += 1;
      let job = JobSpec::new(RawJob {
        binary_path: "/bin/bash".into(),
        args: vec!["-c".into(), SCRIPT.into()],
        cwd: d.w.to_str().unwrap().into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        jail_root: Some(d.jail.to_str().unwrap().into()),
        isolation: iso.clone(),
        ..RawJob::default()
      })
      .unwrap();
      let s = p.submit(job).unwrap();
      let _ = tokio::time::timeout(Duration::from_secs(20), s.result)
        .await
        .expect("settled");
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let n = d.landed_outside();
    eprintln!("pool mode={mode:?}: {n} writes outside in {tries} jobs");
    if isolated {
      assert_eq!(n, 0, "{n} writes outside in {tries} jobs");
    } else {
      assert!(n > 0, "off: the race was never won in {tries} jobs");
    }
  }
}

/// The checked fds are closed on every path: in the addon once the job is done, and in the
/// reaper after each job, whether it ran or its isolation failed to prepare (a protected path
/// that is a symlink). Counted from /proc, for the same reaper across jobs.
#[test]
fn the_checked_fds_are_closed_after_every_job() {
  let sup = Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")));
  let limits = RunLimits {
    timeout: Some(Duration::from_secs(20)),
    max_output_bytes: 1 << 16,
    kill_grace: Duration::from_millis(100),
  };
  let d = dirs();
  // Fds of `pid` open on anything in this test's directories (other tests run in this process
  // at the same time, and the pool's sockets come and go: only ours are counted).
  let base = d.jail.parent().unwrap().to_owned();
  let count = |pid: i32| {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
      .map(|dir| {
        dir
          .flatten()
          .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&base)))
          .count()
      })
      .unwrap_or(0)
  };
  let other = d.jail.join("other");
  std::fs::create_dir(&other).unwrap();
  std::fs::create_dir_all(d.w.join(".git")).unwrap();
  // The test's own (`Dirs::out_fd`).
  let ours = count(std::process::id() as i32);
  let mut reaper_fds: Vec<(i32, usize)> = Vec::new();
  let mut reapers = std::collections::BTreeSet::new();
  for i in 0..20 {
    // Every fourth job fails to prepare (protect is a symlink), the others run.
    let broken = i % 4 == 3;
    let hooks = d.w.join(".git/hooks");
    let _ = std::fs::remove_dir(&hooks).or_else(|_| std::fs::remove_file(&hooks));
    if broken {
      std::os::unix::fs::symlink(&d.out, &hooks).unwrap();
    } else {
      std::fs::create_dir(&hooks).unwrap();
    }
    let plan = two_root_plan(&d.w, &other);
    let spec = SpawnSpec {
      program: CString::new("/bin/true").unwrap(),
      argv: vec![CString::new("true").unwrap()],
      env: vec![],
      cwd: cstr(&d.w),
    };
    let stop = StopCell::<()>::new();
    let mut reaper = 0;
    let r = supervisor::run_blocking(
      &sup,
      JobTerms {
        spec: &spec,
        isolation: Some(&plan),
        limits: &limits,
      },
      Duration::from_millis(100),
      &stop,
      &mut finn_sandbox::core::exec::later::Nothing,
      |pid| reaper = pid,
    );
    drop(plan);
    if can_ns() {
      assert_eq!(r.is_err(), broken, "job {i}: {:?}", r.as_ref().err());
    }
    if reaper != 0 {
      reapers.insert(reaper);
    }
    // The job is done: no fd of the addon or of any reaper used so far is open on our
    // directories any more.
    assert_eq!(
      count(std::process::id() as i32),
      ours,
      "job {i}: the addon kept fds"
    );
    for &pid in &reapers {
      reaper_fds.push((pid, count(pid)));
    }
  }
  assert!(!reapers.is_empty());
  assert!(
    reaper_fds.iter().all(|(_, n)| *n == 0),
    "reapers kept fds: {reaper_fds:?}"
  );
}

/// The reaper refuses a `Run` whose checked fds do not match its plan's writable roots (only a
/// confused addon sends one): it exits without starting the command, rather than run it with
/// grants that no longer line up with the roots.
#[test]
fn a_run_with_fewer_checked_fds_than_writable_roots_starts_nothing() {
  use finn_sandbox::core::supervisor::protocol::{Attached, FromReaper, ToReaper};
  use std::os::fd::AsRawFd;
  let d = dirs();
  let other = d.jail.join("other");
  std::fs::create_dir(&other).unwrap();
  let plan = two_root_plan(&d.w, &other);
  let marker = d.w.join("ran");
  let spec = SpawnSpec {
    program: CString::new("/usr/bin/touch").unwrap(),
    argv: vec![CString::new("touch").unwrap(), cstr(&marker)],
    env: vec![],
    cwd: cstr(&d.w),
  };
  // The cwd's fd and the first root's, not the second's.
  let mut checked = plan.checked.raw_fds();
  checked.pop();
  let attached = Attached {
    stdin: false,
    cwd: plan.checked.cwd.is_some(),
    writable: 1,
  };
  let (_out_r, out_w) = nix::unistd::pipe().unwrap();
  let (_err_r, err_w) = nix::unistd::pipe().unwrap();
  let mut fds = vec![out_w.as_raw_fd(), err_w.as_raw_fd()];
  fds.extend(checked);
  // The message owns the plan, and the plan the checked fds: it lives until they are sent.
  let message = ToReaper::Run {
    spec: Box::new(spec),
    drain_ms: 100,
    linger_us: 0,
    timeout: None,
    isolation: Some(Box::new(plan)),
    attached,
  };
  let sup = Supervisor::new(env!("CARGO_BIN_EXE_finn-supervisor").into());
  let mut reaper = sup.checkout(0).unwrap();
  reaper.conn.send(&message.encode(), &fds).unwrap();
  drop((out_w, err_w, message));
  // The reaper exits: its socket ends without a report (a `Spawned` would mean it ran).
  let answer = reaper.conn.recv();
  assert!(
    matches!(answer, Ok(None)),
    "{:?}",
    answer.map(|f| f.map(|f| FromReaper::decode(&f)))
  );
  assert!(!marker.exists(), "the command ran");
}
