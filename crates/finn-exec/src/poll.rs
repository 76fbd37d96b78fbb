//! `ppoll` with an optional deadline, for the loops that sleep on descriptors: a job run (here and
//! in the supervisor's addon side) and the supervisor's single-threaded processes.

use std::os::fd::RawFd;
use std::time::Instant;

/// A pollfd watching `fd` for input (`None`: an unused slot, ignored by the kernel).
pub fn watch(fd: Option<RawFd>) -> libc::pollfd {
  libc::pollfd {
    fd: fd.unwrap_or(-1),
    events: libc::POLLIN,
    revents: 0,
  }
}

/// Sleeps until one of `fds` is ready or `until` passes (`None`: no limit). EINTR and other
/// failures just return: every caller loops.
pub fn poll(fds: &mut [libc::pollfd], until: Option<Instant>) {
  let ts = until.map(|at| {
    let t = at.saturating_duration_since(Instant::now());
    libc::timespec {
      tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
      tv_nsec: t.subsec_nanos() as libc::c_long,
    }
  });
  let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
  // SAFETY: `fds` is a valid array of pollfd; `ts_ptr` is null or points at `ts`.
  unsafe {
    libc::ppoll(
      fds.as_mut_ptr(),
      fds.len() as libc::nfds_t,
      ts_ptr,
      std::ptr::null(),
    )
  };
}

/// The earliest of some optional instants.
pub fn earliest(times: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
  times.into_iter().flatten().min()
}
