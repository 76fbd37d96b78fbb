//! `NativeWorkerPool`: the pool as JS sees it. `index.js` wraps it into loa-finn's
//! `WorkerPool` (PoolError instances, AbortSignal, never a synchronous throw).

use std::time::Duration;

use std::sync::{Arc, Mutex, OnceLock};

use napi::bindgen_prelude::{Function, PromiseRaw, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, JsValue, Status};
use napi_derive::napi;

use super::convert::{self, Decoded};
use super::error::{coded, pool_error};
use super::event_loop::LoopHost;
use super::sandbox::SandboxResult;
use super::spec;
use finn_job::limits::{MAX_DURATION_MS, MAX_INTERACTIVE_WORKERS, MAX_QUEUE_DEPTH, MAX_TIMEOUT_MS};
use finn_pool::{
  self as pool, BinaryProblem, Crashed, JobOutcome, JobSpec, Pool, PoolConfig, PoolError,
  PoolErrorCode,
};

/// A settled job as the pool's JS callback receives it: a result, or the error `index.js`
/// turns into a PoolError.
#[napi(object)]
pub struct JobSettled {
  pub id: f64,
  pub result: Option<ExecResult>,
  pub sandbox_result: Option<SandboxResult>,
  pub error_code: Option<String>,
  pub error_message: Option<String>,
}

impl JobSettled {
  pub(crate) fn sandbox(id: u64, result: SandboxResult) -> Self {
    JobSettled {
      id: id as f64,
      result: None,
      sandbox_result: Some(result),
      error_code: None,
      error_message: None,
    }
  }

  pub(crate) fn error(id: u64, e: &PoolError) -> Self {
    JobSettled {
      id: id as f64,
      result: None,
      sandbox_result: None,
      error_code: Some(e.code().into()),
      error_message: Some(e.to_string()),
    }
  }
}

/// What `submit` returns: the job's id, or why it was refused.
#[napi(object)]
pub struct Ticket {
  pub id: Option<f64>,
  pub error_code: Option<String>,
  pub error_message: Option<String>,
}

impl Ticket {
  pub(crate) fn accepted(id: u64) -> Self {
    Ticket {
      id: Some(id as f64),
      error_code: None,
      error_message: None,
    }
  }

  pub(crate) fn refused(e: &PoolError) -> Self {
    Ticket {
      id: None,
      error_code: Some(e.code().into()),
      error_message: Some(e.to_string()),
    }
  }
}

type SettleFn = ThreadsafeFunction<(), (), Vec<JobSettled>, Status, false, true>;

/// Delivers settled jobs to JS in batches through one weak threadsafe function per pool (a weak
/// one never holds the event loop open; `index.js` keeps it alive while jobs are pending).
/// Creating a threadsafe function per job, as napi's `spawn_future` does, cost more than the
/// rest of the dispatch.
pub(crate) struct Settler {
  queue: Arc<Mutex<Vec<JobSettled>>>,
  tsfn: SettleFn,
}

impl Settler {
  fn new(on_settled: Function<Vec<JobSettled>, ()>) -> napi::Result<Self> {
    let queue: Arc<Mutex<Vec<JobSettled>>> = Arc::default();
    let drain = Arc::clone(&queue);
    let tsfn = on_settled
      .build_threadsafe_function::<()>()
      .callee_handled::<false>()
      .weak::<true>()
      .build_callback(move |_| {
        Ok(std::mem::take(
          &mut *drain.lock().unwrap_or_else(|e| e.into_inner()),
        ))
      })?;
    Ok(Settler { queue, tsfn })
  }

  /// Queues a settled job; only the push into an empty queue wakes the JS thread, which then
  /// takes the whole batch.
  pub(crate) fn push(&self, settled: JobSettled) {
    let was_empty = {
      let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
      let was_empty = queue.is_empty();
      queue.push(settled);
      was_empty
    };
    if was_empty {
      self.tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
    }
  }
}

