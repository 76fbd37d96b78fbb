//! `NativeWorkerPool`: the pool as JS sees it. `index.js` wraps it into loa-finn's
//! `WorkerPool` (PoolError instances, AbortSignal, never a synchronous throw).

use std::time::Duration;

use napi::bindgen_prelude::{Object, PromiseRaw, Unknown};
use napi::{Env, Status};
use napi_derive::napi;

use super::convert::{self, Checked};
use crate::core::pool::{self, JobOutcome, JobSpec, Pool, PoolConfig, PoolError};

/// Settled value of a job's promise: the result, or the error `index.js` turns into a PoolError.
#[napi(object)]
pub struct JobSettled {
  pub result: Option<ExecResult>,
  pub error_code: Option<String>,
  pub error_message: Option<String>,
}

impl JobSettled {
  pub(crate) fn error(e: &PoolError) -> Self {
    JobSettled {
      result: None,
      error_code: Some(e.code().into()),
      error_message: Some(e.to_string()),
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
}

impl From<pool::ExecResult> for ExecResult {
  fn from(r: pool::ExecResult) -> Self {
    ExecResult {
      stdout: r.stdout,
      stderr: r.stderr,
      exit_code: r.exit_code,
      truncated: r.truncated,
      duration_ms: r.duration_ms,
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

fn config_from_js(config: Option<Unknown>) -> Checked<PoolConfig> {
  let mut out = PoolConfig::default();
  if convert::is_nullish(config.as_ref())? {
    return Ok(out);
  }
  let obj = convert::object(config.as_ref().expect("checked not nullish"), "config")?;
  if let Some(n) = convert::optional_uint(&obj, "interactiveWorkers", "config.interactiveWorkers")?
  {
    if !(1..=4096).contains(&n) {
      return Err(PoolError::InvalidSpec(
        "config.interactiveWorkers must be an integer from 1 to 4096".into(),
      ));
    }
    out.interactive_workers = n as usize;
  }
  if let Some(ms) = convert::optional_uint(&obj, "shutdownDeadlineMs", "config.shutdownDeadlineMs")?
  {
    out.shutdown_deadline = Duration::from_millis(ms);
  }
  if let Some(depth) = convert::optional_uint(&obj, "maxQueueDepth", "config.maxQueueDepth")? {
    out.max_queue_depth = depth as usize;
  }
  if let Some(ms) = convert::optional_uint(&obj, "killGraceMs", "config.killGraceMs")? {
    out.kill_grace = Duration::from_millis(ms);
  }
  // Accepted and ignored: there is no worker script in a native pool.
  convert::optional_string(&obj, "workerScript", "config.workerScript")?;
  Ok(out)
}

pub(crate) fn to_napi(e: PoolError) -> napi::Error {
  napi::Error::new(Status::InvalidArg, format!("{}: {}", e.code(), e))
}

/// The native pool. Use `WorkerPool` from the package entry instead.
#[napi]
pub struct NativeWorkerPool {
  pub(crate) pool: Pool,
}

#[napi]
impl NativeWorkerPool {
  /// Throws `"INVALID_SPEC: <message>"` for a bad config.
  #[napi(constructor, catch_unwind)]
  pub fn new(config: Option<Unknown>) -> napi::Result<Self> {
    let config = config_from_js(config).map_err(to_napi)?;
    let runtime =
      napi::bindgen_prelude::within_runtime_if_available(tokio::runtime::Handle::current);
    Ok(NativeWorkerPool {
      pool: Pool::new(config, runtime),
    })
  }

  /// SIGKILLs every running tree synchronously and closes the pool. `index.js` calls it from
  /// `process.on('exit')`: once Node exits nothing awaits the jobs, and their trees must not
  /// outlive it.
  #[napi(catch_unwind)]
  pub fn kill_all_now(&self) {
    self.pool.kill_all_now();
  }

  /// Admits a job at once (stats count it before this returns). Returns `{ id, promise }`,
  /// or `{ errorCode, errorMessage }` when the job is refused; never throws for bad input.
  #[napi(
    catch_unwind,
    ts_return_type = "{ id: number; promise: Promise<JobSettled> } | { errorCode: string; errorMessage: string }"
  )]
  pub fn submit<'env>(
    &self,
    env: &'env Env,
    spec: Unknown<'env>,
    lane: Option<Unknown<'env>>,
    jail_root: Option<Unknown<'env>>,
  ) -> napi::Result<Object<'env>> {
    let mut out = Object::new(env)?;
    let submitted = convert::raw_job(&spec, lane.as_ref(), jail_root.as_ref())
      .and_then(JobSpec::new)
      .and_then(|job| self.pool.submit(job));
    match submitted {
      Ok(job) => {
        let promise: PromiseRaw<JobSettled> = env.spawn_future(async move {
          Ok(match job.result.await {
            Ok(outcome) => settle(outcome),
            Err(_) => JobSettled::error(&PoolError::Crashed("the job's task panicked".into())),
          })
        })?;
        out.set("id", job.id as f64)?;
        out.set("promise", promise)?;
      }
      Err(e) => {
        out.set("errorCode", e.code())?;
        out.set("errorMessage", e.to_string())?;
      }
    }
    Ok(out)
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
    let done = self.pool.shutdown();
    env.spawn_future(async move {
      done.await;
      Ok(())
    })
  }
}

fn settle(outcome: JobOutcome) -> JobSettled {
  match outcome {
    Ok(result) => JobSettled {
      result: Some(result.into()),
      error_code: None,
      error_message: None,
    },
    Err(e) => JobSettled::error(&e),
  }
}
