//! Work the thread running a job owes elsewhere, done from the job's waits once it is due.

use std::time::Instant;

/// Work a job's thread owes elsewhere (a pool worker's held replies): the job's waits wake
/// for it at [`Later::due`] and do it then.
pub trait Later {
  /// When it must be done; `None`: nothing is owed.
  fn due(&self) -> Option<Instant>;
  /// Does it (all of it: nothing is owed after).
  fn run(&mut self);
  /// Does it if it is due (the clock is read only when something is owed).
  fn run_if_due(&mut self) {
    if self.due().is_some_and(|at| at <= Instant::now()) {
      self.run();
    }
  }
}

/// Nothing owed.
pub struct Nothing;

impl Later for Nothing {
  fn due(&self) -> Option<Instant> {
    None
  }

  fn run(&mut self) {}
}

/// The earlier of a wait's own wake-up and `later`'s due time.
pub fn wake_for(wake: Option<Instant>, later: &dyn Later) -> Option<Instant> {
  match (wake, later.due()) {
    (Some(a), Some(b)) => Some(a.min(b)),
    (a, b) => a.or(b),
  }
}
