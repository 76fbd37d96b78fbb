//! The child side: applies a `Prepared` between fork and exec. Async-signal-safe: raw syscalls on
//! data built before the fork, no allocation, no locks (so libc rather than nix where nix would
//! build a path or an error string). Order matters:
//! cgroup and rlimits first (they bound everything after), namespaces (inside a fresh user
//! namespace when we are not root) and mounts while we still hold CAP_SYS_ADMIN, then fds, capabilities, no_new_privs, landlock, and seccomp last (it
//! denies `mount`, `unshare` and the other calls made above).

use std::ffi::CStr;

use nix::errno::Errno;

use super::error::{Layer, LayerFailed};
use super::mounts;
use super::prepare::Prepared;

fn check(r: libc::c_long) -> Result<(), Errno> {
  if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

impl Prepared {
  /// Applies every prepared layer to the calling process. Call it only in a freshly forked,
  /// single-threaded child, right before exec. A failure names its layer (for the job's
  /// `ISOLATION_UNAVAILABLE`); the working directory's `fchdir` is the start's own step, and
  /// fails as `Layer`-less [`ChildFailed::Start`].
  pub fn apply_in_child(&self) -> Result<(), ChildFailed> {
    if let Some(fd) = &self.cwd_fd {
      use std::os::fd::AsRawFd;
      // Before `unshare`: the new mount namespace takes the cwd over into its copy of the
      // mounts (entered after it, an fd of the old namespace would bypass the binds below).
      // SAFETY: fchdir on an fd owned by `self`.
      check(unsafe { libc::fchdir(fd.as_raw_fd()) }.into()).map_err(ChildFailed::Start)?;
    }
    self.apply_layers().map_err(ChildFailed::Layer)
  }

  fn apply_layers(&self) -> Result<(), LayerFailed> {
    let failed = |layer| move |errno| LayerFailed::new(layer, errno);
    if let Some(cg) = &self.cgroup {
      for procs in cg.procs_files() {
        join_cgroup(procs).map_err(failed(Layer::Cgroup))?;
      }
    }
    set_rlimits(&self.rlimits).map_err(failed(Layer::Rlimits))?;
    // One namespace per call, so that a refusal names its namespace; the user namespace first,
    // so the others belong to it, as when one call makes them all.
    for (flag, layer) in NAMESPACES {
      if self.unshare_flags & flag != 0 {
        // SAFETY: unshare takes flags only.
        check(unsafe { libc::unshare(flag) }.into()).map_err(failed(layer))?;
      }
    }
    if let Some(net) = &self.net {
      use std::os::fd::AsRawFd;
      // The reaper's empty network namespace instead of a new one (`netns.rs`).
      // SAFETY: setns on an fd owned by `self`.
      check(unsafe { libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) }.into())
        .map_err(failed(Layer::Netns))?;
    }
    if let Some((uid_map, gid_map)) = &self.id_maps {
      // Without CAP_SYS_ADMIN: the namespaces were made inside a fresh user namespace, where we
      // hold every capability until they are dropped below. Map our own ids to themselves;
      // setgroups must be denied before an unprivileged gid_map is accepted.
      write_file(c"/proc/self/setgroups", c"deny").map_err(failed(Layer::Userns))?;
      write_file(c"/proc/self/uid_map", uid_map).map_err(failed(Layer::Userns))?;
      write_file(c"/proc/self/gid_map", gid_map).map_err(failed(Layer::Userns))?;
    }
    mounts::apply(&self.mounts).map_err(failed(Layer::Mountns))?;
    if let Some(link) = &self.egress {
      use std::os::fd::AsRawFd;
      // In the job's new network namespace, with its capabilities still held: the only route
      // out, its listeners, go to the reaper (`egress.rs`).
      let child = link.child.as_ref().map_or(-1, |c| c.as_raw_fd());
      super::egress::listen_in_child(child).map_err(failed(Layer::Netns))?;
    }
    if self.pidns_at_fork {
      // The fork made this process pid 1 of its namespace; anything else is a start path
      // that did not fork as `pid_namespace_at_fork` asked, and would mount another
      // namespace's /proc.
      // SAFETY: getpid takes nothing.
      if unsafe { libc::getpid() } != 1 {
        return Err(LayerFailed::new(Layer::Pidns, Errno::EINVAL));
      }
      mount_proc().map_err(failed(Layer::Pidns))?;
    } else if self.pidns {
      enter_pid_namespace().map_err(failed(Layer::Pidns))?;
    }
    cloexec_from_3().map_err(failed(Layer::Privileges))?;
    drop_capabilities(self.drop_bounding, self.cap_last_cap).map_err(failed(Layer::Privileges))?;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())
      .map_err(failed(Layer::Privileges))?;
    if let Some(fd) = &self.landlock_fd {
      use std::os::fd::AsRawFd;
      // SAFETY: the fd is a landlock ruleset owned by `self`; flags 0.
      check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) })
        .map_err(failed(Layer::Landlock))?;
    }
    if let Some(route) = &self.route {
      // The one program, with a listener that goes to the reaper before the command runs.
      return super::route::install_and_send(&route.prog, &route.to_reaper)
        .map_err(failed(Layer::Seccomp));
    }
    for prog in &self.seccomp {
      // apply_filter builds its `sock_fprog` on the stack and makes two syscalls; its error
      // carries an io::Error from errno, which does not allocate.
      seccompiler::apply_filter(prog)
        .map_err(|e| match e {
          seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => {
            Errno::from_raw(io.raw_os_error().unwrap_or(libc::EINVAL))
          }
          _ => Errno::EINVAL,
        })
        .map_err(failed(Layer::Seccomp))?;
    }
    Ok(())
  }
}

