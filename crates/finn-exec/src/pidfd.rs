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
  let _ = send(pidfd, signal);
}

fn send(pidfd: &OwnedFd, signal: Signal) -> io::Result<()> {
  // SAFETY: valid pidfd; a null siginfo means "as kill() would".
  let r = unsafe {
    libc::syscall(
      libc::SYS_pidfd_send_signal,
      pidfd.as_raw_fd(),
      signal as libc::c_int,
      std::ptr::null::<libc::siginfo_t>(),
      0,
    )
  };
  if r < 0 {
    Err(io::Error::last_os_error())
  } else {
    Ok(())
  }
}

/// [`send_signal`] to `pid`, whose pidfd `pidfd` is, by `kill(2)` where signals by pidfd are
/// refused (ENOSYS): in a job reaper, whose seccomp guard refuses them to its commands
/// (`supervisor/shield.rs`). Then a pid recycled between the check that the process is alive
/// and the signal could be hit: a window of a syscall, in which the whole pid space would have
/// to wrap.
pub fn send_signal_to(pidfd: &OwnedFd, pid: i32, signal: Signal) {
  if let Err(e) = send(pidfd, signal)
    && e.raw_os_error() == Some(libc::ENOSYS)
    && !exited(pidfd)
  {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
  }
}

/// A pidfd polls readable once its process has exited: once every thread has, so a leader shown
/// as `Z` whose other threads run on is not exited.
pub fn exited(pidfd: &OwnedFd) -> bool {
  let mut fds = libc::pollfd {
    fd: pidfd.as_raw_fd(),
    events: libc::POLLIN,
    revents: 0,
  };
  // SAFETY: one valid pollfd, zero timeout.
  unsafe { libc::poll(&mut fds, 1, 0) == 1 }
}