/// What `exec` resolves with.
#[napi(object)]
pub struct ExecResult {
  pub stdout: String,
  pub stderr: String,
  /// The real exit code, or `128 + signo` when a signal killed the child.
  pub exit_code: i32,
  /// True when stdout+stderr went over `maxBuffer` and were cut (marker appended).
  pub truncated: bool,
  /// Wall-clock milliseconds from spawn until the child's tree was gone.
  pub duration_ms: f64,
  /// The isolation the command ran under; absent when off.
  pub isolation: Option<super::isolate::IsolationInfo>,
}

impl From<pool::JobResult> for ExecResult {
  fn from(r: pool::JobResult) -> Self {
    ExecResult {
      stdout: r.stdout,
      stderr: r.stderr,
      exit_code: r.exit_code,
      truncated: r.truncated,
      duration_ms: r.duration_ms,
      isolation: r.isolation.map(Into::into),
    }
  }
}

#[napi(object)]
pub struct InteractiveLaneStats {
  pub active: u32,
  pub idle: u32,
  pub queued: u32,
}

#[napi(object)]
pub struct SystemLaneStats {
  pub active: bool,
  pub queued: u32,
}

#[napi(object)]
pub struct PoolTotals {
  pub completed: f64,
  pub failed: f64,
  pub timed_out: f64,
  pub avg_exec_ms: f64,
}

#[napi(object)]
pub struct WorkerPoolStats {
  pub interactive: InteractiveLaneStats,
  pub system: SystemLaneStats,
  pub totals: PoolTotals,
}

fn config_from_js(config: Option<Unknown>) -> Decoded<PoolConfig> {
  let mut out = PoolConfig::default();
  if convert::is_nullish(config.as_ref())? {
    return Ok(out);
  }
  let obj = convert::object(config.as_ref().expect("checked not nullish"), "config")?;
  if let Some(n) = convert::optional_uint(&obj, "interactiveWorkers", "config.interactiveWorkers")?
  {
    if !(1..=MAX_INTERACTIVE_WORKERS as u64).contains(&n) {
      return Err(PoolError::InvalidSpec(format!(
        "config.interactiveWorkers must be an integer from 1 to {MAX_INTERACTIVE_WORKERS}"
      )));
    }
    out.interactive_workers = n as usize;
  }
  let at_most = |field: &str, n: u64, max: u64| {
    if n > max {
      return Err(PoolError::InvalidSpec(format!(
        "{field} must be at most {max}"
      )));
    }
    Ok(n)
  };
  if let Some(ms) = convert::optional_uint(&obj, "shutdownDeadlineMs", "config.shutdownDeadlineMs")?
  {
    let ms = at_most("config.shutdownDeadlineMs", ms, MAX_DURATION_MS)?;
    out.shutdown_deadline = Duration::from_millis(ms);
  }
  if let Some(depth) = convert::optional_uint(&obj, "maxQueueDepth", "config.maxQueueDepth")? {
    out.max_queue_depth = at_most("config.maxQueueDepth", depth, MAX_QUEUE_DEPTH as u64)? as usize;
  }
  if let Some(ms) = convert::optional_uint(&obj, "killGraceMs", "config.killGraceMs")? {
    let ms = at_most("config.killGraceMs", ms, MAX_DURATION_MS)?;
    out.kill_grace = Duration::from_millis(ms);
  }
  if let Some(ms) = convert::optional_uint(&obj, "drainMs", "config.drainMs")? {
    if ms > MAX_TIMEOUT_MS {
      return Err(PoolError::InvalidSpec(format!(
        "config.drainMs must be at most {MAX_TIMEOUT_MS}"
      )));
    }
    out.drain = Duration::from_millis(ms);
  }
  // `index.js` hands it over as JSON (see binding/isolate.rs).
  if let Some(json) = convert::optional_string(&obj, "isolation", "config.isolation")? {
    out.isolation = Some(super::isolate::options_from_json(
      &json,
      "config.isolation",
    )?);
  }
  // Accepted and ignored: there is no worker script in a native pool.
  convert::optional_string(&obj, "workerScript", "config.workerScript")?;
  Ok(out)
}

