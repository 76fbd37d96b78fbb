//! The pool's shared state: the lanes' queues, the running jobs, the parked workers, the
//! totals, and the bookkeeping that starts a job and frees its slot.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::config::{JobSpec, Lane, PoolConfig};
use super::error::{Crashed, NoThread, PoolError};
use super::job::{JobOutcome, Tally};
use super::lane::LaneQueue;
use super::pool::Completion;
use super::stats::Totals;
use super::worker::Mailbox;
use finn_exec::StopCell;
use finn_supervisor::{self as supervisor, Supervisor};

/// Delivers a job's outcome exactly once. Dropped without one (the job's task panicked), it
/// reports the crash, so no caller is left waiting.
pub(super) struct Reply {
  pub(super) id: u64,
  pub(super) done: Option<Completion>,
}

impl Reply {
  pub(super) fn send(mut self, outcome: JobOutcome) {
    if let Some(done) = self.done.take() {
      done(self.id, outcome);
    }
  }
}

impl Drop for Reply {
  fn drop(&mut self) {
    if let Some(done) = self.done.take() {
      done(self.id, Err(PoolError::Crashed(Crashed::Panicked)));
    }
  }
}

/// Why a running job or process was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
  /// The caller's abort (for a background process: its `kill`).
  Abort,
  /// The pool's `shutdown()`.
  Shutdown,
}

pub(super) struct Queued {
  pub(super) id: u64,
  pub(super) job: JobSpec,
  pub(super) reply: Reply,
}

pub(super) struct Running {
  /// Abort and shutdown ask here; the first request per job wins.
  pub(super) stop: Arc<StopCell<StopReason>>,
  /// The pid whose tree to kill once spawned (0 before), for [`Pool::kill_all_now`]: the
  /// job's reaper, or the leader without a supervisor.
  pub(super) leader: Arc<AtomicI32>,
}

pub(super) struct State {
  pub(super) closing: bool,
  /// No handle on the pool is left: running jobs finish, but no worker thread parks.
  pub(super) abandoned: bool,
  /// Worker threads waiting for a job (the most recently parked last).
  pub(super) parked: Vec<Arc<Parked>>,
  pub(super) interactive: LaneQueue<Queued>,
  pub(super) system: LaneQueue<Queued>,
  pub(super) running: HashMap<u64, Running>,
  /// Live [`super::pool::SupervisorLease`]s: sessions whose shell runs under the supervisor,
  /// which an idle pool then keeps.
  pub(super) leases: usize,
  pub(super) totals: Totals,
  pub(super) next_id: u64,
}

impl State {
  /// Stops accepting jobs and lets parked workers go; returns the queued jobs, for the caller
  /// to reject or drop.
  pub(super) fn close(&mut self) -> Vec<Queued> {
    self.closing = true;
    retire_parked(self);
    let mut queued: Vec<Queued> = self.interactive.drain().collect();
    queued.extend(self.system.drain());
    queued
  }

  pub(super) fn lane(&mut self, lane: Lane) -> &mut LaneQueue<Queued> {
    match lane {
      Lane::Interactive => &mut self.interactive,
      Lane::System => &mut self.system,
    }
  }
}

pub(super) struct Inner {
  pub(super) config: PoolConfig,
  pub(super) runtime: Handle,
  pub(super) state: Mutex<State>,
  pub(super) idle: Notify,
  #[cfg(feature = "test-hooks")]
  pub(super) test_hooks: bool,
  /// Set by [`Pool::kill_all_now`]: a job that spawns from now on kills its own tree at once.
  pub(super) exiting: AtomicBool,
  /// Contains every job's tree; started with the first job.
  pub(super) supervisor: Option<Arc<Supervisor>>,
}

impl Inner {
  /// SIGKILLs the trees recorded for running jobs (see [`Running::leader`]), now; with the
  /// supervisor, also waits (briefly) until they are dead.
  pub(super) fn kill_trees_now(&self, pids: &[i32]) {
    match &self.supervisor {
      Some(_) => supervisor::kill_trees_now(pids),
      #[cfg(feature = "test-hooks")]
      None => pids
        .iter()
        .for_each(|&pid| finn_exec::direct::kill_tree_now(pid)),
      // Only a build with the test hooks runs a job without the supervisor.
      #[cfg(not(feature = "test-hooks"))]
      None => {}
    }
  }

  pub(super) fn lock(&self) -> MutexGuard<'_, State> {
    // No panic unwinds through the lock (tokio's spawn panic is caught inside), but a poisoned
    // lock must not wedge the pool.
    self.state.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// Records a job whose slot is already taken as running.
  pub(super) fn register(state: &mut State, queued: Queued) -> Started {
    let stop = Arc::new(StopCell::new());
    let leader = Arc::new(AtomicI32::new(0));
    state.running.insert(
      queued.id,
      Running {
        stop: Arc::clone(&stop),
        leader: Arc::clone(&leader),
      },
    );
    Started {
      queued,
      stop,
      leader,
      resume: None,
      behind: 0,
    }
  }

