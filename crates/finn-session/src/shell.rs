//! A blocking driver of one session's bash: spawns it, runs one command at a time over the
//! [`crate::protocol`], reads the command's fifos and the done descriptor with `ppoll`, and
//! replaces a shell that died (or had to be killed) with a fresh one restored from the last
//! snapshot. The shell is this process's child ([`Host::Local`], the protocol's tests) or the
//! leader of a supervisor reaper's job ([`Host::Reaper`], what the addon runs); the cargo tests
//! run against both (see the crate's doc).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use finn_exec::lifecycle::{Action, Event, Lifecycle};
use finn_exec::{ExitStatus, SpawnSpec, pidfd, poll, tree};
use finn_isolate::Plan;
use finn_supervisor::Supervisor;
use finn_supervisor::shell_job::{ShellJob, ShellStartError};
use nix::fcntl::{FcntlArg, OFlag, fcntl, open};
use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::stat::Mode;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, mkfifo, pipe2};

use crate::protocol::{
  self, DATA_FD, DONE_FD, ProtocolError, Record, RecordReader, SCRIPT_FD, Snapshot, StdinFrom,
};

/// Who starts and holds the shell.
#[derive(Clone, Default)]
pub enum Host {
  /// This process, as its child (the cargo tests of the protocol).
  #[default]
  Local,
  /// A reaper of `supervisor`, with `isolation` applied once to the shell's start (its
  /// writable roots must include the fifo directory). A command's timeout then ends only the
  /// command's tree, and the shell keeps its state.
  Reaper {
    supervisor: Arc<Supervisor>,
    isolation: Option<Box<Plan>>,
  },
}

impl std::fmt::Debug for Host {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match self {
      Host::Local => f.write_str("Local"),
      Host::Reaper { isolation, .. } => f
        .debug_struct("Reaper")
        .field("isolated", &isolation.is_some())
        .finish(),
    }
  }
}

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
  pub host: Host,
}

/// One command's terms.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
  /// Bytes written to the command's stdin, then EOF. `None`: EOF at once (`/dev/null`).
  pub stdin: Option<Vec<u8>>,
  /// After this the command ends: under a reaper, its tree is killed and the shell lives on
  /// (if the shell itself does not finish the command within [`END_COMMAND_BOUND`], it is
  /// replaced too); a local shell, its process group and its session are killed and the shell
  /// replaced. `None`: no limit.
  pub timeout: Option<Duration>,
  /// The same end once neither stdout nor stderr has had a byte for this long.
  pub idle_timeout: Option<Duration>,
  /// A descriptor that turns readable when the caller wants the command ended (an abort, a
  /// destroy): the same end as a timeout.
  pub stop: Option<RawFd>,
  /// After this long the caller is answered with the output so far and, if the command still
  /// runs, it goes on with its shell as a [`Detached`] command (its deadlines kept), and the
  /// session continues in a fresh shell restored from the state before it. `None`: wait.
  pub yield_after: Option<Duration>,
  /// `onTimeout: "background"`: the deadline or idle deadline answers the caller instead of
  /// ending the command, which goes on as a [`Detached`] command for this long at most before
  /// its whole tree is killed. `None`: a timeout ends the command.
  pub background: Option<Duration>,
  /// Keep the command's stdin open for a [`Detached`] holder's writes (`stdin` is not used): a
  /// command that ends before it is detached reads EOF at its end.
  pub stdin_pipe: bool,
}

/// The fifos of a shell under a reaper (its script, data and done descriptors), in the session's
/// directory beside the commands' (`o.<seq>`, `e.<seq>`, `i.<seq>`).
const SCRIPT_FIFO: &str = "script";
const DATA_FIFO: &str = "data";
const DONE_FIFO: &str = "done";

/// Run by `bash -c` with the shell and the three fifos as `$0` to `$3`: opens the fifos at the
/// protocol's descriptors and becomes the session's shell (same pid, so the reaper's leader is
/// the shell itself).
const TRAMPOLINE: &str =
  "exec 3<\"$1\" 4<\"$2\" 5>\"$3\" && exec \"$0\" --noprofile --norc /dev/fd/3";

/// What ended a command before it ended by itself: its deadline, its idle time, or the
/// caller's stop (the session's machine, `finn_exec::lifecycle`, decides).
pub use finn_exec::lifecycle::CommandCut as Cut;

/// How long a shell under a reaper has, once its command's tree was killed, to write the
/// command's record (a command that is the shell's own loop, or keeps forking, does not end by
/// that kill): past it the shell is replaced.
pub use finn_exec::lifecycle::COMMAND_END_BOUND as END_COMMAND_BOUND;

/// Which of a command's streams a chunk comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
  Stdout,
  Stderr,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
  /// `$?` after the command, or the exit status of a shell the command ended (`exit 3`, or an
  /// `exec`'d program's).
  Exited(i32),
  /// The shell itself was killed by this signal while running the command.
  Signaled(i32),
  /// The command was cut ([`CommandResult::cut`]) and the shell had to be replaced to end it.
  TimedOut,
  /// The caller was answered while the command runs on ([`Session::take_detached`]).
  Running,
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
  /// Why the command was ended early, if it was.
  pub cut: Option<Cut>,
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
  #[error(transparent)]
  Reaper(#[from] ShellStartError),
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
  /// The last command went on with the shell ([`Self::take_detached`]).
  detached: Option<Detached>,
}

