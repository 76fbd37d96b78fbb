//! A job's mount namespace, released off the job's path.
//!
//! When the last reference to a mount namespace goes, the kernel unmounts its copy of every
//! mount and waits for an RCU grace period before it frees them (`namespace_unlock`,
//! `synchronize_rcu_expedited`). Left to the job, that last reference is its last process's, and
//! the wait sits in its exit: between the command's end and its reaper seeing it. The grace
//! period needs every other CPU to pass a quiescent point: about 0.05 ms on an idle machine,
//! milliseconds where the other vCPUs are busy or preempted by the host.
//!
//! So the reaper takes a reference of its own once the command runs ([`Held::of`], an fd of
//! `/proc/<leader>/ns/mnt`), and hands it at once to a thread of this process, which keeps it:
//! the job's exit then drops a reference that is not the last. Once the tree is gone, dropping
//! the [`Held`] asks that thread to close it, and the grace period is waited for there. The
//! namespace and its mounts are the job's own; this decides only when, and on which thread,
//! the kernel frees it.
//!
//! The thread keeps a file table of its own (`unshare(CLONE_FILES)`), holding only the end of
//! the socket it receives on and the namespaces it keeps: those are never in the process's
//! table, where the next job's fork would copy them (and that child's exec could then drop the
//! last reference, on that job's path); and the thread holds no copy of a job's pipes, whose
//! last writer must close them for the addon to see the end of the output. The caller's own copy
//! is closed right after it is sent, while the job still runs or the message holds its own
//! reference: that close is never the last.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::socket::{
  AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
  sendmsg, socketpair,
};

/// A job's mount namespace, kept by the releasing thread until this is dropped.
#[derive(Debug)]
pub struct Held(u64);

/// The messages the releasing thread takes: keep the attached fd as `id`, or close `id`.
const KEEP: u8 = b'k';
const CLOSE: u8 = b'c';

impl Held {
  /// The mount namespace of process `pid` (the job's leader, a child of the caller not yet
  /// reaped, so its pid cannot be another process's), handed to the releasing thread. `None`
  /// when the process is already gone (its exit then freed the namespace) or no thread runs.
  pub fn of(pid: libc::pid_t) -> Option<Held> {
    let fd = OwnedFd::from(std::fs::File::open(format!("/proc/{pid}/ns/mnt")).ok()?);
    let tx = releaser()?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    send(tx, KEEP, id, Some(&fd)).ok()?;
    // The job runs, or the message in flight holds its own reference: not the last one.
    drop(fd);
    Some(Held(id))
  }
}

impl Drop for Held {
  fn drop(&mut self) {
    if let Some(tx) = releaser() {
      let _ = send(tx, CLOSE, self.0, None);
    }
  }
}

/// One message to the releasing thread.
fn send(tx: &OwnedFd, what: u8, id: u64, fd: Option<&OwnedFd>) -> nix::Result<usize> {
  let mut msg = [0u8; 9];
  msg[0] = what;
  msg[1..].copy_from_slice(&id.to_ne_bytes());
  let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
  let cmsg = [ControlMessage::ScmRights(&fds)];
  sendmsg::<()>(
    tx.as_raw_fd(),
    &[io::IoSlice::new(&msg)],
    if fds.is_empty() { &[] } else { &cmsg },
    // A full socket drops the message: a namespace not kept is freed by the job's exit, one not
    // closed waits for the process's.
    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    None,
  )
}

/// The sending end of the releasing thread's socket, started at the first call (`None`: it
/// could not start).
fn releaser() -> Option<&'static OwnedFd> {
  static RELEASER: OnceLock<Option<OwnedFd>> = OnceLock::new();
  RELEASER.get_or_init(|| start().ok()).as_ref()
}

/// Starts the releasing thread; the sending end of its socket.
fn start() -> io::Result<OwnedFd> {
  let (tx, rx) = socketpair(
    AddressFamily::Unix,
    SockType::SeqPacket,
    None,
    SockFlag::SOCK_CLOEXEC,
  )?;
  let rx_fd = rx.as_raw_fd();
  // The thread's table starts as a copy of this one: it closes every fd but `rx` there, and
  // says when; this thread then closes its own copy of `rx`.
  let (ready_tx, ready_rx) = std::sync::mpsc::channel::<bool>();
  std::thread::Builder::new()
    .name("finn-ns-release".into())
    .spawn(move || {
      // Signals are the main thread's (the reaper reads SIGCHLD from a signalfd).
      let _ = nix::sys::signal::SigSet::all().thread_block();
      let own = private_table(rx_fd);
      let _ = ready_tx.send(own);
      if own {
        serve(rx_fd);
      }
    })?;
  let own = ready_rx.recv().unwrap_or(false);
  // The thread's table has its own copy of `rx` (or the thread is gone): this one goes.
  drop(rx);
  if own {
    Ok(tx)
  } else {
    Err(io::Error::other(
      "the releasing thread has no file table of its own",
    ))
  }
}

