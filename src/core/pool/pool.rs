//! The pool: two lanes of slots, a worker thread per running job (parked between jobs), shutdown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

use super::config::{JobSpec, Lane, PoolConfig};
use super::error::PoolError;
use super::lane::{Admit, LaneQueue};
use super::stats::{LaneStats, PoolStats, SystemStats, Totals};
use super::worker::{Mailbox, Waited};
use crate::core::exec::{self, EndedBy, Limits, SpawnSpec, Stop, StopCell};
use crate::core::supervisor::{self, Supervisor};

/// What a job resolves with.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub truncated: bool,
  pub duration_ms: f64,
}

pub type JobOutcome = Result<ExecResult, PoolError>;

/// Called once with a job's id and outcome, on whichever thread ends it.
pub type Completion = Box<dyn FnOnce(u64, JobOutcome) + Send>;

/// Handle on a job submitted with [`Pool::submit`].
pub struct Submitted {
  pub id: u64,
  pub result: oneshot::Receiver<JobOutcome>,
}

/// Delivers a job's outcome exactly once. Dropped without one (the job's task panicked), it
/// reports the crash, so no caller is left waiting.
struct Reply {
  id: u64,
  done: Option<Completion>,
}

impl Reply {
  fn send(mut self, outcome: JobOutcome) {
    if let Some(done) = self.done.take() {
      done(self.id, outcome);
    }
  }
}

impl Drop for Reply {
  fn drop(&mut self) {
    if let Some(done) = self.done.take() {
      done(
        self.id,
        Err(PoolError::Crashed("the job's task panicked".into())),
      );
    }
  }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
  Abort,
  Shutdown,
}

struct Queued {
  id: u64,
  job: JobSpec,
  reply: Reply,
}

struct Running {
  /// Abort and shutdown ask here; the first request per job wins.
  stop: Arc<StopCell<StopReason>>,
  /// The pid whose tree to kill once spawned (0 before), for [`Pool::kill_all_now`]: the
  /// job's reaper, or the leader without a supervisor.
  leader: Arc<AtomicI32>,
}

struct State {
  closing: bool,
  /// No handle on the pool is left: running jobs finish, but no worker thread parks.
  abandoned: bool,
  /// Worker threads waiting for a job (the most recently parked last).
  parked: Vec<Arc<Parked>>,
  interactive: LaneQueue<Queued>,
  system: LaneQueue<Queued>,
  running: HashMap<u64, Running>,
  totals: Totals,
  next_id: u64,
}

impl State {
  /// Stops accepting jobs and lets parked workers go; returns the queued jobs, for the caller
  /// to reject or drop.
  fn close(&mut self) -> Vec<Queued> {
    self.closing = true;
    retire_parked(self);
    let mut queued: Vec<Queued> = self.interactive.drain().collect();
    queued.extend(self.system.drain());
    queued
  }

  fn lane(&mut self, lane: Lane) -> &mut LaneQueue<Queued> {
    match lane {
      Lane::Interactive => &mut self.interactive,
      Lane::System => &mut self.system,
    }
  }
}

struct Inner {
  config: PoolConfig,
  runtime: Handle,
  state: Mutex<State>,
  idle: Notify,
  test_hooks: bool,
  /// Set by [`Pool::kill_all_now`]: a job that spawns from now on kills its own tree at once.
  exiting: AtomicBool,
  /// Contains every job's tree; started with the first job.
  supervisor: Option<Supervisor>,
}

/// A native worker pool. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub struct Pool {
  inner: Arc<Inner>,
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

/// Session id that makes a job panic when `FINN_SANDBOX_TEST_HOOKS=1` was set at pool creation,
/// so the tests can prove a panic becomes a rejection and the pool keeps working.
pub const TEST_PANIC_SESSION: &str = "__finn_sandbox_test_panic__";

/// How a finished job counts in the totals.
enum Tally {
  Completed(f64),
  Failed,
  TimedOut,
  Uncounted,
}

