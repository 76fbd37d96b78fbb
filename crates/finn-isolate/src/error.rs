//! Why isolation could not be set up for a job.

use finn_job::isolation::OptionsError;

#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
  #[error(transparent)]
  Options(#[from] OptionsError),
  /// A layer the caller required (or that `mode: "native"` implies) cannot apply on this host.
  #[error("isolation unavailable: {}", .0.join("; "))]
  Unavailable(Vec<String>),
  /// Building a ruleset, filter, cgroup or mount plan failed.
  #[error("prepare isolation ({layer}): {reason}")]
  Prepare { layer: &'static str, reason: String },
}

impl IsolationError {
  /// The stable JS code (`PoolError.code`).
  pub fn code(&self) -> &'static str {
    match self {
      IsolationError::Options(e) => e.code(),
      IsolationError::Unavailable(_) | IsolationError::Prepare { .. } => "ISOLATION_UNAVAILABLE",
    }
  }

  pub(crate) fn prepare(layer: &'static str, e: impl std::fmt::Display) -> Self {
    IsolationError::Prepare {
      layer,
      reason: e.to_string(),
    }
  }
}
