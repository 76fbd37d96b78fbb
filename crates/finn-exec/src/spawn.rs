//! Starting a child without forking the caller.
//!
//! glibc's `posix_spawn` clones with `CLONE_VM | CLONE_VFORK`: the child borrows the parent's
//! address space until it execs, so the cost does not grow with the parent's heap (a `fork()`
//! of a 2 GiB Node process copies page tables for ~70 ms). nix's `spawn` wrapper lacks
//! `POSIX_SPAWN_SETSID` and `posix_spawn_file_actions_addchdir_np`, so this file calls libc.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;

use nix::fcntl::OFlag;
use nix::unistd::Pid;

use super::outcome::ExitStatus;

/// What to start: an already-resolved program, its argv and its entire environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
  /// Path of the program; resolved against `env`'s PATH by [`resolve_program`] beforehand.
  pub program: CString,
  /// argv, `argv[0]` included.
  pub argv: Vec<CString>,
  /// `KEY=value` entries: the child's whole environment, nothing inherited.
  pub env: Vec<CString>,
  /// Working directory of the child.
  pub cwd: CString,
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
  #[error("spawn {program}: {source}{}", resource_hint(.source))]
  Exec { program: String, source: io::Error },
  #[error("spawn {program}: working directory {cwd} is not usable: {source}")]
  Cwd {
    program: String,
    cwd: String,
    source: io::Error,
  },
  #[error("spawn {program}: not found in PATH")]
  NotFound { program: String },
  #[error("set up pipes or pidfd: {0}{hint}", hint = resource_hint(.0))]
  Setup(io::Error),
}

/// Names the exhausted resource behind an errno whose own text does not ("Resource temporarily
/// unavailable" is what a full pids cgroup and RLIMIT_NPROC both give), so the caller knows what
/// to raise.
fn resource_hint(e: &io::Error) -> &'static str {
  match e.raw_os_error() {
    Some(libc::EAGAIN) => " (process limit reached: RLIMIT_NPROC or the pids cgroup's pids.max)",
    Some(libc::EMFILE) => " (open-file limit reached: RLIMIT_NOFILE)",
    Some(libc::ENFILE) => " (the system's open-file table is full)",
    Some(libc::ENOMEM) => " (out of memory)",
    _ => "",
  }
}

impl SpawnError {
  /// The exit code a shell would report for this failure (127 not found, 126 not executable).
  pub fn exit_code(&self) -> i32 {
    let source = match self {
      SpawnError::Exec { source, .. } | SpawnError::Cwd { source, .. } => source,
      SpawnError::NotFound { .. } => return 127,
      SpawnError::Setup(_) => return 126,
    };
    match source.raw_os_error() {
      Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
      _ => 126,
    }
  }
}

/// A running child: the leader of its own session and process group (pgid = sid = pid).
/// Its pidfd polls readable once it has exited; the pipes' read ends are non-blocking.
pub struct Child {
  pid: Pid,
  pidfd: OwnedFd,
  status: Option<ExitStatus>,
  pub stdout: Option<OwnedFd>,
  pub stderr: Option<OwnedFd>,
}

impl Child {
  pub fn pid(&self) -> Pid {
    self.pid
  }

  pub fn pidfd(&self) -> RawFd {
    self.pidfd.as_raw_fd()
  }

  /// The exit status once the leader has been reaped.
  pub fn status(&self) -> Option<ExitStatus> {
    self.status
  }

  /// Reaps the leader if it has exited; never blocks.
  pub fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
    if self.status.is_none() {
      self.status = try_reap(self.pid)?;
    }
    Ok(self.status)
  }

  /// Blocks until the leader has exited and reaps it: for a child that outlived the reap
  /// bound, on a thread of its own.
  pub fn wait_blocking(self) {
    if self.status.is_none() {
      while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(self.pid, None) {}
    }
  }
}

fn try_reap(pid: Pid) -> io::Result<Option<ExitStatus>> {
  use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
  match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
    Ok(WaitStatus::Exited(_, code)) => Ok(Some(ExitStatus::Exited(code))),
    Ok(WaitStatus::Signaled(_, signal, _)) => Ok(Some(ExitStatus::Signaled(signal as i32))),
    Ok(_) => Ok(None),
    Err(errno) => Err(io::Error::from(errno)),
  }
}

