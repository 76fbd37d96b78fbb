//! The seam between the pipeline and whatever runs a command. The native pool implements
//! [`Runner`] (the binding's `pool_runner.rs`), so does the binding's adapter for a JS `{ exec(spec) }`
//! executor, and [`NoRunner`] stands for "no executor configured". A supervisor or an isolating
//! runner plugs in here the same way.

use std::convert::Infallible;

use finn_audit::IsolationRecord;
use finn_job::RawJob;
pub use finn_job::RunnerError;

/// Receives a job's outcome, with the id [`Runner::run`] returned for it, exactly once and on
/// any thread.
pub type Done<E> = Box<dyn FnOnce(u64, RunOutcome<E>) + Send>;

/// Runs jobs the pipeline allowed.
pub trait Runner {
  /// Why a job could not run: audited as `execution_failed: <code>`, then handed back.
  type Error: RunnerError + Send + 'static;

  /// Starts `job` and returns its id. `done` receives the outcome exactly once; when the job
  /// is refused at once, `run` returns the error and drops `done` uncalled.
  fn run(&self, job: RawJob, done: Done<Self::Error>) -> Result<u64, Self::Error>;
}

/// What a finished command printed and how it exited.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub truncated: bool,
  /// The isolation the runner applied; `None` when it applied none (or cannot say).
  pub isolation: Option<IsolationRecord>,
}

/// How a runner ended a job it accepted.
#[derive(Debug)]
pub enum RunOutcome<E> {
  Finished(Output),
  /// The runner gave up at the job's timeout, its tree is dead; the runner's message.
  TimedOut(String),
  /// Any other failure; the pipeline audits it and hands the error back.
  Failed(E),
  /// There is no runner: the command reads as disabled.
  NoRunner,
}

/// No executor is configured: every allowed command ends as "Sandbox is disabled".
pub struct NoRunner;

impl Runner for NoRunner {
  type Error = Infallible;

  fn run(&self, _job: RawJob, done: Done<Infallible>) -> Result<u64, Infallible> {
    done(0, RunOutcome::NoRunner);
    Ok(0)
  }
}
