//! Background processes: a command started on the pool's supervisor like a job (a reaper of its
//! own, the same subreaper containment and the same [`finn_exec::lifecycle::Lifecycle`]), whose
//! output streams to a sink as it is read instead of being captured, on a thread of its own. It
//! takes no slot of a lane (a server may run for hours), but counts as running: `shutdown()`
//! terminates it and waits for its tree, `kill_all_now()` kills it, and the supervisor stays
//! while it runs.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use super::config::JobSpec;
use super::error::{NoThread, PoolError};
use super::job::{self, Prepared};
use super::pool::Pool;
use super::state::{Inner, Running, StopReason};
use finn_exec::capture::Stream;
use finn_exec::pipes::Streaming;
use finn_exec::{EndedBy, ExitStatus, Stop, StopCell};
use finn_supervisor::RunError;
use finn_supervisor::run::{Outgoing, run_streaming};

/// What a background process runs: a job's spec (its `timeout_ms` and `max_buffer` unused), its
/// own deadline, and whether it gets a stdin pipe.
pub struct ProcessSpec {
  pub job: JobSpec,
  /// `None`: no deadline.
  pub timeout: Option<Duration>,
  /// A pipe for the command's stdin (else `/dev/null`): its write end is the handle's.
  pub stdin: bool,
}

/// How a background process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEnd {
  /// Its tree is gone. `status`: the command's (`None` only when it could not be reaped within
  /// the hard bound); `ended_by`: its own exit, its deadline, a kill or the shutdown.
  Ended {
    status: Option<ExitStatus>,
    ended_by: EndedBy<StopReason>,
  },
  /// It could not run, or its supervisor failed (its tree is killed by whichever is left).
  Failed(PoolError),
}

/// Where a background process's life goes, called on its thread in this order: `spawned` once
/// (unless it fails before), `output` for each read, `ended` once. `output` may block: the
/// command's writes then wait in its full pipe.
pub trait ProcessSink: Send + 'static {
  /// The command runs as `pid` (the command's own, not its reaper's).
  fn spawned(&mut self, pid: i32);
  fn output(&mut self, stream: Stream, bytes: &[u8]);
  fn ended(&mut self, end: ProcessEnd);
}

/// The caller's handle on a running background process.
pub struct ProcessHandle {
  pub id: u64,
  stop: Arc<StopCell<StopReason>>,
  /// The write end of its stdin pipe (non-blocking), when it has one.
  pub stdin: Option<OwnedFd>,
}

impl ProcessHandle {
  /// Terminates the process's tree: SIGTERM now and SIGKILL after `grace` (zero: SIGKILL now).
  /// A later call can bring the SIGKILL forward; once the tree is gone, nothing happens.
  pub fn kill(&self, grace: Duration) {
    self.stop.escalate(Stop {
      grace,
      reason: StopReason::Abort,
    });
  }

  /// Sends signal `signo` to every process of the tree, by its reaper, without ending it (a
  /// server's SIGINT or SIGHUP); nothing once the tree is gone. SIGSTOP is not sent.
  pub fn signal(&self, signo: i32) {
    self.stop.send_signal(signo);
  }
}

