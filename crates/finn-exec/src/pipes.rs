//! A job's two output pipes, read into its byte-bounded capture: how much one wake-up reads, and
//! the final drain once the tree is gone.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::capture::{Capture, Pushed, Stream};

/// Bytes per read.
pub const READ_CHUNK: usize = 32 * 1024;
/// Reads per pipe per wake-up, so a flooding stream cannot starve the other checks.
pub const READS_PER_WAKE: usize = 16;

/// The read ends of a job's stdout and stderr (each closed at its EOF) and what they gave.
pub struct Pipes {
  pipes: [(Option<OwnedFd>, Stream); 2],
  capture: Capture,
  /// Grown on the first read and filled through spare capacity: never zeroed, and most
  /// commands print too little to need it at all.
  buf: Vec<u8>,
}

impl Pipes {
  /// The read ends (`None`: a stream not watched) under a cap of `max_output_bytes`.
  pub fn new(stdout: Option<OwnedFd>, stderr: Option<OwnedFd>, max_output_bytes: usize) -> Self {
    Pipes {
      pipes: [(stdout, Stream::Stdout), (stderr, Stream::Stderr)],
      capture: Capture::new(max_output_bytes),
      buf: Vec::new(),
    }
  }

  /// The descriptor of pipe `slot` (0: stdout, 1: stderr) while it is open.
  pub fn fd(&self, slot: usize) -> Option<RawFd> {
    self.pipes[slot].0.as_ref().map(AsRawFd::as_raw_fd)
  }

  /// Reads what pipe `slot` has now, at most [`READS_PER_WAKE`] reads; true when this went over
  /// the output cap.
  pub fn drain(&mut self, slot: usize) -> bool {
    self.read(slot, READS_PER_WAKE)
  }

  /// Reads each pipe until it has nothing more, at most `max_reads` reads each: whatever a dead
  /// tree left buffered. Bounded: a writer outside the tree could write forever.
  pub fn drain_final(&mut self, max_reads: usize) {
    for slot in 0..2 {
      self.read(slot, max_reads);
    }
  }

  /// stdout, stderr, and whether either was cut.
  pub fn finish(self) -> (String, String, bool) {
    self.capture.finish()
  }

  fn read(&mut self, slot: usize, max_reads: usize) -> bool {
    let (pipe, stream) = &mut self.pipes[slot];
    let mut overflowed = false;
    for _ in 0..max_reads {
      match read_once(pipe, *stream, &mut self.capture, &mut self.buf) {
        Some(o) => overflowed |= o,
        None => break,
      }
    }
    overflowed
  }
}

/// One read into `capture`. `Some(overflowed)` after a read of data; `None` when the pipe had
/// nothing (EAGAIN), is closed, or ended (then it is closed).
fn read_once(
  pipe: &mut Option<OwnedFd>,
  stream: Stream,
  capture: &mut Capture,
  buf: &mut Vec<u8>,
) -> Option<bool> {
  let fd = pipe.as_ref()?;
  if buf.capacity() < READ_CHUNK {
    buf.reserve_exact(READ_CHUNK);
  }
  loop {
    buf.clear();
    let spare = buf.spare_capacity_mut();
    // SAFETY: reads at most `spare.len()` bytes into the vector's spare capacity.
    let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
    if n > 0 {
      // SAFETY: the kernel initialised the first `n` bytes.
      unsafe { buf.set_len(n as usize) };
      return Some(capture.push(stream, buf) == Pushed::Overflowed);
    }
    if n < 0 && Errno::last() == Errno::EINTR {
      continue;
    }
    if n < 0 && Errno::last() == Errno::EAGAIN {
      return None;
    }
    // EOF or a read error: this stream is done.
    *pipe = None;
    return None;
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use nix::fcntl::OFlag;

  fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap()
  }

  #[test]
  fn a_wake_up_reads_a_bounded_amount_and_the_final_drain_the_rest() {
    let (r, w) = pipe();
    // Larger than one wake-up's reads can take when each read returns a small write.
    let writes = READS_PER_WAKE + 4;
    for _ in 0..writes {
      nix::unistd::write(&w, b"x").unwrap();
    }
    let mut pipes = Pipes::new(Some(r), None, 1 << 20);
    // A pipe coalesces small writes: one read takes them all, the next finds nothing.
    assert!(!pipes.drain(0));
    assert!(pipes.fd(0).is_some());
    nix::unistd::write(&w, b"yz").unwrap();
    drop(w);
    pipes.drain_final(64);
    assert!(pipes.fd(0).is_none(), "closed at EOF");
    let (out, err, cut) = pipes.finish();
    assert_eq!(out.len(), writes + 2);
    assert!(out.ends_with("yz"));
    assert_eq!((err.as_str(), cut), ("", false));
  }

  #[test]
  fn going_over_the_cap_is_reported_by_the_read_that_did_it() {
    let (r, w) = pipe();
    nix::unistd::write(&w, &[b'a'; 100]).unwrap();
    let mut pipes = Pipes::new(None, Some(r), 40);
    assert!(pipes.drain(1));
    let (out, err, cut) = pipes.finish();
    assert!(cut);
    assert_eq!(out, "");
    assert_eq!(err.len(), 40, "marker included");
  }
}