/// The supervisor binary, checked to be an executable file. Only a build with the test hooks,
/// run with `FINN_SANDBOX_TEST_HOOKS=1`, may go without one: commands then run directly from
/// Node, contained by process groups only, which is how the tests show what the supervisor adds.
fn supervisor_path(path: Option<String>) -> Decoded<Option<std::path::PathBuf>> {
  let Some(path) = path else {
    if cfg!(feature = "test-hooks")
      && std::env::var_os("FINN_SANDBOX_TEST_HOOKS").is_some_and(|v| v == "1")
    {
      return Ok(None);
    }
    return Err(PoolError::Crashed(Crashed::NoSupervisorBinary));
  };
  let bad = |problem| {
    PoolError::Crashed(Crashed::SupervisorBinary {
      path: path.clone().into(),
      problem,
    })
  };
  let meta = std::fs::metadata(&path).map_err(|e| bad(BinaryProblem::Unreadable(e.into())))?;
  let c = std::ffi::CString::new(path.as_str()).map_err(|_| bad(BinaryProblem::Nul))?;
  // SAFETY: `c` is a valid NUL-terminated string.
  if !meta.is_file() || unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
    return Err(bad(BinaryProblem::NotExecutable));
  }
  Ok(Some(path.into()))
}

/// The native pool. Use `WorkerPool` from the package entry instead.
#[napi(custom_finalize)]
pub struct NativeWorkerPool {
  pub(crate) pool: Pool,
  pub(crate) settler: Arc<Settler>,
  /// Where jobs started on this thread wait for their reaper (see `event_loop.rs`); `None`
  /// where it cannot be set up (every job then runs on a worker thread).
  inline: std::cell::RefCell<Option<LoopHost>>,
  /// The environment's cleanup hook that kills the running trees (see [`TeardownHook`]);
  /// removed when the pool is collected first with no job running or queued.
  teardown: Option<Arc<TeardownHook>>,
}

/// Kills the pool's running trees when its JS environment goes. `index.js` does that from
/// `process.on('exit')`, which a worker thread ended by `terminate()` never emits: its pools'
/// trees ran on until their timeout (an attack: 3 of 3 processes alive 20 s later). The hook
/// runs on the environment's thread, at its teardown, for every way an environment ends.
struct TeardownHook {
  pool: finn_pool::ExitHandle,
  ran: std::sync::atomic::AtomicBool,
}

unsafe extern "C" fn on_teardown(arg: *mut std::ffi::c_void) {
  // SAFETY: the reference given to the hook in `add_teardown`, taken back once: the hook runs
  // once, and `finalize` removes it (and takes the reference back itself) only if it has not run.
  let hook = unsafe { Arc::from_raw(arg as *const TeardownHook) };
  hook.ran.store(true, std::sync::atomic::Ordering::SeqCst);
  let _ = std::panic::catch_unwind(|| hook.pool.kill_all_now());
}

fn add_teardown(env: &Env, pool: &Pool) -> Option<Arc<TeardownHook>> {
  let hook = Arc::new(TeardownHook {
    pool: pool.exit_handle(),
    ran: std::sync::atomic::AtomicBool::new(false),
  });
  let arg = Arc::into_raw(hook.clone()) as *mut std::ffi::c_void;
  // SAFETY: `env` is this call's environment; the hook's argument holds one reference.
  let status = unsafe { napi::sys::napi_add_env_cleanup_hook(env.raw(), Some(on_teardown), arg) };
  if status != napi::sys::Status::napi_ok {
    // SAFETY: the reference made above, which the hook never got.
    drop(unsafe { Arc::from_raw(arg as *const TeardownHook) });
    return None;
  }
  Some(hook)
}

