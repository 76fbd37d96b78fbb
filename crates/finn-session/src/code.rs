//! JS's `SessionErrorCode`: the one list of the codes a `SessionError` carries. The addon
//! exports it; `index.js` builds `SessionErrorCode` from that export, and a test holds
//! `index.d.ts` to it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionErrorCode {
  /// The session was destroyed: the call came after `destroy()`, or was running or queued
  /// when it was called.
  Destroyed,
  /// A wait ran past its `timeoutMs` (a command's own timeout is a result, not this error).
  TimedOut,
  /// The process waited on exited first.
  ProcessExited,
  /// A path does not exist (a bad `cwd`).
  NotFound,
  /// A bad argument: a NUL in a command, a bad env name, a bad option value; the message names
  /// the option.
  Invalid,
  /// The caller's AbortSignal fired.
  Aborted,
}

impl SessionErrorCode {
  pub const ALL: [SessionErrorCode; 6] = [
    SessionErrorCode::Destroyed,
    SessionErrorCode::TimedOut,
    SessionErrorCode::ProcessExited,
    SessionErrorCode::NotFound,
    SessionErrorCode::Invalid,
    SessionErrorCode::Aborted,
  ];

  pub fn as_str(self) -> &'static str {
    match self {
      SessionErrorCode::Destroyed => "ESESSIONDESTROYED",
      SessionErrorCode::TimedOut => "ETIMEDOUT",
      SessionErrorCode::ProcessExited => "EPROCESSEXITED",
      SessionErrorCode::NotFound => "ENOENT",
      SessionErrorCode::Invalid => "EINVAL",
      SessionErrorCode::Aborted => "ABORT_ERR",
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn every_code_is_listed_once_and_spelled_as_node_spells_it() {
    let names: Vec<_> = SessionErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
    assert!(
      names
        .iter()
        .all(|n| n.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
    );
  }
}
