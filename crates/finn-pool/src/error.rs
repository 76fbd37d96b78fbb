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
  /// No thread could be started to run the job (retry with backoff, as for a full queue).
  #[error("No worker thread could be started: {0}")]
  NoWorker(String),
  #[error("{0}")]
  InvalidSpec(String),
  /// Isolation was required (or `mode: "native"` asked for) and a layer cannot apply here.
  #[error("{0}")]
  IsolationUnavailable(String),
}

impl PoolError {
  /// The stable `PoolErrorCode` string seen by JS.
  pub fn code(&self) -> &'static str {
    self.error_code().as_str()
  }

  pub fn error_code(&self) -> PoolErrorCode {
    match self {
      PoolError::QueueFull(_) | PoolError::NoWorker(_) => PoolErrorCode::WorkerUnavailable,
      PoolError::Closed | PoolError::ShutDown => PoolErrorCode::PoolShuttingDown,
      PoolError::Timeout(_) => PoolErrorCode::ExecTimeout,
      PoolError::Aborted => PoolErrorCode::Aborted,
      PoolError::Crashed(_) => PoolErrorCode::WorkerCrashed,
      PoolError::InvalidSpec(_) => PoolErrorCode::InvalidSpec,
      PoolError::IsolationUnavailable(_) => PoolErrorCode::IsolationUnavailable,
    }
  }
}

/// JS's `PoolErrorCode`: the one list of codes. The addon exports it; `index.js` builds its
/// `PoolErrorCode` from that export, and a test holds `index.d.ts` to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolErrorCode {
  /// The lane's queue is full: retry with backoff.
  WorkerUnavailable,
  /// `shutdown()` has begun: do not retry.
  PoolShuttingDown,
  /// Execution is disabled by configuration (only `index.js`'s DisabledExecutor uses it).
  SandboxDisabled,
  /// The command ran past its timeout; its tree is dead.
  ExecTimeout,
  /// An internal failure (a panic in the addon).
  WorkerCrashed,
  /// The caller's AbortSignal fired.
  Aborted,
  /// The spec or an argument is invalid; the message names the field.
  InvalidSpec,
  /// Required isolation cannot be applied on this host; the message names the layers and why.
  IsolationUnavailable,
}

impl PoolErrorCode {
  pub const ALL: [PoolErrorCode; 8] = [
    PoolErrorCode::WorkerUnavailable,
    PoolErrorCode::PoolShuttingDown,
    PoolErrorCode::SandboxDisabled,
    PoolErrorCode::ExecTimeout,
    PoolErrorCode::WorkerCrashed,
    PoolErrorCode::Aborted,
    PoolErrorCode::InvalidSpec,
    PoolErrorCode::IsolationUnavailable,
  ];

  pub fn as_str(self) -> &'static str {
    match self {
      PoolErrorCode::WorkerUnavailable => "WORKER_UNAVAILABLE",
      PoolErrorCode::PoolShuttingDown => "POOL_SHUTTING_DOWN",
      PoolErrorCode::SandboxDisabled => "SANDBOX_DISABLED",
      PoolErrorCode::ExecTimeout => "EXEC_TIMEOUT",
      PoolErrorCode::WorkerCrashed => "WORKER_CRASHED",
      PoolErrorCode::Aborted => "ABORTED",
      PoolErrorCode::InvalidSpec => "INVALID_SPEC",
      PoolErrorCode::IsolationUnavailable => "ISOLATION_UNAVAILABLE",
    }
  }
}

impl finn_job::RunError for PoolError {
  fn audit_code(&self) -> String {
    self.code().into()
  }
}