/// The namespaces a job may get, in the order one `unshare` with all their flags makes them,
/// and their layers.
const NAMESPACES: [(libc::c_int, Layer); 4] = [
  (libc::CLONE_NEWUSER, Layer::Userns),
  (libc::CLONE_NEWNS, Layer::Mountns),
  (libc::CLONE_NEWPID, Layer::Pidns),
  (libc::CLONE_NEWNET, Layer::Netns),
];

/// Why the child side of isolation stopped before exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildFailed {
  /// A step of the start itself (entering the working directory): a spawn failure.
  Start(Errno),
  Layer(LayerFailed),
}

impl From<ChildFailed> for std::io::Error {
  fn from(e: ChildFailed) -> Self {
    match e {
      ChildFailed::Start(errno) => errno.into(),
      ChildFailed::Layer(layer) => layer.into(),
    }
  }
}

/// Sets each limit as both soft and hard.
pub(super) fn set_rlimits(
  rlimits: &[(libc::__rlimit_resource_t, libc::rlim_t)],
) -> Result<(), Errno> {
  for &(res, value) in rlimits {
    let lim = libc::rlimit {
      rlim_cur: value,
      rlim_max: value,
    };
    // SAFETY: `lim` is a valid rlimit on our stack.
    check(unsafe { libc::setrlimit(res, &lim) }.into())?;
  }
  Ok(())
}

/// After `unshare(CLONE_NEWPID)` only children land in the new namespace: fork once more. The
/// child (pid 1 there) mounts a fresh /proc and returns to exec the command. The parent stays
/// behind as a waiter and never returns: it closes every fd (so the command alone holds stdio and
/// the spawner's exec-error pipe), ignores the polite signals a group stop sends (the command
/// gets them itself), and exits the way the command did.
fn enter_pid_namespace() -> Result<(), Errno> {
  // SAFETY: fork in a single-threaded child; both sides make only async-signal-safe calls.
  let pid = unsafe { libc::fork() };
  if pid < 0 {
    return Err(Errno::last());
  }
  if pid == 0 {
    // SAFETY: integers and static strings only. The waiter's death (SIGKILL to the group, or the
    // supervisor's) takes the command with it.
    unsafe {
      if libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
      ) != 0
      {
        return Err(Errno::last());
      }
    }
    return mount_proc();
  }
  // SAFETY: the waiter only closes fds, sets signal dispositions, waits and exits.
  unsafe {
    libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
    for sig in [
      libc::SIGTERM,
      libc::SIGINT,
      libc::SIGHUP,
      libc::SIGQUIT,
      libc::SIGUSR1,
      libc::SIGUSR2,
    ] {
      libc::signal(sig, libc::SIG_IGN);
    }
    let mut status = 0;
    while libc::waitpid(pid, &mut status, 0) < 0 {
      if Errno::last() != Errno::EINTR {
        libc::_exit(127);
      }
    }
    if libc::WIFSIGNALED(status) {
      let sig = libc::WTERMSIG(status);
      libc::signal(sig, libc::SIG_DFL);
      let mut set: libc::sigset_t = std::mem::zeroed();
      libc::sigemptyset(&mut set);
      libc::sigaddset(&mut set, sig);
      libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
      libc::kill(libc::getpid(), sig);
      libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status));
  }
}

