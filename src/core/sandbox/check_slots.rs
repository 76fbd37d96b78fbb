//! How many repository checks run at once in this process, across every sandbox. Each walks up to
//! the entry bound and starts host gits, on a thread of its own (off libuv's pool, which Node's fs
//! calls share), so their number is bounded here instead. A pipe holds one byte per free slot
//! (make's jobserver): taking a slot is a read, giving it back a write, and a waiting check polls
//! the pipe together with its job's cancellation, so an abort ends the wait as well.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;

use nix::fcntl::OFlag;

use crate::core::policy::Denial;
use crate::core::policy::host_git::Cancel;

/// Repository checks that run at once; the others wait their turn. Each check is bounded in time
/// (`host_git::REPOSITORY_CHECK_MS`), so a wait is too.
pub const MAX_CONCURRENT_CHECKS: usize = 4;

struct Slots {
  read: OwnedFd,
  write: OwnedFd,
}

fn slots() -> Result<&'static Slots, Denial> {
  static SLOTS: OnceLock<Result<Slots, String>> = OnceLock::new();
  SLOTS
    .get_or_init(|| {
      let (read, write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(|e| e.to_string())?;
      for _ in 0..MAX_CONCURRENT_CHECKS {
        nix::unistd::write(&write, &[0]).map_err(|e| e.to_string())?;
      }
      Ok(Slots { read, write })
    })
    .as_ref()
    .map_err(|e| {
      Denial::audited(
        format!("Repository check unavailable: {e}"),
        format!("check_slots: {e}"),
      )
    })
}

/// A slot taken; given back when dropped.
pub struct Slot(&'static Slots);

impl Drop for Slot {
  fn drop(&mut self) {
    // The byte read when the slot was taken: the pipe has room for it.
    let _ = nix::unistd::write(&self.0.write, &[0]);
  }
}

fn aborted() -> Denial {
  Denial::audited("The operation was aborted", "aborted")
}

/// Waits for a free slot, or until `cancel` fires.
pub fn acquire(cancel: Option<&Cancel>) -> Result<Slot, Denial> {
  let slots = slots()?;
  let wake = cancel.and_then(Cancel::wake_fd);
  let mut byte = [0u8; 1];
  loop {
    if cancel.is_some_and(Cancel::is_cancelled) {
      return Err(aborted());
    }
    match nix::unistd::read(&slots.read, &mut byte) {
      Ok(1) => return Ok(Slot(slots)),
      // Another waiter took it first, or none is free: wait for one.
      Ok(_) | Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
      Err(e) => {
        return Err(Denial::audited(
          format!("Repository check unavailable: {e}"),
          format!("check_slots: {e}"),
        ));
      }
    }
    let mut fds = [
      libc::pollfd {
        fd: slots.read.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
      },
      libc::pollfd {
        fd: wake.as_ref().map_or(-1, |w| w.as_raw_fd()),
        events: libc::POLLIN,
        revents: 0,
      },
    ];
    // SAFETY: `fds` is a valid array of two pollfd; a negative fd is ignored by the kernel.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  /// The slots are the process's: this test takes every one, so it is the only test here that
  /// holds any.
  #[test]
  fn a_check_waits_for_a_free_slot_and_an_abort_ends_the_wait() {
    let held: Vec<Slot> = (0..MAX_CONCURRENT_CHECKS)
      .map(|_| acquire(None).unwrap())
      .collect();
    let cancel = std::sync::Arc::new(Cancel::new().unwrap());
    let waiter = {
      let cancel = std::sync::Arc::clone(&cancel);
      std::thread::spawn(move || acquire(Some(&cancel)).map(drop))
    };
    cancel.cancel();
    let got = waiter.join().unwrap().unwrap_err();
    assert_eq!(got.message, "The operation was aborted");
    // A free slot is taken by the next waiter.
    let (tx, rx) = std::sync::mpsc::channel();
    let next = std::thread::spawn(move || {
      let slot = acquire(None).unwrap();
      tx.send(()).unwrap();
      drop(slot);
    });
    drop(held);
    rx.recv().unwrap();
    next.join().unwrap();
  }
}
