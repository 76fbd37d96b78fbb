//! A blocking driver of one session's bash: spawns it, runs one command at a time over the
//! [`crate::protocol`], reads the command's fifos and the done descriptor with `ppoll`, and
//! replaces a shell that died (or had to be killed) with a fresh one restored from the last
//! snapshot. This is what the cargo tests exercise against real bash; the supervisor's reaper
//! drives the same protocol from its own loop (see the crate's doc).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use finn_exec::{pidfd, poll, tree};
use nix::fcntl::{FcntlArg, OFlag, fcntl, open};
use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::stat::Mode;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, mkfifo, pipe2};

use crate::protocol::{
  self, DATA_FD, DONE_FD, ProtocolError, Record, RecordReader, SCRIPT_FD, Snapshot, StdinFrom,
};

/// How a session's shell is started.
#[derive(Debug, Clone)]
pub struct SessionConfig {
  /// The bash to run (an absolute path).
  pub shell: PathBuf,
  /// The first shell's working directory; a restored shell takes the snapshot's `$PWD`.
  pub cwd: PathBuf,
  /// The first shell's whole environment; a restored shell gets the snapshot's exported
  /// variables instead.
  pub env: Vec<(OsString, OsString)>,
}

/// One command's terms.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
  /// Bytes written to the command's stdin, then EOF. `None`: EOF at once (`/dev/null`).
  pub stdin: Option<Vec<u8>>,
  /// After this the shell, its process group and its session are killed and the shell
  /// replaced. `None`: no limit.
  pub timeout: Option<Duration>,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
  /// `$?` after the command, or the exit status of a shell the command ended (`exit 3`, or an
  /// `exec`'d program's).
  Exited(i32),
  /// The shell itself was killed by this signal while running the command.
  Signaled(i32),
  /// The command outlived [`RunOptions::timeout`].
  TimedOut,
}

/// One command's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandResult {
  /// Exactly the bytes the command wrote to stdout.
  pub stdout: Vec<u8>,
  /// Exactly the bytes the command wrote to stderr.
  pub stderr: Vec<u8>,
  pub status: CommandStatus,
  /// The shell was replaced and its state restored: during this command (it ended the shell,
  /// or timed out) or between the previous command and this one.
  pub session_restarted: bool,
}

