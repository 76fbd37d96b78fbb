//! The pool: two lanes of slots, a worker thread per running job (parked between jobs), shutdown.
//! Its parts: `state.rs` (what is queued and running), `worker.rs` (the worker threads),
//! `job.rs` (a job spec to a run and back), `lane.rs` (one lane's queue and fairness).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

use super::config::{JobSpec, Lane, PoolConfig};
use super::error::PoolError;
use super::inline::InlineHost;
use super::job::JobOutcome;
use super::lane::{Admit, LaneQueue};
use super::state::{Inner, Queued, Reply, State, StopReason, retire_parked};
use super::stats::{LaneStats, PoolStats, SystemStats, Totals};
use finn_exec::Stop;
use finn_supervisor::Supervisor;

/// Called once with a job's id and outcome, on whichever thread ends it.
pub type Completion = Box<dyn FnOnce(u64, JobOutcome) + Send>;

/// Handle on a job submitted with [`Pool::submit`].
pub struct Submitted {
  pub id: u64,
  pub result: oneshot::Receiver<JobOutcome>,
}

/// A native worker pool. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub struct Pool {
  pub(super) inner: Arc<Inner>,
  /// Dropped with the last clone: parked worker threads then exit at once (they hold `inner`).
  _owners: Arc<Owners>,
}

struct Owners(Arc<Inner>);

impl Drop for Owners {
  fn drop(&mut self) {
    let mut state = self.0.lock();
    state.abandoned = true;
    retire_parked(&mut state);
  }
}

impl Pool {
  /// Each running job occupies a thread of `runtime`'s blocking pool (see `supervisor::run_blocking`), so
  /// the runtime's `max_blocking_threads` must cover every slot.
  pub fn new(config: PoolConfig, runtime: Handle) -> Pool {
    let supervisor = config.supervisor.clone().map(|program| {
      Arc::new(Supervisor::new(program).with_landlock_abi_max(config.landlock_abi_max))
    });
    let state = State {
      closing: false,
      abandoned: false,
      parked: Vec::new(),
      interactive: LaneQueue::new(config.interactive_workers, config.max_queue_depth),
      system: LaneQueue::new(1, config.max_queue_depth),
      running: HashMap::new(),
      leases: 0,
      totals: Totals::default(),
      next_id: 1,
    };
    let inner = Arc::new(Inner {
      config,
      runtime,
      state: Mutex::new(state),
      idle: Notify::new(),
      #[cfg(feature = "test-hooks")]
      test_hooks: super::test_hooks::enabled(),
      exiting: AtomicBool::new(false),
      supervisor,
    });
    Pool {
      _owners: Arc::new(Owners(Arc::clone(&inner))),
      inner,
    }
  }

  pub fn config(&self) -> &PoolConfig {
    &self.inner.config
  }

  /// The pool's supervisor, for a session's shell (`finn-session`), which runs under one of
  /// its reapers beside the pool's jobs, and a lease that keeps it: an idle pool lets its
  /// supervisor go only when no lease is held. `None`: this pool runs without one.
  pub fn lease_supervisor(&self) -> Option<(Arc<Supervisor>, SupervisorLease)> {
    let supervisor = self.inner.supervisor.clone()?;
    self.inner.lock().leases += 1;
    Some((
      supervisor,
      SupervisorLease {
        inner: Arc::clone(&self.inner),
      },
    ))
  }

  /// Whether `shutdown()` has begun (a new session is refused then, as a new job is).
  pub fn is_closing(&self) -> bool {
    self.inner.lock().closing
  }

  /// Admits a job synchronously: when this returns, `stats()` already counts it as active or
  /// queued, and a full queue or a closed pool has been detected (then `on_done` is dropped
  /// uncalled). Otherwise `on_done` receives the outcome exactly once; it must not call back
  /// into the pool.
  pub fn submit_with(&self, job: JobSpec, on_done: Completion) -> Result<u64, PoolError> {
    self.admit(job, on_done, None)
  }

  /// [`Self::submit_with`] called on the host's event-loop thread: a job that may start now
  /// is started from this thread and watched through `host` (see `inline.rs`), when it
  /// qualifies.
  pub fn submit_inline(
    &self,
    job: JobSpec,
    on_done: Completion,
    host: &dyn InlineHost,
  ) -> Result<u64, PoolError> {
    self.admit(job, on_done, Some(host))
  }