struct Shell {
  proc: Proc,
  /// The shell's life as a job (its watcher's side): a command is its `Busy` phase.
  life: Lifecycle<()>,
  script: File,
  data: OwnedFd,
  done: OwnedFd,
  reader: RecordReader,
}

/// The shell's process, as whoever holds it.
enum Proc {
  Local { pid: Pid, pidfd: OwnedFd },
  Reaper(ShellJob),
}

impl Proc {
  fn pid(&self) -> i32 {
    match self {
      Proc::Local { pid, .. } => pid.as_raw(),
      Proc::Reaper(job) => job.pid,
    }
  }

  /// Readable once the shell may have exited.
  fn fd(&self) -> RawFd {
    match self {
      Proc::Local { pidfd, .. } => pidfd.as_raw_fd(),
      Proc::Reaper(job) => job.fd(),
    }
  }

  /// The shell's status once it has exited (`None`: it runs).
  fn exited(&mut self) -> Option<CommandStatus> {
    match self {
      Proc::Local { pid, pidfd } => pidfd::exited(pidfd).then(|| wait_status(*pid)),
      Proc::Reaper(job) => job.exited().map(|status| match status {
        ExitStatus::Exited(code) => CommandStatus::Exited(code),
        ExitStatus::Signaled(sig) => CommandStatus::Signaled(sig),
      }),
    }
  }
}

/// What one exchange with a shell came to.
enum Exchange {
  Done(Record),
  ShellGone(CommandStatus),
  /// The shell ended before it read any of the command's text: the command never ran, and the
  /// status is the shell's, not the command's.
  NotStarted(CommandStatus),
  TimedOut,
  /// The caller is answered while the command runs on: it goes with its shell.
  Detach(Box<InFlight>),
}

impl Session {
  /// Starts the shell and takes its first snapshot.
  pub fn start(config: SessionConfig) -> Result<Self, SessionError> {
    // Only this user may open the fifos (another user could read a command's output).
    let dir = tempfile::Builder::new()
      .prefix("finn-session-")
      .permissions(std::fs::Permissions::from_mode(0o700))
      .tempdir()
      .map_err(SessionError::Spawn)?;
    Self::start_in(config, dir)
  }