/// Why a session could not run a command.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
  #[error("run a command containing a NUL byte (bash cannot hold one)")]
  NulInCommand,
  #[error("start the shell in {0:?}: not a directory")]
  Cwd(PathBuf),
  #[error("start the shell: {0}")]
  Spawn(io::Error),
  #[error("talk to the shell: {0}")]
  Io(#[from] io::Error),
  #[error("read the shell's record: {0}")]
  Protocol(#[from] ProtocolError),
  #[error("start a shell that stays alive (it ended with {0:?} before its first record)")]
  DiedAtStart(CommandStatus),
}

/// A session: a long-lived bash, replaced when it dies, and the fifo directory its commands'
/// pipes are made in (private to this process's user, removed on drop).
pub struct Session {
  config: SessionConfig,
  dir: tempfile::TempDir,
  shell: Option<Shell>,
  seq: u64,
  snapshot: Option<Snapshot>,
  /// The shell died between commands; the next result says it was replaced.
  replaced: bool,
}

struct Shell {
  pid: Pid,
  pidfd: OwnedFd,
  script: File,
  data: OwnedFd,
  done: OwnedFd,
  reader: RecordReader,
}

/// What one exchange with a shell came to.
enum Exchange {
  Done(Record),
  ShellGone(CommandStatus),
  TimedOut,
}

struct Output {
  stdout: Vec<u8>,
  stderr: Vec<u8>,
}

impl Session {
  /// Starts the shell and takes its first snapshot.
  pub fn start(config: SessionConfig) -> Result<Self, SessionError> {
    if !config.cwd.is_dir() {
      return Err(SessionError::Cwd(config.cwd));
    }
    // Only this user may open the fifos (another user could read a command's output).
    let dir = tempfile::Builder::new()
      .prefix("finn-session-")
      .permissions(std::fs::Permissions::from_mode(0o700))
      .tempdir()
      .map_err(SessionError::Spawn)?;
    let mut session = Session {
      config,
      dir,
      shell: None,
      seq: 0,
      snapshot: None,
      replaced: false,
    };
    session.respawn()?;
    Ok(session)
  }

  /// The directory the commands' fifos are made in: the shell must be able to open files in
  /// it (an isolation plan allows it).
  pub fn fifo_dir(&self) -> &Path {
    self.dir.path()
  }

  /// The shell's pid (it changes when the shell is replaced).
  pub fn pid(&self) -> Option<i32> {
    self.shell.as_ref().map(|s| s.pid.as_raw())
  }

  /// Runs `command` in the shell, to its end, and replaces the shell if the command ended it.
  pub fn run(
    &mut self,
    command: &[u8],
    options: &RunOptions,
  ) -> Result<CommandResult, SessionError> {
    if command.contains(&0) {
      return Err(SessionError::NulInCommand);
    }
    if self.shell.as_ref().is_none_or(|s| pidfd::exited(&s.pidfd)) {
      self.reap();
      self.respawn()?;
      self.replaced = true;
    }
    let restarted_before = std::mem::take(&mut self.replaced);
    let (exchange, out) = self.exchange(command, options)?;
    let status = match exchange {
      Exchange::Done(record) => {
        self.snapshot = Some(record.snapshot);
        return Ok(CommandResult {
          stdout: out.stdout,
          stderr: out.stderr,
          status: CommandStatus::Exited(record.status),
          session_restarted: restarted_before,
        });
      }
      Exchange::ShellGone(status) => status,
      Exchange::TimedOut => CommandStatus::TimedOut,
    };
    self.reap();
    self.respawn()?;
    Ok(CommandResult {
      stdout: out.stdout,
      stderr: out.stderr,
      status,
      session_restarted: true,
    })
  }

  /// Starts a fresh shell and brings it to the last snapshot (none yet: the config's state).
  /// A restore that itself ends the shell is dropped, and the shell starts from the config.
  fn respawn(&mut self) -> Result<(), SessionError> {
    let restore = self.snapshot.as_ref().map(protocol::restore_script);
    for script in [restore, None] {
      let Some(script) = script else {
        self.shell = Some(self.spawn(true)?);
        let (exchange, _) = self.exchange(b"", &RunOptions::default())?;
        return self.adopt(exchange);
      };
      self.shell = Some(self.spawn(false)?);
      let (exchange, _) = self.exchange(&script, &RunOptions::default())?;
      if self.adopt(exchange).is_ok() {
        return Ok(());
      }
      self.reap();
    }
    unreachable!("the loop returns on its last round")
  }

  fn adopt(&mut self, exchange: Exchange) -> Result<(), SessionError> {
    match exchange {
      Exchange::Done(record) => {
        self.snapshot = Some(record.snapshot);
        Ok(())
      }
      Exchange::ShellGone(status) => Err(SessionError::DiedAtStart(status)),
      Exchange::TimedOut => Err(SessionError::DiedAtStart(CommandStatus::TimedOut)),
    }
  }

  /// Spawns bash reading its script from [`SCRIPT_FD`], and sends the bootstrap. `fresh`: with
  /// the config's environment and cwd; otherwise with none, the restore providing both.
  fn spawn(&self, fresh: bool) -> Result<Shell, SessionError> {
    let (script_r, script_w) = pipe2(OFlag::O_CLOEXEC).map_err(to_io)?;
    let (data_r, data_w) = pipe2(OFlag::O_CLOEXEC).map_err(to_io)?;
    let (done_r, done_w) = pipe2(OFlag::O_CLOEXEC).map_err(to_io)?;
    let (script_r, data_r, done_w) = (
      above_stdio(script_r)?,
      above_stdio(data_r)?,
      above_stdio(done_w)?,
    );

    // The shell's own stdio: nothing to read, and its own noise (its xtrace of the session's
    // code) goes nowhere; every command gets its own fifos.
    let null = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()).map_err(to_io)?;
    let null = above_stdio(null)?;
    let mut actions = PosixSpawnFileActions::init().map_err(to_io)?;
    for fd in 0..3 {
      actions.add_dup2(null.as_raw_fd(), fd).map_err(to_io)?;
    }
    actions
      .add_dup2(script_r.as_raw_fd(), SCRIPT_FD)
      .map_err(to_io)?;
    actions
      .add_dup2(data_r.as_raw_fd(), DATA_FD)
      .map_err(to_io)?;
    actions
      .add_dup2(done_w.as_raw_fd(), DONE_FD)
      .map_err(to_io)?;
    let mut attr = PosixSpawnAttr::init().map_err(to_io)?;
    // Its own session (and so its own process group), so that what it starts is found by group
    // or session even after it died and its children were reparented; default dispositions
    // and an empty mask, so that an ignored SIGPIPE here is not inherited.
    attr
      .set_flags(
        PosixSpawnFlags::from_bits_retain(libc::POSIX_SPAWN_SETSID.into())
          | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF
          | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK,
      )
      .map_err(to_io)?;
    let mut defaults = SigSet::all();
    defaults.remove(Signal::SIGKILL);
    defaults.remove(Signal::SIGSTOP);
    attr.set_sigdefault(&defaults).map_err(to_io)?;
    attr.set_sigmask(&SigSet::empty()).map_err(to_io)?;

    let program = cstring(self.config.shell.as_os_str())?;
    let script_path = format!("/dev/fd/{SCRIPT_FD}");
    let args = [
      program.clone(),
      c"--noprofile".to_owned(),
      c"--norc".to_owned(),
      CString::new(script_path).expect("no NUL"),
    ];
    let env: Vec<CString> = if fresh {
      self
        .config
        .env
        .iter()
        .map(|(k, v)| {
          let mut kv = k.clone();
          kv.push("=");
          kv.push(v);
          cstring(&kv)
        })
        .collect::<Result<_, _>>()?
    } else {
      Vec::new()
    };
    let pid = posix_spawn(program.as_c_str(), &actions, &attr, &args, &env)
      .map_err(|e| SessionError::Spawn(e.into()))?;
    drop((script_r, data_r, done_w, null));
    let pidfd = pidfd::open(pid.as_raw())?;

    let dir = self.dir.path().as_os_str().as_bytes();
    // A restored shell starts here too, and the restore then moves it to the snapshot's `$PWD`
    // (or leaves it here if that directory is gone).
    let cwd = self.config.cwd.as_os_str().as_bytes();
    let mut script = File::from(script_w);
    let mut data = File::from(data_w);
    // Blocking writes: bash reads both at once, and they are a few hundred bytes.
    script.write_all(protocol::bootstrap(dir.len(), cwd.len()).as_bytes())?;
    data.write_all(dir)?;
    data.write_all(cwd)?;
    let data = OwnedFd::from(data);
    set_nonblocking(&data)?;
    set_nonblocking(&done_r)?;
    Ok(Shell {
      pid,
      pidfd,
      script,
      data,
      done: done_r,
      reader: RecordReader::default(),
    })
  }

  /// Sends one command and follows it to its record, the shell's end, or its timeout.
  fn exchange(
    &mut self,
    command: &[u8],
    options: &RunOptions,
  ) -> Result<(Exchange, Output), SessionError> {
    self.seq += 1;
    let seq = self.seq;
    let shell = self.shell.as_mut().expect("a shell runs");
    let fifo = |stream: char| self.dir.path().join(protocol::fifo_name(stream, seq));
    let mut fifos = Fifos::make(
      fifo('o'),
      fifo('e'),
      options.stdin.as_ref().map(|_| fifo('i')),
    )?;
    let deadline = options.timeout.map(|t| Instant::now() + t);
    let stdin_from = if options.stdin.is_some() {
      StdinFrom::Fifo
    } else {
      StdinFrom::Null
    };

    let mut out = Output {
      stdout: Vec::new(),
      stderr: Vec::new(),
    };
    if let Err(e) = shell
      .script
      .write_all(protocol::request(seq, command.len(), stdin_from).as_bytes())
    {
      if e.kind() == io::ErrorKind::BrokenPipe {
        return Ok((Exchange::ShellGone(wait_status(shell.pid)), out));
      }
      return Err(e.into());
    }
    let mut text = command;
    let mut stdin_data: &[u8] = options.stdin.as_deref().unwrap_or_default();
    let mut stdin_w = fifos.stdin_writer.take();
    let mut stdin_opened = fifos.stdin_opened.take();
    let mut stdout = fifos.stdout.take();
    let mut stderr = fifos.stderr.take();
    let mut done = Some(shell.done.as_raw_fd());
    loop {
      let mut fds = [
        poll::watch(done),
        poll::watch(stdout.as_ref().map(AsRawFd::as_raw_fd)),
        poll::watch(stderr.as_ref().map(AsRawFd::as_raw_fd)),
        poll::watch(Some(shell.pidfd.as_raw_fd())),
        writable((!text.is_empty()).then(|| shell.data.as_raw_fd())),
        writable(
          stdin_w
            .as_ref()
            .filter(|_| !stdin_data.is_empty())
            .map(AsRawFd::as_raw_fd),
        ),
        poll::watch(stdin_opened.as_ref().map(AsRawFd::as_raw_fd)),
      ];
      poll::poll(&mut fds, deadline);
      if fds[0].revents != 0 && !read_into(&shell.done, &mut shell.reader) {
        // The shell closed it: it exec'd or is ending; its pidfd says when it has.
        done = None;
      }
      // Only when poll says so: a fifo read before the shell has opened it reads as EOF.
      if fds[1].revents != 0 {
        drain(&mut stdout, &mut out.stdout);
      }
      if fds[2].revents != 0 {
        drain(&mut stderr, &mut out.stderr);
      }
      if let Some(record) = shell.reader.next_record()? {
        if record.seq == seq {
          // Every write of the command's foreground processes precedes the record.
          drain(&mut stdout, &mut out.stdout);
          drain(&mut stderr, &mut out.stderr);
          return Ok((Exchange::Done(record), out));
        }
        continue;
      }
      if fds[3].revents != 0 {
        drain(&mut stdout, &mut out.stdout);
        drain(&mut stderr, &mut out.stderr);
        return Ok((Exchange::ShellGone(wait_status(shell.pid)), out));
      }
      if fds[4].revents != 0 {
        text = &text[write_some(&shell.data, text).min(text.len())..];
      }
      if fds[5].revents != 0
        && let Some(w) = &stdin_w
      {
        stdin_data = &stdin_data[write_some(w, stdin_data).min(stdin_data.len())..];
      }
      if fds[6].revents != 0 {
        stdin_opened = None;
      }
      if stdin_data.is_empty() && stdin_opened.is_none() {
        // EOF for the command once it has read everything.
        stdin_w = None;
      }
      if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok((Exchange::TimedOut, out));
      }
    }
  }

  /// Forgets the current shell: SIGKILL for what is left of its process group and session
  /// (its background jobs belong to it and are not restored; under `set -m` they have groups of
  /// their own in its session), then reaps it. Until it is reaped its pid, the group's and the
  /// session's id, cannot be reused, so the signal reaches no stranger. A `setsid` escapee
  /// whose parent has died is out of reach here: that is the reaper's tree walk.
  fn reap(&mut self) {
    if let Some(shell) = self.shell.take() {
      let _ = killpg(shell.pid, Signal::SIGKILL);
      for pid in tree::escapees(&tree::scan(), shell.pid.as_raw()) {
        if let Ok(fd) = pidfd::open(pid) {
          pidfd::send_signal(&fd, Signal::SIGKILL);
        }
      }
      let _ = waitpid(shell.pid, None);
    }
  }
}

