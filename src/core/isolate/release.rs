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
//! `/proc/<leader>/ns/mnt`): the job's exit then drops one that is not the last. Once the tree
//! is gone, dropping the [`Held`] hands the fd to a thread of this process ([`later`]) that
//! closes it, and waits for the grace period there. The namespace is the job's own, as before,
//! with the same mounts; only the moment and the thread that free it change.
//!
//! The thread keeps a file table of its own (`unshare(CLONE_FILES)`), holding only the end of
//! the socket it receives on: an fd waiting to be closed is never in the process's table, where
//! the next job's fork would copy it (and that child's exec could then drop the last reference,
//! on that job's path); and the thread holds no copy of a job's pipes, whose last writer must
//! close them for the addon to see the end of the output.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use nix::sys::socket::{
  AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
  sendmsg, socketpair,
};

/// A reference to a job's mount namespace, taken by its reaper; released by [`later`] on drop.
#[derive(Debug)]
pub struct Held(Option<OwnedFd>);

impl Held {
  /// The mount namespace of process `pid` (the job's leader, a child of the caller not yet
  /// reaped, so its pid cannot be another process's). `None` when it is already gone: its
  /// exit then released the namespace itself.
  pub fn of(pid: libc::pid_t) -> Option<Held> {
    std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
      .ok()
      .map(|f| Held(Some(OwnedFd::from(f))))
  }
}

impl Drop for Held {
  fn drop(&mut self) {
    if let Some(fd) = self.0.take() {
      later(fd);
    }
  }
}

/// The sending end of the releasing thread's socket, once it runs (`None`: it could not start,
/// and fds are closed on the spot).
static RELEASER: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Closes `fd` on the releasing thread, started at the first call; on the spot where that
/// thread cannot run or its socket is full. Either way `fd` leaves this thread's file table
/// before this returns.
pub fn later(fd: OwnedFd) {
  let Some(tx) = RELEASER.get_or_init(|| start().ok()) else {
    drop(fd);
    return;
  };
  let fds = [fd.as_raw_fd()];
  // In flight, the message holds its own reference: closing ours below is not the last.
  let _ = sendmsg::<()>(
    tx.as_raw_fd(),
    &[io::IoSlice::new(b"f")],
    &[ControlMessage::ScmRights(&fds)],
    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    None,
  );
  drop(fd);
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
      if !own {
        return;
      }
      serve(rx_fd);
    })?;
  // A thread that could not take a table of its own has returned: the fds sent would sit in
  // the shared table's socket; close them on the spot instead.
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

/// Receives fds on `rx` and closes them, until every sending end is gone.
fn serve(rx: RawFd) {
  let mut buf = [0u8; 8];
  let mut cmsg = nix::cmsg_space!([RawFd; 4]);
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
    let Ok(cmsgs) = msg.cmsgs() else { continue };
    for c in cmsgs {
      if let ControlMessageOwned::ScmRights(fds) = c {
        for fd in fds {
          // SAFETY: the kernel just installed this fd in this thread's table.
          drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
      }
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::io::Read;

  /// The fds of thread `tid` of this process, by number.
  fn fds_of_thread(tid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/self/task/{tid}/fd"))
      .unwrap()
      .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
      .collect()
  }

  /// The releasing thread's id, found by its name.
  fn releaser() -> i32 {
    std::fs::read_dir("/proc/self/task")
      .unwrap()
      .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
      .find(|tid| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
          .is_ok_and(|c| c.trim() == "finn-ns-release")
      })
      .expect("the releasing thread runs")
  }

  /// A pipe's write end handed over is closed (its reader sees the end), gone from this
  /// process's table at once (a fork made right after would not copy it), and the releasing
  /// thread keeps nothing but its socket: no copy of a pipe some reader waits on.
  #[test]
  fn a_released_fd_leaves_the_table_at_once_and_is_closed_by_the_releaser() {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (r2, w2) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let number = w.as_raw_fd();
    later(w);
    // SAFETY: F_GETFD on a number: EBADF when nothing is there.
    assert_eq!(unsafe { libc::fcntl(number, libc::F_GETFD) }, -1);
    let mut reader = std::fs::File::from(r);
    let mut got = Vec::new();
    assert_eq!(
      reader.read_to_end(&mut got).unwrap(),
      0,
      "the end of the pipe"
    );
    // A pipe opened here after the thread started is not in its table: its reader sees the
    // end once this process closes its writer.
    let tid = releaser();
    assert_eq!(fds_of_thread(tid).len(), 1, "{:?}", fds_of_thread(tid));
    drop(w2);
    let mut reader2 = std::fs::File::from(r2);
    assert_eq!(reader2.read_to_end(&mut got).unwrap(), 0);
  }

  /// The namespace of a child not yet reaped is held; a pid with no process gives nothing.
  #[test]
  fn a_living_childs_namespace_is_held_and_a_missing_one_is_not() {
    let mut child = std::process::Command::new("sleep")
      .arg("5")
      .spawn()
      .unwrap();
    let held = Held::of(child.id() as i32).expect("held");
    let ours = std::fs::metadata("/proc/self/ns/mnt").unwrap();
    let theirs = nix::sys::stat::fstat(held.0.as_ref().unwrap()).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(theirs.st_ino, ours.ino());
    drop(held);
    let _ = child.kill();
    let _ = child.wait();
    assert!(Held::of(i32::MAX).is_none());
  }
}