impl Pool {
  /// Each running job occupies a thread of `runtime`'s blocking pool (see `exec::run`), so
  /// the runtime's `max_blocking_threads` must cover every slot.
  pub fn new(config: PoolConfig, runtime: Handle) -> Pool {
    let supervisor = config.supervisor.clone().map(Supervisor::new);
    let state = State {
      closing: false,
      abandoned: false,
      parked: Vec::new(),
      interactive: LaneQueue::new(config.interactive_workers, config.max_queue_depth),
      system: LaneQueue::new(1, config.max_queue_depth),
      running: HashMap::new(),
      totals: Totals::default(),
      next_id: 1,
    };
    let inner = Arc::new(Inner {
      config,
      runtime,
      state: Mutex::new(state),
      idle: Notify::new(),
      test_hooks: std::env::var_os("FINN_SANDBOX_TEST_HOOKS").is_some_and(|v| v == "1"),
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

  /// Admits a job synchronously: when this returns, `stats()` already counts it as active or
  /// queued, and a full queue or a closed pool has been detected (then `on_done` is dropped
  /// uncalled). Otherwise `on_done` receives the outcome exactly once; it must not call back
  /// into the pool.
  pub fn submit_with(&self, job: JobSpec, on_done: Completion) -> Result<u64, PoolError> {
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
      Admit::Run(queued) => self.inner.start(&mut state, queued),
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
  /// resolves once no child of the pool is alive. Idempotent: every call waits for the same end.
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
          return;
        }
        idle.await;
      }
    }
  }
}

impl Pool {
  /// SIGKILLs every running tree now, synchronously, and closes the pool: for the host
  /// process's exit, when no promise will be awaited any more. Queued jobs are dropped. A job
  /// between `posix_spawn` and recording its pid (its child may already run) is waited for, up
  /// to 200 ms; one that spawns after this call kills its own tree at once.
  pub fn kill_all_now(&self) {
    self.inner.exiting.store(true, Ordering::SeqCst);
    let dropped: Vec<Queued> = self.inner.lock().close();
    drop(dropped);
    let mut killed: Vec<i32> = Vec::new();
    let give_up = std::time::Instant::now() + Duration::from_millis(200);
    loop {
      let pids: Vec<i32> = self
        .inner
        .lock()
        .running
        .values()
        .map(|r| r.leader.load(Ordering::SeqCst))
        .collect();
      for &pid in &pids {
        if pid > 0 && !killed.contains(&pid) {
          self.inner.kill_tree_now(pid);
          killed.push(pid);
        }
      }
      if !pids.contains(&0) || std::time::Instant::now() >= give_up {
        return;
      }
      std::thread::sleep(Duration::from_millis(1));
    }
  }
}

impl Inner {
  /// SIGKILLs the tree recorded for a running job (see [`Running::leader`]).
  fn kill_tree_now(&self, pid: i32) {
    match &self.supervisor {
      Some(_) => supervisor::kill_tree_now(pid),
      None => exec::kill_tree_now(pid),
    }
  }