impl Drop for Session {
  fn drop(&mut self) {
    self.reap();
  }
}

/// A command's fifos, opened on our side before the shell opens them (its opens then never
/// block), and removed when the command is over.
struct Fifos {
  paths: Vec<PathBuf>,
  stdout: Option<OwnedFd>,
  stderr: Option<OwnedFd>,
  /// Kept open so the stdin fifo always has a reader: a write before the command opens it is
  /// buffered, not refused. Never read from.
  _stdin_anchor: Option<OwnedFd>,
  stdin_writer: Option<OwnedFd>,
  /// An inotify descriptor that reads once the shell has opened the stdin fifo. Until then the
  /// writer stays open even with everything written: closed earlier, the fifo would have no
  /// writer when the shell opens it, and its open would wait for one for ever.
  stdin_opened: Option<OwnedFd>,
}

fn watch_open(path: &Path) -> io::Result<OwnedFd> {
  // SAFETY: plain syscall; on success the descriptor is ours.
  let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
  if fd < 0 {
    return Err(io::Error::last_os_error());
  }
  // SAFETY: a fresh descriptor from the kernel.
  let fd = unsafe { OwnedFd::from_raw_fd(fd) };
  let path = CString::new(path.as_os_str().as_bytes())
    .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
  // SAFETY: a valid inotify descriptor and a NUL-terminated path.
  if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_OPEN) } < 0 {
    return Err(io::Error::last_os_error());
  }
  Ok(fd)
}