  fn admit(
    &self,
    job: JobSpec,
    on_done: Completion,
    host: Option<&dyn InlineHost>,
  ) -> Result<u64, PoolError> {
    let mut state = self.inner.lock();
    if state.closing {
      return Err(PoolError::Closed);
    }
    let lane = job.lane;
    let session = job.session_id.clone();
    let id = state.next_id;
    let queued = Queued {
      id,
      job,
      reply: Reply {
        id,
        done: Some(on_done),
      },
    };
    match state.lane(lane).admit(session, queued) {
      Admit::Run(queued) => match host {
        Some(host) if self.inner.inline_ok(&queued.job) => {
          let started = Inner::register(&mut state, queued);
          state.next_id += 1;
          drop(state);
          self.inner.start_inline(started, host);
          return Ok(id);
        }
        _ => self.inner.start(&mut state, queued)?,
      },
      Admit::Queued => {}
      Admit::Full(mut refused) => {
        refused.reply.done = None;
        return Err(PoolError::QueueFull(lane));
      }
    }
    state.next_id += 1;
    Ok(id)
  }

  /// [`Self::submit_with`] with the outcome delivered through a channel.
  pub fn submit(&self, job: JobSpec) -> Result<Submitted, PoolError> {
    let (tx, result) = oneshot::channel();
    let id = self.submit_with(
      job,
      Box::new(move |_, outcome| {
        let _ = tx.send(outcome);
      }),
    )?;
    Ok(Submitted { id, result })
  }

  /// Aborts a job: a queued one is removed, a running one is terminated like a timeout.
  /// Unknown or finished ids are ignored.
  pub fn abort(&self, id: u64) {
    let mut state = self.inner.lock();
    for lane in [Lane::Interactive, Lane::System] {
      if let Some(queued) = state.lane(lane).remove_where(|q| q.id == id) {
        drop(state);
        queued.reply.send(Err(PoolError::Aborted));
        return;
      }
    }
    if let Some(running) = state.running.get(&id) {
      running.stop.request(Stop {
        grace: self.inner.config.kill_grace,
        reason: StopReason::Abort,
      });
    }
  }

  /// A snapshot of the pool right now.
  pub fn stats(&self) -> PoolStats {
    let state = self.inner.lock();
    PoolStats {
      interactive: LaneStats {
        active: state.interactive.active,
        idle: state.interactive.capacity - state.interactive.active,
        queued: state.interactive.queued(),
      },
      system: SystemStats {
        active: state.system.active > 0,
        queued: state.system.queued(),
      },
      totals: state.totals.clone(),
    }
  }

  /// Stops accepting jobs, rejects the queued ones, terminates the running ones (SIGTERM now,
  /// SIGKILL at the shutdown deadline). All of that happens before this returns; the future
  /// resolves once no child of the pool is alive, the supervisor included (reaped: not even a
  /// zombie is left). Its last step blocks while the supervisor exits (a few ms, at most
  /// [`SUPERVISOR_EXIT_WAIT`]): poll it where blocking is allowed, as [`Self::shutdown_then`]
  /// does. Idempotent: every call waits for the same end.
  pub fn shutdown(&self) -> impl Future<Output = ()> + Send + 'static {
    let rejected: Vec<Queued> = {
      let mut state = self.inner.lock();
      if state.closing {
        Vec::new()
      } else {
        let grace = self.inner.config.shutdown_deadline;
        for running in state.running.values() {
          running.stop.request(Stop {
            grace,
            reason: StopReason::Shutdown,
          });
        }
        state.close()
      }
    };
    for queued in rejected {
      queued.reply.send(Err(PoolError::ShutDown));
    }
    let inner = Arc::clone(&self.inner);
    async move {
      loop {
        let idle = inner.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if inner.lock().running.is_empty() {
          // No job will come any more: the supervisor and its idle reapers can go now
          // rather than when the last handle on the pool is dropped. Reaped before the
          // shutdown settles (it exits at once when its socket closes), so none of the pool's
          // processes is left then, not even a zombie: a soak that counted zombies right after
          // `shutdown()` found the supervisor there once, under load, before its reap thread ran.
          // This blocks the thread that polls the future, for as long as the supervisor takes
          // to exit (a few ms): [`Pool::shutdown_then`] polls it on a thread of its own. (A
          // thread of the runtime's blocking pool would linger 10 s after, as a job thread.)
          if let Some(supervisor) = &inner.supervisor {
            supervisor.stop_and_wait(SUPERVISOR_EXIT_WAIT);
          }
          return;
        }
        idle.await;
      }
    }
  }
}