  fn lock(&self) -> MutexGuard<'_, State> {
    // A panic never happens while the lock is held, but a poisoned lock must not wedge the pool.
    self.state.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// Records a job whose slot is already taken as running.
  fn register(state: &mut State, queued: Queued) -> Started {
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
    }
  }

  /// Starts a job whose slot is already taken: on a parked worker thread if there is one,
  /// else on a new thread of the blocking pool.
  fn start(self: &Arc<Self>, state: &mut State, queued: Queued) {
    let started = Self::register(state, queued);
    match state.parked.pop() {
      Some(worker) => worker.hand(started),
      None => self.launch(started),
    }
  }

  fn launch(self: &Arc<Self>, started: Started) {
    let inner = Arc::clone(self);
    self.runtime.spawn_blocking(move || inner.work(started));
  }

  /// A worker thread: runs its job, then the queued jobs of the same lane back to back; when
  /// none is queued it parks, to take the next submitted job without a new thread, and exits
  /// after [`WORKER_IDLE`] without one.
  fn work(self: Arc<Self>, mut started: Started) {
    let me = Arc::new(Parked::default());
    // The previous job's outcome while the next queued job is being started: replying first
    // would wake Node's thread, which would compete with this one for the CPU until the next
    // child runs. Sent as soon as it does (or if anything goes wrong first).
    let mut carried = Carried(None);
    loop {
      let span = tracing::info_span!(
        "job",
        id = %uuid::Uuid::new_v4(),
        seq = started.queued.id,
        lane = ?started.queued.job.lane,
        binary = %started.queued.job.binary_path,
      );
      let next = match span.in_scope(|| self.run_job(started, &me, &mut carried)) {
        Some(next) => Some(next),
        None => {
          carried.flush();
          self.wait_parked(&me)
        }
      };
      match next {
        Some(next) => started = next,
        None => return,
      }
    }
  }

  /// Runs one job (sending `carried` once its child runs); returns the lane's next job, already
  /// counted as running, with this job's outcome left in `carried`. Without a next job, this
  /// thread is parked (in the same lock that freed the slot, so the job its reply triggers
  /// finds it).
  fn run_job(
    self: &Arc<Self>,
    started: Started,
    me: &Arc<Parked>,
    carried: &mut Carried,
  ) -> Option<Started> {
    let Started {
      queued: Queued { id, job, reply },
      stop,
      leader,
    } = started;
    // Frees the slot even if the job panics; the dropped `reply` then reads as a crash.
    let slot = Slot {
      inner: self,
      id,
      lane: job.lane,
      armed: true,
    };
    if self.test_hooks && job.session_id.as_deref() == Some(TEST_PANIC_SESSION) {
      panic!("test hook: job {id} panics on purpose");
    }
    let (outcome, tally) = execute(job, &stop, self, &leader, || carried.flush());
    carried.flush();
    tracing::debug!(?outcome, "job settled");
    let next = slot.finish(tally, me);
    match next {
      Some(_) => carried.0 = Some((reply, outcome)),
      None => reply.send(outcome),
    }
    next
  }

  /// Waits, parked, for a handed-over job; `None` when retired or idle for too long.
  fn wait_parked(self: &Arc<Self>, me: &Arc<Parked>) -> Option<Started> {
    let idle_until = std::time::Instant::now() + WORKER_IDLE;
    loop {
      match me.wait_until(idle_until) {
        Waited::Job(started) => return Some(started),
        Waited::Retired => return None,
        Waited::Idle => {
          let mut state = self.lock();
          if let Some(at) = state.parked.iter().position(|p| Arc::ptr_eq(p, me)) {
            state.parked.remove(at);
            return None;
          }
          // A job was handed over in the meantime: the next wait takes it at once.
        }
      }
    }
  }

  /// Bookkeeping when a job ends: totals, the slot, shutdown's wait. Returns the lane's next
  /// queued job, registered as running, for the caller to run; without one, `parker` (if
  /// any) is parked for the next submitted job.
  fn finish(
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
    let next = lane_queue
      .dispatch_next()
      .map(|next| Self::register(&mut state, next));
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

/// A finished job's reply held back while its worker starts the next child. Dropped (a panic
/// unwinding the worker), it still sends the real outcome.
struct Carried(Option<(Reply, JobOutcome)>);

impl Carried {
  fn flush(&mut self) {
    if let Some((reply, outcome)) = self.0.take() {
      reply.send(outcome);
    }
  }
}

impl Drop for Carried {
  fn drop(&mut self) {
    self.flush();
  }
}

/// How long a worker thread without a job stays parked before it exits.
const WORKER_IDLE: Duration = Duration::from_secs(10);

/// A parked worker thread, as the pool sees it.
type Parked = Mailbox<Started>;

/// Lets every parked worker thread exit (the pool is closing).
fn retire_parked(state: &mut State) {
  for worker in state.parked.drain(..) {
    worker.retire();
  }
}

/// A job counted as running, with its stop cell and the slot for its leader's pid.
struct Started {
  queued: Queued,
  stop: Arc<StopCell<StopReason>>,
  leader: Arc<AtomicI32>,
}

/// Frees a running job's slot exactly once: through [`Slot::finish`], or when dropped by a
/// panic (then the lane's next job starts on a new thread).
struct Slot<'a> {
  inner: &'a Arc<Inner>,
  id: u64,
  lane: Lane,
  armed: bool,
}

impl Slot<'_> {
  fn finish(mut self, tally: Tally, parker: &Arc<Parked>) -> Option<Started> {
    self.armed = false;
    self.inner.finish(self.id, self.lane, tally, Some(parker))
  }
}

impl Drop for Slot<'_> {
  fn drop(&mut self) {
    if self.armed
      && let Some(next) = self.inner.finish(self.id, self.lane, Tally::Failed, None)
    {
      self.inner.launch(next);
    }
  }
}

