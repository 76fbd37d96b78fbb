//! The network namespace a reaper makes once and each of its jobs enters.
//!
//! Making a network namespace per job costs its `unshare(CLONE_NEWNET)` in the child (about
//! 0.3 ms), and its teardown after the job runs on a kernel worker (`cleanup_net`), which takes
//! CPU from the jobs that follow. A reaper runs one job at a time, and reports a job done only
//! once its whole tree is gone (`TreeGone`: no process of it is left), so an empty namespace made
//! once per reaper and entered with `setns` gives each job the same thing a fresh one would, as
//! long as no job can leave anything in it for the next:
//! - sockets, bound abstract Unix names and listeners belong to processes, and go with them;
//! - the loopback device, addresses, routes, rules and every other setting through netlink need
//!   CAP_NET_ADMIN in the namespace's user namespace (the host's), which no command keeps: the
//!   child drops every capability, the bounding set with them, before exec;
//! - the namespace's sysctls (`/proc/sys/net`) need no capability: uid 0 writes them by their
//!   owner bits. So a job enters the shared namespace only when `/proc/sys` is read-only for it
//!   ([`Prepared::may_share_net`](super::Prepared::may_share_net)): its mount namespace makes every
//!   mount read-only but the writable roots (none of them at or above `/proc`), and a pid
//!   namespace's fresh `/proc` gets its `sys` bound read-only. Any other job makes its own.
//!
//! Made only where the reaper holds CAP_SYS_ADMIN itself; inside a user namespace (non-root), a
//! job makes its own network namespace inside its own user namespace.

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// An empty network namespace, held for the life of the reaper that made it.
#[derive(Debug, Clone)]
pub struct SharedNet(pub(super) Arc<OwnedFd>);

impl SharedNet {
  /// Makes the namespace on a short-lived thread of its own (the namespace is the thread's, so
  /// the reaper's own stays the host's), and keeps an fd of it.
  pub fn new() -> std::io::Result<SharedNet> {
    std::thread::scope(|s| {
      s.spawn(|| {
        // SAFETY: unshare takes flags only; it changes the calling thread's namespace alone.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
          return Err(std::io::Error::last_os_error());
        }
        let ns = std::fs::File::open("/proc/thread-self/ns/net")?;
        Ok(SharedNet(Arc::new(OwnedFd::from(ns))))
      })
      .join()
      .unwrap_or_else(|_| Err(std::io::Error::other("the thread panicked")))
    })
  }

  /// The namespace, for `setns`.
  pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsFd;
    self.0.as_fd()
  }

  /// The namespace's inode number, as `/proc/<pid>/ns/net` names it (`net:[<inode>]`).
  pub fn inode(&self) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::File::from(self.0.try_clone().expect("an fd to duplicate"))
      .metadata()
      .map(|m| m.ino())
      .unwrap_or(0)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  /// The namespace is a new one, and the thread that made it leaves this one as it was.
  #[test]
  fn a_shared_namespace_is_new_and_leaves_the_caller_in_its_own() {
    let before = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let Ok(net) = SharedNet::new() else {
      // Without CAP_SYS_ADMIN the kernel refuses; the reaper then makes none.
      // SAFETY: geteuid cannot fail.
      assert_ne!(unsafe { libc::geteuid() }, 0, "root makes one");
      return;
    };
    assert_eq!(
      std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
      before
    );
    assert_ne!(
      format!("net:[{}]", net.inode()),
      before.to_string_lossy(),
      "a namespace of its own"
    );
  }
}