  /// [`Self::start`] with the fifo directory made by the caller (private to this user), who
  /// needs its path first: an isolation plan must let the shell write there.
  pub fn start_in(config: SessionConfig, dir: tempfile::TempDir) -> Result<Self, SessionError> {
    if !config.cwd.is_dir() {
      return Err(SessionError::Cwd(config.cwd));
    }
    let mut session = Session {
      config,
      dir,
      shell: None,
      seq: 0,
      snapshot: None,
      replaced: false,
      detached: None,
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
    self.shell.as_ref().map(|s| s.proc.pid())
  }

  /// The reaper that holds the shell (`None`: a local shell): every process of the session
  /// is its descendant.
  pub fn reaper_pid(&self) -> Option<i32> {
    match self.shell.as_ref().map(|s| &s.proc) {
      Some(Proc::Reaper(job)) => Some(job.reaper_pid),
      _ => None,
    }
  }

  /// Runs `command` in the shell, to its end, and replaces the shell if the command ended it.
  pub fn run(
    &mut self,
    command: &[u8],
    options: &RunOptions,
  ) -> Result<CommandResult, SessionError> {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut result = self.run_streaming(command, options, &mut |stream, bytes| match stream {
      Stream::Stdout => stdout.extend_from_slice(bytes),
      Stream::Stderr => stderr.extend_from_slice(bytes),
    })?;
    result.stdout = stdout;
    result.stderr = stderr;
    Ok(result)
  }

  /// [`Self::run`], with the output handed to `sink` as it is read, in order per stream (the
  /// result's `stdout` and `stderr` are empty). `sink` may block: the command then waits on its
  /// full pipe, which is the backpressure.
  pub fn run_streaming(
    &mut self,
    command: &[u8],
    options: &RunOptions,
    sink: &mut dyn FnMut(Stream, &[u8]),
  ) -> Result<CommandResult, SessionError> {
    if command.contains(&0) {
      return Err(SessionError::NulInCommand);
    }
    // A shell that ends between the check below and its read of the command (`set -t` did,
    // after every request line, and a background job of an earlier command can kill it then)
    // had its exit status reported as the command's, with nothing run: such a command is sent
    // again, once, to a fresh shell.
    let mut tries = 0;
    let (exchange, cut) = loop {
      match self.shell.as_mut().map(|s| s.proc.exited().is_some()) {
        // The last shell went with a detached command: its state before that command is the
        // session's, and nothing was lost.
        None if tries == 0 => self.respawn()?,
        None | Some(true) => {
          self.reap();
          self.respawn()?;
          self.replaced = true;
        }
        Some(false) => {}
      }
      tries += 1;
      match self.exchange(command, options, sink)? {
        (Exchange::NotStarted(_), _) if tries < 2 => {
          self.reap();
        }
        (Exchange::NotStarted(status), cut) => break (Exchange::ShellGone(status), cut),
        other => break other,
      }
    };
    let restarted_before = std::mem::take(&mut self.replaced);
    let status = match exchange {
      Exchange::Done(record) => {
        if protocol::blocks_the_session(&record.snapshot) {
          // Replaced now; the next command finds a restored shell and says so.
          self.reap();
          self.replaced = true;
        }
        self.snapshot = Some(record.snapshot);
        return Ok(CommandResult {
          stdout: Vec::new(),
          stderr: Vec::new(),
          status: CommandStatus::Exited(record.status),
          session_restarted: restarted_before,
          cut,
        });
      }
      Exchange::ShellGone(status) | Exchange::NotStarted(status) => status,
      Exchange::TimedOut => CommandStatus::TimedOut,
      Exchange::Detach(cmd) => {
        let shell = self.shell.take().expect("a shell runs");
        self.detached = Some(Detached {
          shell,
          cmd: *cmd,
          host: self.config.host.clone(),
        });
        return Ok(CommandResult {
          stdout: Vec::new(),
          stderr: Vec::new(),
          status: CommandStatus::Running,
          session_restarted: restarted_before,
          cut,
        });
      }
    };
    self.reap();
    self.respawn()?;
    Ok(CommandResult {
      stdout: Vec::new(),
      stderr: Vec::new(),
      status,
      session_restarted: true,
      cut,
    })
  }

  /// Ends the shell and everything the session started, and waits until it is all gone (under
  /// a reaper, up to its bound). The session starts a fresh, restored shell if used again.
  /// A [`Detached`] command is its holder's to end.
  pub fn end(&mut self) {
    self.reap();
  }

  /// The command the last result left running ([`CommandStatus::Running`]), with its shell;
  /// the session has no shell until the next command or [`Self::ready`] starts a restored one.
  pub fn take_detached(&mut self) -> Option<Detached> {
    self.detached.take()
  }

  /// Starts the session's next shell now if the last one went with a detached command, so
  /// the next command does not wait for it.
  pub fn ready(&mut self) -> Result<(), SessionError> {
    if self.shell.is_none() {
      self.respawn()?;
    }
    Ok(())
  }

  /// Starts a fresh shell and brings it to the last snapshot (none yet: the config's state).
  /// A restore that itself ends the shell is dropped, and the shell starts from the config.
  fn respawn(&mut self) -> Result<(), SessionError> {
    let restore = self.snapshot.as_ref().map(protocol::restore_script);
    for script in [restore, None] {
      let Some(script) = script else {
        self.shell = Some(self.spawn(true)?);
        let (exchange, _) = self.exchange(b"", &RunOptions::default(), &mut |_, _| {})?;
        return self.adopt(exchange);
      };
      self.shell = Some(self.spawn(false)?);
      let (exchange, _) = self.exchange(&script, &RunOptions::default(), &mut |_, _| {})?;
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
        // The shell has its script, data and done descriptors open (it wrote a record): their
        // names are no longer needed, and any process of this user could open them by name,
        // a command of another session or pool job included, and write code the shell would
        // run as the session's own (an attack read another session's secret that way).
        for name in [SCRIPT_FIFO, DATA_FIFO, DONE_FIFO] {
          let _ = std::fs::remove_file(self.dir.path().join(name));
        }
        Ok(())
      }
      Exchange::ShellGone(status) | Exchange::NotStarted(status) => {
        Err(SessionError::DiedAtStart(status))
      }
      Exchange::TimedOut | Exchange::Detach(_) => {
        Err(SessionError::DiedAtStart(CommandStatus::TimedOut))
      }
    }
  }

  /// The environment a shell starts with: the config's for a fresh one; none for a restored
  /// one, the restore providing it.
  fn start_env(&self, fresh: bool) -> Result<Vec<CString>, SessionError> {
    if !fresh {
      return Ok(Vec::new());
    }
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
      .collect()
  }

  /// Spawns bash reading its script from [`SCRIPT_FD`], and sends the bootstrap. `fresh`: with
  /// the config's environment and cwd; otherwise with none, the restore providing both.
  fn spawn(&self, fresh: bool) -> Result<Shell, SessionError> {
    let (proc, script_w, data_w, done_r) = match &self.config.host {
      Host::Local => self.spawn_local(fresh)?,
      Host::Reaper {
        supervisor,
        isolation,
      } => self.spawn_under(supervisor, isolation.as_deref(), fresh)?,
    };
    let dir = self.dir.path().as_os_str().as_bytes();
    // A restored shell starts here too, and the restore then moves it to the snapshot's `$PWD`
    // (or leaves it here if that directory is gone).
    let cwd = self.config.cwd.as_os_str().as_bytes();
    let mut script = File::from(script_w);
    let data = File::from(data_w);
    // Both are a few hundred bytes: they fit in the pipes whether or not bash reads yet.
    script.write_all(protocol::bootstrap(dir.len(), cwd.len()).as_bytes())?;
    let data = OwnedFd::from(data);
    write_all_fd(&data, dir)?;
    write_all_fd(&data, cwd)?;
    set_nonblocking(&data)?;
    set_nonblocking(&done_r)?;
    let mut life = Lifecycle::watcher(None, Duration::ZERO);
    life.on(Event::Spawned, Instant::now());
    Ok(Shell {
      proc,
      life,
      script,
      data,
      done: done_r,
      reader: RecordReader::default(),
    })
  }

