//! Frames over a unix stream socket, with descriptors passed by `SCM_RIGHTS`.
//!
//! A stream socket and not `SOCK_SEQPACKET`: a datagram must fit the socket's send buffer
//! (`wmem_max`, 208 KiB by default, raised only with CAP_NET_ADMIN), while a command's argv and
//! environment may reach `execve`'s 2 MiB and more (then `execve` itself refuses, with E2BIG,
//! the same answer as without the supervisor). Each frame is a little-endian `u32` length and
//! the payload. Descriptors ride on the first byte of their frame; the receiver keeps them in
//! arrival order, and a frame that carries some takes them from the front.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{
  AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
  sendmsg, socketpair,
};

/// Larger frames are refused as corrupt: `execve` takes far less than this.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Descriptors accepted per read: a `Run` carries the two pipes, the checked cwd and up to
/// `MAX_WRITABLE_ROOTS` checked roots; more in one read are truncated (and closed) by the kernel.
const MAX_FDS: usize = 3 + finn_isolate::MAX_WRITABLE_ROOTS + 1;
const READ_CHUNK: usize = 4096;

/// A connected pair of stream sockets, both close-on-exec.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
  socketpair(
    AddressFamily::Unix,
    SockType::Stream,
    None,
    SockFlag::SOCK_CLOEXEC,
  )
  .map_err(io::Error::from)
}

/// One end of a connection: the socket, bytes read past the last whole frame, and descriptors
/// received but not yet taken.
pub struct Conn {
  fd: OwnedFd,
  buf: Vec<u8>,
  fds: VecDeque<OwnedFd>,
  eof: bool,
}

impl Conn {
  pub fn new(fd: OwnedFd) -> Conn {
    Conn {
      fd,
      buf: Vec::new(),
      fds: VecDeque::new(),
      eof: false,
    }
  }

  pub fn raw(&self) -> RawFd {
    self.fd.as_raw_fd()
  }

  /// Sends one frame with `fds` attached; blocks until all of it is written.
  pub fn send(&self, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    send(self.fd.as_raw_fd(), &framed(&[payload])?, fds)
  }

  /// Sends several frames in one write, so the peer wakes once for all of them.
  pub fn send_all(&self, payloads: &[&[u8]]) -> io::Result<()> {
    send(self.fd.as_raw_fd(), &framed(payloads)?, &[])
  }

