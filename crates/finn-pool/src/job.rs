//! The job mapping: a [`JobSpec`] to the runner's limits and spawn spec, the jail check on its
//! working directory, and the run's outcome to the pool's result and tally.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use super::config::JobSpec;
use super::error::{PoolError, Unavailable};
use super::state::{Inner, StopReason};
use finn_exec::later::Later;
use finn_exec::{self as exec, EndedBy, RunLimits, SpawnSpec, StopCell};
use finn_isolate::{
  IsolationError, IsolationOptions, IsolationReport, LayerFailed, Mode, Plan, probe,
};
use finn_supervisor as supervisor;

/// The job's options (or the pool's default) resolved against this host and the job's cwd.
fn resolve_isolation(
  opts: Option<&IsolationOptions>,
  cwd: &str,
  has_supervisor: bool,
  landlock_abi_max: Option<i32>,
) -> Result<Option<Plan>, PoolError> {
  let Some(opts) = opts.filter(|o| o.mode != Mode::Off) else {
    return Ok(None);
  };
  if !has_supervisor {
    return Err(PoolError::IsolationUnavailable(Unavailable::NoSupervisor));
  }
  Plan::resolve(opts, Path::new(cwd), &probe().capped(landlock_abi_max)).map_err(|e| match e {
    IsolationError::Options(e) => PoolError::InvalidSpec(format!("spec.{e}")),
    IsolationError::Unavailable(missing) => {
      PoolError::IsolationUnavailable(Unavailable::Missing(missing))
    }
    IsolationError::Prepare { layer, source } => {
      PoolError::IsolationUnavailable(Unavailable::Layer(LayerFailed::prepared(layer, &source)))
    }
  })
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub truncated: bool,
  pub duration_ms: f64,
  /// The isolation the command ran under (`None`: off).
  pub isolation: Option<IsolationReport>,
}

pub type JobOutcome = Result<JobResult, PoolError>;

/// How a finished job counts in the totals.
pub(super) enum Tally {
  Completed(f64),
  Failed,
  TimedOut,
  Uncounted,
}

const JAIL_REJECTION: &str = "Working directory validation failed";

/// Why a working directory was rejected: for the log only (the caller sees
/// [`JAIL_REJECTION`]).
#[derive(Debug, thiserror::Error)]
enum JailCheck {
  #[error("{field} {path}: {source}")]
  Unresolved {
    field: &'static str,
    path: String,
    source: std::io::Error,
  },
  #[error("cwd {} is outside jailRoot {}", cwd.display(), root.display())]
  Outside { cwd: PathBuf, root: PathBuf },
}

/// `cwd` must resolve inside `root` (compared by path components, after realpath).
fn cwd_inside_jail(cwd: &str, root: &str) -> Result<(), JailCheck> {
  let resolve = |field, path: &str| {
    std::fs::canonicalize(path).map_err(|source| JailCheck::Unresolved {
      field,
      path: path.into(),
      source,
    })
  };
  let root = resolve("jailRoot", root)?;
  let real = resolve("cwd", cwd)?;
  if real.starts_with(&root) {
    Ok(())
  } else {
    Err(JailCheck::Outside { cwd: real, root })
  }
}

fn result(
  stdout: String,
  stderr: String,
  exit_code: i32,
  truncated: bool,
  duration: Duration,
) -> JobResult {
  JobResult {
    stdout,
    stderr,
    exit_code,
    truncated,
    duration_ms: duration.as_secs_f64() * 1000.0,
    isolation: None,
  }
}

/// A result whose only output is the pool's own `message` on stderr, held to the job's
/// `maxBuffer` like a command's output (UTF-8 bytes, marker included, no split character), so a
/// failed spawn's message naming a long path cannot exceed `maxBuffer: 1`.
fn message_result(
  message: &str,
  exit_code: i32,
  max_bytes: usize,
  duration: Duration,
) -> JobResult {
  let mut capture = exec::capture::Capture::new(max_bytes);
  capture.push(exec::capture::Stream::Stderr, message.as_bytes());
  let (stdout, stderr, truncated) = capture.finish();
  result(stdout, stderr, exit_code, truncated, duration)
}

