//! The structured agent tools (`finn-tools`) as JS sees them. A call is planned and checked by
//! the ToolSandbox pipeline off Node's thread (`plan`: the jail, the git policy and the
//! repository's check, the audit's `allow`), handed out as an `ExecSpec` for whatever runner
//! `index.js` was given (`start`), completed by the pipeline (`NativePrepared.complete`:
//! redaction, the outcome's audit) and finished off Node's thread again (`finish`: the path
//! checked once more, the output normalized and cut). The runner never sees anything but the
//! spec, so every runner gets the same checks.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Object, PromiseRaw, Unknown};
use napi::{Env, JsValue};
use napi_derive::napi;

use super::convert::{self, Decoded};
use super::error::sandbox_error;
use super::executor::{self, HandOff};
use super::pool::jobs_runtime;
use super::sandbox::{NativeAuditLog, NativeCheckCancel, SandboxResult, checked_to_sandbox};
use finn_audit::AuditLog;
use finn_job::limits::{
  DEFAULT_TIMEOUT_MS, DEFAULT_TOOL_OUTPUT_BYTES, MAX_BUFFER_LIMIT, MAX_TIMEOUT_MS,
  TOOL_RUN_MAX_BUFFER,
};
use finn_policy::SandboxCommand;
use finn_pool::PoolError;
use finn_sandbox_core::{self as sandbox, CheckedCommand, RunnerError, SandboxConfig};
use finn_tools::plan::{Context, Finders, Planned};
use finn_tools::{RunnerOutput, ToolName};

/// A tool call's result.
#[napi(object)]
pub struct ToolResult {
  pub ok: bool,
  pub exit_code: i32,
  pub output: String,
  pub truncated: bool,
  pub error: Option<ToolError>,
}

#[napi(object)]
pub struct ToolError {
  pub code: String,
  pub message: String,
}

impl From<finn_tools::ToolResult> for ToolResult {
  fn from(r: finn_tools::ToolResult) -> Self {
    ToolResult {
      ok: r.ok,
      exit_code: r.exit_code,
      output: r.output,
      truncated: r.truncated,
      error: r.error.map(|e| ToolError {
        code: e.code,
        message: e.message,
      }),
    }
  }
}

/// The tools' names, in order.
#[napi(catch_unwind)]
pub fn tool_names() -> Vec<String> {
  finn_tools::TOOL_NAMES.map(str::to_owned).to_vec()
}

/// The git subcommands the `git` tool runs.
#[napi(catch_unwind)]
pub fn allowed_git_commands() -> Vec<String> {
  finn_tools::allowed_git_commands()
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// Every tool's JSON Schema, as one JSON text (`index.js` parses it into fresh objects).
#[napi(catch_unwind)]
pub fn tool_schemas_json() -> String {
  finn_tools::schemas().to_string()
}

struct ToolsConfig {
  config: SandboxConfig,
  finders: Finders,
  max_output_bytes: u64,
}

fn tools_config(value: &Unknown) -> Decoded<ToolsConfig> {
  let obj = convert::object(value, "options")?;
  let worktree = convert::required_string(&obj, "worktree", "worktree")?;
  if worktree.contains('\0') {
    return Err(PoolError::InvalidSpec(
      "worktree must not contain NUL bytes".into(),
    ));
  }
  let timeout_ms =
    convert::optional_uint(&obj, "timeoutMs", "options.timeoutMs")?.unwrap_or(DEFAULT_TIMEOUT_MS);
  if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
    return Err(PoolError::InvalidSpec(format!(
      "options.timeoutMs must be an integer from 1 to {MAX_TIMEOUT_MS}"
    )));
  }
  let max_output_bytes = convert::optional_uint(&obj, "maxOutputBytes", "options.maxOutputBytes")?
    .unwrap_or(DEFAULT_TOOL_OUTPUT_BYTES);
  if max_output_bytes == 0 || max_output_bytes > MAX_BUFFER_LIMIT {
    return Err(PoolError::InvalidSpec(format!(
      "options.maxOutputBytes must be an integer from 1 to {MAX_BUFFER_LIMIT}"
    )));
  }
  let path_var = std::env::var("PATH").unwrap_or_default();
  let finders = match convert::optional_string(&obj, "finders", "options.finders")?.as_deref() {
    None | Some("auto") => Finders::detect(&path_var),
    Some("grep-find") => Finders::portable(),
    Some("rg-fd") => {
      let found = Finders::detect(&path_var);
      if !found.rg || found.fd.is_none() {
        return Err(PoolError::InvalidSpec(
          "options.finders is \"rg-fd\" but rg or fd (fdfind) is not on PATH".into(),
        ));
      }
      found
    }
    Some(other) => {
      return Err(PoolError::InvalidSpec(format!(
        "options.finders must be \"auto\", \"rg-fd\" or \"grep-find\", not {other:?}"
      )));
    }
  };
  // `index.js` stringifies the caller's object (or passes `{"mode":"off"}` for a runner of the
  // caller's that was given no isolation), so serde names the field of any error.
  let isolation = match convert::optional_string(&obj, "isolation", "options.isolation")? {
    None => None,
    Some(json) => Some(
      serde_json::from_str(&json)
        .map_err(|e| PoolError::InvalidSpec(format!("options.isolation must be an object: {e}")))?,
    ),
  };
  let isolation = sandbox::SandboxIsolation::from_json(isolation)
    .map_err(|e| PoolError::InvalidSpec(format!("options.{e}")))?;
  Ok(ToolsConfig {
    config: SandboxConfig {
      allow_bash: true,
      jail_root: worktree,
      exec_timeout_ms: timeout_ms,
      max_output: TOOL_RUN_MAX_BUFFER,
      policies: Some(finn_tools::plan::policies(&path_var)),
      networks: Default::default(),
      isolation,
    },
    finders,
    max_output_bytes,
  })
}

