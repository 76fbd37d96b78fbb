//! A worker thread's mailbox while it waits, parked, for its next job.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Where a parked worker thread receives its next job, or is told to exit.
pub struct Mailbox<T> {
  slot: Mutex<Slot<T>>,
  wake: Condvar,
}

enum Slot<T> {
  Empty,
  Job(Box<T>),
  Retire,
}

/// What [`Mailbox::wait_until`] found.
pub enum Waited<T> {
  Job(T),
  Retired,
  /// Nothing came before the deadline.
  Idle,
}

impl<T> Default for Mailbox<T> {
  fn default() -> Self {
    Mailbox {
      slot: Mutex::new(Slot::Empty),
      wake: Condvar::new(),
    }
  }
}

impl<T> Mailbox<T> {
  fn lock(&self) -> MutexGuard<'_, Slot<T>> {
    self.slot.lock().unwrap_or_else(|e| e.into_inner())
  }

  fn put(&self, slot: Slot<T>) {
    *self.lock() = slot;
    self.wake.notify_one();
  }

  pub fn hand(&self, job: T) {
    self.put(Slot::Job(Box::new(job)));
  }

  pub fn retire(&self) {
    self.put(Slot::Retire);
  }

  /// Takes a job or a retirement, waiting for one until `until` (a job already there is
  /// taken even after it).
  pub fn wait_until(&self, until: Instant) -> Waited<T> {
    let mut slot = self.lock();
    loop {
      match std::mem::replace(&mut *slot, Slot::Empty) {
        Slot::Job(job) => return Waited::Job(*job),
        Slot::Retire => return Waited::Retired,
        Slot::Empty => {}
      }
      let now = Instant::now();
      if now >= until {
        return Waited::Idle;
      }
      slot = self
        .wake
        .wait_timeout(slot, until - now)
        .unwrap_or_else(|e| e.into_inner())
        .0;
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::sync::Arc;
  use std::time::Duration;

  #[test]
  fn a_job_handed_before_or_during_the_wait_is_taken() {
    let mailbox = Mailbox::default();
    mailbox.hand(1);
    assert!(matches!(mailbox.wait_until(Instant::now()), Waited::Job(1)));
    let mailbox = Arc::new(mailbox);
    let sender = Arc::clone(&mailbox);
    let handing = std::thread::spawn(move || sender.hand(2));
    let waited = mailbox.wait_until(Instant::now() + Duration::from_secs(10));
    handing.join().unwrap();
    assert!(matches!(waited, Waited::Job(2)));
  }

  #[test]
  fn retirement_and_idleness_end_the_wait() {
    let mailbox = Mailbox::<u8>::default();
    assert!(matches!(
      mailbox.wait_until(Instant::now() + Duration::from_millis(1)),
      Waited::Idle
    ));
    mailbox.retire();
    assert!(matches!(
      mailbox.wait_until(Instant::now()),
      Waited::Retired
    ));
  }
}
