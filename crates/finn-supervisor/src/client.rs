//! The addon's handle on its supervisor: started lazily with `posix_spawn` (Node is never
//! forked), restarted after it dies, and a stock of idle job reapers to lease.
//!
//! The supervisor is Node's child; it is reaped here by its own pid (a dedicated `waitpid`),
//! never with `waitpid(-1)`, and no signal disposition of Node's is touched, so Node's
//! `child_process` keeps working beside it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::error::{Crash, Fault};
use super::protocol::{FromSupervisor, ToSupervisor};
use super::server::{ADDON_FD, DEFAULT_REAPER_IDLE, REAPER_IDLE_ARG};
use super::wire::{self, Conn};
use finn_exec::lifecycle::NUDGE_EVERY;
use finn_exec::pidfd;
use finn_exec::spawn::SpawnAttrs;

/// A job reaper leased for one job.
pub struct Reaper {
  pub pid: i32,
  pub conn: Conn,
  generation: u64,
  /// The landlock ABI of its own domain around its commands (0: none; see `shield::confine`).
  landlock: u8,
}

#[cfg(test)]
impl Reaper {
  /// A reaper whose socket is `conn`, for tests of what the addon reads from it.
  pub(crate) fn on(pid: i32, conn: Conn) -> Reaper {
    Reaper {
      pid,
      conn,
      generation: 0,
      landlock: 0,
    }
  }
}

/// One pool's supervisor.
pub struct Supervisor {
  program: PathBuf,
  /// A reaper without a job for this long exits (reporting `Retired`), as the pool lets
  /// parked worker threads go: an idle pool holds no reaper.
  reaper_idle: Duration,
  /// The landlock ABI reapers for jobs without isolation may use for a domain around their
  /// commands (as far as the kernel has it): `FINN_SANDBOX_LANDLOCK_ABI_MAX`, so the commands
  /// run as on an older kernel (below 6: no signal scope, the seccomp guard's watch alone).
  landlock_abi_max: u8,
  state: Mutex<State>,
  /// Where the egress proxy's audit entries go ([`Self::set_egress_audit`]).
  egress_audit: Arc<Mutex<Option<EgressAudit>>>,
}

/// Takes each audit entry of the egress proxy (`{"audit": entry}` as JSON bytes).
pub type EgressAudit = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Reads the proxy's audit socket on a thread of its own until the proxy closes it, handing
/// each message to the sink set at that moment.
fn read_egress_audit(audit: OwnedFd, sink: Arc<Mutex<Option<EgressAudit>>>) {
  let read = move || {
    while let Ok(Some((bytes, _))) = finn_egress::service::recv(audit.as_raw_fd()) {
      let sink = sink.lock().unwrap_or_else(|e| e.into_inner()).clone();
      if let Some(sink) = sink {
        sink(&bytes);
      }
    }
  };
  if std::thread::Builder::new()
    .name("finn-egress-audit".into())
    .spawn(read)
    .is_err()
  {
    tracing::warn!("could not start a thread to read the egress proxy's audit");
  }
}

struct State {
  running: Option<Running>,
  /// Bumped at every (re)start: reapers of an earlier supervisor are never reused.
  generation: u64,
  idle: Vec<(Reaper, Instant)>,
}

struct Running {
  pid: i32,
  /// Shared with a request for a reaper in flight, which waits on the supervisor outside the
  /// state's lock: Node's thread takes that lock (idle reapers, returns) and must never wait
  /// for the supervisor. A supervisor busy killing a big orphaned tree answered a request 0.65 to
  /// 1.7 s late, and Node's `exec()` waited as long while the lock was held across it.
  link: Arc<Link>,
}

struct Link {
  pidfd: OwnedFd,
  /// The socket's fd, for `shutdown` while a request holds `conn`.
  raw: std::os::fd::RawFd,
  /// One request at a time.
  conn: Mutex<Conn>,
}

impl Supervisor {
  /// Nothing is started before the first job.
  pub fn new(program: PathBuf) -> Supervisor {
    Self::with_reaper_idle(program, DEFAULT_REAPER_IDLE)
  }

  /// [`Self::new`] with reapers that retire after `reaper_idle` without a job.
  pub fn with_reaper_idle(program: PathBuf, reaper_idle: Duration) -> Supervisor {
    Supervisor {
      program,
      reaper_idle,
      landlock_abi_max: u8::MAX,
      egress_audit: Arc::new(Mutex::new(None)),
      state: Mutex::new(State {
        running: None,
        generation: 0,
        idle: Vec::new(),
      }),
    }
  }

  /// [`Self::new`] whose reapers use no landlock ABI above `max` (`None`: the kernel's).
  pub fn with_landlock_abi_max(mut self, max: Option<i32>) -> Supervisor {
    self.landlock_abi_max = max.map_or(u8::MAX, |m| m.clamp(0, 255) as u8);
    self
  }

