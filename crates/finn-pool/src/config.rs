//! Pool configuration and the job description, validated once.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use super::error::PoolError;
use finn_isolate::IsolationOptions;
use finn_job::limits::{
  DEFAULT_DRAIN_MS, DEFAULT_INTERACTIVE_WORKERS, DEFAULT_KILL_GRACE_MS, DEFAULT_MAX_BUFFER,
  DEFAULT_MAX_QUEUE_DEPTH, DEFAULT_SHUTDOWN_DEADLINE_MS, DEFAULT_TIMEOUT_MS, MAX_ARG_BYTES,
  MAX_BUFFER_LIMIT, MAX_PATH_BYTES, MAX_TIMEOUT_MS,
};
pub use finn_job::{Lane, RawJob};

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
  /// Once a command's main process has exited, how long the rest of its tree may run (and
  /// write) before it is killed and the job settles.
  pub drain: Duration,
  /// The supervisor binary that contains every job's tree. `None` runs commands directly from
  /// this process (process groups only: a process whose parent died escapes), for tests.
  pub supervisor: Option<PathBuf>,
  /// Isolation for every job that does not bring its own (`None`: off).
  pub isolation: Option<IsolationOptions>,
  /// Caps the landlock ABI the jobs use (`FINN_SANDBOX_LANDLOCK_ABI_MAX`, read when the pool
  /// starts); `None`: the kernel's.
  pub landlock_abi_max: Option<i32>,
}

impl Default for PoolConfig {
  fn default() -> Self {
    PoolConfig {
      interactive_workers: DEFAULT_INTERACTIVE_WORKERS,
      shutdown_deadline: Duration::from_millis(DEFAULT_SHUTDOWN_DEADLINE_MS),
      max_queue_depth: DEFAULT_MAX_QUEUE_DEPTH,
      kill_grace: Duration::from_millis(DEFAULT_KILL_GRACE_MS),
      drain: Duration::from_millis(DEFAULT_DRAIN_MS),
      supervisor: None,
      isolation: None,
      landlock_abi_max: None,
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
  /// Validated; resolved against the host when the job runs.
  pub isolation: Option<IsolationOptions>,
}

fn invalid(msg: String) -> PoolError {
  PoolError::InvalidSpec(msg)
}

/// `field` names the value in the error; it is only built when there is one.
fn c_string(value: &str, field: impl FnOnce() -> String) -> Result<CString, PoolError> {
  CString::new(value).map_err(|_| invalid(format!("{} must not contain NUL bytes", field())))
}

/// Refuses a string the kernel would refuse anyway (E2BIG, ENAMETOOLONG), before spawning and
/// with the field's name; `what` says which limit.
fn at_most(
  value: &str,
  limit: usize,
  what: &str,
  field: impl FnOnce() -> String,
) -> Result<(), PoolError> {
  if value.len() > limit {
    return Err(invalid(format!(
      "{} must be at most {limit} bytes ({what}), not {}",
      field(),
      value.len()
    )));
  }
  Ok(())
}

/// A value quoted in an error, cut so that a 10 MB key never makes a 10 MB message.
fn shown(value: &str) -> String {
  match value.char_indices().nth(40) {
    Some((cut, _)) => format!("{:?}... ({} bytes)", &value[..cut], value.len()),
    None => format!("{value:?}"),
  }
}

/// An env key as part of a field name (`spec.env.KEY`), cut like [`shown`].
fn key_field(key: &str) -> String {
  match key.char_indices().nth(40) {
    Some((cut, _)) => format!("spec.env.{}...", &key[..cut]),
    None => format!("spec.env.{key}"),
  }
}

/// The kernel's bound on argv and envp together, pointers included (`sysconf(_SC_ARG_MAX)`, a
/// quarter of the stack limit); unbounded when the system reports none.
static ARG_MAX: LazyLock<usize> =
  LazyLock::new(
    || match nix::unistd::sysconf(nix::unistd::SysconfVar::ARG_MAX) {
      Ok(Some(n)) if n > 0 => n as usize,
      _ => usize::MAX,
    },
  );

/// What `execve` copies for one string: its bytes, its NUL and its pointer.
fn exec_bytes(s: &CString) -> usize {
  s.as_bytes_with_nul().len() + std::mem::size_of::<usize>()
}

impl JobSpec {
  pub fn new(raw: RawJob) -> Result<JobSpec, PoolError> {
    if raw.binary_path.is_empty() {
      return Err(invalid("spec.binaryPath must be a non-empty string".into()));
    }
    at_most(&raw.binary_path, MAX_PATH_BYTES, "PATH_MAX", || {
      "spec.binaryPath".into()
    })?;
    let mut argv = vec![c_string(&raw.binary_path, || "spec.binaryPath".into())?];
    for (i, arg) in raw.args.iter().enumerate() {
      at_most(
        arg,
        MAX_ARG_BYTES,
        "the kernel's limit on one argument",
        || format!("spec.args[{i}]"),
      )?;
      argv.push(c_string(arg, || format!("spec.args[{i}]"))?);
    }
    if raw.cwd.is_empty() {
      return Err(invalid("spec.cwd must be a non-empty string".into()));
    }
    at_most(&raw.cwd, MAX_PATH_BYTES, "PATH_MAX", || "spec.cwd".into())?;
    c_string(&raw.cwd, || "spec.cwd".into())?;
    let mut env = Vec::with_capacity(raw.env.len());
    let mut path_var = None;
    for (key, value) in &raw.env {
      if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(invalid(format!(
          "spec.env key {} must be non-empty without '=' or NUL",
          shown(key)
        )));
      }
      let entry = format!("{key}={value}");
      at_most(
        &entry,
        MAX_ARG_BYTES,
        "the kernel's limit on one KEY=value string",
        || key_field(key),
      )?;
      env.push(c_string(&entry, || key_field(key))?);
      if key == "PATH" {
        path_var = Some(value.clone());
      }
    }
    let total: usize = argv.iter().chain(&env).map(exec_bytes).sum();
    if total > *ARG_MAX {
      return Err(invalid(format!(
        "spec.args and spec.env take {total} bytes together, over the kernel's ARG_MAX of {}",
        *ARG_MAX
      )));
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
      at_most(root, MAX_PATH_BYTES, "PATH_MAX", || "jailRoot".into())?;
      c_string(root, || "jailRoot".into())?;
    }
    if let Some(iso) = &raw.isolation {
      iso.validate().map_err(|e| invalid(format!("spec.{e}")))?;
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
      isolation: raw.isolation,
    })
  }
}
