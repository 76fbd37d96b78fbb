//! The proxy as a process of its own: what a pool's supervisor forks to serve every job's
//! allowlist, so the proxy never runs in Node's process.
//!
//! It talks to the supervisor over one `SOCK_SEQPACKET` socket (the control socket), a message
//! a JSON object:
//! - supervisor -> proxy: `{"addJob": {"job": id, "network": NetworkOptions}}` with one fd
//!   attached: the proxy's end of that job's channel. The job is the channel: a connection that
//!   arrives on it is checked against that job's list, whatever it sends. The job ends when the
//!   other end of its channel closes.
//! - proxy -> supervisor: `{"audit": AuditEntry}` for each connection that ended, and
//!   `{"refused": {"job": id, "reason": ..}}` for a job whose options are bad.
//!
//! On a job's channel (also `SOCK_SEQPACKET`) each message carries one connected stream socket
//! (TCP or Unix), a connection the job's command opened: the one who accepted it passes it on
//! as it is.
//! The process ends when the control socket closes.

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use nix::sys::socket::{
  AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
  sendmsg, socketpair,
};
use serde::Deserialize;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::proxy::{Job, Proxy, Resolve};
use crate::rules::{NetworkOptions, Policy};

/// The largest message on either socket.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
enum ToEgress {
  AddJob {
    job: String,
    network: NetworkOptions,
  },
}

/// A `SOCK_SEQPACKET` pair, close-on-exec: a control socket, or a job's channel.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
  Ok(socketpair(
    AddressFamily::Unix,
    SockType::SeqPacket,
    None,
    SockFlag::SOCK_CLOEXEC,
  )?)
}

/// Sends one message, with at most one fd, on a blocking socket.
pub fn send(sock: &OwnedFd, bytes: &[u8], fd: Option<RawFd>) -> io::Result<()> {
  let fds = fd.map(|f| [f]);
  let cmsgs: Vec<ControlMessage> = fds.iter().map(|f| ControlMessage::ScmRights(f)).collect();
  sendmsg::<()>(
    sock.as_raw_fd(),
    &[IoSlice::new(bytes)],
    &cmsgs,
    MsgFlags::MSG_NOSIGNAL,
    None,
  )?;
  Ok(())
}

/// Receives one message and the fd it carries; `None` when the peer closed.
pub fn recv(sock: RawFd) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
  let mut buf = vec![0u8; MAX_MESSAGE_BYTES];
  let mut space = nix::cmsg_space!([RawFd; 1]);
  let mut iov = [IoSliceMut::new(&mut buf)];
  let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
  let mut fd = None;
  for c in msg.cmsgs()? {
    if let ControlMessageOwned::ScmRights(fds) = c {
      for f in fds {
        // SAFETY: the kernel just installed this fd in this process for us; nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(f) };
        // A second fd is not part of the protocol: it is closed as it is dropped.
        fd.get_or_insert(owned);
      }
    }
  }
  let n = msg.bytes;
  if n == 0 && fd.is_none() {
    return Ok(None);
  }
  buf.truncate(n);
  Ok(Some((buf, fd)))
}

async fn recv_async(sock: &AsyncFd<OwnedFd>) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
  loop {
    let mut guard = sock.readable().await?;
    match guard.try_io(|s| recv(s.as_raw_fd())) {
      Ok(r) => return r,
      Err(_would_block) => continue,
    }
  }
}

async fn send_async(sock: &AsyncFd<OwnedFd>, bytes: &[u8]) -> io::Result<()> {
  loop {
    let mut guard = sock.writable().await?;
    match guard.try_io(|s| send(s.get_ref(), bytes, None)) {
      Ok(r) => return r,
      Err(_would_block) => continue,
    }
  }
}

/// Registers `fd` with the runtime, non-blocking.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
  nonblocking(&fd)?;
  // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until it is dropped;
  // nothing here replaces or closes it meanwhile.
  unsafe { AsyncFd::register(fd) }.map_err(|e| io::Error::other(e.to_string()))
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
  use nix::fcntl::{FcntlArg, OFlag, fcntl};
  let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
  fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
  Ok(())
}