/// Finds `program` the way `execvp` would, but in the child's PATH (from `env`), as Node's
/// `child_process` does. Names containing a slash are taken as they are.
pub fn resolve_program(program: &str, path_var: Option<&str>) -> Result<CString, SpawnError> {
  let not_found = || SpawnError::NotFound {
    program: program.to_owned(),
  };
  if program.contains('/') {
    return CString::new(program).map_err(|_| not_found());
  }
  let path_var = path_var.unwrap_or("/usr/local/bin:/usr/bin:/bin");
  for dir in path_var.split(':').filter(|d| !d.is_empty()) {
    let candidate = format!("{dir}/{program}");
    let Ok(c) = CString::new(candidate) else {
      continue;
    };
    // SAFETY: `c` is a valid NUL-terminated string.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 && is_regular_file(&c) {
      return Ok(c);
    }
  }
  Err(not_found())
}

fn is_regular_file(path: &CStr) -> bool {
  let mut st = MaybeUninit::<libc::stat>::uninit();
  // SAFETY: valid path pointer and a writable stat buffer.
  unsafe {
    libc::stat(path.as_ptr(), st.as_mut_ptr()) == 0
      && (st.assume_init().st_mode & libc::S_IFMT) == libc::S_IFREG
  }
}

/// Starts the child: new session and process group, stdin `/dev/null`, stdout and stderr piped,
/// an empty signal mask and default dispositions for every catchable signal (Node ignores
/// SIGPIPE, and ignored dispositions survive `exec`).
///
pub fn spawn(spec: &SpawnSpec) -> Result<Child, SpawnError> {
  let (out_r, out_w) =
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| SpawnError::Setup(e.into()))?;
  let (err_r, err_w) =
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| SpawnError::Setup(e.into()))?;

  let pid = posix_spawn(spec, out_w.as_raw_fd(), err_w.as_raw_fd())
    .map_err(|source| classify_exec_error(spec, source))?;
  // The write ends now belong to the child; holding them would keep EOF from ever arriving.
  drop(out_w);
  drop(err_w);

  let setup = || -> io::Result<Child> {
    Ok(Child {
      pid,
      pidfd: super::pidfd::open(pid.as_raw())?,
      status: None,
      stdout: Some(nonblocking(out_r)?),
      stderr: Some(nonblocking(err_r)?),
    })
  };
  setup().map_err(|e| {
    // Do not leave an unsupervised child behind.
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
    SpawnError::Setup(e)
  })
}

/// The read end of one of our own pipes, made non-blocking with one `fcntl`. Only the read
/// end: the child's write end stays blocking.
fn nonblocking(fd: OwnedFd) -> io::Result<OwnedFd> {
  nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
    .map_err(io::Error::from)?;
  Ok(fd)
}

/// posix_spawn reports a failed `chdir` and a failed `execve` with the same errno; tell them
/// apart only after the failure, so the success path pays nothing.
pub fn classify_exec_error(spec: &SpawnSpec, source: io::Error) -> SpawnError {
  let program = spec.program.to_string_lossy().into_owned();
  if matches!(
    source.raw_os_error(),
    Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
  ) {
    let cwd = spec.cwd.to_string_lossy().into_owned();
    let cwd_error = match std::fs::metadata(&cwd) {
      Ok(meta) if meta.is_dir() => None,
      Ok(_) => Some(io::Error::from_raw_os_error(libc::ENOTDIR)),
      Err(e) => Some(e),
    };
    if let Some(source) = cwd_error {
      return SpawnError::Cwd {
        program,
        cwd,
        source,
      };
    }
  }
  SpawnError::Exec { program, source }
}

/// The libc spawn attribute objects for a child that starts clean: a session of its own (no
/// terminal signal reaches it), an empty signal mask and every catchable signal at its default.
/// The caller adds its file actions, then [`SpawnAttrs::spawn`]; dropping destroys both objects.
pub struct SpawnAttrs {
  attr: libc::posix_spawnattr_t,
  actions: libc::posix_spawn_file_actions_t,
}