impl Fifos {
  fn make(stdout: PathBuf, stderr: PathBuf, stdin: Option<PathBuf>) -> io::Result<Self> {
    let mut paths = vec![stdout, stderr];
    paths.extend(stdin);
    for p in &paths {
      mkfifo(p.as_path(), Mode::S_IRUSR | Mode::S_IWUSR).map_err(to_io)?;
    }
    let rd = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let out = open(paths[0].as_path(), rd, Mode::empty()).map_err(to_io)?;
    let err = open(paths[1].as_path(), rd, Mode::empty()).map_err(to_io)?;
    let (anchor, writer, opened) = match paths.get(2) {
      Some(p) => {
        let anchor = open(p.as_path(), rd, Mode::empty()).map_err(to_io)?;
        let wr = OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let writer = open(p.as_path(), wr, Mode::empty()).map_err(to_io)?;
        // Watched after our own two opens, so its first event is the shell's.
        (Some(anchor), Some(writer), Some(watch_open(p)?))
      }
      None => (None, None, None),
    };
    Ok(Fifos {
      paths,
      stdout: Some(out),
      stderr: Some(err),
      _stdin_anchor: anchor,
      stdin_writer: writer,
      stdin_opened: opened,
    })
  }
}

impl Drop for Fifos {
  fn drop(&mut self) {
    for p in &self.paths {
      let _ = std::fs::remove_file(p);
    }
  }
}