/// Keeps the pool's supervisor while held (see [`Pool::lease_supervisor`]). The last one
/// dropped on a pool with no job and no parked worker thread lets the supervisor go, as that
/// pool's last worker thread would have.
pub struct SupervisorLease {
  inner: Arc<Inner>,
}

impl Drop for SupervisorLease {
  fn drop(&mut self) {
    let mut state = self.inner.lock();
    state.leases -= 1;
    if state.leases == 0
      && state.parked.is_empty()
      && state.running.is_empty()
      && let Some(supervisor) = &self.inner.supervisor
    {
      supervisor.stop();
    }
  }
}

/// How long a shutdown waits for the supervisor to exit once its socket is closed (it exits at
/// once; this only bounds a stopped or stuck one, which is then reaped on a thread of its own).
const SUPERVISOR_EXIT_WAIT: Duration = Duration::from_secs(5);

impl Pool {
  /// [`Self::shutdown`], with `then` called once its future resolves, on a thread of its own
  /// that waits for it (the future needs no driver: it waits on the pool's own notify). For the
  /// binding, which has no runtime of its own to await it on. Not a thread of the pool's
  /// runtime: those are the job threads, and a parked one must mean a job's.
  pub fn shutdown_then(&self, then: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let done = self.shutdown();
    let runtime = self.inner.runtime.clone();
    std::thread::Builder::new()
      .name("finn-sandbox-shut".into())
      .spawn(move || {
        runtime.block_on(done);
        then();
      })
      .map(drop)
  }
}

/// A handle on a pool that does not keep it alive, for a host's teardown hook (a worker thread
/// ended by `terminate()`, which runs no `exit` handler): [`ExitHandle::kill_all_now`].
pub struct ExitHandle(std::sync::Weak<Inner>);

impl ExitHandle {
  /// [`Pool::kill_all_now`], if the pool still exists.
  pub fn kill_all_now(&self) {
    if let Some(inner) = self.0.upgrade() {
      kill_all_now(&inner);
    }
  }
}

impl Pool {
  /// Whether a job runs or waits in a queue.
  pub fn has_jobs(&self) -> bool {
    let state = self.inner.lock();
    !state.running.is_empty() || state.interactive.queued() > 0 || state.system.queued() > 0
  }

  /// An [`ExitHandle`] on this pool.
  pub fn exit_handle(&self) -> ExitHandle {
    ExitHandle(Arc::downgrade(&self.inner))
  }

  /// SIGKILLs every running tree now, synchronously, and closes the pool: for the host
  /// process's exit, when no promise will be awaited any more. Queued jobs are dropped. A job
  /// between `posix_spawn` and recording its pid (its child may already run) is waited for, up
  /// to 200 ms; one that spawns after this call kills its own tree at once.
  pub fn kill_all_now(&self) {
    kill_all_now(&self.inner);
  }
}

fn kill_all_now(inner: &Inner) {
  inner.exiting.store(true, Ordering::SeqCst);
  let dropped: Vec<Queued> = inner.lock().close();
  drop(dropped);
  let mut killed: Vec<i32> = Vec::new();
  let give_up = std::time::Instant::now() + Duration::from_millis(200);
  loop {
    let pids: Vec<i32> = inner
      .lock()
      .running
      .values()
      .map(|r| r.leader.load(Ordering::SeqCst))
      .collect();
    let fresh: Vec<i32> = pids
      .iter()
      .copied()
      .filter(|&pid| pid > 0 && !killed.contains(&pid))
      .collect();
    inner.kill_trees_now(&fresh);
    killed.extend(fresh);
    if !pids.contains(&0) || std::time::Instant::now() >= give_up {
      return;
    }
    std::thread::sleep(Duration::from_millis(1));
  }
}