  /// The landlock ABI a job's reaper may confine its commands with: 0 for an isolated job,
  /// whose own ruleset does.
  pub fn landlock_for(&self, isolated: bool) -> u8 {
    if isolated { 0 } else { self.landlock_abi_max }
  }

  pub fn program(&self) -> &Path {
    &self.program
  }

  fn lock(&self) -> MutexGuard<'_, State> {
    self.state.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// The supervisor's pid, if one runs.
  pub fn pid(&self) -> Option<i32> {
    self.lock().running.as_ref().map(|r| r.pid)
  }

  /// Where the pool's egress proxy's audit entries go (each a JSON object with an `audit`
  /// field); without a sink they are read and dropped.
  pub fn set_egress_audit(&self, sink: EgressAudit) {
    *self.egress_audit.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
  }

  /// A channel to the pool's egress proxy for a job whose `NetworkOptions` are `network` (JSON,
  /// already checked): the supervisor starts the proxy at the first one. Its end goes to the
  /// job's reaper with the `Run`. A refusal is `NoReaper` naming it (the job cannot start), a
  /// failed supervisor `Failed`.
  pub fn egress_channel(&self, job: &str, network: &str) -> Result<OwnedFd, CheckoutError> {
    let (generation, pid, link) = self.running()?;
    match egress_channel(&link, job, network) {
      Ok(Ok((channel, audit))) => {
        if let Some(audit) = audit {
          let sink = self.egress_audit.clone();
          read_egress_audit(audit, sink);
        }
        Ok(channel)
      }
      Ok(Err(reason)) => Err(CheckoutError::NoReaper(io::Error::other(reason))),
      Err(fault) => {
        let mut state = self.lock();
        if state.generation == generation {
          stop(&mut state);
        }
        Err(CheckoutError::Failed(Crash::Supervisor { pid, fault }))
      }
    }
  }

  /// The running supervisor's link, starting it if none runs.
  fn running(&self) -> Result<(u64, i32, Arc<Link>), CheckoutError> {
    let mut state = self.lock();
    if state
      .running
      .as_ref()
      .is_some_and(|r| pidfd::exited(&r.link.pidfd))
    {
      stop(&mut state);
    }
    if state.running.is_none() {
      state.running = Some(self.start().map_err(|e| {
        CheckoutError::Failed(Crash::Start {
          program: self.program.clone(),
          source: e.into(),
        })
      })?);
      state.generation += 1;
    }
    let running = state.running.as_ref().expect("started above");
    Ok((state.generation, running.pid, running.link.clone()))
  }

  /// A reaper for one job: an idle one, or a new one (starting the supervisor if needed). The
  /// error says what failed, naming the supervisor's file.
  /// `landlock`: the ABI of the reaper's own domain around its commands (see
  /// [`Self::landlock_for`]).
  pub fn checkout(&self, landlock: u8) -> Result<Reaper, CheckoutError> {
    let (generation, pid, link) = {
      let mut state = self.lock();
      if state
        .running
        .as_ref()
        .is_some_and(|r| pidfd::exited(&r.link.pidfd))
      {
        stop(&mut state);
      }
      // The most recently used first. One that retired or died meanwhile is found out by the
      // job itself (`Retired`, or EPIPE), which then takes another: no check costs a syscall
      // here.
      if let Some(reaper) = take_idle(&mut state, landlock) {
        return Ok(reaper);
      }
      if state.running.is_none() {
        state.running = Some(self.start().map_err(|e| {
          // A filled process limit fails this job as a spawn failure naming the limit, as a
          // reaper that cannot be made does; the next job starts the supervisor again.
          if e.raw_os_error() == Some(libc::EAGAIN) {
            return CheckoutError::NoReaper(e);
          }
          CheckoutError::Failed(Crash::Start {
            program: self.program.clone(),
            source: e.into(),
          })
        })?);
        state.generation += 1;
      }
      let running = state.running.as_ref().expect("started above");
      (state.generation, running.pid, running.link.clone())
    };
    // Outside the state's lock (see `Running::link`).
    match new_reaper(&link, landlock) {
      Ok(Ok((pid, conn))) => Ok(Reaper {
        pid,
        conn,
        generation,
        landlock,
      }),
      Ok(Err(e)) => Err(CheckoutError::NoReaper(e)),
      Err(fault) => {
        let mut state = self.lock();
        // Unless another job's request found it out first and a new one runs already.
        if state.generation == generation {
          stop(&mut state);
        }
        Err(CheckoutError::Failed(Crash::Supervisor { pid, fault }))
      }
    }
  }