/// The tools over one worktree, with one audit log, isolation and limits.
#[napi]
pub struct NativeTools {
  sandbox: Arc<sandbox::ToolSandbox>,
  finders: Finders,
  max_output_bytes: u64,
}

#[napi]
impl NativeTools {
  /// `options`: `{ worktree, isolation?: string (JSON), timeoutMs?, maxOutputBytes?, finders? }`.
  /// Without `auditLog` the calls are audited nowhere. `secretsEnv` is what the redactor takes
  /// its secret values from. Throws a `SANDBOX_ERROR` error naming the field, or an errno error
  /// when the worktree does not exist.
  #[napi(constructor, catch_unwind)]
  pub fn new(
    env: &Env,
    options: Unknown,
    audit_log: Option<&NativeAuditLog>,
    secrets_env: Option<Unknown>,
  ) -> napi::Result<Self> {
    let cfg = tools_config(&options).map_err(checked_to_sandbox(env))?;
    let secrets =
      super::sandbox::string_env(secrets_env, "secretsEnv").map_err(checked_to_sandbox(env))?;
    let audit = audit_log.map_or_else(AuditLog::discard, |a| a.log.clone());
    let worktree = cfg.config.jail_root.clone();
    let sandbox = sandbox::ToolSandbox::new(cfg.config, audit, &secrets)
      .map_err(|e| super::sandbox::fs_error(env, &e, &worktree))?;
    Ok(NativeTools {
      sandbox: Arc::new(sandbox),
      finders: cfg.finders,
      max_output_bytes: cfg.max_output_bytes,
    })
  }

  /// Plans and checks one call on a thread of the addon's own: the arguments, the path inside
  /// the worktree, the ToolSandbox pipeline over the argv (policy, git's repository check,
  /// isolation, the audit's `allow`). `argsJson` is the call's arguments as JSON. `cancel` (the
  /// call's AbortSignal) ends a repository check early. Never rejects except on a panic.
  #[napi(catch_unwind, ts_return_type = "Promise<NativeToolCall>")]
  pub fn plan<'env>(
    &self,
    env: &'env Env,
    name: String,
    args_json: String,
    session_id: Option<String>,
    cancel: Option<&NativeCheckCancel>,
  ) -> napi::Result<PromiseRaw<'env, NativeToolCall>> {
    let (deferred, promise) = env.create_deferred::<NativeToolCall, Resolve>()?;
    let sandbox = Arc::clone(&self.sandbox);
    let finders = self.finders;
    let max_output = self.max_output_bytes;
    let cancel = cancel.map(|c| Arc::clone(&c.cancel));
    let runtime = jobs_runtime()
      .map_err(|e| sandbox_error(env, format!("could not start the tool's thread: {e}")))?;
    runtime.spawn_blocking(move || {
      let state = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        plan_call(
          &sandbox,
          &name,
          &args_json,
          finders,
          max_output,
          session_id,
          cancel.as_deref(),
        )
      }));
      if let Some(cancel) = &cancel {
        cancel.retire();
      }
      match state {
        Ok(state) => deferred.resolve(Box::new(move |_| {
          Ok(NativeToolCall {
            sandbox,
            state: Mutex::new(Some(state)),
          })
        })),
        Err(_) => deferred.reject(napi::Error::from_reason("the tool's plan panicked")),
      }
    });
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }
}

type Resolve = Box<dyn FnOnce(Env) -> napi::Result<NativeToolCall> + Send>;

