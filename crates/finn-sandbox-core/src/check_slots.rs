//! How many repository checks of one sandbox run at once. Each walks up to the entry bound and
//! starts host gits, on a thread of its own (off libuv's pool, which Node's fs calls share), so
//! their number is bounded here instead: per sandbox, so that one agent's hostile repository (a
//! check held to its deadline) delays only its own commands. A pipe holds one byte per free slot
//! (make's jobserver): taking a slot is a read, giving it back a write, and a waiting check polls
//! the pipe together with its job's cancellation, so an abort ends the wait as well.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;

use finn_policy::Denial;
use finn_policy::host_git::Cancel;

/// Repository checks of one sandbox that run at once; the others wait their turn. Each check is bounded in time
/// (`host_git::REPOSITORY_CHECK_MS`), so a wait is too.
pub const MAX_CONCURRENT_CHECKS: usize = 4;

/// One sandbox's slots.
pub struct CheckSlots {
  read: OwnedFd,
  write: OwnedFd,
}

/// A slot taken; given back when dropped.
pub struct Slot<'a>(&'a CheckSlots);

impl Drop for Slot<'_> {
  fn drop(&mut self) {
    // The byte read when the slot was taken: the pipe has room for it.
    let _ = nix::unistd::write(&self.0.write, &[0]);
  }
}

fn aborted() -> Denial {
  Denial::audited("The operation was aborted", "aborted")
}

impl CheckSlots {
  pub fn new() -> io::Result<Self> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    for _ in 0..MAX_CONCURRENT_CHECKS {
      nix::unistd::write(&write, &[0])?;
    }
    Ok(CheckSlots { read, write })
  }

  /// Waits for a free slot, or until `cancel` fires.
  pub fn acquire(&self, cancel: Option<&Cancel>) -> Result<Slot<'_>, Denial> {
    let wake = cancel.and_then(Cancel::wake_fd);
    let mut byte = [0u8; 1];
    loop {
      if cancel.is_some_and(Cancel::is_cancelled) {
        return Err(aborted());
      }
      match nix::unistd::read(&self.read, &mut byte) {
        Ok(1) => return Ok(Slot(self)),
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
          fd: self.read.as_fd().as_raw_fd(),
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
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_check_waits_for_a_free_slot_and_an_abort_ends_the_wait() {
    let slots = CheckSlots::new().unwrap();
    let held: Vec<Slot> = (0..MAX_CONCURRENT_CHECKS)
      .map(|_| slots.acquire(None).unwrap())
      .collect();
    let cancel = Cancel::new().unwrap();
    std::thread::scope(|s| {
      let waiter = s.spawn(|| slots.acquire(Some(&cancel)).map(drop));
      cancel.cancel();
      let got = waiter.join().unwrap().unwrap_err();
      assert_eq!(got.message, "The operation was aborted");
      // A slot given back is taken by the next waiter; none is made up.
      let next = s.spawn(|| {
        let slot = slots.acquire(None).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
          nix::unistd::read(&slots.read, &mut byte),
          Err(nix::errno::Errno::EAGAIN),
          "a fifth slot"
        );
        drop(slot);
      });
      let mut held = held;
      held.pop();
      next.join().unwrap();
      drop(held);
    });
    let all: Vec<Slot> = (0..MAX_CONCURRENT_CHECKS)
      .map(|_| slots.acquire(None).unwrap())
      .collect();
    assert_eq!(all.len(), MAX_CONCURRENT_CHECKS);
  }
}
