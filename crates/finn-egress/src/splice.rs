//! The relay's bulk path: once a connection's first bytes are checked and sent, its bytes move
//! socket -> pipe -> socket with splice(2), one pipe per direction, and never pass through the
//! proxy's memory. Each splice is non-blocking and driven by tokio's readiness of the socket it
//! waits on, so one thread still serves every connection.
//!
//! A direction fills its pipe only when the pipe is empty: a non-blocking splice into an empty
//! pipe that finds nothing means the socket has nothing (never that the pipe is full), and one
//! out of a pipe that holds bytes that finds no room means the socket is full.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::sys::socket::{Shutdown, shutdown};
use nix::unistd::pipe2;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// What a pipe grows to once a direction fills it (a bulk transfer): a splice moves at most a
/// pipe's worth, so a larger pipe costs fewer system calls and wake-ups per byte. Pipes start at
/// the kernel's 64 KiB and most connections never fill them: pipe capacity counts against a
/// per-user total (`/proc/sys/fs/pipe-user-pages-soft`), beyond which every new pipe of that
/// user is small. A pipe the kernel does not let grow keeps its size and works as well.
pub const PIPE_BYTES: usize = 1024 * 1024;

/// A connected stream socket, as the relay splices from and to it.
#[derive(Clone, Copy)]
pub enum Socket<'a> {
  Tcp(&'a TcpStream),
  Unix(&'a UnixStream),
}

/// A client stream the proxy serves; the relay splices it when it is a socket.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {
  /// The socket under the stream; `None` relays it by copying.
  fn socket(&self) -> Option<Socket<'_>> {
    None
  }
}

impl Stream for TcpStream {
  fn socket(&self) -> Option<Socket<'_>> {
    Some(Socket::Tcp(self))
  }
}

impl Stream for UnixStream {
  fn socket(&self) -> Option<Socket<'_>> {
    Some(Socket::Unix(self))
  }
}

impl Socket<'_> {
  fn fd(&self) -> BorrowedFd<'_> {
    match self {
      Socket::Tcp(s) => s.as_fd(),
      Socket::Unix(s) => s.as_fd(),
    }
  }

  /// Runs `f` until it does not find the socket unready, waiting for `interest` in between.
  async fn io<R>(&self, interest: Interest, mut f: impl FnMut() -> io::Result<R>) -> io::Result<R> {
    loop {
      let r = match self {
        Socket::Tcp(s) => s.try_io(interest, &mut f),
        Socket::Unix(s) => s.try_io(interest, &mut f),
      };
      match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => match self {
          Socket::Tcp(s) => s.ready(interest).await?,
          Socket::Unix(s) => s.ready(interest).await?,
        },
        r => return r,
      };
    }
  }
}

/// One direction's pipe.
struct Pipe {
  read: OwnedFd,
  write: OwnedFd,
  size: usize,
}

impl Pipe {
  fn new() -> io::Result<Pipe> {
    let (read, write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    let size = fcntl(&write, FcntlArg::F_GETPIPE_SZ)? as usize;
    Ok(Pipe { read, write, size })
  }

  /// Grows the pipe to [`PIPE_BYTES`] if the kernel lets it, once.
  fn grow(&mut self) {
    if self.size < PIPE_BYTES
      && let Ok(n) = fcntl(&self.write, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32))
    {
      self.size = n as usize;
    }
  }
}

/// The two pipes of a connection; made before the relay starts so that a proxy out of file
/// descriptors relays by copying rather than failing the connection.
pub struct Pipes(Pipe, Pipe);

impl Pipes {
  pub fn new() -> io::Result<Pipes> {
    Ok(Pipes(Pipe::new()?, Pipe::new()?))
  }
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE.union(SpliceFFlags::SPLICE_F_NONBLOCK);

/// Moves `src`'s bytes to `dst` until `src` ends, then shuts `dst`'s write side, as a copy does.
/// `moved` counts the bytes taken from `src`, also when an error ends the direction.
async fn one_way(
  src: Socket<'_>,
  dst: Socket<'_>,
  pipe: &mut Pipe,
  moved: &mut u64,
) -> io::Result<()> {
  let mut grown = false;
  loop {
    let n = src
      .io(Interest::READABLE, || {
        Ok(splice(src.fd(), None, &pipe.write, None, pipe.size, FLAGS)?)
      })
      .await?;
    if n == 0 {
      break;
    }
    *moved += n as u64;
    if n == pipe.size && !grown {
      pipe.grow();
      grown = true;
    }
    let mut left = n;
    while left > 0 {
      left -= dst
        .io(Interest::WRITABLE, || {
          Ok(splice(&pipe.read, None, dst.fd(), None, left, FLAGS)?)
        })
        .await?;
    }
  }
  Ok(shutdown(dst.fd().as_raw_fd(), Shutdown::Write)?)
}

/// Relays `a` and `b` both ways until each direction has ended (or the first error), counting
/// the bytes read from each in `from_a` and `from_b`.
pub async fn relay(
  a: Socket<'_>,
  b: Socket<'_>,
  pipes: Pipes,
  from_a: &mut u64,
  from_b: &mut u64,
) -> io::Result<()> {
  let Pipes(mut to_b, mut to_a) = pipes;
  tokio::try_join!(
    one_way(a, b, &mut to_b, from_a),
    one_way(b, a, &mut to_a, from_b)
  )
  .map(drop)
}
