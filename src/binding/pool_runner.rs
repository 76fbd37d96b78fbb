//! The native pool as the sandbox pipeline's [`Runner`]: the job is validated into a
//! [`JobSpec`] and submitted; the pool's rejections keep their `PoolError`, a timeout becomes a
//! timed-out result.

use finn_audit::IsolationRecord;
use finn_job::RawJob;
use finn_pool::{JobSpec, Pool, PoolError};
use finn_sandbox_core::{Done, Output, RunOutcome, Runner};

/// A pool lent to the pipeline for one command.
pub struct PoolRunner<'a>(pub &'a Pool);

impl Runner for PoolRunner<'_> {
  type Error = PoolError;

  fn run(&self, job: RawJob, done: Done<PoolError>) -> Result<u64, PoolError> {
    let job = JobSpec::new(job)?;
    self.0.submit_with(
      job,
      Box::new(move |id, outcome| {
        let outcome = match outcome {
          Ok(r) => RunOutcome::Finished(Output {
            stdout: r.stdout,
            stderr: r.stderr,
            exit_code: r.exit_code,
            truncated: r.truncated,
            isolation: r.isolation.map(|i| IsolationRecord {
              backend: i.backend.into(),
              applied: i.applied.iter().map(|s| (*s).to_owned()).collect(),
              degraded: i.degraded,
            }),
          }),
          Err(e @ PoolError::Timeout(_)) => RunOutcome::TimedOut(e.to_string()),
          Err(e) => RunOutcome::Failed(e),
        };
        done(id, outcome)
      }),
    )
  }
}