  /// Starts a job whose slot is already taken: on a parked worker thread if there is one,
  /// else on a new thread of the blocking pool. When no thread can start, the job is taken
  /// back out (slot freed, never reported through its completion) and the error returned for
  /// the caller to refuse it with.
  pub(super) fn start(
    self: &Arc<Self>,
    state: &mut State,
    queued: Queued,
  ) -> Result<(), PoolError> {
    let started = Self::register(state, queued);
    match state.parked.pop() {
      Some(worker) => {
        worker.hand(started);
        Ok(())
      }
      None => self.launch(started).map_err(|refused| {
        let (mut started, e) = *refused;
        state.running.remove(&started.queued.id);
        state.lane(started.queued.job.lane).release();
        started.queued.reply.done = None;
        if state.running.is_empty() {
          self.idle.notify_waiters();
        }
        e
      }),
    }
  }

  /// Runs `started` on a new thread of the blocking pool. tokio panics when its pool has no
  /// thread and cannot start one (a full pids cgroup, RLIMIT_NPROC): that panic is caught and
  /// the job handed back with the reason, so its slot is never left taken.
  pub(super) fn launch(
    self: &Arc<Self>,
    started: Started,
  ) -> Result<(), Box<(Started, PoolError)>> {
    // The job waits here until its thread takes it, so a refused spawn leaves it with us. tokio
    // queues the closure before it fails to add a thread, and a later thread runs it: by then
    // the slot is empty and the closure does nothing.
    let slot = Arc::new(Mutex::new(Some(started)));
    let (inner, handed) = (Arc::clone(self), Arc::clone(&slot));
    let spawned = std::panic::catch_unwind(AssertUnwindSafe(|| {
      self.runtime.spawn_blocking(move || {
        let started = handed.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(started) = started {
          inner.work(started);
        }
      })
    }));
    let Err(panic) = spawned else {
      return Ok(());
    };
    let started = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    match started {
      Some(started) => Err(Box::new((
        started,
        PoolError::NoWorker(thread_error(panic.as_ref())),
      ))),
      // Some thread took the job after all: it runs.
      None => Ok(()),
    }
  }

  /// [`Self::launch`] where no lock is held: a job whose thread cannot start fails with the
  /// reason, and its slot goes to the lane's next job (which is tried the same way).
  pub(super) fn launch_or_fail(self: &Arc<Self>, started: Started) {
    let mut next = Some(started);
    while let Some(started) = next.take() {
      if let Err(refused) = self.launch(started) {
        let (started, e) = *refused;
        let (id, lane) = (started.queued.id, started.queued.job.lane);
        started.queued.reply.send(Err(e));
        next = self.finish(id, lane, Tally::Failed, None);
      }
    }
  }

  /// Bookkeeping when a job ends: totals, the slot, shutdown's wait. Returns the lane's next
  /// queued job, registered as running, for the caller to run; without one, `parker` (if
  /// any) is parked for the next submitted job.
  pub(super) fn finish(
    self: &Arc<Self>,
    id: u64,
    lane: Lane,
    tally: Tally,
    parker: Option<&Arc<Parked>>,
  ) -> Option<Started> {
    let mut state = self.lock();
    match tally {
      Tally::Completed(ms) => {
        state.totals.completed += 1;
        state.totals.total_exec_ms += ms;
      }
      Tally::Failed => state.totals.failed += 1,
      Tally::TimedOut => state.totals.timed_out += 1,
      Tally::Uncounted => {}
    }
    state.totals.refresh_average();
    state.running.remove(&id);
    let lane_queue = state.lane(lane);
    lane_queue.release();
    let next = lane_queue.dispatch_next();
    let behind = lane_queue.queued();
    let next = next.map(|next| Started {
      behind,
      ..Self::register(&mut state, next)
    });
    if next.is_none()
      && let Some(me) = parker
    {
      if state.closing || state.abandoned {
        me.retire();
      } else {
        state.parked.push(Arc::clone(me));
      }
    }
    if state.running.is_empty() {
      self.idle.notify_waiters();
    }
    next
  }
}

/// The errno of tokio's "OS can't spawn worker thread" panic.
fn thread_error(panic: &(dyn std::any::Any + Send)) -> NoThread {
  let text = panic
    .downcast_ref::<String>()
    .map(String::as_str)
    .or_else(|| panic.downcast_ref::<&str>().copied())
    .unwrap_or_default();
  NoThread::from_panic(text)
}

/// A parked worker thread, as the pool sees it.
pub(super) type Parked = Mailbox<Started>;

/// Lets every parked worker thread exit (the pool is closing).
pub(super) fn retire_parked(state: &mut State) {
  for worker in state.parked.drain(..) {
    worker.retire();
  }
}

/// A job counted as running, with its stop cell and the slot for its leader's pid.
pub(super) struct Started {
  pub(super) queued: Queued,
  pub(super) stop: Arc<StopCell<StopReason>>,
  pub(super) leader: Arc<AtomicI32>,
  /// Prepared (and perhaps sent) on the host's thread already: see `inline.rs`.
  pub(super) resume: Option<Box<super::job::Resume>>,
  /// How many jobs were left queued in its lane when a finishing job took it from there (0
  /// when it came another way).
  pub(super) behind: usize,
}
