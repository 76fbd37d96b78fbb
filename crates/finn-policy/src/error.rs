//! Why the sandbox refused a command. Messages are loa-finn's, which its callers match.

/// A refusal: the message the caller sees and, when the stage is audited, the audit reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
  pub message: String,
  /// `Some` when loa-finn audits this stage (`binary_not_allowed: x`, `flag_denied: -c`, ...).
  pub reason: Option<String>,
}

impl Denial {
  pub fn audited(message: impl Into<String>, reason: impl Into<String>) -> Self {
    Denial {
      message: message.into(),
      reason: Some(reason.into()),
    }
  }

  /// A refusal loa-finn did not audit (tokenizer, jail). The pipeline audits it anyway.
  pub fn plain(message: impl Into<String>) -> Self {
    Denial {
      message: message.into(),
      reason: None,
    }
  }
}