impl napi::bindgen_prelude::ObjectFinalize for NativeWorkerPool {
  fn finalize(self, env: Env) -> napi::Result<()> {
    // A pool collected while jobs run or wait keeps its hook: those trees must still die with
    // the environment (an attack dropped a pool with 3 jobs running, forced a GC, then
    // terminated the thread: 6 of 6 processes lived on). Only such pools leave a hook behind,
    // a few bytes each, until the environment goes.
    if let Some(hook) = &self.teardown
      && !self.pool.has_jobs()
      && !hook.ran.load(std::sync::atomic::Ordering::SeqCst)
    {
      let arg = Arc::as_ptr(hook) as *mut std::ffi::c_void;
      // SAFETY: the hook added in `new` with this argument, on this environment's thread, and
      // not run: removed, it never runs, so its reference is taken back here.
      unsafe {
        napi::sys::napi_remove_env_cleanup_hook(env.raw(), Some(on_teardown), arg);
        drop(Arc::from_raw(arg as *const TeardownHook));
      }
    }
    Ok(())
  }
}

#[napi]
impl NativeWorkerPool {
  /// Throws an `INVALID_SPEC` error naming the field for a bad config. `onSettled` receives batches of
  /// settled jobs. `supervisor` is the path of the `finn-supervisor` binary that contains every
  /// job's tree (`index.js` finds it); without an executable file there, this throws
  /// `WORKER_CRASHED` naming it.
  #[napi(constructor, catch_unwind)]
  pub fn new(
    env: &Env,
    config: Option<Unknown>,
    on_settled: Function<Vec<JobSettled>, ()>,
    supervisor: Option<String>,
  ) -> napi::Result<Self> {
    let mut config = config_from_js(config).map_err(|e| pool_error(env, &e))?;
    config.supervisor = supervisor_path(supervisor).map_err(|e| pool_error(env, &e))?;
    if let Some(path) = &config.supervisor {
      // The repository check's host gits start through it, so Node's death ends them too.
      finn_policy::host_git::set_launcher(path.clone());
    }
    config.landlock_abi_max = finn_isolate::landlock_abi_max()
      .map_err(|e| pool_error(env, &PoolError::InvalidSpec(e.to_string())))?;
    let runtime = jobs_runtime().map_err(|e| {
      let message = format!("could not start the job runtime: {e}");
      coded(env, PoolErrorCode::WorkerCrashed.as_str(), message)
    })?;
    let pool = Pool::new(config, runtime);
    let teardown = add_teardown(env, &pool);
    Ok(NativeWorkerPool {
      pool,
      settler: Arc::new(Settler::new(on_settled)?),
      inline: std::cell::RefCell::new(LoopHost::new(env)),
      teardown,
    })
  }

  /// SIGKILLs every running tree synchronously and closes the pool. `index.js` calls it from
  /// `process.on('exit')`: once Node exits nothing awaits the jobs, and their trees must not
  /// outlive it.
  #[napi(catch_unwind)]
  pub fn kill_all_now(&self) {
    self.pool.kill_all_now();
  }

  /// Admits a job at once (stats count it before this returns). Returns its id, or why it was
  /// refused; never throws for bad input. The outcome arrives through `onSettled`.
  #[napi(catch_unwind)]
  pub fn submit(&self, spec: Unknown, lane: Option<Unknown>, jail_root: Option<Unknown>) -> Ticket {
    self.admit(spec::raw_job(&spec, lane.as_ref(), jail_root.as_ref()))
  }

  /// [`Self::submit`] for a job `index.js` packed into one string (see `spec::packed_job`).
  /// A malformed string is refused with `INVALID_SPEC`; `index.js` then resubmits the spec
  /// field by field for an error that names the field.
  #[napi(catch_unwind)]
  pub fn submit_packed(&self, packed: String) -> Ticket {
    self.admit(spec::packed_job(&packed))
  }

