//! A caller's request to stop a running child, and how it wakes the runner.
//!
//! The runner sleeps in `ppoll` on its child's pipes and pidfd; a request must wake it. Each
//! runner thread owns one eventfd for its whole life (created on first use), registered in the
//! cell while a run is in progress, so a job costs no extra descriptor.

use std::cell::OnceCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A caller's request to stop a running child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop<R> {
  /// Time between SIGTERM and SIGKILL; zero kills at once.
  pub grace: Duration,
  pub reason: R,
}

/// Where a stop request waits for the runner. Cheap to create; share it behind an `Arc`.
pub struct StopCell<R> {
  state: Mutex<CellState<R>>,
}

struct CellState<R> {
  request: Option<Stop<R>>,
  /// Signals asked for the running tree (see [`StopCell::send_signal`]), oldest first.
  signals: Vec<i32>,
  /// Set by the first request, so a later one is ignored even after the runner took it.
  requested: bool,
  /// The runner's eventfd while it runs.
  waker: Option<RawFd>,
}

impl<R> Default for StopCell<R> {
  fn default() -> Self {
    StopCell {
      state: Mutex::new(CellState {
        request: None,
        signals: Vec::new(),
        requested: false,
        waker: None,
      }),
    }
  }
}

impl<R> StopCell<R> {
  pub fn new() -> Self {
    Self::default()
  }

  fn lock(&self) -> MutexGuard<'_, CellState<R>> {
    self.state.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// Asks the run to stop. The first request wins; a later one is ignored.
  pub fn request(&self, stop: Stop<R>) {
    let mut state = self.lock();
    if !state.requested {
      state.requested = true;
      state.request = Some(stop);
      if let Some(fd) = state.waker {
        wake(fd);
      }
    }
  }

  /// Asks the run to stop even after an earlier request: a caller's second `kill` with a
  /// shorter grace. It replaces a request the runner has not taken yet, and wakes it; the job's
  /// [`crate::lifecycle::Lifecycle`] keeps only a sooner SIGKILL from it.
  pub fn escalate(&self, stop: Stop<R>) {
    let mut state = self.lock();
    state.requested = true;
    state.request = Some(stop);
    if let Some(fd) = state.waker {
      wake(fd);
    }
  }

  /// Asks the runner to send signal `signo` to the running tree, without stopping it; wakes it
  /// like a stop request. Signals asked before the run started wait for it.
  pub fn send_signal(&self, signo: i32) {
    let mut state = self.lock();
    state.signals.push(signo);
    if let Some(fd) = state.waker {
      wake(fd);
    }
  }

  /// Registers the calling thread's eventfd for the length of a run, until the returned guard
  /// is dropped; or says why the eventfd could not be created. A request (or a signal) made
  /// before the run started leaves it readable.
  pub fn attach(&self) -> io::Result<Attached<'_, R>> {
    let fd = thread_waker()?;
    drain(fd);
    let mut state = self.lock();
    state.waker = Some(fd);
    if state.request.is_some() || !state.signals.is_empty() {
      wake(fd);
    }
    Ok(Attached { cell: self, fd })
  }

  fn detach(&self) {
    self.lock().waker = None;
  }
}

/// A run's registration in a [`StopCell`]: detached when dropped, however the run ends (a panic
/// included), since a cell must never keep the descriptor of a thread that may exit.
pub struct Attached<'a, R> {
  cell: &'a StopCell<R>,
  fd: RawFd,
}

impl<R> Attached<'_, R> {
  /// The eventfd that turns readable when a request comes.
  pub fn fd(&self) -> RawFd {
    self.fd
  }

  /// The request, once (the eventfd is drained with it). After it the eventfd stays quiet: only
  /// the first request wakes, or an [`StopCell::escalate`].
  pub fn take(&self) -> Option<Stop<R>> {
    drain(self.fd);
    self.cell.lock().request.take()
  }

  /// The signals asked for since the last call (see [`StopCell::send_signal`]).
  pub fn take_signals(&self) -> Vec<i32> {
    std::mem::take(&mut self.cell.lock().signals)
  }
}

impl<R> Drop for Attached<'_, R> {
  fn drop(&mut self) {
    self.cell.detach();
  }
}

thread_local! {
  static WAKER: OnceCell<OwnedFd> = const { OnceCell::new() };
}

fn thread_waker() -> io::Result<RawFd> {
  WAKER.with(|cell| {
    if let Some(fd) = cell.get() {
      return Ok(fd.as_raw_fd());
    }
    // SAFETY: plain syscall; on success the descriptor is ours.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
      return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor from the kernel.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = owned.as_raw_fd();
    let _ = cell.set(owned);
    Ok(raw)
  })
}

fn wake(fd: RawFd) {
  let one: u64 = 1;
  // SAFETY: writes 8 bytes from a valid u64 to an eventfd that lives as long as its thread
  // (a runner detaches before its run returns, under the cell's lock).
  unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

fn drain(fd: RawFd) {
  let mut value: u64 = 0;
  // SAFETY: reads 8 bytes into a valid u64; the eventfd is non-blocking.
  unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
}

#[cfg(test)]
mod tests {
  use super::*;

  fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
      fd,
      events: libc::POLLIN,
      revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
  }

  fn stop(reason: &'static str) -> Stop<&'static str> {
    Stop {
      grace: Duration::ZERO,
      reason,
    }
  }

  #[test]
  fn a_request_made_before_the_run_attached_still_wakes_it() {
    let cell = StopCell::new();
    cell.request(stop("early"));
    let attached = cell.attach().unwrap();
    let fd = attached.fd();
    assert!(readable(fd));
    assert_eq!(attached.take().map(|s| s.reason), Some("early"));
    assert!(!readable(fd));
  }

  #[test]
  fn a_request_wakes_an_attached_run_and_the_first_one_wins() {
    let cell = StopCell::new();
    let attached = cell.attach().unwrap();
    let fd = attached.fd();
    assert!(!readable(fd));
    cell.request(stop("first"));
    cell.request(stop("second"));
    assert!(readable(fd));
    assert_eq!(attached.take().map(|s| s.reason), Some("first"));
    // Taken: a later request is still ignored (one stop per run).
    cell.request(stop("after"));
    assert!(!readable(fd));
    assert!(attached.take().is_none());
    drop(attached);
    // Detached: a late request no longer writes to this thread's eventfd.
    cell.request(stop("late"));
    assert!(!readable(fd));
  }

  #[test]
  fn a_signal_wakes_the_run_and_waits_for_it_when_asked_before() {
    let cell = StopCell::<&str>::new();
    cell.send_signal(2);
    let attached = cell.attach().unwrap();
    assert!(readable(attached.fd()));
    assert!(attached.take().is_none());
    assert_eq!(attached.take_signals(), vec![2]);
    cell.send_signal(1);
    cell.send_signal(10);
    assert!(readable(attached.fd()));
    assert_eq!(attached.take_signals(), vec![1, 10]);
    assert!(attached.take_signals().is_empty());
  }

  #[test]
  fn an_escalation_wakes_the_run_after_the_first_request_was_taken() {
    let cell = StopCell::new();
    let attached = cell.attach().unwrap();
    cell.request(stop("term"));
    assert_eq!(attached.take().map(|s| s.reason), Some("term"));
    cell.request(stop("ignored"));
    assert!(!readable(attached.fd()));
    cell.escalate(stop("kill"));
    assert!(readable(attached.fd()));
    assert_eq!(attached.take().map(|s| s.reason), Some("kill"));
  }
}