  /// The next whole frame already read, without a syscall.
  pub fn take_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
    if self.buf.len() < 4 {
      return Ok(None);
    }
    let len = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME {
      return Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("frame of {len} bytes"),
      ));
    }
    if self.buf.len() < 4 + len {
      return Ok(None);
    }
    let frame = self.buf[4..4 + len].to_vec();
    self.buf.drain(..4 + len);
    Ok(Some(frame))
  }

  /// Whether the peer has closed (seen by a read).
  pub fn at_eof(&self) -> bool {
    self.eof
  }

  /// A descriptor that arrived with the frames read so far, oldest first.
  pub fn take_fd(&mut self) -> Option<OwnedFd> {
    self.fds.pop_front()
  }

  /// One read from the socket (it blocks if nothing is there). Returns false at EOF.
  pub fn fill(&mut self) -> io::Result<bool> {
    self.fill_with(MsgFlags::MSG_CMSG_CLOEXEC)
  }

  /// Reads what the socket has now, without waiting; false at EOF.
  pub fn fill_now(&mut self) -> io::Result<bool> {
    match self.fill_with(MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT) {
      Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
      other => other,
    }
  }

  /// Calls `f` with each whole frame already read, leaving them to be taken (a bad length is
  /// an error, as in [`Self::take_frame`]).
  pub fn peek_frames(&self, mut f: impl FnMut(&[u8])) -> io::Result<()> {
    let mut at = 0;
    while self.buf.len() >= at + 4 {
      let len = u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("4 bytes")) as usize;
      if len > MAX_FRAME {
        return Err(io::Error::new(
          io::ErrorKind::InvalidData,
          format!("frame of {len} bytes"),
        ));
      }
      if self.buf.len() < at + 4 + len {
        break;
      }
      f(&self.buf[at + 4..at + 4 + len]);
      at += 4 + len;
    }
    Ok(())
  }

  fn fill_with(&mut self, flags: MsgFlags) -> io::Result<bool> {
    if self.eof {
      return Ok(false);
    }
    let mut chunk = [0u8; READ_CHUNK];
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (n, received) = loop {
      let mut iov = [IoSliceMut::new(&mut chunk)];
      match recvmsg::<()>(self.fd.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
        Ok(msg) => {
          let mut received = Vec::new();
          for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
              received.extend(fds);
            }
          }
          break (msg.bytes, received);
        }
        Err(Errno::EINTR) => continue,
        Err(e) => return Err(e.into()),
      }
    };
    // SAFETY: the kernel installed these descriptors in this process for us alone.
    self.fds.extend(
      received
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
    );
    if n == 0 {
      self.eof = true;
      return Ok(false);
    }
    self.buf.extend_from_slice(&chunk[..n]);
    Ok(true)
  }

  /// The next frame, reading (and blocking) as needed; `None` at EOF between frames.
  pub fn recv(&mut self) -> io::Result<Option<Vec<u8>>> {
    loop {
      if let Some(frame) = self.take_frame()? {
        return Ok(Some(frame));
      }
      // Sleep in poll, not in recvmsg: a thread blocked in recvmsg on a unix stream socket is
      // also woken each time the peer reads what this side sent (the socket's write-space
      // wake-up), and on a 2-vCPU VM that spurious wake-up cost a job about 25 us of latency
      // (`perf sched timehist`, 3 of 4 jobs). poll only wakes for POLLIN.
      if !self.eof {
        let mut fds = [finn_exec::poll::watch(Some(self.raw()))];
        while fds[0].revents == 0 {
          finn_exec::poll::poll(&mut fds, None);
        }
      }
      if !self.fill()? {
        if self.buf.is_empty() {
          return Ok(None);
        }
        return Err(io::Error::new(
          io::ErrorKind::UnexpectedEof,
          "connection closed inside a frame",
        ));
      }
    }
  }
}

/// Each payload behind its length.
fn framed(payloads: &[&[u8]]) -> io::Result<Vec<u8>> {
  let mut out = Vec::with_capacity(payloads.iter().map(|p| 4 + p.len()).sum());
  for payload in payloads {
    if payload.len() > MAX_FRAME {
      return Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("frame of {} bytes is over {MAX_FRAME}", payload.len()),
      ));
    }
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
  }
  Ok(out)
}

/// Writes `bytes` whole (it blocks as needed), `fds` riding on the first byte.
fn send(fd: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
  let mut sent = 0;
  while sent < bytes.len() {
    let iov = [IoSlice::new(&bytes[sent..])];
    let rights = [ControlMessage::ScmRights(fds)];
    // Descriptors go with the first byte only.
    let cmsgs: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
      &rights
    } else {
      &[]
    };
    match sendmsg::<()>(fd, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
      Ok(n) => sent += n,
      Err(Errno::EINTR) => continue,
      Err(e) => return Err(e.into()),
    }
  }
  Ok(())
}

/// Builds a payload.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
  pub fn u8(&mut self, v: u8) -> &mut Self {
    self.0.push(v);
    self
  }

  pub fn u32(&mut self, v: u32) -> &mut Self {
    self.0.extend_from_slice(&v.to_le_bytes());
    self
  }

  pub fn i32(&mut self, v: i32) -> &mut Self {
    self.0.extend_from_slice(&v.to_le_bytes());
    self
  }

  pub fn u64(&mut self, v: u64) -> &mut Self {
    self.0.extend_from_slice(&v.to_le_bytes());
    self
  }

  pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
    self.u32(v.len() as u32);
    self.0.extend_from_slice(v);
    self
  }
}

