//! The job mapping: a [`JobSpec`] to the runner's limits and spawn spec, the jail check on its
//! working directory, and the run's outcome to the pool's result and tally.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use super::config::JobSpec;
use super::error::PoolError;
use super::state::StopReason;
use crate::core::exec::{self, EndedBy, Limits, SpawnSpec, StopCell};

#[derive(Debug, Clone, PartialEq)]
pub struct ExecResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub truncated: bool,
  pub duration_ms: f64,
}

pub type JobOutcome = Result<ExecResult, PoolError>;

/// How a finished job counts in the totals.
pub(super) enum Tally {
  Completed(f64),
  Failed,
  TimedOut,
  Uncounted,
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

pub(super) fn execute(
  job: JobSpec,
  stop: &StopCell<StopReason>,
  kill_grace: Duration,
  leader: &AtomicI32,
  exiting: &AtomicBool,
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
    kill_grace,
  };
  let on_spawn = |pid| {
    leader.store(pid, Ordering::SeqCst);
    if exiting.load(Ordering::SeqCst) {
      exec::kill_tree_now(pid);
    }
    on_spawned();
  };
  let finished = match exec::run_blocking(&spec, &limits, stop, on_spawn) {
    Ok(finished) => finished,
    Err(e) => return spawn_failure(e),
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
