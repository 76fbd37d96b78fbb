//! The reaper's side of a job's network route (`finn_isolate`'s `route.rs`, `docs/network.md`):
//! it answers the job's `connect`, `bind` and `listen`, which the job's seccomp filter hands to
//! it.
//!
//! For each call the reaper takes the job's socket (`pidfd_getfd`: the same socket, not a copy
//! of it) and reads the address from the job's memory into its own; then it acts on that socket
//! with that copy. A connect to the proxy address is made to the route's target, whatever the
//! job writes afterwards, and one to a listener of the job's own to that listener; a bind to
//! 127.0.0.1 or ::1 is made as asked; a `listen` is made on a socket bound there (or a Unix
//! one). Everything else fails (`ECONNREFUSED` for a connect, `EACCES` for a
//! bind or listen). Only a Unix socket's `connect` and `bind` are carried out by the kernel in
//! the job's own context (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`: its path is the job's, and the
//! job's landlock domain judges it): a TCP socket swapped in under the same fd number meanwhile
//! gets nowhere, since the job's landlock ruleset denies its own TCP connects and binds.
//!
//! The job's process is identified by the notification's pid, checked still waiting
//! (`SECCOMP_IOCTL_NOTIF_ID_VALID`) after the pidfd is opened and after its memory is read, so
//! a pid reused meanwhile is never acted on. A process that dies mid-call leaves an answer the
//! kernel drops (`ENOENT`); nothing here waits on the job. A blocking socket's connect waits
//! for the target, at most [`CONNECT_BOUND`], with the reaper's loop held meanwhile: only a
//! target whose accept queue is full makes it wait.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use finn_isolate::{BindVerdict, ConnectVerdict, NetRoute, route_bind, route_listen};

/// How long the reaper waits for its own connect of a job's blocking socket to the target (a
/// loopback listener: it answers at once unless its accept queue is full).
const CONNECT_BOUND: Duration = Duration::from_secs(1);

/// The longest address read from a job (`sockaddr_storage`).
const MAX_SOCKADDR: usize = 128;

/// The reaper's end of one job's route.
pub struct NetCalls {
  listener: OwnedFd,
  route: NetRoute,
  /// `net.ipv4.ip_unprivileged_port_start`: the job binds no port below it, as it could not
  /// itself without a capability (the reaper may hold one).
  unprivileged_from: u16,
  /// The job's TCP listeners, each with the reaper's own reference to its socket: the port
  /// stays the job's until the job ends, so a connect the job makes to it reaches its own server.
  own: Vec<(SocketAddr, OwnedFd)>,
}

/// The job's listeners the reaper keeps: a job's connects reach these and the proxy, nothing else.
const MAX_OWN_LISTENERS: usize = 64;

/// What the job's call returns.
enum Answer {
  /// The kernel carries the call out as the job made it.
  Continue,
  /// It returns 0 (`Ok`) or fails with the errno.
  Return(Result<(), i32>),
}