/// Gives the calling thread a file table of its own holding only `keep`.
fn private_table(keep: RawFd) -> bool {
  // SAFETY: unshare takes flags only; it affects the calling thread alone.
  if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
    return false;
  }
  let keep = keep as libc::c_uint;
  // SAFETY: close_range on this thread's own (now private) table.
  unsafe {
    (keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0)
      && libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32) == 0
  }
}

/// Keeps the fds it is sent, and closes each when asked, until every sending end is gone.
fn serve(rx: RawFd) {
  let mut kept: std::collections::HashMap<u64, OwnedFd> = std::collections::HashMap::new();
  let mut buf = [0u8; 9];
  let mut cmsg = nix::cmsg_space!([RawFd; 1]);
  loop {
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let msg = match recvmsg::<()>(rx, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
      Ok(msg) => msg,
      Err(nix::errno::Errno::EINTR) => continue,
      Err(_) => return,
    };
    if msg.bytes == 0 {
      return;
    }
    let bytes = msg.bytes;
    let mut fds = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
      for c in cmsgs {
        if let ControlMessageOwned::ScmRights(got) = c {
          // SAFETY: the kernel just installed these fds in this thread's table.
          fds.extend(
            got
              .into_iter()
              .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
          );
        }
      }
    }
    if bytes != buf.len() {
      continue;
    }
    let id = u64::from_ne_bytes(buf[1..].try_into().expect("8 bytes"));
    match (buf[0], fds.pop()) {
      (KEEP, Some(fd)) => {
        kept.insert(id, fd);
      }
      (CLOSE, _) => {
        kept.remove(&id);
      }
      _ => {}
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  /// The links of the fds of thread `tid` of this process.
  fn links_of_thread(tid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/self/task/{tid}/fd"))
      .map(|dir| {
        dir
          .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
          .map(|l| l.to_string_lossy().into_owned())
          .collect()
      })
      .unwrap_or_default()
  }

  /// The releasing thread's id, found by its name.
  fn releaser_tid() -> i32 {
    std::fs::read_dir("/proc/self/task")
      .unwrap()
      .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
      .find(|tid| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
          .is_ok_and(|c| c.trim() == "finn-ns-release")
      })
      .expect("the releasing thread runs")
  }

  /// A held namespace is kept by the releasing thread, in its own file table (not in this
  /// thread's, which a fork would copy), after its process is gone too, and closed once the
  /// `Held` is dropped; the thread holds nothing else but its socket (no copy of a pipe opened
  /// here before or after it started).
  #[test]
  fn a_held_namespace_is_kept_by_the_releaser_until_dropped() {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let mut child = std::process::Command::new("sleep")
      .arg("30")
      .spawn()
      .unwrap();
    let ns = std::fs::read_link(format!("/proc/{}/ns/mnt", child.id()))
      .unwrap()
      .to_string_lossy()
      .into_owned();
    let held = Held::of(child.id() as i32).expect("held");
    let _ = child.kill();
    let _ = child.wait();
    let tid = releaser_tid();
    let me = nix::unistd::gettid().as_raw();
    let kept = |tid| links_of_thread(tid).iter().filter(|l| **l == ns).count();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while kept(tid) == 0 && std::time::Instant::now() < until {
      std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(kept(tid), 1, "{:?}", links_of_thread(tid));
    assert_eq!(kept(me), 0, "{:?}", links_of_thread(me));
    assert!(
      links_of_thread(tid)
        .iter()
        .all(|l| l.starts_with("socket:") || l.starts_with("mnt:")),
      "{:?}",
      links_of_thread(tid)
    );
    drop(held);
    while kept(tid) == 1 && std::time::Instant::now() < until {
      std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(kept(tid), 0, "{:?}", links_of_thread(tid));
    // The pipe's reader sees its end once this thread closes the writer: no copy elsewhere.
    drop(w);
    let mut got = Vec::new();
    let n = std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut got).unwrap();
    assert_eq!(n, 0);
  }

  /// A full socket fails the message at once (the reaper never waits on the releasing
  /// thread), and so does a socket whose reader is gone.
  #[test]
  fn a_message_to_a_full_or_closed_socket_fails_at_once() {
    let (tx, rx) = socketpair(
      AddressFamily::Unix,
      SockType::SeqPacket,
      None,
      SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let full = (0..1_000_000).find_map(|id| send(&tx, CLOSE, id, None).err());
    assert_eq!(full, Some(nix::errno::Errno::EAGAIN));
    drop(rx);
    // EPIPE, or ECONNRESET where the reader left unread messages behind; no SIGPIPE either way.
    let gone = send(&tx, CLOSE, 0, None).unwrap_err();
    assert!(
      matches!(
        gone,
        nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET
      ),
      "{gone}"
    );
  }

  /// A pid with no process holds nothing.
  #[test]
  fn a_missing_process_gives_nothing_to_hold() {
    assert!(Held::of(i32::MAX).is_none());
  }
}
