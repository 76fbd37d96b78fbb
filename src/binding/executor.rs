//! A JS `{ exec(spec) }` executor as a [`Runner`]. The pipeline runs in Rust as for the native
//! pool; the adapter hands the allowed job out to JS (as the `ExecSpec` for `exec`) and parks the
//! completion in a `NativePrepared`, which JS completes with the executor's outcome. Two napi
//! crossings per command: `prepare` (spec and handle at once) and `complete`.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use napi::Env;
use napi::bindgen_prelude::{Object, Unknown};
use napi_derive::napi;

use super::convert::{self, Decoded};
use super::error::sandbox_error;
use super::sandbox::SandboxResult;
use super::sandbox::checked_to_sandbox;
use super::spec;
use finn_audit::IsolationRecord;
use finn_pool::{PoolError, RawJob};
use finn_sandbox_core::{self as sandbox, Done, Output, RunOutcome, Runner, RunnerError};

/// The executor's rejection, as JS names it (its `code`, else its message). JS rethrows its
/// own error object; Rust only audits this.
pub struct ExecutorFailed(String);

impl RunnerError for ExecutorFailed {
  fn audit_code(&self) -> String {
    self.0.clone()
  }
}

type Outcome = Result<sandbox::SandboxResult, ExecutorFailed>;

/// Takes the job the pipeline allowed and its completion, for [`NativePrepared`].
#[derive(Default)]
pub(crate) struct HandOff {
  handed: Cell<Option<(RawJob, Done<ExecutorFailed>)>>,
}

impl Runner for HandOff {
  type Error = ExecutorFailed;

  fn run(&self, job: RawJob, done: Done<ExecutorFailed>) -> Result<u64, ExecutorFailed> {
    self.handed.set(Some((job, done)));
    Ok(0)
  }
}

impl HandOff {
  /// The handed job as a `NativePrepared` (whose completion lands in `result`).
  pub(crate) fn prepared(self, result: Arc<Mutex<Option<Outcome>>>) -> (RawJob, NativePrepared) {
    let (job, done) = self
      .handed
      .into_inner()
      .expect("the pipeline hands an allowed job to its runner");
    (
      job,
      NativePrepared {
        done: Some(done),
        result,
      },
    )
  }
}

/// A command that passed stages 1-7, waiting for its executor's outcome.
#[napi]
pub struct NativePrepared {
  done: Option<Done<ExecutorFailed>>,
  result: Arc<Mutex<Option<Outcome>>>,
}

#[napi]
impl NativePrepared {
  /// Stage 9 for the executor's result (`ExecResult`), timeout (`{ timeoutMessage }`) or
  /// failure (`{ failedCode }`: audited, returns undefined so the caller rethrows its own
  /// error).
  #[napi(catch_unwind)]
  pub fn complete(&mut self, env: &Env, outcome: Unknown) -> napi::Result<Option<SandboxResult>> {
    let done = self
      .done
      .take()
      .ok_or_else(|| sandbox_error(env, "command already completed"))?;
    let outcome = exec_outcome(&outcome).map_err(checked_to_sandbox(env))?;
    done(0, outcome);
    let settled = self.result.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(settled.and_then(Result::ok).map(Into::into))
  }
}

/// `{ spec, prepared, isolation? }` for JS: the `ExecSpec` to hand to the executor, and the handle to
/// complete.
pub(crate) fn prepared_to_js<'env>(
  env: &'env Env,
  job: &RawJob,
  prepared: NativePrepared,
) -> napi::Result<Object<'env>> {
  let spec = spec::exec_spec(env, job)?;
  let mut out = Object::new(env)?;
  out.set("spec", spec)?;
  out.set("prepared", prepared)?;
  // The command's isolation as JSON, for `index.js` to put on the spec: an executor that hands
  // the spec to `WorkerPool.exec` gets it applied (and its result's `isolation` is audited).
  if let Some(iso) = &job.isolation {
    out.set("isolation", sandbox::options_json(iso).to_string())?;
  }
  Ok(out)
}

fn exec_outcome(value: &Unknown) -> Decoded<RunOutcome<ExecutorFailed>> {
  let obj = convert::object(value, "outcome")?;
  if let Some(message) = convert::optional_string(&obj, "timeoutMessage", "outcome.timeoutMessage")?
  {
    return Ok(RunOutcome::TimedOut(message));
  }
  if let Some(code) = convert::optional_string(&obj, "failedCode", "outcome.failedCode")? {
    return Ok(RunOutcome::Failed(ExecutorFailed(code)));
  }
  let exit_code = match convert::optional_number(&obj, "exitCode", "result.exitCode")? {
    Some(n) => n
      .as_i64()
      .and_then(|n| i32::try_from(n).ok())
      .ok_or_else(|| PoolError::InvalidSpec("result.exitCode must be an integer".into()))?,
    None => {
      return Err(PoolError::InvalidSpec(
        "result.exitCode is required (a number)".into(),
      ));
    }
  };
  Ok(RunOutcome::Finished(Output {
    stdout: convert::optional_string(&obj, "stdout", "result.stdout")?.unwrap_or_default(),
    stderr: convert::optional_string(&obj, "stderr", "result.stderr")?.unwrap_or_default(),
    exit_code,
    truncated: convert::optional_bool(&obj, "truncated", "result.truncated")?.unwrap_or(false),
    isolation: reported_isolation(&obj)?,
  }))
}

/// `result.isolation` as a `WorkerPool` reports it (`{ backend, applied, degraded }`), when the
/// executor handed the spec's `isolation` on to one; anything else reports none.
fn reported_isolation(obj: &Object) -> Decoded<Option<IsolationRecord>> {
  let Some(value) = convert::get(obj, "isolation", "result.isolation")? else {
    return Ok(None);
  };
  let iso = convert::object(&value, "result.isolation")?;
  Ok(Some(IsolationRecord {
    backend: convert::required_string(&iso, "backend", "result.isolation.backend")?,
    applied: convert::required_string_array(&iso, "applied", "result.isolation.applied")?,
    degraded: convert::required_string_array(&iso, "degraded", "result.isolation.degraded")?,
  }))
}