/// Reads a payload; every shortfall is an `InvalidData` error.
pub struct Reader<'a>(pub &'a [u8]);

fn corrupt(what: &str) -> io::Error {
  io::Error::new(io::ErrorKind::InvalidData, format!("corrupt frame: {what}"))
}

impl<'a> Reader<'a> {
  fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
    if self.0.len() < n {
      return Err(corrupt("too short"));
    }
    let (head, rest) = self.0.split_at(n);
    self.0 = rest;
    Ok(head)
  }

  pub fn u8(&mut self) -> io::Result<u8> {
    Ok(self.take(1)?[0])
  }

  pub fn u32(&mut self) -> io::Result<u32> {
    Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
  }

  pub fn i32(&mut self) -> io::Result<i32> {
    Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
  }

  pub fn u64(&mut self) -> io::Result<u64> {
    Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
  }

  pub fn bytes(&mut self) -> io::Result<&'a [u8]> {
    let n = self.u32()? as usize;
    self.take(n)
  }

  /// Fails when bytes are left over: a frame is read whole or not at all.
  pub fn end(&self) -> io::Result<()> {
    if self.0.is_empty() {
      Ok(())
    } else {
      Err(corrupt("trailing bytes"))
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn frames_larger_than_a_socket_buffer_arrive_whole_with_their_descriptors() {
    let (a, b) = pair().unwrap();
    let (mut a, mut b) = (Conn::new(a), Conn::new(b));
    let big = vec![7u8; 3 * 1024 * 1024];
    let (r, w) = nix::unistd::pipe().unwrap();
    let sender = std::thread::spawn(move || {
      a.send(b"first", &[w.as_raw_fd()]).unwrap();
      a.send(&big, &[]).unwrap();
      a.send(b"", &[]).unwrap();
      drop(w);
      // Keeps `a` alive until the reader has everything, then closes it.
      a.recv().unwrap()
    });
    assert_eq!(b.recv().unwrap().unwrap(), b"first");
    let passed = b.take_fd().expect("the pipe's write end");
    assert!(b.take_fd().is_none());
    let frame = b.recv().unwrap().unwrap();
    assert_eq!(frame.len(), 3 * 1024 * 1024);
    assert!(frame.iter().all(|&x| x == 7));
    assert_eq!(b.recv().unwrap().unwrap(), b"");
    // The passed descriptor is the real write end: bytes written there come out of `r`.
    nix::unistd::write(&passed, b"x").unwrap();
    let mut got = [0u8; 1];
    nix::unistd::read(&r, &mut got).unwrap();
    assert_eq!(&got, b"x");
    drop(b);
    assert!(sender.join().unwrap().is_none());
  }

  #[test]
  fn eof_inside_a_frame_is_an_error_and_between_frames_is_none() {
    let (a, b) = pair().unwrap();
    let mut b = Conn::new(b);
    // A header announcing 10 bytes, then only 2 of them.
    nix::unistd::write(&a, &[10, 0, 0, 0, 1, 2]).unwrap();
    drop(a);
    assert_eq!(b.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    let (a, b) = pair().unwrap();
    drop(a);
    assert!(Conn::new(b).recv().unwrap().is_none());
  }

  #[test]
  fn a_reader_refuses_short_and_overlong_payloads() {
    let mut w = Writer::default();
    w.u8(1).bytes(b"abc").u64(9);
    let mut r = Reader(&w.0);
    assert_eq!(r.u8().unwrap(), 1);
    assert_eq!(r.bytes().unwrap(), b"abc");
    assert!(r.end().is_err());
    assert_eq!(r.u64().unwrap(), 9);
    r.end().unwrap();
    assert!(r.u8().is_err());
    assert!(Reader(&[5, 0, 0, 0, 1]).bytes().is_err());
  }
}
