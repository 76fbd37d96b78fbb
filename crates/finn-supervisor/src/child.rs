//! Starting a job's command inside its reaper: the one place where code may later run between
//! fork and exec.
//!
//! [`start`] uses `posix_spawn` (vfork-class, the cheapest start; the reaper is small, but a
//! plain `fork` still costs about 0.3 ms on this VM). [`start_with`] forks and runs a
//! `pre_exec` step in the child before `execve`: that is the seam for the isolation layers
//! (rlimits, landlock, seccomp, namespaces). Both give the child the same setup as
//! [`finn_exec::spawn`]: a new session, stdin `/dev/null`, the two pipes as stdout and
//! stderr, the working directory, an empty signal mask and default dispositions.

use std::os::fd::{OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

use finn_exec::SpawnSpec;
use finn_isolate::{ChildFailed, Layer, LayerFailed};

/// Starts `spec` with `stdout`/`stderr` as its output; returns its pid or the errno.
pub fn start(spec: &SpawnSpec, stdout: RawFd, stderr: RawFd) -> Result<Pid, Errno> {
  start_fed(spec, None, stdout, stderr)
}

/// [`start`] with `stdin` as the command's fd 0 (`None`: `/dev/null`).
pub fn start_fed(
  spec: &SpawnSpec,
  stdin: Option<RawFd>,
  stdout: RawFd,
  stderr: RawFd,
) -> Result<Pid, Errno> {
  finn_exec::spawn::posix_spawn_fed(spec, stdin, stdout, stderr)
    .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
}

/// A step run in the forked child just before `execve`. It runs in a copy of the reaper's main
/// thread (a small process: see `start_watched` on its other thread), so it may allocate; an error aborts the start and comes back
/// from [`start_with`]: an isolation layer's as [`StartError::Layer`], any other as the spawn's
/// errno.
pub type PreExec<'a> = &'a dyn Fn() -> Result<(), ChildFailed>;

/// Why a command did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
  /// The start itself failed (fork, the child's setup, `execve`): the errno.
  #[error("{0}")]
  Spawn(Errno),
  /// An isolation layer failed in the child.
  #[error(transparent)]
  Layer(LayerFailed),
}

impl From<Errno> for StartError {
  fn from(errno: Errno) -> Self {
    StartError::Spawn(errno)
  }
}

/// Like [`start`], with `pre_exec` run in the child after its setup and before `execve`.
pub fn start_with(
  spec: &SpawnSpec,
  stdout: RawFd,
  stderr: RawFd,
  pre_exec: PreExec,
) -> Result<Pid, StartError> {
  start_watched(spec, None, stdout, stderr, pre_exec, None).map(|(pid, _)| pid)
}

/// [`start_with`] with `stdin` as fd 0 (`None`: `/dev/null`), and with `watch` (a program of
/// `shield::watch_program`) the child installs it before `pre_exec` and hands back its
/// listener.
pub fn start_watched(
  spec: &SpawnSpec,
  stdin: Option<RawFd>,
  stdout: RawFd,
  stderr: RawFd,
  pre_exec: PreExec,
  watch: Option<&[libc::sock_filter]>,
) -> Result<(Pid, Option<OwnedFd>), StartError> {
  use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
  // Everything the child needs is built before the fork.
  let mut argv: Vec<*const libc::c_char> = spec.argv.iter().map(|a| a.as_ptr()).collect();
  argv.push(std::ptr::null());
  let mut envp: Vec<*const libc::c_char> = spec.env.iter().map(|e| e.as_ptr()).collect();
  envp.push(std::ptr::null());
  // The child reports a failure, or passes the watch's listener, through this socket
  // (close-on-exec: a successful exec closes it, and the parent reads EOF).
  let (report_r, report_w) = socketpair(
    AddressFamily::Unix,
    SockType::SeqPacket,
    None,
    SockFlag::SOCK_CLOEXEC,
  )?;
  // SAFETY: the child is a copy of this thread, consistent: the reaper's only other thread
  // (`isolate`'s namespace releaser, after the first isolated job) takes no lock the child
  // takes (it waits in `recvmsg` and closes fds in a file table of its own; glibc's fork holds
  // malloc's locks across the fork). The child only runs `exec_child`, which ends in `execve`
  // or `_exit`.
  match unsafe { nix::unistd::fork() }? {
    nix::unistd::ForkResult::Child => {
      use std::os::fd::AsRawFd;
      drop(report_r);
      let fds = ChildFds {
        stdin,
        stdout,
        stderr,
        report: report_w.as_raw_fd(),
      };
      exec_child(spec, &argv, &envp, fds, pre_exec, watch)
    }
    nix::unistd::ForkResult::Parent { child } => {
      drop(report_w);
      let mut listener = None;
      loop {
        match read_report(&report_r) {
          Ok(Report::Listener(fd)) => listener = Some(fd),
          Ok(Report::Failed(failed)) => {
            // The child failed before exec and has exited: reap it here, it never ran the job.
            let _ = nix::sys::wait::waitpid(child, None);
            return Err(failed);
          }
          Ok(Report::Exec) | Err(_) => return Ok((child, listener)),
        }
      }
    }
  }
}

