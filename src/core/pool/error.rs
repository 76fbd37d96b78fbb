//! Why the pool rejected a job. Messages are loa-finn's, which its callers and tests match.

use super::config::Lane;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
  #[error("{} queue full", match .0 { Lane::Interactive => "Interactive", Lane::System => "System" })]
  QueueFull(Lane),
  /// `exec` called after `shutdown()` began.
  #[error("Pool is shutting down")]
  Closed,
  /// A queued or running job that shutdown ended.
  #[error("Pool shutting down")]
  ShutDown,
  #[error("Command timed out after {0}ms")]
  Timeout(u64),
  #[error("The operation was aborted")]
  Aborted,
  #[error("Worker crashed: {0}")]
  Crashed(String),
  #[error("{0}")]
  InvalidSpec(String),
}

impl PoolError {
  /// The stable `PoolErrorCode` string seen by JS.
  pub fn code(&self) -> &'static str {
    match self {
      PoolError::QueueFull(_) => "WORKER_UNAVAILABLE",
      PoolError::Closed | PoolError::ShutDown => "POOL_SHUTTING_DOWN",
      PoolError::Timeout(_) => "EXEC_TIMEOUT",
      PoolError::Aborted => "ABORTED",
      PoolError::Crashed(_) => "WORKER_CRASHED",
      PoolError::InvalidSpec(_) => "INVALID_SPEC",
    }
  }
}
