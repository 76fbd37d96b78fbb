//! How a run ended.

use std::time::Duration;

/// How the leader process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
  Exited(i32),
  Signaled(i32),
}

impl ExitStatus {
  /// Shell convention: the exit code, or `128 + signo` for a signal death.
  pub fn code(self) -> i32 {
    match self {
      ExitStatus::Exited(code) => code,
      ExitStatus::Signaled(signal) => 128 + signal,
    }
  }
}

/// Why the run stopped, when it did not simply finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndedBy<R> {
  /// The leader exited and both pipes reached EOF.
  Exit,
  /// The timeout elapsed; the tree was terminated.
  Timeout,
  /// The caller asked for a stop (abort, shutdown); the tree was terminated.
  Stopped(R),
  /// Output went over the cap; the tree was killed.
  OutputLimit,
}

/// The result of [`super::run`].
#[derive(Debug)]
pub struct Finished<R> {
  /// `None` only when the leader could not be reaped within the hard bound (a D-state child).
  pub status: Option<ExitStatus>,
  pub stdout: String,
  pub stderr: String,
  pub truncated: bool,
  pub ended_by: EndedBy<R>,
  /// From spawn until the tree was gone.
  pub duration: Duration,
  /// Pids of the tree that were still alive when the hard bound gave up on them.
  pub survivors: Vec<i32>,
}

impl<R> Finished<R> {
  /// The exit code the pool reports: real codes pass through, signals are `128 + signo`.
  pub fn exit_code(&self) -> i32 {
    self.status.map_or(137, ExitStatus::code)
  }
}