impl NetCalls {
  pub fn new(route: NetRoute, listener: OwnedFd) -> NetCalls {
    let unprivileged_from =
      std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024);
    NetCalls {
      listener,
      route,
      unprivileged_from,
      own: Vec::new(),
    }
  }

  pub fn fd(&self) -> RawFd {
    self.listener.as_raw_fd()
  }

  /// Answers one waiting call (the listener polled readable). `Err`: the listener is broken.
  pub fn answer(&mut self) -> io::Result<()> {
    // SAFETY: the kernel fills the zeroed struct it asks for (RECV refuses a dirty one).
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a valid seccomp_notif for the kernel to write.
    if unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } < 0 {
      let e = io::Error::last_os_error();
      // The caller was interrupted or died before it was read: nothing to answer.
      return match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EINTR) => Ok(()),
        _ => Err(e),
      };
    }
    let (error, flags) = match self.decide(&req) {
      Answer::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
      Answer::Return(Ok(())) => (0, 0),
      Answer::Return(Err(errno)) => (-errno, 0),
    };
    let resp = libc::seccomp_notif_resp {
      id: req.id,
      val: 0,
      error,
      flags,
    };
    // SAFETY: `resp` is a valid seccomp_notif_resp for the kernel to read. A caller gone in
    // between (ENOENT) needs no answer.
    unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    Ok(())
  }

  /// Whether the call `id` still waits: its process was not replaced under its pid.
  fn still_waiting(&self, id: u64) -> bool {
    // SAFETY: reads the id from a valid u64.
    let r = unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) };
    r == 0
  }

  fn decide(&mut self, req: &libc::seccomp_notif) -> Answer {
    let gone = Answer::Return(Err(libc::ESRCH));
    let Some(pidfd) = pidfd_of_thread(req.pid) else {
      return gone;
    };
    if !self.still_waiting(req.id) {
      return gone;
    }
    let args = req.data.args;
    let sock = match pidfd_getfd(&pidfd, args[0] as i32) {
      Ok(s) => s,
      Err(errno) => return Answer::Return(Err(errno)),
    };
    let family = match sockopt(&sock, libc::SO_DOMAIN) {
      Ok(f) => f,
      Err(errno) => return Answer::Return(Err(errno)),
    };
    let read_addr = || -> Option<Vec<u8>> {
      let raw = read_memory(req.pid, args[1], (args[2] as usize).min(MAX_SOCKADDR))?;
      self.still_waiting(req.id).then_some(raw)
    };
    match i64::from(req.data.nr) {
      libc::SYS_connect => {
        if family == libc::AF_UNIX {
          return Answer::Continue;
        }
        let Some(raw) = read_addr() else {
          return gone;
        };
        let own: Vec<SocketAddr> = self.own.iter().map(|(a, _)| *a).collect();
        match self.route.connect(family, &raw, &own) {
          ConnectVerdict::Continue => Answer::Continue,
          ConnectVerdict::ConnectTo(at) => Answer::Return(connect(&sock, at)),
          ConnectVerdict::Refuse(errno) => Answer::Return(Err(errno)),
        }
      }
      libc::SYS_bind => {
        if family == libc::AF_UNIX {
          return Answer::Continue;
        }
        let Some(raw) = read_addr() else {
          return gone;
        };
        match route_bind(family, &raw, self.unprivileged_from) {
          BindVerdict::Continue => Answer::Continue,
          BindVerdict::BindTo(at) => Answer::Return(bind(&sock, at)),
          BindVerdict::Refuse(errno) => Answer::Return(Err(errno)),
          BindVerdict::Listen => Answer::Return(Err(libc::EINVAL)),
        }
      }
      libc::SYS_listen => {
        let bound = (family != libc::AF_UNIX)
          .then(|| local_addr(&sock, family))
          .flatten();
        match route_listen(family, bound) {
          BindVerdict::Listen => {
            let listened = listen(&sock, args[1] as i32);
            if let (Ok(()), Some(at)) = (listened, bound)
              && self.own.len() < MAX_OWN_LISTENERS
              && !self.own.iter().any(|(a, _)| *a == at)
            {
              self.own.push((at, sock));
            }
            Answer::Return(listened)
          }
          BindVerdict::Refuse(errno) => Answer::Return(Err(errno)),
          BindVerdict::Continue | BindVerdict::BindTo(_) => Answer::Return(Err(libc::EINVAL)),
        }
      }
      _ => Answer::Return(Err(libc::ENOSYS)),
    }
  }
}

fn errno() -> i32 {
  io::Error::last_os_error()
    .raw_os_error()
    .unwrap_or(libc::EIO)
}

/// A pidfd whose fd table is the calling thread `tid`'s own: the thread's (`PIDFD_THREAD`,
/// Linux 6.9), or else its process's, which every thread shares unless it was cloned without
/// `CLONE_FILES` (then the reaper acts on the process's socket of that number, never on
/// anything the job could not reach: connects still land on the target only).
fn pidfd_of_thread(tid: u32) -> Option<OwnedFd> {
  const PIDFD_THREAD: u32 = libc::O_EXCL as u32;
  // SAFETY: pidfd_open takes integers only.
  let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as i32, PIDFD_THREAD) };
  if fd >= 0 {
    // SAFETY: a fresh fd the kernel just made for us.
    return Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
  }
  pidfd_open(tgid_of(tid)?).ok()
}

/// The process (thread group) of the thread `tid`, from `/proc`.
fn tgid_of(tid: u32) -> Option<i32> {
  let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
  status
    .lines()
    .find_map(|l| l.strip_prefix("Tgid:"))?
    .trim()
    .parse()
    .ok()
}

fn pidfd_open(pid: i32) -> Result<OwnedFd, i32> {
  // SAFETY: pidfd_open takes integers only.
  let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
  if fd < 0 {
    return Err(errno());
  }
  // SAFETY: a fresh fd the kernel just made for us.
  Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The open socket behind the job's fd `fd` (the same socket, not a new one).
fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd, i32> {
  // SAFETY: pidfd_getfd takes integers only; the new fd is close-on-exec.
  let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) };
  if got < 0 {
    // A job's fd that is not open answers EBADF, as its own call would.
    return Err(errno());
  }
  // SAFETY: a fresh fd the kernel just made for us.
  Ok(unsafe { OwnedFd::from_raw_fd(got as i32) })
}