/// A working directory outside the jail: loa-finn's sanitized result (exit 1), not an error.
fn jail_rejected(max_bytes: usize) -> (JobOutcome, Tally) {
  let rejected = message_result(JAIL_REJECTION, 1, max_bytes, Duration::ZERO);
  (Ok(rejected), Tally::Completed(0.0))
}

/// A job whose checks passed, resolved to what a runner needs.
pub(super) struct Prepared {
  pub(super) spec: SpawnSpec,
  pub(super) isolation: Option<Plan>,
  report: Option<IsolationReport>,
  pub(super) limits: RunLimits,
  timeout_ms: u64,
  started: std::time::Instant,
}

impl Prepared {
  pub(super) fn terms(&self) -> supervisor::JobTerms<'_> {
    supervisor::JobTerms {
      spec: &self.spec,
      isolation: self.isolation.as_ref(),
      limits: &self.limits,
    }
  }
}

/// The jail check, the isolation plan and the program's path: a job ready to run, or its
/// outcome when it cannot run (a rejected cwd is a result, as in loa-finn).
pub(super) fn prepare(
  job: &mut JobSpec,
  inner: &Inner,
) -> Result<Prepared, Box<(JobOutcome, Tally)>> {
  if let Some(root) = &job.jail_root
    && let Err(detail) = cwd_inside_jail(&job.cwd, root)
  {
    // The caller sees the sanitized message only; the detail goes to the log.
    tracing::warn!(%detail, "working directory rejected");
    return Err(Box::new(jail_rejected(job.max_buffer)));
  }
  let isolation = match resolve_isolation(
    job.isolation.as_ref().or(inner.config.isolation.as_ref()),
    &job.cwd,
    inner.supervisor.is_some(),
    inner.config.landlock_abi_max,
  ) {
    Ok(plan) => plan,
    Err(e) => return Err(Box::new((Err(e), Tally::Failed))),
  };
  // Isolated, the cwd the reaper enters (and the rules it builds) is the object opened by
  // `Plan::resolve`: check that one, by the path the kernel names it by now. The path check
  // above may have seen another directory at the same name a moment earlier.
  if let (Some(root), Some(plan)) = (&job.jail_root, &isolation) {
    let inside = match (&plan.cwd, std::fs::canonicalize(root)) {
      (Some(cwd), Ok(root)) => cwd.starts_with(&root),
      _ => false,
    };
    if !inside {
      tracing::warn!(cwd = ?plan.cwd, "working directory rejected (its checked fd)");
      return Err(Box::new(jail_rejected(job.max_buffer)));
    }
  }
  let report = isolation.as_ref().map(Plan::report);
  let started = std::time::Instant::now();
  let program = match exec::resolve_program(&job.binary_path, job.path_var.as_deref()) {
    Ok(program) => program,
    Err(e) => return Err(Box::new(spawn_failure(e, job.max_buffer, started))),
  };
  let spec = SpawnSpec {
    program,
    argv: std::mem::take(&mut job.argv),
    env: std::mem::take(&mut job.env),
    cwd: std::ffi::CString::new(job.cwd.as_str()).expect("validated without NUL"),
  };
  let limits = RunLimits {
    timeout: Some(Duration::from_millis(job.timeout_ms)),
    max_output_bytes: job.max_buffer,
    kill_grace: inner.config.kill_grace,
  };
  Ok(Prepared {
    spec,
    isolation,
    report,
    limits,
    timeout_ms: job.timeout_ms,
    started,
  })
}

fn spawn_failure(
  e: exec::SpawnError,
  max_bytes: usize,
  started: std::time::Instant,
) -> (JobOutcome, Tally) {
  let failed = message_result(
    &format!("{e}\n"),
    e.exit_code(),
    max_bytes,
    started.elapsed(),
  );
  (Ok(failed), Tally::Failed)
}

/// Records the pid whose tree is the job's (see `Running::leader`); a job that starts while
/// the host exits kills its tree at once.
pub(super) fn register(inner: &Inner, leader: &AtomicI32, pid: i32) {
  leader.store(pid, Ordering::SeqCst);
  if inner.exiting.load(Ordering::SeqCst) {
    inner.kill_trees_now(&[pid]);
  }
}

