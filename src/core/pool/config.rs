//! Pool configuration and the job description, validated once.

use std::ffi::CString;
use std::time::Duration;

use super::error::PoolError;
use crate::core::limits::{
  DEFAULT_INTERACTIVE_WORKERS, DEFAULT_KILL_GRACE_MS, DEFAULT_MAX_BUFFER, DEFAULT_MAX_QUEUE_DEPTH,
  DEFAULT_SHUTDOWN_DEADLINE_MS, DEFAULT_TIMEOUT_MS, MAX_BUFFER_LIMIT, MAX_TIMEOUT_MS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
  Interactive,
  System,
}

#[derive(Debug, Clone)]
pub struct PoolConfig {
  /// Concurrent interactive jobs; the system lane always has exactly one slot of its own.
  pub interactive_workers: usize,
  /// From `shutdown()` until whatever still runs is SIGKILLed.
  pub shutdown_deadline: Duration,
  /// Queued jobs per lane beyond the running ones.
  pub max_queue_depth: usize,
  /// SIGTERM-to-SIGKILL grace after a timeout or an abort.
  pub kill_grace: Duration,
}

impl Default for PoolConfig {
  fn default() -> Self {
    PoolConfig {
      interactive_workers: DEFAULT_INTERACTIVE_WORKERS,
      shutdown_deadline: Duration::from_millis(DEFAULT_SHUTDOWN_DEADLINE_MS),
      max_queue_depth: DEFAULT_MAX_QUEUE_DEPTH,
      kill_grace: Duration::from_millis(DEFAULT_KILL_GRACE_MS),
    }
  }
}

/// A job as the caller described it, checked and converted for spawning.
#[derive(Debug, Clone)]
pub struct JobSpec {
  pub binary_path: String,
  pub argv: Vec<CString>,
  pub env: Vec<CString>,
  /// The child's PATH, for resolving a bare binary name as `execvp` would.
  pub path_var: Option<String>,
  pub cwd: String,
  pub timeout_ms: u64,
  pub max_buffer: usize,
  pub session_id: Option<String>,
  pub jail_root: Option<String>,
  pub lane: Lane,
}

/// The caller's fields before validation (types are already checked by the binding).
#[derive(Debug, Clone, Default)]
pub struct RawJob {
  pub binary_path: String,
  pub args: Vec<String>,
  pub cwd: String,
  pub env: Vec<(String, String)>,
  pub timeout_ms: Option<u64>,
  pub max_buffer: Option<u64>,
  pub session_id: Option<String>,
  pub jail_root: Option<String>,
  pub lane: Option<Lane>,
}

fn invalid(msg: String) -> PoolError {
  PoolError::InvalidSpec(msg)
}

/// `field` names the value in the error; it is only built when there is one.
fn c_string(value: &str, field: impl FnOnce() -> String) -> Result<CString, PoolError> {
  CString::new(value).map_err(|_| invalid(format!("{} must not contain NUL bytes", field())))
}

impl JobSpec {
  pub fn new(raw: RawJob) -> Result<JobSpec, PoolError> {
    if raw.binary_path.is_empty() {
      return Err(invalid("spec.binaryPath must be a non-empty string".into()));
    }
    let mut argv = vec![c_string(&raw.binary_path, || "spec.binaryPath".into())?];
    for (i, arg) in raw.args.iter().enumerate() {
      argv.push(c_string(arg, || format!("spec.args[{i}]"))?);
    }
    if raw.cwd.is_empty() {
      return Err(invalid("spec.cwd must be a non-empty string".into()));
    }
    c_string(&raw.cwd, || "spec.cwd".into())?;
    let mut env = Vec::with_capacity(raw.env.len());
    let mut path_var = None;
    for (key, value) in &raw.env {
      if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(invalid(format!(
          "spec.env key {key:?} must be non-empty without '=' or NUL"
        )));
      }
      env.push(c_string(&format!("{key}={value}"), || {
        format!("spec.env.{key}")
      })?);
      if key == "PATH" {
        path_var = Some(value.clone());
      }
    }
    let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 {
      return Err(invalid("spec.timeoutMs must be a positive integer".into()));
    }
    if timeout_ms > MAX_TIMEOUT_MS {
      return Err(invalid(format!(
        "spec.timeoutMs must be at most {MAX_TIMEOUT_MS}"
      )));
    }
    let max_buffer = raw.max_buffer.unwrap_or(DEFAULT_MAX_BUFFER);
    if max_buffer > MAX_BUFFER_LIMIT {
      return Err(invalid(format!(
        "spec.maxBuffer must be at most {MAX_BUFFER_LIMIT}"
      )));
    }
    if let Some(root) = &raw.jail_root {
      c_string(root, || "jailRoot".into())?;
    }
    Ok(JobSpec {
      binary_path: raw.binary_path,
      argv,
      env,
      path_var,
      cwd: raw.cwd,
      timeout_ms,
      max_buffer: max_buffer as usize,
      session_id: raw.session_id,
      jail_root: raw.jail_root.filter(|r| !r.is_empty()),
      lane: raw.lane.unwrap_or(Lane::Interactive),
    })
  }
}