  /// SIGCONTs the supervisor, if one runs (a job's command may have stopped it).
  pub fn nudge(&self) {
    if let Some(running) = &self.lock().running {
      pidfd::send_signal(&running.link.pidfd, Signal::SIGCONT);
    }
  }

  /// An idle reaper of the running supervisor, if one is at hand; never starts anything (so
  /// it never waits).
  pub fn checkout_idle(&self, landlock: u8) -> Option<Reaper> {
    let mut state = self.lock();
    state.running.as_ref()?;
    take_idle(&mut state, landlock)
  }

  /// Lets the supervisor and its idle reapers go (the pool is shut down). A later checkout
  /// would start a new one.
  pub fn stop(&self) {
    stop(&mut self.lock());
  }

  /// [`Self::stop`] for a pool that is shut down: waits up to `bound` for the supervisor to
  /// exit and reaps it on the calling thread, so that once the shutdown settles the pool has
  /// no process left, not even a zombie. Past the bound it is reaped as [`Self::stop`] does.
  pub fn stop_and_wait(&self, bound: Duration) {
    let running = {
      let mut state = self.lock();
      state.idle.clear();
      state.running.take()
    };
    let Some(Running { pid, link }) = running else {
      return;
    };
    link.close();
    let until = Instant::now() + bound;
    while !pidfd::exited(&link.pidfd) && Instant::now() < until {
      let mut fds = [finn_exec::poll::watch(Some(link.pidfd.as_raw_fd()))];
      finn_exec::poll::poll(&mut fds, Some(until));
    }
    reap(pid, link);
  }

  /// Returns a reaper whose job ended with its tree gone. Reapers idle for too long are let go.
  pub fn checkin(&self, reaper: Reaper) {
    let mut state = self.lock();
    let now = Instant::now();
    state
      .idle
      .retain(|(_, since)| now.duration_since(*since) < self.reaper_idle);
    if reaper.generation == state.generation && state.running.is_some() {
      state.idle.push((reaper, now));
    }
  }

  fn start(&self) -> io::Result<Running> {
    let (ours, theirs) = wire::pair()?;
    let program = CString::new(self.program.as_os_str().as_bytes())
      .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    let idle = CString::new(self.reaper_idle.as_millis().to_string()).expect("digits");
    let args = [c"finn-supervisor", REAPER_IDLE_ARG, &idle];
    let pid = spawn_supervisor(&program, &args, theirs.as_raw_fd())?;
    drop(theirs);
    let pidfd = match pidfd::open(pid) {
      Ok(fd) => fd,
      Err(e) => {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        return Err(e);
      }
    };
    Ok(Running {
      pid,
      link: Arc::new(Link {
        pidfd,
        raw: ours.as_raw_fd(),
        conn: Mutex::new(Conn::new(ours)),
      }),
    })
  }
}

impl Drop for Supervisor {
  fn drop(&mut self) {
    stop(&mut self.lock());
  }
}

/// Lets the supervisor go: closing its socket and those of the idle reapers makes all of them
/// kill what they hold and exit. Reaped on a thread of its own, as it may take a moment.
fn stop(state: &mut State) {
  state.idle.clear();
  if let Some(Running { pid, link }) = state.running.take() {
    link.close();
    reap(pid, link);
  }
}

impl Link {
  /// Makes the supervisor see its end of the socket closed, even while a request in flight
  /// still holds `conn` (that request then fails at once): it kills what it holds and exits.
  fn close(&self) {
    // SAFETY: `raw` is `conn`'s fd, open as long as this `Link` is.
    unsafe { libc::shutdown(self.raw, libc::SHUT_RDWR) };
  }
}

/// Reaps the supervisor now if it has exited, else on a thread of its own.
fn reap(pid: i32, link: Arc<Link>) {
  if pidfd::exited(&link.pidfd) {
    let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
  } else {
    let reap = move || {
      let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
      drop(link);
    };
    if std::thread::Builder::new()
      .name("finn-supervisor-reap".into())
      .spawn(reap)
      .is_err()
    {
      tracing::warn!(pid, "could not start a thread to reap the supervisor");
    }
  }
}

/// The most recently used idle reaper of the running supervisor and of this kind; idle ones
/// of an earlier supervisor are dropped on the way.
fn take_idle(state: &mut State, landlock: u8) -> Option<Reaper> {
  let generation = state.generation;
  state.idle.retain(|(r, _)| r.generation == generation);
  let at = state
    .idle
    .iter()
    .rposition(|(r, _)| r.landlock == landlock)?;
  Some(state.idle.remove(at).0)
}