pub(super) fn execute(
  mut job: JobSpec,
  stop: &StopCell<StopReason>,
  inner: &Inner,
  leader: &AtomicI32,
  later: &mut dyn Later,
) -> (JobOutcome, Tally) {
  let prepared = match prepare(&mut job, inner) {
    Ok(prepared) => prepared,
    Err(done) => return *done,
  };
  let ran = match &inner.supervisor {
    Some(sup) => supervisor::run_blocking(
      sup,
      prepared.terms(),
      inner.config.drain,
      stop,
      later,
      |pid| register(inner, leader, pid),
    ),
    // The direct path (a test fixture) does not watch `later`: it is done in full once the
    // child runs.
    #[cfg(feature = "test-hooks")]
    None => exec::direct::run_blocking(&prepared.spec, &prepared.limits, stop, |pid| {
      register(inner, leader, pid);
      later.run();
    })
    .map_err(Into::into),
    // Only a build with the test hooks runs a job without the supervisor.
    #[cfg(not(feature = "test-hooks"))]
    None => Err(supervisor::RunError::Crashed(supervisor::Crash::Start {
      program: PathBuf::from("finn-supervisor"),
      source: std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "no supervisor binary was given",
      )
      .into(),
    })),
  };
  conclude(prepared, ran)
}

/// A job prepared and sent elsewhere (see `inline.rs`), seen through on this thread: sent
/// first if no reaper has it yet. `stop: None` only once its whole end is read (see
/// `supervisor::run::resume`).
pub(super) fn resume(
  resume: Resume,
  stop: Option<&StopCell<StopReason>>,
  inner: &Inner,
  leader: &AtomicI32,
  later: &mut dyn Later,
) -> (JobOutcome, Tally) {
  let Resume {
    prepared,
    reaper,
    outgoing,
  } = resume;
  let Some(sup) = &inner.supervisor else {
    unreachable!("only jobs through the supervisor are resumed");
  };
  let isolation = prepared.isolation.as_ref();
  let sent = match reaper {
    Some(reaper) => {
      later.run_if_due();
      Ok((reaper, outgoing))
    }
    None => outgoing.send(sup, &prepared.spec, isolation, later),
  };
  let ran = sent.and_then(|(reaper, outgoing)| {
    supervisor::run::resume(
      sup,
      reaper,
      outgoing,
      prepared.terms(),
      stop,
      later,
      |pid| register(inner, leader, pid),
    )
  });
  conclude(prepared, ran)
}

/// A prepared job's `Run`, and the reaper it went to if it went.
pub(super) struct Resume {
  pub(super) prepared: Prepared,
  pub(super) reaper: Option<supervisor::client::Reaper>,
  pub(super) outgoing: supervisor::run::Outgoing,
}

/// A run's end as the pool's outcome and tally.
pub(super) fn conclude(
  prepared: Prepared,
  ran: Result<exec::Finished<StopReason>, supervisor::RunError>,
) -> (JobOutcome, Tally) {
  let finished = match ran {
    Ok(finished) => finished,
    Err(supervisor::RunError::Spawn(e)) => {
      return spawn_failure(e, prepared.limits.max_output_bytes, prepared.started);
    }
    Err(supervisor::RunError::Isolation(failed)) => {
      let e = PoolError::IsolationUnavailable(Unavailable::Layer(failed));
      return (Err(e), Tally::Failed);
    }
    Err(supervisor::RunError::Crashed(crash)) => {
      tracing::error!(%crash, "the job's supervisor failed");
      return (Err(PoolError::Crashed(crash.into())), Tally::Failed);
    }
  };
  if !finished.survivors.is_empty() {
    tracing::error!(survivors = ?finished.survivors, "processes outlived SIGKILL and the reap bound");
  }
  let exit_code = finished.exit_code();
  match finished.ended_by {
    EndedBy::Exit | EndedBy::OutputLimit => {
      let mut done = result(
        finished.stdout,
        finished.stderr,
        exit_code,
        finished.truncated,
        finished.duration,
      );
      done.isolation = prepared.report;
      let ms = done.duration_ms;
      (Ok(done), Tally::Completed(ms))
    }
    EndedBy::Timeout => (
      Err(PoolError::Timeout(prepared.timeout_ms)),
      Tally::TimedOut,
    ),
    EndedBy::Stopped(StopReason::Abort) => (Err(PoolError::Aborted), Tally::Uncounted),
    EndedBy::Stopped(StopReason::Shutdown) => (Err(PoolError::ShutDown), Tally::Uncounted),
  }
}