/// The process's whole life after the fork: one thread, serving until `control` closes.
/// `audit`: where the `{"audit": entry}` messages go instead of `control` (a socket of their
/// own, read by the addon); at most [`AUDIT_BACKLOG`] wait there, more are dropped, so a
/// reader that stalls never holds up a job.
pub fn run(control: OwnedFd, audit: Option<OwnedFd>, resolver: Arc<dyn Resolve>) -> io::Result<()> {
  use nix::sys::signal::{SigHandler, Signal, signal};
  // A splice to a socket whose peer is gone raises SIGPIPE (splice(2) takes no MSG_NOSIGNAL);
  // the relay reads EPIPE as that connection's end, never the process's.
  // SAFETY: SIG_IGN installs no handler, so nothing runs in signal context.
  unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) }?;
  let rt = tokio::runtime::Builder::new_current_thread()
    .enable_all()
    .build()?;
  rt.block_on(serve(control, audit, resolver))
}

/// Audit messages waiting for the audit socket's reader.
pub const AUDIT_BACKLOG: usize = 4096;

async fn serve(
  control: OwnedFd,
  audit: Option<OwnedFd>,
  resolver: Arc<dyn Resolve>,
) -> io::Result<()> {
  let control = register(control)?;
  let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
  let audit_tx: Arc<dyn Fn(Vec<u8>) + Send + Sync> = match audit {
    Some(audit) => {
      let audit = register(audit)?;
      let (tx, mut rx) = mpsc::channel::<Vec<u8>>(AUDIT_BACKLOG);
      tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
          if send_async(&audit, &msg).await.is_err() {
            break;
          }
        }
      });
      Arc::new(move |msg| {
        let _ = tx.try_send(msg);
      })
    }
    None => {
      let tx = out_tx.clone();
      Arc::new(move |msg| {
        let _ = tx.send(msg);
      })
    }
  };
  let proxy = Arc::new(Proxy::new(
    resolver,
    Arc::new(move |record| {
      let msg = serde_json::json!({ "audit": record.to_audit_entry() });
      audit_tx(msg.to_string().into_bytes());
    }),
  ));
  loop {
    tokio::select! {
      msg = recv_async(&control) => {
        let Some((bytes, fd)) = msg? else {
          return Ok(());
        };
        if let Err(reason) = add_job(&proxy, &bytes, fd) {
          let _ = out_tx.send(serde_json::json!({ "refused": reason }).to_string().into_bytes());
        }
      }
      Some(out) = out_rx.recv() => send_async(&control, &out).await?,
    }
  }
}

fn add_job(proxy: &Arc<Proxy>, bytes: &[u8], fd: Option<OwnedFd>) -> Result<(), serde_json::Value> {
  let refuse = |job: &str, reason: String| serde_json::json!({ "job": job, "reason": reason });
  let msg: ToEgress =
    serde_json::from_slice(bytes).map_err(|e| refuse("", format!("bad message: {e}")))?;
  let ToEgress::AddJob { job, network } = msg;
  let channel = fd.ok_or_else(|| refuse(&job, "addJob without its channel".into()))?;
  let policy = Policy::new(&network).map_err(|e| refuse(&job, e.to_string()))?;
  let channel = register(channel).map_err(|e| refuse(&job, e.to_string()))?;
  let job = Arc::new(Job { id: job, policy });
  tokio::spawn(serve_job(proxy.clone(), job, channel));
  Ok(())
}

/// Takes the job's connections off its channel until the channel closes. A connection is a
/// TCP socket (a job's listener on loopback in its network namespace) or a Unix one (a job's
/// pathname socket where it has no namespace); anything else is closed.
async fn serve_job(proxy: Arc<Proxy>, job: Arc<Job>, channel: AsyncFd<OwnedFd>) {
  use nix::sys::socket::{SockaddrLike, SockaddrStorage, getsockname};
  while let Ok(Some((_, fd))) = recv_async(&channel).await {
    let Some(fd) = fd else { continue };
    let family = getsockname::<SockaddrStorage>(fd.as_raw_fd())
      .ok()
      .and_then(|a| a.family());
    let (proxy, job) = (proxy.clone(), job.clone());
    match family {
      Some(AddressFamily::Inet | AddressFamily::Inet6) => {
        let stream = std::net::TcpStream::from(fd);
        if let Ok(s) = stream
          .set_nonblocking(true)
          .and_then(|()| tokio::net::TcpStream::from_std(stream))
        {
          tokio::spawn(async move { proxy.handle(s, &job).await });
        }
      }
      Some(AddressFamily::Unix) => {
        let stream = std::os::unix::net::UnixStream::from(fd);
        if let Ok(s) = stream
          .set_nonblocking(true)
          .and_then(|()| tokio::net::UnixStream::from_std(stream))
        {
          tokio::spawn(async move { proxy.handle(s, &job).await });
        }
      }
      _ => {}
    }
  }
}