fn plan_call(
  sandbox: &sandbox::ToolSandbox,
  name: &str,
  args_json: &str,
  finders: Finders,
  max_output: u64,
  session_id: Option<String>,
  cancel: Option<&finn_policy::host_git::Cancel>,
) -> State {
  // Refused before the pipeline saw a command: audited as the pipeline audits its own refusals
  // (the tool, its arguments, why).
  let refuse = |answer: finn_tools::ToolResult| {
    let why = match &answer.error {
      Some(e) => format!("tool_{}: {}", e.code.to_lowercase(), e.message),
      None => format!("path_rejected: {}", answer.output),
    };
    sandbox.audit_refusal(name, &[args_json.to_owned()], why);
    State::Answered(answer)
  };
  let Some(tool) = ToolName::parse(name) else {
    return refuse(finn_tools::ToolResult::failed(
      "UNKNOWN_TOOL",
      format!(
        "toolName must be one of {}, not {name:?}",
        finn_tools::TOOL_NAMES.join(", ")
      ),
    ));
  };
  let args: serde_json::Value = match serde_json::from_str(args_json) {
    Ok(v) => v,
    Err(e) => {
      return refuse(finn_tools::ToolResult::failed(
        "INVALID_ARGUMENT",
        format!("args must be a JSON object: {e}"),
      ));
    }
  };
  let plan = match finn_tools::plan(tool, &args, sandbox.jail(), finders, max_output) {
    Planned::Answered(answer) => return refuse(answer),
    Planned::Run(plan) => *plan,
  };
  let cmd = SandboxCommand {
    binary: plan.binary.to_owned(),
    args: plan.args,
  };
  match sandbox.check_argv(cmd, session_id, cancel) {
    // The policy's or the jail's refusal: the model reads it and may retry.
    Err(denial) => State::Answered(finn_tools::ToolResult::refused(denial.message)),
    Ok(mut checked) => {
      if let Some(cwd) = &plan.cwd {
        checked.run_from(cwd, plan.env);
      }
      if let Some(max) = plan.max_buffer {
        checked.limit_output(max);
      }
      State::Checked(Box::new((checked, plan.context)))
    }
  }
}

enum State {
  Answered(finn_tools::ToolResult),
  Checked(Box<(CheckedCommand, Context)>),
  Started(Box<Context>),
}

/// One planned call: answered already (`answer`), or to be started (`start`) and finished.
#[napi]
pub struct NativeToolCall {
  sandbox: Arc<sandbox::ToolSandbox>,
  state: Mutex<Option<State>>,
}

#[napi]
impl NativeToolCall {
  /// The result when the call needs no runner (bad input, a refusal); `null` otherwise.
  #[napi(catch_unwind)]
  pub fn answer(&self) -> Option<ToolResult> {
    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
    match state.take() {
      Some(State::Answered(r)) => Some(r.into()),
      other => {
        *state = other;
        None
      }
    }
  }

  /// `{ spec, prepared, isolation? }`: the `ExecSpec` for the runner, the pipeline's handle to
  /// complete with the runner's outcome, and the isolation (JSON) to put on the spec. Throws
  /// a `SANDBOX_ERROR` error when the call is not waiting to start.
  #[napi(
    catch_unwind,
    ts_return_type = "{ spec: import('./index').ExecSpec; prepared: NativePrepared; isolation?: string }"
  )]
  pub fn start<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
    let Some(State::Checked(checked)) = state.take() else {
      return Err(sandbox_error(env, "the tool call is not waiting to start"));
    };
    let (checked, context) = *checked;
    *state = Some(State::Started(Box::new(context)));
    let hand_off = HandOff::default();
    let slot: Arc<Mutex<Option<_>>> = Arc::default();
    let fill = Arc::clone(&slot);
    let land = move |_, outcome| *fill.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
    if let Err(e) = self.sandbox.start(checked, &hand_off, land) {
      return Err(sandbox_error(
        env,
        format!("the runner refused the command: {}", e.audit_code()),
      ));
    }
    let (job, prepared) = hand_off.prepared(slot);
    executor::prepared_to_js(env, &job, prepared)
  }

  /// The call's result from the pipeline's completion of the runner's outcome, on a thread of
  /// the addon's own (the path is checked again, hard-linked files looked at).
  #[napi(catch_unwind, ts_return_type = "Promise<ToolResult>")]
  pub fn finish<'env>(
    &self,
    env: &'env Env,
    completed: SandboxResult,
  ) -> napi::Result<PromiseRaw<'env, ToolResult>> {
    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
    let Some(State::Started(context)) = state.take() else {
      return Err(sandbox_error(env, "the tool call has not started"));
    };
    let (deferred, promise) = env.create_deferred::<ToolResult, FinishResolve>()?;
    let sandbox = Arc::clone(&self.sandbox);
    let runtime = jobs_runtime()
      .map_err(|e| sandbox_error(env, format!("could not start the tool's thread: {e}")))?;
    runtime.spawn_blocking(move || {
      let out = RunnerOutput {
        stdout: completed.stdout,
        stderr: completed.stderr,
        exit_code: completed.exit_code,
        truncated: completed.truncated,
        timed_out: completed.timed_out,
      };
      let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        finn_tools::finish(&context, sandbox.jail(), out)
      }));
      match result {
        Ok(r) => deferred.resolve(Box::new(move |_| Ok(r.into()))),
        Err(_) => deferred.reject(napi::Error::from_reason("the tool's finish panicked")),
      }
    });
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }
}

type FinishResolve = Box<dyn FnOnce(Env) -> napi::Result<ToolResult> + Send>;