  fn admit(&self, raw: Decoded<pool::RawJob>) -> Ticket {
    let settler = Arc::clone(&self.settler);
    let submitted = raw.and_then(JobSpec::new).and_then(|job| {
      let done = Box::new(move |id, outcome| settler.push(settle(id, outcome)));
      match &*self.inline.borrow() {
        Some(inline) => self.pool.submit_inline(job, done, inline.host()),
        None => self.pool.submit_with(job, done),
      }
    });
    match submitted {
      Ok(id) => Ticket::accepted(id),
      Err(e) => Ticket::refused(&e),
    }
  }

  /// Aborts a queued or running job; unknown ids are ignored.
  #[napi(catch_unwind)]
  pub fn abort(&self, id: f64) {
    self.pool.abort(id as u64);
  }

  /// A synchronous snapshot.
  #[napi(catch_unwind)]
  pub fn stats(&self) -> WorkerPoolStats {
    let s = self.pool.stats();
    WorkerPoolStats {
      interactive: InteractiveLaneStats {
        active: s.interactive.active as u32,
        idle: s.interactive.idle as u32,
        queued: s.interactive.queued as u32,
      },
      system: SystemLaneStats {
        active: s.system.active,
        queued: s.system.queued as u32,
      },
      totals: PoolTotals {
        completed: s.totals.completed as f64,
        failed: s.totals.failed as f64,
        timed_out: s.totals.timed_out as f64,
        avg_exec_ms: s.totals.avg_exec_ms as f64,
      },
    }
  }

  /// Closes the pool now; the promise resolves once no child of the pool is alive.
  #[napi(catch_unwind)]
  pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
    // A deferred settled from the pool's runtime, not `env.spawn_future`: that needs napi's
    // own tokio runtime, whose two worker threads every process that loads the addon would
    // keep for this one promise.
    let (deferred, promise) = env.create_deferred::<(), fn(Env) -> napi::Result<()>>()?;
    // No job comes any more: the inline host's handle and descriptors go now (a job it still
    // watches goes to a worker thread), not when the pool object is collected.
    drop(self.inline.borrow_mut().take());
    // Settled by the waiting thread, or here when that thread cannot be made (a command filled
    // the process limit): a deferred dropped unsettled keeps Node's loop alive for ever.
    let slot = Arc::new(Mutex::new(Some(deferred)));
    let waiter = slot.clone();
    let waiting = self.pool.shutdown_then(move || {
      if let Some(deferred) = waiter.lock().unwrap_or_else(|e| e.into_inner()).take() {
        deferred.resolve(|_| Ok(()));
      }
    });
    if let Err(e) = waiting
      && let Some(deferred) = slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    {
      deferred.reject(coded(
        env,
        PoolErrorCode::WorkerCrashed.as_str(),
        format!("could not wait for the shutdown: {e}"),
      ));
    }
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }
}

/// The runtime whose blocking pool runs the jobs, one thread per running job. A pool parks its
/// idle worker threads itself (for 10 s) and retires them at shutdown; the runtime then lets a
/// retired thread go after 200 ms. Its own runtime, because napi's caps blocking threads at
/// 512 and a pool may have 4096 workers; shared by every pool.
pub(crate) fn jobs_runtime() -> Result<tokio::runtime::Handle, &'static std::io::Error> {
  static RUNTIME: OnceLock<std::io::Result<tokio::runtime::Runtime>> = OnceLock::new();
  let runtime = RUNTIME.get_or_init(|| {
    tokio::runtime::Builder::new_current_thread()
      .max_blocking_threads(16 * 1024)
      .thread_keep_alive(std::time::Duration::from_millis(200))
      .thread_name("finn-sandbox-job")
      .build()
  });
  runtime.as_ref().map(|rt| rt.handle().clone())
}

fn settle(id: u64, outcome: JobOutcome) -> JobSettled {
  match outcome {
    Ok(result) => JobSettled {
      id: id as f64,
      result: Some(result.into()),
      sandbox_result: None,
      error_code: None,
      error_message: None,
    },
    Err(e) => JobSettled::error(id, &e),
  }
}