impl Pool {
  /// Starts a background process. Checks and prepares it here (a bad isolation option, a
  /// refused cwd or a pool shutting down is an error now), then runs it on a thread of its own.
  pub fn start_process(
    &self,
    mut spec: ProcessSpec,
    sink: Box<dyn ProcessSink>,
  ) -> Result<ProcessHandle, PoolError> {
    let inner = Arc::clone(&self.inner);
    if inner.supervisor.is_none() {
      return Err(PoolError::InvalidSpec(
        "a background process runs on the pool's supervisor, and this pool has none".into(),
      ));
    }
    let mut prepared = match job::prepare(&mut spec.job, &inner) {
      Ok(prepared) => prepared,
      Err(refused) => {
        return Err(match refused.0 {
          Err(e) => e,
          Ok(result) => PoolError::InvalidSpec(result.stderr.trim_end().to_owned()),
        });
      }
    };
    prepared.limits.timeout = spec.timeout;
    let built = if spec.stdin {
      Outgoing::fed(
        &prepared.spec,
        prepared.isolation.as_ref(),
        &prepared.limits,
        inner.config.drain,
      )
      .map(|(o, w)| (o, Some(w)))
    } else {
      Outgoing::new(
        &prepared.spec,
        prepared.isolation.as_ref(),
        &prepared.limits,
        inner.config.drain,
        Duration::ZERO,
      )
      .map(|o| (o, None))
    };
    let (outgoing, stdin) = built.map_err(|e| match e {
      RunError::Spawn(e) => PoolError::InvalidSpec(format!("could not start: {e}")),
      other => run_error(other),
    })?;
    let stop = Arc::new(StopCell::new());
    let leader = Arc::new(AtomicI32::new(0));
    let id = {
      let mut state = inner.lock();
      if state.closing {
        return Err(PoolError::Closed);
      }
      let id = state.next_id;
      state.next_id += 1;
      state.running.insert(
        id,
        Running {
          stop: Arc::clone(&stop),
          leader: Arc::clone(&leader),
        },
      );
      id
    };
    let (thread_inner, thread_stop) = (Arc::clone(&inner), Arc::clone(&stop));
    let spawned = std::thread::Builder::new()
      .name("finn-sandbox-proc".into())
      .spawn(move || {
        let mut sink = sink;
        let end = follow(
          &thread_inner,
          prepared,
          outgoing,
          &thread_stop,
          &leader,
          &mut *sink,
        );
        thread_inner.finish_process(id);
        sink.ended(end);
      });
    if let Err(e) = spawned {
      inner.finish_process(id);
      let errno = e.raw_os_error().map(nix::errno::Errno::from_raw);
      return Err(PoolError::NoWorker(NoThread { errno }));
    }
    Ok(ProcessHandle { id, stop, stdin })
  }
}

/// The process from its send to the end of its tree.
fn follow(
  inner: &Inner,
  prepared: Prepared,
  outgoing: Outgoing,
  stop: &StopCell<StopReason>,
  leader: &AtomicI32,
  sink: &mut dyn ProcessSink,
) -> ProcessEnd {
  let sup = inner.supervisor.as_ref().expect("checked at the start");
  // The sink's `output` and `spawned` both need it: the first is called from the pipes' reads,
  // the second once, before any of them.
  let sink = std::cell::RefCell::new(sink);
  let ran = run_streaming(
    sup,
    outgoing,
    prepared.terms(),
    stop,
    Streaming(|stream: Stream, bytes: &[u8]| sink.borrow_mut().output(stream, bytes)),
    |reaper, pid| {
      job::register(inner, leader, reaper);
      sink.borrow_mut().spawned(pid);
    },
  );
  match ran {
    Ok(followed) => {
      if !followed.survivors.is_empty() {
        tracing::error!(survivors = ?followed.survivors, "processes outlived SIGKILL and the reap bound");
      }
      ProcessEnd::Ended {
        status: followed.status,
        ended_by: followed.ended_by,
      }
    }
    Err(e) => ProcessEnd::Failed(run_error(e)),
  }
}

fn run_error(e: RunError) -> PoolError {
  match e {
    RunError::Spawn(e) => PoolError::InvalidSpec(format!("could not start: {e}")),
    RunError::Isolation(failed) => {
      PoolError::IsolationUnavailable(super::error::Unavailable::Layer(failed))
    }
    RunError::Crashed(crash) => {
      tracing::error!(%crash, "a background process's supervisor failed");
      PoolError::Crashed(crash.into())
    }
  }
}

impl Inner {
  /// A background process's tree is gone: it no longer counts as running. With nothing
  /// running, no worker thread parked and no session's lease held, the supervisor goes too (as
  /// a worker thread leaving an idle pool does it: `worker.rs`), so an idle pool holds no
  /// process; a session's shell runs under that supervisor and keeps it.
  pub(super) fn finish_process(&self, id: u64) {
    let mut state = self.lock();
    state.running.remove(&id);
    if state.running.is_empty() {
      if state.parked.is_empty()
        && state.leases == 0
        && let Some(sup) = &self.supervisor
      {
        sup.stop();
      }
      self.idle.notify_waiters();
    }
  }
}