enum Report {
  /// EOF: the child exec'd.
  Exec,
  Failed(StartError),
  Listener(OwnedFd),
}

/// The child's report of a failure: the layer's id (0: not a layer, the start itself), then
/// the errno.
const FAILURE_BYTES: usize = 5;

fn encode_failure(layer: Option<Layer>, errno: Errno) -> [u8; FAILURE_BYTES] {
  let mut bytes = [0u8; FAILURE_BYTES];
  bytes[0] = layer.map_or(0, Layer::id);
  bytes[1..].copy_from_slice(&(errno as i32).to_ne_bytes());
  bytes
}

/// A report of `FAILURE_BYTES`; an unknown layer id is reported as a failed start.
fn decode_failure(bytes: [u8; FAILURE_BYTES]) -> StartError {
  let errno = Errno::from_raw(i32::from_ne_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]));
  match Layer::from_id(bytes[0]) {
    Some(layer) => StartError::Layer(LayerFailed::new(layer, errno)),
    None => StartError::Spawn(errno),
  }
}

fn read_report(socket: &OwnedFd) -> nix::Result<Report> {
  use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
  use std::os::fd::{AsRawFd, FromRawFd};
  let mut buf = [0u8; FAILURE_BYTES];
  let mut cmsg = nix::cmsg_space!([RawFd; 1]);
  loop {
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = match recvmsg::<()>(
      socket.as_raw_fd(),
      &mut iov,
      Some(&mut cmsg),
      MsgFlags::MSG_CMSG_CLOEXEC,
    ) {
      Err(Errno::EINTR) => continue,
      other => other?,
    };
    for c in msg.cmsgs()? {
      if let ControlMessageOwned::ScmRights(fds) = c
        && let Some(&fd) = fds.first()
      {
        // SAFETY: the kernel just installed this fd for us.
        return Ok(Report::Listener(unsafe { OwnedFd::from_raw_fd(fd) }));
      }
    }
    return Ok(match msg.bytes {
      FAILURE_BYTES => Report::Failed(decode_failure(buf)),
      _ => Report::Exec,
    });
  }
}

/// The descriptors the forked child starts with: the job's pipes, and its end of the socket
/// that reports a failure to the reaper.
struct ChildFds {
  /// `None`: `/dev/null`.
  stdin: Option<RawFd>,
  stdout: RawFd,
  stderr: RawFd,
  report: RawFd,
}