impl SpawnAttrs {
  pub fn new_session() -> io::Result<Self> {
    // SAFETY: both objects are initialised by their `_init` before any other use, and an
    // `SpawnAttrs` exists (and so is dropped) only once both are.
    unsafe {
      let mut attr = MaybeUninit::<libc::posix_spawnattr_t>::zeroed().assume_init();
      check(libc::posix_spawnattr_init(&mut attr))?;
      let mut actions = MaybeUninit::<libc::posix_spawn_file_actions_t>::zeroed().assume_init();
      if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut actions)) {
        libc::posix_spawnattr_destroy(&mut attr);
        return Err(e);
      }
      let mut a = SpawnAttrs { attr, actions };
      let flags = libc::POSIX_SPAWN_SETSID as libc::c_int
        | libc::POSIX_SPAWN_SETSIGMASK
        | libc::POSIX_SPAWN_SETSIGDEF;
      check(libc::posix_spawnattr_setflags(
        &mut a.attr,
        flags as libc::c_short,
      ))?;
      let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
      libc::sigemptyset(empty.as_mut_ptr());
      check(libc::posix_spawnattr_setsigmask(
        &mut a.attr,
        empty.as_ptr(),
      ))?;
      let mut defaults = MaybeUninit::<libc::sigset_t>::uninit();
      libc::sigemptyset(defaults.as_mut_ptr());
      for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
          libc::sigaddset(defaults.as_mut_ptr(), sig);
        }
      }
      check(libc::posix_spawnattr_setsigdefault(
        &mut a.attr,
        defaults.as_ptr(),
      ))?;
      Ok(a)
    }
  }

  /// The child gets `from` as its fd `to`.
  pub fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: `actions` is initialised; libc only records the numbers.
    check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.actions, from, to) })
  }

  /// The child gets `path` opened with `flags` as its fd `fd`.
  pub fn open(&mut self, fd: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `actions` is initialised; glibc copies `path`.
    check(unsafe {
      libc::posix_spawn_file_actions_addopen(&mut self.actions, fd, path.as_ptr(), flags, 0)
    })
  }

  /// The child starts in `dir`.
  pub fn chdir(&mut self, dir: &CStr) -> io::Result<()> {
    // SAFETY: `actions` is initialised; glibc copies `dir`.
    check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.actions, dir.as_ptr()) })
  }

  /// Starts `program` with `argv` and `envp`, each a null-terminated array of C strings.
  pub fn spawn(
    &self,
    program: &CStr,
    argv: &[*mut libc::c_char],
    envp: &[*mut libc::c_char],
  ) -> io::Result<libc::pid_t> {
    assert!(argv.last().is_some_and(|p| p.is_null()) && envp.last().is_some_and(|p| p.is_null()));
    let mut pid: libc::pid_t = 0;
    // SAFETY: both objects are initialised; the arrays are null-terminated (checked above) and
    // point at C strings the caller keeps alive for the call.
    check(unsafe {
      libc::posix_spawn(
        &mut pid,
        program.as_ptr(),
        &self.actions,
        &self.attr,
        argv.as_ptr(),
        envp.as_ptr(),
      )
    })?;
    Ok(pid)
  }
}

impl Drop for SpawnAttrs {
  fn drop(&mut self) {
    // SAFETY: both were initialised in `new_session` before a `SpawnAttrs` was built.
    unsafe {
      libc::posix_spawnattr_destroy(&mut self.attr);
      libc::posix_spawn_file_actions_destroy(&mut self.actions);
    }
  }
}

fn check(rc: libc::c_int) -> io::Result<()> {
  if rc == 0 {
    Ok(())
  } else {
    Err(io::Error::from_raw_os_error(rc))
  }
}

pub fn posix_spawn(spec: &SpawnSpec, stdout: RawFd, stderr: RawFd) -> io::Result<Pid> {
  posix_spawn_fed(spec, None, stdout, stderr)
}

/// [`posix_spawn`] with `stdin` as the child's fd 0 (`None`: `/dev/null`).
pub fn posix_spawn_fed(
  spec: &SpawnSpec,
  stdin: Option<RawFd>,
  stdout: RawFd,
  stderr: RawFd,
) -> io::Result<Pid> {
  let mut argv: Vec<*mut libc::c_char> = spec.argv.iter().map(|a| a.as_ptr() as *mut _).collect();
  argv.push(ptr::null_mut());
  let mut envp: Vec<*mut libc::c_char> = spec.env.iter().map(|e| e.as_ptr() as *mut _).collect();
  envp.push(ptr::null_mut());
  let mut a = SpawnAttrs::new_session()?;
  match stdin {
    Some(fd) => a.dup2(fd, 0)?,
    None => a.open(0, c"/dev/null", libc::O_RDONLY)?,
  }
  a.dup2(stdout, 1)?;
  a.dup2(stderr, 2)?;
  a.chdir(&spec.cwd)?;
  Ok(Pid::from_raw(a.spawn(&spec.program, &argv, &envp)?))
}
