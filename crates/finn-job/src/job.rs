//! A job as the caller describes it, before the pool validates it (`finn_pool::JobSpec`).

use crate::isolation::IsolationOptions;

/// Which of a pool's lanes runs a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
  Interactive,
  System,
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
  pub isolation: Option<IsolationOptions>,
}

/// Why a runner could not run a job, as the audit log names it (`execution_failed: <code>`).
pub trait RunnerError {
  fn audit_code(&self) -> String;
}

impl RunnerError for std::convert::Infallible {
  fn audit_code(&self) -> String {
    match *self {}
  }
}