  /// The shell under a reaper: its three pipes are fifos in the session's directory, which
  /// this side holds open read-write (neither side's open then waits for the other); a
  /// trampoline puts them at fds 3 to 5 and execs the shell on its script, in the same process.
  fn spawn_under(
    &self,
    supervisor: &Supervisor,
    isolation: Option<&Plan>,
    fresh: bool,
  ) -> Result<(Proc, OwnedFd, OwnedFd, OwnedFd), SessionError> {
    ensure_private_dir(self.dir.path())?;
    let path = |name: &str| self.dir.path().join(name);
    let mut ends = Vec::new();
    for name in [SCRIPT_FIFO, DATA_FIFO, DONE_FIFO] {
      let p = path(name);
      remove_any(&p)?;
      mkfifo(p.as_path(), Mode::S_IRUSR | Mode::S_IWUSR).map_err(to_io)?;
      let end =
        open(p.as_path(), OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()).map_err(to_io)?;
      ends.push(end);
    }
    let program = cstring(self.config.shell.as_os_str())?;
    let fifo_arg = |name: &str| cstring(path(name).as_os_str());
    let spec = SpawnSpec {
      program: program.clone(),
      argv: vec![
        program,
        c"--noprofile".to_owned(),
        c"--norc".to_owned(),
        c"-c".to_owned(),
        CString::new(TRAMPOLINE).expect("no NUL"),
        cstring(self.config.shell.as_os_str())?,
        fifo_arg(SCRIPT_FIFO)?,
        fifo_arg(DATA_FIFO)?,
        fifo_arg(DONE_FIFO)?,
      ],
      env: self.start_env(fresh)?,
      cwd: cstring(self.config.cwd.as_os_str())?,
    };
    let job = ShellJob::start(supervisor, &spec, isolation)?;
    let done = ends.pop().expect("three ends");
    let data = ends.pop().expect("three ends");
    let script = ends.pop().expect("three ends");
    Ok((Proc::Reaper(job), script, data, done))
  }

  fn spawn_local(&self, fresh: bool) -> Result<(Proc, OwnedFd, OwnedFd, OwnedFd), SessionError> {
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
    let env = self.start_env(fresh)?;
    let pid = posix_spawn(program.as_c_str(), &actions, &attr, &args, &env)
      .map_err(|e| SessionError::Spawn(e.into()))?;
    drop((script_r, data_r, done_w, null));
    let pidfd = pidfd::open(pid.as_raw())?;
    Ok((Proc::Local { pid, pidfd }, script_w, data_w, done_r))
  }

  /// Sends one command and follows it to its record, the shell's end, its timeout, or the
  /// point where its caller is answered while it runs on (its yield, or a timeout that moves
  /// it to the background); the output goes to `sink` as it is read.
  fn exchange(
    &mut self,
    command: &[u8],
    options: &RunOptions,
    sink: &mut dyn FnMut(Stream, &[u8]),
  ) -> Result<(Exchange, Option<Cut>), SessionError> {
    self.seq += 1;
    let seq = self.seq;
    ensure_private_dir(self.dir.path())?;
    let shell = self.shell.as_mut().expect("a shell runs");
    let fifo = |stream: char| self.dir.path().join(protocol::fifo_name(stream, seq));
    let piped = options.stdin_pipe || options.stdin.is_some();
    let fifos = Fifos::make(fifo('o'), fifo('e'), piped.then(|| fifo('i')))?;
    let started = Instant::now();
    let stdin_from = if piped {
      StdinFrom::Fifo
    } else {
      StdinFrom::Null
    };
    shell.life.on(
      Event::CommandSent {
        seq,
        deadline: options.timeout.map(|t| started + t),
        idle: options.idle_timeout,
        background: options.background,
      },
      started,
    );

    if let Err(e) = shell
      .script
      .write_all(protocol::request(seq, command.len(), stdin_from).as_bytes())
    {
      if e.kind() == io::ErrorKind::BrokenPipe {
        let status = shell
          .proc
          .exited()
          .unwrap_or(CommandStatus::Signaled(libc::SIGKILL));
        return Ok((Exchange::ShellGone(status), None));
      }
      return Err(e.into());
    }
    let mut cmd = InFlight {
      seq,
      text: command.to_vec(),
      text_len: command.len(),
      stdin_data: if options.stdin_pipe {
        Vec::new()
      } else {
        options.stdin.clone().unwrap_or_default()
      },
      keep_stdin: options.stdin_pipe,
      stdin_handed: false,
      fifos,
      done_open: true,
      stop: options.stop,
      ended: None,
      asked_end: false,
    };
    let answer_by = options.yield_after.map(|d| started + d);
    loop {
      let actions = match drive(shell, &mut cmd, sink, answer_by)? {
        Step::Done(record) => return Ok((Exchange::Done(record), shell.life.command_cut())),
        Step::ShellGone(status) => {
          return Ok((Exchange::ShellGone(status), shell.life.command_cut()));
        }
        Step::NotStarted(status) => {
          return Ok((Exchange::NotStarted(status), shell.life.command_cut()));
        }
        Step::Answer => return Ok((Exchange::Detach(Box::new(cmd)), None)),
        Step::Stop => {
          cmd.stop = None;
          shell
            .life
            .on(Event::StopCommand, Instant::now())
            .iter()
            .collect()
        }
        Step::Act(actions) => actions,
      };
      for action in actions {
        match (action, &mut shell.proc) {
          // Only the command's tree: the shell writes the record and keeps its state.
          (Action::EndCommand, Proc::Reaper(job)) => {
            cmd.asked_end = true;
            job.end_command();
          }
          // A local shell cannot end a command alone; a shell past the bound goes too.
          (Action::EndCommand | Action::AskTerminate { .. }, _) => {
            return Ok((Exchange::TimedOut, shell.life.command_cut()));
          }
          // Timed out with `onTimeout: "background"`: answered now, it runs on.
          (Action::Background, _) => {
            return Ok((Exchange::Detach(Box::new(cmd)), shell.life.command_cut()));
          }
          _ => {}
        }
      }
    }
  }

