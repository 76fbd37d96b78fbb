//! pidfds: race-free handles on processes (a recycled pid is never signalled by mistake).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::sys::signal::Signal;

pub fn open(pid: i32) -> io::Result<OwnedFd> {
  // SAFETY: plain syscall; on success the descriptor is ours.
  let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
  if fd < 0 {
    return Err(io::Error::last_os_error());
  }
  // SAFETY: fresh descriptor from the kernel.
  Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub fn send_signal(pidfd: &OwnedFd, signal: Signal) {
  // SAFETY: valid pidfd; a null siginfo means "as kill() would".
  unsafe {
    libc::syscall(
      libc::SYS_pidfd_send_signal,
      pidfd.as_raw_fd(),
      signal as libc::c_int,
      std::ptr::null::<libc::siginfo_t>(),
      0,
    );
  }
}

/// A pidfd polls readable once its process has exited.
pub fn exited(pidfd: &OwnedFd) -> bool {
  let mut fds = libc::pollfd {
    fd: pidfd.as_raw_fd(),
    events: libc::POLLIN,
    revents: 0,
  };
  // SAFETY: one valid pollfd, zero timeout.
  unsafe { libc::poll(&mut fds, 1, 0) == 1 }
}