/// Why [`Supervisor::checkout`] has no reaper.
#[derive(Debug)]
pub enum CheckoutError {
  /// The supervisor could not be started, or failed (it is let go: the next job starts
  /// another).
  Failed(Crash),
  /// The supervisor is fine but could not make a reaper (a process limit, which another job's
  /// command may have filled): this job cannot start, as when a spawn fails.
  NoReaper(io::Error),
}

/// Asks for a new reaper: the outer error is the supervisor's failure, the inner one its
/// refusal (see [`CheckoutError`]).
fn new_reaper(link: &Link, landlock: u8) -> Result<io::Result<(i32, Conn)>, Fault> {
  let mut conn = link.conn.lock().unwrap_or_else(|e| e.into_inner());
  let pid = match ask(link, &mut conn, &ToSupervisor::NewReaper { landlock })? {
    FromSupervisor::ReaperReady { pid } => pid,
    FromSupervisor::ReaperFailed { errno } => {
      return Ok(Err(io::Error::from_raw_os_error(errno)));
    }
    _ => return Err(Fault::NoSocket),
  };
  let fd = conn.take_fd().ok_or(Fault::NoSocket)?;
  Ok(Ok((pid, Conn::new(fd))))
}

/// Asks for a channel to the egress proxy: the outer error is the supervisor's failure, the
/// inner one the proxy's refusal; with the channel, the proxy's audit socket when it is new.
fn egress_channel(
  link: &Link,
  job: &str,
  network: &str,
) -> Result<Result<(OwnedFd, Option<OwnedFd>), String>, Fault> {
  let mut conn = link.conn.lock().unwrap_or_else(|e| e.into_inner());
  let msg = ToSupervisor::EgressJob {
    job: job.into(),
    network: network.into(),
  };
  match ask(link, &mut conn, &msg)? {
    FromSupervisor::EgressReady { audit } => {
      let channel = conn.take_fd().ok_or(Fault::NoSocket)?;
      let audit = if audit {
        Some(conn.take_fd().ok_or(Fault::NoSocket)?)
      } else {
        None
      };
      Ok(Ok((channel, audit)))
    }
    FromSupervisor::EgressFailed { reason } => Ok(Err(reason)),
    _ => Err(Fault::NoSocket),
  }
}

/// Sends `msg` and waits for the supervisor's answer.
fn ask(link: &Link, conn: &mut Conn, msg: &ToSupervisor) -> Result<FromSupervisor, Fault> {
  conn.send(&msg.encode(), &[])?;
  // A job's command may have stopped the supervisor (it runs as its user): it is sent SIGCONT
  // while the answer does not come, and given up on after `NEW_REAPER_BOUND`.
  let asked = Instant::now();
  let frame = loop {
    if let Some(frame) = conn.take_frame()? {
      break frame;
    }
    let mut fds = [finn_exec::poll::watch(Some(conn.raw()))];
    finn_exec::poll::poll(&mut fds, Some(Instant::now() + NUDGE_EVERY));
    if fds[0].revents == 0 {
      pidfd::send_signal(&link.pidfd, Signal::SIGCONT);
      if asked.elapsed() >= NEW_REAPER_BOUND {
        return Err(Fault::NoAnswer);
      }
      continue;
    }
    if !conn.fill()? {
      return Err(Fault::Exited);
    }
  };
  Ok(FromSupervisor::decode(&frame)?)
}

/// How long a request for a reaper waits for the supervisor's answer.
const NEW_REAPER_BOUND: Duration = Duration::from_secs(10);

/// Starts the supervisor with `socket` as its fd 3: a new session (no terminal signal reaches
/// it), stdin and stdout `/dev/null`, stderr shared for its diagnostics, an empty signal mask,
/// default dispositions and an empty environment.
fn spawn_supervisor(program: &CString, args: &[&CStr], socket: i32) -> io::Result<i32> {
  let mut argv: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr() as *mut _).collect();
  argv.push(std::ptr::null_mut());
  let envp = [std::ptr::null_mut::<libc::c_char>()];
  let mut a = SpawnAttrs::new_session()?;
  for fd in [0, 1] {
    a.open(fd, c"/dev/null", libc::O_RDWR)?;
  }
  // dup2 of a descriptor onto its own number would leave close-on-exec set: if the socket
  // happens to be fd 3, hand the child a copy from another number.
  let moved = if socket == ADDON_FD {
    // SAFETY: fcntl on a descriptor we hold; the copy is owned below.
    let fd = unsafe { libc::fcntl(socket, libc::F_DUPFD_CLOEXEC, ADDON_FD + 1) };
    if fd < 0 {
      return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made by fcntl and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
  } else {
    None
  };
  let source = moved.as_ref().map_or(socket, |m| m.as_raw_fd());
  a.dup2(source, ADDON_FD)?;
  a.spawn(program, &argv, &envp)
}