  /// Forgets the current shell and everything it started. Under a reaper: the reaper kills
  /// its whole tree (escapees included) and reports it gone. Locally: SIGKILL for what is left
  /// of its process group and session (its background jobs belong to it and are not restored;
  /// under `set -m` they have groups of their own in its session), then it is reaped. Until it
  /// is reaped its pid, the group's and the session's id, cannot be reused, so the signal
  /// reaches no stranger. A `setsid` escapee whose parent has died is out of reach locally:
  /// that is the reaper's tree walk.
  fn reap(&mut self) {
    if let Some(shell) = self.shell.take() {
      end_proc(shell.proc, &self.config.host);
    }
  }
}

/// Ends a shell's process and its whole tree (see [`Session::reap`]).
fn end_proc(proc: Proc, host: &Host) {
  match proc {
    Proc::Reaper(job) => {
      if let Host::Reaper { supervisor, .. } = host {
        job.end(supervisor);
      }
    }
    Proc::Local { pid, .. } => {
      let _ = killpg(pid, Signal::SIGKILL);
      for pid in tree::escapees(&tree::scan(), pid.as_raw()) {
        if let Ok(fd) = pidfd::open(pid) {
          pidfd::send_signal(&fd, Signal::SIGKILL);
        }
      }
      let _ = waitpid(pid, None);
    }
  }
}

impl Drop for Session {
  fn drop(&mut self) {
    self.reap();
  }
}

/// A command in flight in its shell: its fifos, what is left to write, its record once read.
/// It moves with the shell when its caller is answered before its end ([`Detached`]).
struct InFlight {
  seq: u64,
  /// The command's text, not yet written to the data fifo.
  text: Vec<u8>,
  /// The whole text's length: what was written is `text_len - text.len()`.
  text_len: usize,
  /// Bytes for its stdin, not yet written.
  stdin_data: Vec<u8>,
  /// `stdin: "pipe"`: the stdin fifo stays open for whoever holds its writer.
  keep_stdin: bool,
  /// A copy of the writer went to the holder ([`Detached::take_stdin`]): ours is kept only until
  /// the shell has opened the fifo (a fifo without a writer would make that open wait).
  stdin_handed: bool,
  fifos: Fifos,
  done_open: bool,
  /// Readable when the caller wants the command ended.
  stop: Option<RawFd>,
  /// The command's record, held until the reaper has confirmed the end of its tree.
  ended: Option<Record>,
  asked_end: bool,
}

/// Where one stretch of [`drive`] ended.
enum Step {
  /// The command's record (its tree's end confirmed when it was asked for).
  Done(Record),
  /// The shell exited while running it.
  ShellGone(CommandStatus),
  /// The shell exited before the command ran (see [`Exchange::NotStarted`]).
  NotStarted(CommandStatus),
  /// The time to answer the caller has come (the command runs on).
  Answer,
  /// The caller's stop descriptor is readable.
  Stop,
  /// The machine asks for these.
  Act(Vec<Action>),
}