/// The forked child: the same setup as `posix_spawn`'s attributes, then the watch, then
/// `pre_exec`, then `execve`. Never returns.
fn exec_child(
  spec: &SpawnSpec,
  argv: &[*const libc::c_char],
  envp: &[*const libc::c_char],
  fds: ChildFds,
  pre_exec: PreExec,
  watch: Option<&[libc::sock_filter]>,
) -> ! {
  let ChildFds {
    stdin,
    stdout,
    stderr,
    report,
  } = fds;
  let report_failure = |layer: Option<Layer>, errno: Errno| -> ! {
    let bytes = encode_failure(layer, errno);
    // SAFETY: writes the bytes of a stack array to our own socket, then exits without running
    // the parent's atexit handlers or destructors.
    unsafe {
      libc::write(report, bytes.as_ptr().cast(), bytes.len());
      libc::_exit(127)
    }
  };
  let fail = |errno: Errno| -> ! { report_failure(None, errno) };
  // SAFETY: plain syscalls on this process's own state and descriptors; every pointer is
  // valid and NUL-terminated (argv and envp end with a null pointer).
  unsafe {
    // The reaper is non-dumpable (`shield.rs`), and so is this copy of it: its `/proc/self`
    // would belong to root, and an unprivileged isolation step that writes there (a user
    // namespace's uid_map) would get EACCES. `execve` makes the command dumpable anyway.
    if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 {
      fail(Errno::last());
    }
    if libc::setsid() < 0 {
      fail(Errno::last());
    }
    // Close-on-exec: only its copy as fd 0 reaches the command.
    let input = match stdin {
      Some(fd) => fd,
      None => libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
    };
    if input < 0 || libc::dup2(input, 0) < 0 {
      fail(Errno::last());
    }
    if libc::dup2(stdout, 1) < 0 || libc::dup2(stderr, 2) < 0 {
      fail(Errno::last());
    }
    if libc::chdir(spec.cwd.as_ptr()) < 0 {
      fail(Errno::last());
    }
    for sig in 1..32 {
      if sig != libc::SIGKILL && sig != libc::SIGSTOP {
        libc::signal(sig, libc::SIG_DFL);
      }
    }
    let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    libc::sigemptyset(empty.as_mut_ptr());
    libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
    if let Some(prog) = watch {
      // The listener goes to the reaper; this process keeps no copy (a command holding it
      // could answer for itself).
      match super::shield::install_watch(prog) {
        Ok(listener) => {
          use std::os::fd::AsRawFd;
          let fds = [listener.as_raw_fd()];
          let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
          let iov = [std::io::IoSlice::new(b"L")];
          if let Err(errno) = nix::sys::socket::sendmsg::<()>(
            report,
            &iov,
            &cmsg,
            nix::sys::socket::MsgFlags::empty(),
            None,
          ) {
            fail(errno);
          }
        }
        // A pool run by a job's command: the outer job's watch is on this process already,
        // and the kernel allows one listener on a chain (EBUSY). The outer reaper goes on
        // judging these calls, keeping them inside the outer job.
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        Err(e) => fail(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EPERM))),
      }
    }
    match pre_exec() {
      Ok(()) => {}
      Err(ChildFailed::Start(errno)) => fail(errno),
      Err(ChildFailed::Layer(failed)) => report_failure(Some(failed.layer), failed.errno),
    }
    libc::execve(spec.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
    fail(Errno::last())
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::ffi::CString;
  use std::os::fd::AsRawFd;

  fn spec(script: &str) -> SpawnSpec {
    let c = |s: &str| CString::new(s).unwrap();
    SpawnSpec {
      program: c("/bin/sh"),
      argv: vec![c("sh"), c("-c"), c(script)],
      env: vec![c("PATH=/usr/bin:/bin")],
      cwd: c("/tmp"),
    }
  }

  fn output(
    start: impl FnOnce(RawFd) -> Result<Pid, StartError>,
  ) -> (Result<i32, StartError>, String) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let started = start(w.as_raw_fd());
    drop(w);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    let status = started.map(|pid| match nix::sys::wait::waitpid(pid, None).unwrap() {
      nix::sys::wait::WaitStatus::Exited(_, code) => code,
      other => panic!("{other:?}"),
    });
    (status, out)
  }

  #[test]
  fn the_pre_exec_step_runs_in_the_child_before_exec() {
    // The hook lowers RLIMIT_NOFILE in the child only; the command sees the lowered limit.
    let lower = || {
      nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 17, 17)
        .map_err(ChildFailed::Start)
    };
    let s = spec("ulimit -n; echo $$ $PPID; pwd");
    let (status, out) = output(|w| start_with(&s, w, w, &lower));
    assert_eq!(status, Ok(0));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "17");
    assert_eq!(lines[2], "/tmp");
    // Without the hook, the limit is the parent's.
    let (_, plain) = output(|w| start(&s, w, w).map_err(StartError::Spawn));
    assert_ne!(plain.lines().next(), Some("17"));
  }

  #[test]
  fn failures_before_and_at_exec_are_reported_as_errnos() {
    let refuse = || Err(ChildFailed::Start(Errno::EPERM));
    let (status, _) = output(|w| start_with(&spec("true"), w, w, &refuse));
    assert_eq!(status, Err(StartError::Spawn(Errno::EPERM)));
    let mut missing = spec("true");
    missing.program = CString::new("/nonexistent/x").unwrap();
    let (status, _) = output(|w| start_with(&missing, w, w, &|| Ok(())));
    assert_eq!(status, Err(StartError::Spawn(Errno::ENOENT)));
  }

  #[test]
  fn a_layer_that_fails_in_the_child_is_reported_with_its_errno() {
    for layer in finn_isolate::Layer::ALL {
      let refuse = move || Err(ChildFailed::Layer(LayerFailed::new(layer, Errno::EACCES)));
      let (status, _) = output(|w| start_with(&spec("true"), w, w, &refuse));
      assert_eq!(
        status,
        Err(StartError::Layer(LayerFailed::new(layer, Errno::EACCES)))
      );
    }
  }

  #[test]
  fn a_failure_report_round_trips_and_an_unknown_layer_is_a_failed_start() {
    for layer in [None, Some(Layer::Seccomp)] {
      let back = decode_failure(encode_failure(layer, Errno::ENOMEM));
      let expected = match layer {
        Some(layer) => StartError::Layer(LayerFailed::new(layer, Errno::ENOMEM)),
        None => StartError::Spawn(Errno::ENOMEM),
      };
      assert_eq!(back, expected);
    }
    let mut unknown = encode_failure(None, Errno::EIO);
    unknown[0] = 250;
    assert_eq!(decode_failure(unknown), StartError::Spawn(Errno::EIO));
  }
}