fn writable(fd: Option<RawFd>) -> libc::pollfd {
  let mut p = poll::watch(fd);
  p.events = libc::POLLOUT;
  p
}

/// Reads what is there; `false` at EOF.
fn read_into(fd: &OwnedFd, reader: &mut RecordReader) -> bool {
  let mut buf = [0u8; 64 * 1024];
  loop {
    match nix::unistd::read(fd, &mut buf) {
      Ok(0) => return false,
      Ok(n) => reader.push(&buf[..n]),
      Err(nix::errno::Errno::EINTR) => {}
      Err(_) => return true,
    }
  }
}

/// Reads a fifo until it would block; closes it at EOF.
fn drain(fd: &mut Option<OwnedFd>, into: &mut Vec<u8>) {
  let Some(f) = fd else { return };
  let mut buf = [0u8; 64 * 1024];
  loop {
    match nix::unistd::read(&*f, &mut buf) {
      Ok(0) => {
        *fd = None;
        return;
      }
      Ok(n) => into.extend_from_slice(&buf[..n]),
      Err(nix::errno::Errno::EINTR) => {}
      Err(_) => return,
    }
  }
}

/// Writes what fits; how many bytes went.
fn write_some(fd: &OwnedFd, bytes: &[u8]) -> usize {
  match nix::unistd::write(fd.as_fd(), bytes) {
    Ok(n) => n,
    // EPIPE: nobody will read the rest.
    Err(nix::errno::Errno::EPIPE) => bytes.len(),
    Err(_) => 0,
  }
}

/// How the shell ended, read without reaping it: [`Session::reap`] still signals its group and
/// session, whose ids stay the shell's until it is reaped.
fn wait_status(pid: Pid) -> CommandStatus {
  match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
    Ok(WaitStatus::Exited(_, code)) => CommandStatus::Exited(code),
    Ok(WaitStatus::Signaled(_, sig, _)) => CommandStatus::Signaled(sig as i32),
    _ => CommandStatus::Signaled(Signal::SIGKILL as i32),
  }
}

/// Moves `fd` to a number above the spawn's targets (0 to 5), so that one dup2 of the spawn
/// never overwrites the source of another.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
  let raw = fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(10)).map_err(to_io)?;
  // SAFETY: a fresh descriptor from fcntl, owned by nobody else.
  Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
  let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(to_io)?;
  fcntl(
    fd,
    FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
  )
  .map_err(to_io)?;
  Ok(())
}

fn cstring(s: &OsStr) -> Result<CString, SessionError> {
  CString::new(s.as_bytes())
    .map_err(|_| SessionError::Spawn(io::Error::from(io::ErrorKind::InvalidInput)))
}

fn to_io(e: nix::errno::Errno) -> io::Error {
  io::Error::from(e)
}