/// Follows `cmd` in `shell` until something is up for the caller: its record, the shell's end,
/// `answer_by`, a stop request (the machine's `StopCommand` is applied here) or actions of the
/// machine. Every byte the command writes goes to `sink`, in order, before the step that ends
/// this stretch: a caller that hands the command on to another holder loses nothing and
/// repeats nothing.
fn drive(
  shell: &mut Shell,
  cmd: &mut InFlight,
  sink: &mut dyn FnMut(Stream, &[u8]),
  answer_by: Option<Instant>,
) -> Result<Step, SessionError> {
  let seq = cmd.seq;
  loop {
    let now = Instant::now();
    let due = [shell.life.next_wake(now), answer_by]
      .into_iter()
      .flatten()
      .min();
    let f = &mut cmd.fifos;
    let mut fds = [
      poll::watch(cmd.done_open.then(|| shell.done.as_raw_fd())),
      poll::watch(f.stdout.as_ref().map(AsRawFd::as_raw_fd)),
      poll::watch(f.stderr.as_ref().map(AsRawFd::as_raw_fd)),
      poll::watch(Some(shell.proc.fd())),
      writable((!cmd.text.is_empty()).then(|| shell.data.as_raw_fd())),
      writable(
        f.stdin_writer
          .as_ref()
          .filter(|_| !cmd.stdin_data.is_empty())
          .map(AsRawFd::as_raw_fd),
      ),
      poll::watch(f.stdin_opened.as_ref().map(AsRawFd::as_raw_fd)),
      poll::watch(cmd.stop),
    ];
    poll::poll(&mut fds, due);
    if fds[0].revents != 0 && !read_into(&shell.done, &mut shell.reader) {
      // The shell closed it: it exec'd or is ending; its pidfd says when it has.
      cmd.done_open = false;
    }
    // Only when poll says so: a fifo read before the shell has opened it reads as EOF.
    // One read per stream per round: the deadline and the record are looked at between two
    // (read until empty, a writer faster than the sink kept this loop away from them for
    // ever: 'yes' with a slow onStdout ran past its timeout for good).
    let out = fds[1].revents != 0 && drain(&mut f.stdout, Stream::Stdout, sink, READ_SIZE);
    let err = fds[2].revents != 0 && drain(&mut f.stderr, Stream::Stderr, sink, READ_SIZE);
    if out || err {
      shell.life.on(Event::CommandOutput, Instant::now());
    }
    loop {
      let record = match shell.reader.next_record() {
        Ok(Some(record)) => record,
        Ok(None) => break,
        // Not the session's code: a command wrote to the done fifo (through /proc/$$/fd, or
        // a DEBUG trap carried into `post` by `set -T`).
        // Nothing the shell says can be trusted any more, and the command must not outlive
        // its timeout: the shell is killed with its tree and a fresh one restored.
        Err(_) => {
          drain_present(&mut f.stdout, Stream::Stdout, sink);
          drain_present(&mut f.stderr, Stream::Stderr, sink);
          shell.life.on(Event::LeaderExited, Instant::now());
          return Ok(Step::ShellGone(CommandStatus::Signaled(libc::SIGKILL)));
        }
      };
      if record.seq == seq {
        // Every write of the command's foreground processes precedes the record.
        drain_present(&mut f.stdout, Stream::Stdout, sink);
        drain_present(&mut f.stderr, Stream::Stderr, sink);
        cmd.ended = Some(record);
        break;
      }
    }
    let exited = if fds[3].revents != 0 {
      shell.proc.exited()
    } else {
      None
    };
    // Once its tree was asked to end, the command is over when the reaper says that tree is
    // gone, not at the record alone (the shell reports its foreground child's death before
    // the other processes killed with it have gone).
    let acked = match &shell.proc {
      Proc::Reaper(job) => !cmd.asked_end || job.command_ended(),
      Proc::Local { .. } => true,
    };
    if acked && let Some(record) = cmd.ended.take() {
      shell.life.on(Event::CommandEnded { seq }, Instant::now());
      return Ok(Step::Done(record));
    }
    if let Some(status) = exited {
      drain_present(&mut f.stdout, Stream::Stdout, sink);
      drain_present(&mut f.stderr, Stream::Stderr, sink);
      shell.life.on(Event::LeaderExited, Instant::now());
      // Every byte of the text written so far still in the data pipe (`pre` never read it),
      // or the stdout fifo never opened (its redirection comes right before the `eval`): the
      // command never ran.
      let written = cmd.text_len - cmd.text.len();
      let never_opened = f.stdout_opened.as_ref().is_some_and(|w| !inotify_fired(w));
      if cmd.text_len > 0 && (unread(&shell.data) == Some(written) || never_opened) {
        return Ok(Step::NotStarted(status));
      }
      return Ok(Step::ShellGone(status));
    }
    if fds[4].revents != 0 {
      let n = write_some(&shell.data, &cmd.text).min(cmd.text.len());
      cmd.text.drain(..n);
    }
    if fds[5].revents != 0
      && let Some(w) = &f.stdin_writer
    {
      let n = write_some(w, &cmd.stdin_data).min(cmd.stdin_data.len());
      cmd.stdin_data.drain(..n);
    }
    if fds[6].revents != 0 {
      f.stdin_opened = None;
      // The shell has its end: the anchor is no longer needed, and without it a write after
      // the command closed its stdin fails (EPIPE) instead of filling a pipe nobody reads.
      f.stdin_anchor = None;
    }
    if (!cmd.keep_stdin || cmd.stdin_handed)
      && cmd.stdin_data.is_empty()
      && f.stdin_opened.is_none()
    {
      // EOF for the command once it has read everything (or, for a pipe, once its holder
      // closes its copy).
      f.stdin_writer = None;
    }
    if fds[7].revents != 0 {
      return Ok(Step::Stop);
    }
    let now = Instant::now();
    let due = shell.life.on(Event::Tick, now);
    if !due.is_empty() {
      return Ok(Step::Act(due.iter().collect()));
    }
    if answer_by.is_some_and(|at| now >= at) {
      return Ok(Step::Answer);
    }
  }
}