const JAIL_REJECTION: &str = "Working directory validation failed";

/// `cwd` must resolve inside `root` (compared by path components, after realpath).
fn cwd_inside_jail(cwd: &str, root: &str) -> Result<(), String> {
  let root = std::fs::canonicalize(root).map_err(|e| format!("jailRoot {root}: {e}"))?;
  let real = std::fs::canonicalize(cwd).map_err(|e| format!("cwd {cwd}: {e}"))?;
  if Path::new(&real).starts_with(&root) {
    Ok(())
  } else {
    Err(format!(
      "cwd {} is outside jailRoot {}",
      real.display(),
      root.display()
    ))
  }
}

fn result(
  stdout: String,
  stderr: String,
  exit_code: i32,
  truncated: bool,
  duration: Duration,
) -> ExecResult {
  ExecResult {
    stdout,
    stderr,
    exit_code,
    truncated,
    duration_ms: duration.as_secs_f64() * 1000.0,
  }
}

fn execute(
  job: JobSpec,
  stop: &StopCell<StopReason>,
  inner: &Inner,
  leader: &AtomicI32,
  on_spawned: impl FnOnce(),
) -> (JobOutcome, Tally) {
  if let Some(root) = &job.jail_root
    && let Err(detail) = cwd_inside_jail(&job.cwd, root)
  {
    // The caller sees the sanitized message only; the detail goes to the log.
    tracing::warn!(%detail, "working directory rejected");
    let rejected = result(
      String::new(),
      JAIL_REJECTION.into(),
      1,
      false,
      Duration::ZERO,
    );
    return (Ok(rejected), Tally::Completed(0.0));
  }
  let started = std::time::Instant::now();
  let spawn_failure = |e: exec::SpawnError| {
    let failed = result(
      String::new(),
      format!("{e}\n"),
      e.exit_code(),
      false,
      started.elapsed(),
    );
    (Ok(failed), Tally::Failed)
  };
  let program = match exec::resolve_program(&job.binary_path, job.path_var.as_deref()) {
    Ok(program) => program,
    Err(e) => return spawn_failure(e),
  };
  let spec = SpawnSpec {
    program,
    argv: job.argv,
    env: job.env,
    cwd: std::ffi::CString::new(job.cwd.as_str()).expect("validated without NUL"),
  };
  let limits = Limits {
    timeout: Some(Duration::from_millis(job.timeout_ms)),
    max_output_bytes: job.max_buffer,
    kill_grace: inner.config.kill_grace,
  };
  let on_spawn = |pid| {
    leader.store(pid, Ordering::SeqCst);
    if inner.exiting.load(Ordering::SeqCst) {
      inner.kill_tree_now(pid);
    }
    on_spawned();
  };
  let ran = match &inner.supervisor {
    Some(sup) => supervisor::run_blocking(sup, &spec, &limits, inner.config.drain, stop, on_spawn),
    None => exec::run_blocking(&spec, &limits, stop, on_spawn).map_err(Into::into),
  };
  let finished = match ran {
    Ok(finished) => finished,
    Err(supervisor::RunError::Spawn(e)) => return spawn_failure(e),
    Err(supervisor::RunError::Crashed(msg)) => {
      tracing::error!(%msg, "the job's supervisor failed");
      return (Err(PoolError::Crashed(msg)), Tally::Failed);
    }
  };
  if !finished.survivors.is_empty() {
    tracing::error!(survivors = ?finished.survivors, "processes outlived SIGKILL and the reap bound");
  }
  let exit_code = finished.exit_code();
  match finished.ended_by {
    EndedBy::Exit | EndedBy::OutputLimit => {
      let done = result(
        finished.stdout,
        finished.stderr,
        exit_code,
        finished.truncated,
        finished.duration,
      );
      let ms = done.duration_ms;
      (Ok(done), Tally::Completed(ms))
    }
    EndedBy::Timeout => (Err(PoolError::Timeout(job.timeout_ms)), Tally::TimedOut),
    EndedBy::Stopped(StopReason::Abort) => (Err(PoolError::Aborted), Tally::Uncounted),
    EndedBy::Stopped(StopReason::Shutdown) => (Err(PoolError::ShutDown), Tally::Uncounted),
  }
}