fn sockopt(sock: &OwnedFd, opt: libc::c_int) -> Result<i32, i32> {
  let mut v: libc::c_int = 0;
  let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
  // SAFETY: getsockopt writes one int into `v` on our stack.
  let r = unsafe {
    libc::getsockopt(
      sock.as_raw_fd(),
      libc::SOL_SOCKET,
      opt,
      (&mut v as *mut libc::c_int).cast(),
      &mut len,
    )
  };
  if r < 0 { Err(errno()) } else { Ok(v) }
}

/// `len` bytes at `addr` in the memory of the thread `tid`.
fn read_memory(tid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
  let mut buf = vec![0u8; len];
  let local = libc::iovec {
    iov_base: buf.as_mut_ptr().cast(),
    iov_len: len,
  };
  let remote = libc::iovec {
    iov_base: addr as *mut libc::c_void,
    iov_len: len,
  };
  // SAFETY: writes at most `len` bytes into `buf`; the remote side is only read by the kernel.
  let n = unsafe { libc::process_vm_readv(tid as i32, &local, 1, &remote, 1, 0) };
  if n < 0 {
    return None;
  }
  buf.truncate(n as usize);
  Some(buf)
}

/// `connect` or `bind` of `sock` to `at`.
fn to_addr(
  call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
  sock: &OwnedFd,
  at: SocketAddr,
) -> Result<(), i32> {
  let (ss, len) = finn_isolate::sockaddr(at);
  // SAFETY: `ss` holds a valid sockaddr of `len` bytes on our stack.
  let r = unsafe {
    call(
      sock.as_raw_fd(),
      (&ss as *const libc::sockaddr_storage).cast(),
      len,
    )
  };
  if r < 0 { Err(errno()) } else { Ok(()) }
}

/// Connects the job's socket to `at`, as the job's own call would have: a non-blocking socket
/// gets `EINPROGRESS` and finishes on its own; a blocking one is connected here within
/// [`CONNECT_BOUND`] (its file status flags are the job's, restored before the answer).
fn connect(sock: &OwnedFd, at: SocketAddr) -> Result<(), i32> {
  use nix::fcntl::{FcntlArg, OFlag, fcntl};
  let flags = fcntl(sock, FcntlArg::F_GETFL).map_err(|e| e as i32)?;
  let blocking = OFlag::from_bits_truncate(flags) & OFlag::O_NONBLOCK == OFlag::empty();
  if blocking {
    fcntl(
      sock,
      FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| e as i32)?;
  }
  let result = match to_addr(libc::connect, sock, at) {
    Ok(()) => Ok(()),
    Err(libc::EINPROGRESS) if blocking => {
      let mut fds = [libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
      }];
      // SAFETY: polls one pollfd on our stack.
      let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, CONNECT_BOUND.as_millis() as i32) };
      if n <= 0 {
        Err(libc::ETIMEDOUT)
      } else {
        match sockopt(sock, libc::SO_ERROR) {
          Ok(0) => Ok(()),
          Ok(e) | Err(e) => Err(e),
        }
      }
    }
    Err(e) => Err(e),
  };
  if blocking {
    let _ = fcntl(sock, FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags)));
  }
  result
}

fn bind(sock: &OwnedFd, at: SocketAddr) -> Result<(), i32> {
  to_addr(libc::bind, sock, at)
}

fn listen(sock: &OwnedFd, backlog: i32) -> Result<(), i32> {
  // SAFETY: listen takes integers only; `sock` is an open socket.
  if unsafe { libc::listen(sock.as_raw_fd(), backlog) } < 0 {
    Err(errno())
  } else {
    Ok(())
  }
}

/// The address the socket is bound to (`None`: not an IP socket, or unreadable).
fn local_addr(sock: &OwnedFd, family: i32) -> Option<SocketAddr> {
  // SAFETY: a zeroed sockaddr_storage is valid; getsockname writes at most `len` bytes into it.
  let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
  let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
  // SAFETY: as above.
  let r = unsafe {
    libc::getsockname(
      sock.as_raw_fd(),
      (&mut ss as *mut libc::sockaddr_storage).cast(),
      &mut len,
    )
  };
  if r < 0 {
    return None;
  }
  // SAFETY: reads the `len` bytes the kernel wrote.
  let raw = unsafe {
    std::slice::from_raw_parts(
      (&ss as *const libc::sockaddr_storage).cast::<u8>(),
      len as usize,
    )
  };
  finn_isolate::parse_sockaddr(family, raw)
}