/// A command's fifos, opened on our side before the shell opens them (its opens then never
/// block), and removed when the command is over.
struct Fifos {
  paths: Vec<PathBuf>,
  stdout: Option<OwnedFd>,
  stderr: Option<OwnedFd>,
  /// Kept open until the shell has opened the stdin fifo, so that it always has a reader: a
  /// write before the command opens it is buffered, not refused. Never read from.
  stdin_anchor: Option<OwnedFd>,
  stdin_writer: Option<OwnedFd>,
  /// An inotify descriptor that reads once the shell has opened the stdin fifo. Until then the
  /// writer stays open even with everything written: closed earlier, the fifo would have no
  /// writer when the shell opens it, and its open would wait for one for ever.
  stdin_opened: Option<OwnedFd>,
  /// An inotify descriptor that reads once the stdout fifo was opened after our own open: by
  /// the shell, right before the command's `eval`. A shell that ends without it never ran
  /// the command.
  stdout_opened: Option<OwnedFd>,
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
      // A command can write in the directory: what it left at this name goes first.
      remove_any(p)?;
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
    let stdout_opened = watch_open(&paths[0]).ok();
    Ok(Fifos {
      paths,
      stdout_opened,
      stdout: Some(out),
      stderr: Some(err),
      stdin_anchor: anchor,
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

/// Makes `dir` a directory private to this user again. The session's commands run as its user
/// and may remove it, replace it, or take its permissions away: the next command then still
/// gets its fifos, where otherwise every later `exec` of the session would fail (`ENOENT` or
/// `EACCES`).
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
  use std::os::unix::fs::DirBuilderExt;
  match std::fs::symlink_metadata(dir) {
    Ok(m) if m.is_dir() => {
      if m.permissions().mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
      }
      return Ok(());
    }
    Ok(_) => std::fs::remove_file(dir)?,
    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
    Err(e) => return Err(e),
  }
  std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// Removes whatever is at `path` (a file, a fifo, a symlink, a directory); nothing there is fine.
fn remove_any(path: &Path) -> io::Result<()> {
  match std::fs::symlink_metadata(path) {
    Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
    Ok(_) => std::fs::remove_file(path),
    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
    Err(e) => Err(e),
  }
}

fn writable(fd: Option<RawFd>) -> libc::pollfd {
  let mut p = poll::watch(fd);
  p.events = libc::POLLOUT;
  p
}

/// Whether an inotify descriptor has an event to read (it is non-blocking).
fn inotify_fired(fd: &OwnedFd) -> bool {
  let mut buf = [0u8; 4096];
  matches!(nix::unistd::read(fd, &mut buf), Ok(n) if n > 0)
}

/// How many bytes wait in a pipe (`None`: unknown).
fn unread(fd: &OwnedFd) -> Option<usize> {
  let mut n: libc::c_int = 0;
  // SAFETY: FIONREAD writes one int through a valid pointer.
  let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
  (rc == 0).then_some(n as usize)
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

/// The most a fifo read takes at once.
const READ_SIZE: usize = 64 * 1024;

/// Reads what a fifo holds now, and no more: a background child that still writes to it must
/// not keep the command from ending (it did, with a sink slower than its writes).
fn drain_present(
  fd: &mut Option<OwnedFd>,
  stream: Stream,
  sink: &mut dyn FnMut(Stream, &[u8]),
) -> bool {
  let present = fd.as_ref().and_then(unread).unwrap_or(0);
  present > 0 && drain(fd, stream, sink, present)
}

/// Reads a fifo until it would block or `budget` bytes came, handing each read to `sink`;
/// closes it at EOF. Returns whether any byte came.
fn drain(
  fd: &mut Option<OwnedFd>,
  stream: Stream,
  sink: &mut dyn FnMut(Stream, &[u8]),
  mut budget: usize,
) -> bool {
  let Some(f) = fd else { return false };
  let mut buf = [0u8; READ_SIZE];
  let mut any = false;
  loop {
    if budget == 0 {
      return any;
    }
    let want = budget.min(buf.len());
    match nix::unistd::read(&*f, &mut buf[..want]) {
      Ok(0) => {
        *fd = None;
        return any;
      }
      Ok(n) => {
        any = true;
        budget -= n;
        sink(stream, &buf[..n]);
      }
      Err(nix::errno::Errno::EINTR) => {}
      Err(_) => return any,
    }
  }
}

/// Writes all of `bytes` to a blocking descriptor.
fn write_all_fd(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
  while !bytes.is_empty() {
    match nix::unistd::write(fd.as_fd(), bytes) {
      Ok(n) => bytes = &bytes[n..],
      Err(nix::errno::Errno::EINTR) => {}
      Err(e) => return Err(e.into()),
    }
  }
  Ok(())
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

/// A command whose caller was answered before its end (its yield, or a timeout that moved it
/// to the background), with the shell that runs it: that shell's job is now the command's
/// alone. [`Detached::follow`] sees it to its end (its record, or the shell's), under the
/// deadlines it was sent with, and then ends the whole job, as a background process ends:
/// nothing it started outlives it.
pub struct Detached {
  shell: Shell,
  cmd: InFlight,
  host: Host,
}

/// A request to a [`Detached`] command's follower, written to its control pipe as one
/// [`Control::SIZE`]-byte message (a pipe's write of it is atomic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
  /// Terminate the whole tree: SIGTERM now, SIGKILL after `grace` (zero: SIGKILL now).
  Kill { grace: Duration },
  /// This signal to every process of the tree (the reaper freezes it first).
  Signal(i32),
}

impl Control {
  pub const SIZE: usize = 5;

  pub fn encode(self) -> [u8; Self::SIZE] {
    let (tag, n) = match self {
      Control::Kill { grace } => (b'K', u32::try_from(grace.as_millis()).unwrap_or(u32::MAX)),
      Control::Signal(signo) => (b'S', signo as u32),
    };
    let n = n.to_le_bytes();
    [tag, n[0], n[1], n[2], n[3]]
  }

  pub fn decode(bytes: &[u8]) -> Option<Self> {
    let n = u32::from_le_bytes(bytes.get(1..5)?.try_into().ok()?);
    match bytes.first()? {
      b'K' => Some(Control::Kill {
        grace: Duration::from_millis(n.into()),
      }),
      b'S' => Some(Control::Signal(n as i32)),
      _ => None,
    }
  }
}

/// What ended a [`Detached`] command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachedEnd {
  /// It ended by itself (its record, or its shell's exit: `exit 3`, an `exec`'d program).
  Exit,
  /// Its deadline, idle deadline or background hard deadline: its tree was killed.
  Timeout,
  /// A [`Control::Kill`].
  Killed,
}

impl Detached {
  /// The pid of the shell that runs the command.
  pub fn pid(&self) -> i32 {
    self.shell.proc.pid()
  }

  /// The reaper that holds it (`None`: a local shell).
  pub fn reaper_pid(&self) -> Option<i32> {
    match &self.shell.proc {
      Proc::Reaper(job) => Some(job.reaper_pid),
      Proc::Local { .. } => None,
    }
  }

  /// The write end of the command's stdin fifo (non-blocking) when it was sent with
  /// [`RunOptions::stdin_pipe`]: the command reads EOF once it is closed. The follower keeps a
  /// copy of its own only until the shell has opened the fifo.
  pub fn take_stdin(&mut self) -> Option<OwnedFd> {
    if !self.cmd.keep_stdin || self.cmd.stdin_handed {
      return None;
    }
    let writer = self.cmd.fifos.stdin_writer.as_ref()?;
    let copy = fcntl(writer, FcntlArg::F_DUPFD_CLOEXEC(0)).ok()?;
    self.cmd.stdin_handed = true;
    if self.cmd.fifos.stdin_opened.is_none() {
      self.cmd.fifos.stdin_writer = None;
    }
    // SAFETY: a fresh descriptor from fcntl, owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(copy) })
  }

  /// Follows the command to its end, its output to `sink` as it is read, taking
  /// [`Control`] messages from `control` (a pipe's read end; its close is ignored); then ends
  /// the whole job and returns once its tree is gone: the command's status (`None` when it
  /// could not be read) and what ended it.
  pub fn follow(
    mut self,
    control: OwnedFd,
    sink: &mut dyn FnMut(Stream, &[u8]),
  ) -> (Option<CommandStatus>, DetachedEnd) {
    let _ = set_nonblocking(&control);
    self.cmd.stop = Some(control.as_raw_fd());
    let mut by = DetachedEnd::Exit;
    let status = loop {
      let actions = match drive(&mut self.shell, &mut self.cmd, sink, None) {
        Ok(Step::Done(record)) => break Some(CommandStatus::Exited(record.status)),
        Ok(Step::ShellGone(status) | Step::NotStarted(status)) => break Some(status),
        Ok(Step::Answer) => Vec::new(),
        Ok(Step::Stop) => {
          let mut buf = [0u8; Control::SIZE * 64];
          match nix::unistd::read(&control, &mut buf) {
            // The holder is gone; the command runs on under its deadlines.
            Ok(0) => self.cmd.stop = None,
            Ok(n) => {
              for message in buf[..n].chunks_exact(Control::SIZE) {
                match Control::decode(message) {
                  Some(Control::Kill { grace }) => {
                    if by == DetachedEnd::Exit {
                      by = DetachedEnd::Killed;
                    }
                    if self.terminate(grace) {
                      break;
                    }
                  }
                  Some(Control::Signal(signo)) => {
                    if let Proc::Reaper(job) = &mut self.shell.proc {
                      job.signal(signo);
                    }
                  }
                  None => {}
                }
              }
            }
            Err(_) => {}
          }
          Vec::new()
        }
        Ok(Step::Act(actions)) => actions,
        Err(_) => break None,
      };
      let mut gone = false;
      for action in actions {
        if let Action::EndCommand | Action::AskTerminate { .. } = action {
          // A deadline: the command's tree, which is now the whole job's.
          if by == DetachedEnd::Exit {
            by = DetachedEnd::Timeout;
          }
          gone |= self.terminate(Duration::ZERO);
        }
      }
      if gone {
        break Some(CommandStatus::Signaled(libc::SIGKILL));
      }
    };
    let Detached { shell, cmd, host } = self;
    // The command's end is the job's: whatever it left running dies with its shell.
    end_proc(shell.proc, &host);
    drop(cmd);
    (status, by)
  }

  /// Asks for the whole tree's end (SIGTERM, SIGKILL after `grace`). Returns whether it is
  /// already over (a local shell is killed at once).
  fn terminate(&mut self, grace: Duration) -> bool {
    match &mut self.shell.proc {
      Proc::Reaper(job) => {
        job.terminate(grace);
        false
      }
      Proc::Local { pid, .. } => {
        let _ = killpg(*pid, Signal::SIGKILL);
        true
      }
    }
  }
}