/// Mounts a fresh `/proc` for the pid namespace the caller is pid 1 of, with its `sys` bound
/// read-only over itself: uid 0 writes sysctls by their owner bits, without any capability, and
/// the mount namespace made every other mount read-only already (a job may share its reaper's
/// network namespace only while `/proc/sys/net` is read-only for it: `netns.rs`).
fn mount_proc() -> Result<(), Errno> {
  let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
  // SAFETY: static NUL-terminated strings and integers only.
  unsafe {
    check(
      libc::mount(
        c"proc".as_ptr(),
        c"/proc".as_ptr(),
        c"proc".as_ptr(),
        flags,
        std::ptr::null(),
      )
      .into(),
    )?;
    check(
      libc::mount(
        c"/proc/sys".as_ptr(),
        c"/proc/sys".as_ptr(),
        std::ptr::null(),
        libc::MS_BIND | libc::MS_REC,
        std::ptr::null(),
      )
      .into(),
    )?;
    check(
      libc::mount(
        std::ptr::null(),
        c"/proc/sys".as_ptr(),
        std::ptr::null(),
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
        std::ptr::null(),
      )
      .into(),
    )
  }
}

/// Moves the calling process into the group: writing "0" means "the writer".
pub(super) fn join_cgroup(procs: &CStr) -> Result<(), Errno> {
  write_file(procs, c"0")
}

/// Writes `text` to the file at `path` in one `write`.
pub(super) fn write_file(path: &CStr, text: &CStr) -> Result<(), Errno> {
  let bytes = text.to_bytes();
  // SAFETY: NUL-terminated path, a buffer of `bytes.len()` bytes; open/write/close only.
  unsafe {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
      return Err(Errno::last());
    }
    let r = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let err = Errno::last();
    libc::close(fd);
    if r != bytes.len() as isize {
      return Err(err);
    }
  }
  Ok(())
}

/// Marks every fd above 2 close-on-exec: only 0-2 reach the command. CLOEXEC rather than close,
/// because the landlock ruleset fd and std's exec-error pipe are still needed until exec.
pub(super) fn cloexec_from_3() -> Result<(), Errno> {
  const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
  // SAFETY: close_range only changes flags of our own fds.
  let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
  if r == 0 {
    return Ok(());
  }
  // Before Linux 5.11: walk the table up to the soft limit.
  let mut lim = libc::rlimit {
    rlim_cur: 0,
    rlim_max: 0,
  };
  // SAFETY: getrlimit writes into `lim` on our stack; fcntl on any int is harmless (EBADF).
  unsafe {
    libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    for fd in 3..lim.rlim_cur.min(1 << 20) as libc::c_int {
      libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
  }
  Ok(())
}

/// Empties the bounding set (root only: it takes CAP_SETPCAP), the ambient set, and the
/// effective/permitted/inheritable sets. With the bounding set empty, exec grants root nothing.
fn drop_capabilities(drop_bounding: bool, cap_last_cap: u32) -> Result<(), Errno> {
  if drop_bounding {
    for cap in 0..=cap_last_cap {
      // SAFETY: PR_CAPBSET_DROP takes integers only.
      let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
      if r != 0 && Errno::last() != Errno::EINVAL {
        return Err(Errno::last());
      }
    }
  }
  // SAFETY: integers only. EINVAL on kernels without ambient capabilities is fine: none to clear.
  let r = unsafe {
    libc::prctl(
      libc::PR_CAP_AMBIENT,
      libc::PR_CAP_AMBIENT_CLEAR_ALL,
      0,
      0,
      0,
    )
  };
  if r != 0 && Errno::last() != Errno::EINVAL {
    return Err(Errno::last());
  }
  #[repr(C)]
  struct Header {
    version: u32,
    pid: libc::c_int,
  }
  #[repr(C)]
  #[derive(Clone, Copy)]
  struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
  }
  const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
  let mut header = Header {
    version: LINUX_CAPABILITY_VERSION_3,
    pid: 0,
  };
  let data = [Data {
    effective: 0,
    permitted: 0,
    inheritable: 0,
  }; 2];
  // SAFETY: capset reads a v3 header and two data structs, both on our stack.
  check(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) })
}
