//! A job's two output pipes, read into a sink (the byte-bounded capture of a job's result, or a
//! stream handed on as it is read): how much one wake-up reads, and the final drain once the tree
//! is gone.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::capture::{Capture, Pushed, Stream};

/// Bytes per read.
pub const READ_CHUNK: usize = 32 * 1024;
/// Reads per pipe per wake-up, so a flooding stream cannot starve the other checks.
pub const READS_PER_WAKE: usize = 16;

/// Where the bytes read from a job's pipes go.
pub trait Sink {
  /// Takes the next bytes of `stream`; [`Pushed::Overflowed`] when this went over the job's
  /// output cap (the job is then stopped).
  fn push(&mut self, stream: Stream, bytes: &[u8]) -> Pushed;
}

impl Sink for Capture {
  fn push(&mut self, stream: Stream, bytes: &[u8]) -> Pushed {
    Capture::push(self, stream, bytes)
  }
}

/// A sink that hands every read to a function as it comes, with no cap of its own: the
/// function bounds what it keeps (a background process's ring) and may block to push back on
/// the command, whose writes then wait in the full pipe.
pub struct Streaming<F>(pub F);

impl<F: FnMut(Stream, &[u8])> Sink for Streaming<F> {
  fn push(&mut self, stream: Stream, bytes: &[u8]) -> Pushed {
    (self.0)(stream, bytes);
    Pushed::Kept
  }
}

/// The read ends of a job's stdout and stderr (each closed at its EOF) and what they gave.
pub struct Pipes<S = Capture> {
  pipes: [(Option<OwnedFd>, Stream); 2],
  sink: S,
  /// Grown on the first read and filled through spare capacity: never zeroed, and most
  /// commands print too little to need it at all.
  buf: Vec<u8>,
}

impl Pipes<Capture> {
  /// The read ends (`None`: a stream not watched) under a cap of `max_output_bytes`.
  pub fn new(stdout: Option<OwnedFd>, stderr: Option<OwnedFd>, max_output_bytes: usize) -> Self {
    Pipes::with_sink(stdout, stderr, Capture::new(max_output_bytes))
  }

  /// stdout, stderr, and whether either was cut.
  pub fn finish(self) -> (String, String, bool) {
    self.sink.finish()
  }
}

impl<S: Sink> Pipes<S> {
  /// The read ends (`None`: a stream not watched), read into `sink`.
  pub fn with_sink(stdout: Option<OwnedFd>, stderr: Option<OwnedFd>, sink: S) -> Self {
    Pipes {
      pipes: [(stdout, Stream::Stdout), (stderr, Stream::Stderr)],
      sink,
      buf: Vec::new(),
    }
  }

  /// The sink, once the pipes are read.
  pub fn into_sink(self) -> S {
    self.sink
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

  fn read(&mut self, slot: usize, max_reads: usize) -> bool {
    let (pipe, stream) = &mut self.pipes[slot];
    let mut overflowed = false;
    for _ in 0..max_reads {
      match read_once(pipe, *stream, &mut self.sink, &mut self.buf) {
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
  sink: &mut impl Sink,
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
      return Some(sink.push(stream, buf) == Pushed::Overflowed);
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

  /// A streaming sink sees every byte in order, each stream apart, with no cap: 1 MiB through a
  /// 64 KiB pipe, read as the writer goes, then the final drain.
  #[test]
  fn a_streaming_sink_gets_every_byte_in_order() {
    let (r, w) = pipe();
    let (er, ew) = pipe();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let writing = {
      let data = data.clone();
      std::thread::spawn(move || {
        let mut f = std::fs::File::from(w);
        nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty())).unwrap();
        std::io::Write::write_all(&mut f, &data).unwrap();
        nix::unistd::write(&ew, b"done").unwrap();
      })
    };
    let mut got: (Vec<u8>, Vec<u8>) = Default::default();
    {
      let mut pipes = Pipes::with_sink(
        Some(r),
        Some(er),
        Streaming(|stream: Stream, bytes: &[u8]| match stream {
          Stream::Stdout => got.0.extend_from_slice(bytes),
          Stream::Stderr => got.1.extend_from_slice(bytes),
        }),
      );
      while pipes.fd(0).is_some() {
        let mut fds = [crate::poll::watch(pipes.fd(0))];
        crate::poll::poll(&mut fds, None);
        assert!(!pipes.drain(0), "a streaming sink never overflows");
      }
      writing.join().unwrap();
      pipes.drain_final(64);
    }
    assert_eq!(got.0, data);
    assert_eq!(got.1, b"done");
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
