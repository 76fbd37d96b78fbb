//! The native pool as a [`Runner`]: the job is validated into a [`JobSpec`] and submitted;
//! the pool's rejections keep their `PoolError`, a timeout becomes a timed-out result.

use super::runner::{Done, Output, RunError, RunOutcome, Runner};
use crate::core::audit::IsolationRecord;
use crate::core::pool::{JobSpec, Pool, PoolError, RawJob};

impl RunError for PoolError {
  fn audit_code(&self) -> String {
    self.code().into()
  }
}

impl Runner for Pool {
  type Error = PoolError;

  fn run(&self, job: RawJob, done: Done<PoolError>) -> Result<u64, PoolError> {
    let job = JobSpec::new(job)?;
    self.submit_with(
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
