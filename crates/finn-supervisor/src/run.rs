//! One job through a reaper, from the addon's side: a spec and its limits in, a `Finished` out,
//! with the spawn, the waiting and the killing done by the job's reaper.
//!
//! The worker thread creates the pipes, sends `Run` with their write ends, and sleeps in
//! `ppoll` on the read ends, the reaper's socket and its stop eventfd. Its loops drive the
//! watcher's [`Lifecycle`] (`finn_exec::lifecycle`): they turn the reaper's frames, the
//! output cap, a stop request and the machine's wake-up time into events, and carry out what
//! it asks (a `Terminate` to the reaper; SIGCONT and the addon's own kill for a reaper that does
//! not answer). The reaper reports the leader's exit and, once it has no child left, that the
//! tree is gone. It keeps the deadline too (see `ToReaper::Run::timeout`), and says so
//! (`TimedOut`) when it was first.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

use super::client::{CheckoutError, Reaper, Supervisor};
use super::descendants;
use super::error::Crash;
use super::protocol::{FromReaper, Timeout, ToReaper};
use finn_exec::capture::Capture;
use finn_exec::later::{Later, Nothing, wake_for};
use finn_exec::lifecycle::{Action, Actions, End, Event, Lifecycle};
use finn_exec::pipes::{Pipes, Sink};
use finn_exec::poll::{poll, watch};
use finn_exec::spawn::classify_exec_error;
use finn_exec::stop::Attached;
use finn_exec::{EndedBy, ExitStatus, Finished, RunLimits, SpawnError, SpawnSpec, StopCell};
use finn_isolate::{LayerFailed, Plan};

/// Why a job through the supervisor did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
  /// The command could not be started (a result for the caller: exit code 126/127).
  #[error(transparent)]
  Spawn(#[from] SpawnError),
  /// An isolation layer could not be set up: the command did not run, and the job rejects
  /// with `ISOLATION_UNAVAILABLE`.
  #[error(transparent)]
  Isolation(LayerFailed),
  /// The supervisor or the job's reaper failed or died: the job's tree is killed by whichever
  /// of them is left, and the job rejects with `WORKER_CRASHED`.
  #[error(transparent)]
  Crashed(Crash),
}

/// Reads of the final drain once the tree is gone: every writer is dead, so this only bounds
/// a writer outside the tree that was handed the pipe.
const FINAL_READS: usize = 1024;
/// The same bound for a job finished on Node's thread (`stop: None` in [`resume`]): a writer
/// outside the tree (another job's command handed the pipe) could otherwise keep Node's thread
/// reading 32 MiB; this is 2 MiB, about a millisecond.
const FINAL_READS_INLINE: usize = 64;
/// Reapers that may turn out retired (or dead) under one job before it gives up. Each try
/// takes another idle reaper, and a freshly forked one does not retire before its first job:
/// this only bounds a supervisor that misbehaves.
const MAX_RETIRED: usize = 64;

/// Runs `spec` through one of `supervisor`'s reapers on the calling thread. `on_spawn` gets the
/// reaper's pid once the command runs: every process of the job's tree is a descendant of it
/// (see [`kill_trees_now`]). Once the leader exits, the rest of its tree is killed after
/// `drain`.
/// `later` is done once the job is on its way to a reaper if it is due by then (before the
/// reaper has answered), else by its due time from the job's waits. The pool sends the
/// previous jobs' replies there: the wake-up of Node's thread then overlaps with the reaper's
/// start of this one instead of coming before it.
pub fn run_blocking<R>(
  supervisor: &Supervisor,
  job: JobTerms,
  drain: Duration,
  stop: &StopCell<R>,
  later: &mut dyn Later,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, RunError> {
  let outgoing = Outgoing::new(job.spec, job.isolation, job.limits, drain, Duration::ZERO)?;
  let (reaper, outgoing) = outgoing.send(supervisor, job.spec, job.isolation, later)?;
  resume(
    supervisor,
    reaper,
    outgoing,
    job,
    Some(stop),
    later,
    on_spawn,
  )
}

/// What a job runs and under which terms, as the addon's side hands it to a reaper.
#[derive(Clone, Copy)]
pub struct JobTerms<'a> {
  pub spec: &'a SpawnSpec,
  /// `None`: no isolation.
  pub isolation: Option<&'a Plan>,
  pub limits: &'a RunLimits,
}

/// A job's `Run` frame with the pipes it carries: built once, sent to one reaper (or, when a
/// reaper turns out retired, to the next).
pub struct Outgoing {
  run: Vec<u8>,
  /// The pipes' write ends, kept until a reaper has answered: a retired reaper closes its
  /// socket with them unread, and the next one needs them again.
  writes: Option<(OwnedFd, OwnedFd)>,
  reads: (OwnedFd, OwnedFd),
  /// The read end of the command's stdin pipe, kept like `writes` (`None`: `/dev/null`).
  stdin: Option<OwnedFd>,
  started: Instant,
  /// The last reaper it went to had closed before reading it (it retired): nothing started.
  unread: bool,
  /// The job's channel to the egress proxy (a plan with `egress`), attached last; kept like
  /// `writes`.
  egress: Option<OwnedFd>,
}

impl Outgoing {
  /// `linger`: how long the reaper polls for its next job after this one (see
  /// `ToReaper::Run::linger_us`). The reaper gets the job's deadline and grace from `limits`.
  pub fn new(
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
    limits: &RunLimits,
    drain: Duration,
    linger: Duration,
  ) -> Result<Outgoing, RunError> {
    Self::build(spec, isolation, limits, drain, linger, None)
  }

  /// [`Self::new`] for a command with a stdin pipe: also returns the pipe's write end
  /// (non-blocking), which the caller writes to and closes for the command's EOF.
  pub fn fed(
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
    limits: &RunLimits,
    drain: Duration,
  ) -> Result<(Outgoing, OwnedFd), RunError> {
    let (stdin_r, stdin_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
      .map_err(|e| SpawnError::Setup(e.into()))?;
    // The command's end blocks, as any stdin does; ours stays non-blocking.
    nix::fcntl::fcntl(&stdin_r, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
      .map_err(|e| SpawnError::Setup(e.into()))?;
    let outgoing = Self::build(
      spec,
      isolation,
      limits,
      drain,
      Duration::ZERO,
      Some(stdin_r),
    )?;
    Ok((outgoing, stdin_w))
  }

  fn build(
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
    limits: &RunLimits,
    drain: Duration,
    linger: Duration,
    stdin: Option<OwnedFd>,
  ) -> Result<Outgoing, RunError> {
    let started = Instant::now();
    let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
      .map_err(|e| SpawnError::Setup(e.into()))?;
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
      .map_err(|e| SpawnError::Setup(e.into()))?;
    // The write ends must block in the child: clear O_NONBLOCK on them (it is per open file).
    for w in [&out_w, &err_w] {
      nix::fcntl::fcntl(w, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
        .map_err(|e| SpawnError::Setup(e.into()))?;
    }
    Ok(Outgoing {
      run: ToReaper::encode_run(
        spec,
        drain.as_millis() as u64,
        linger.as_micros().min(u32::MAX as u128) as u32,
        Timeout::of(limits.timeout, limits.kill_grace),
        isolation,
        stdin.is_some(),
      ),
      writes: Some((out_w, err_w)),
      reads: (out_r, err_r),
      stdin,
      started,
      unread: false,
      egress: None,
    })
  }

  /// The size of the `Run` frame.
  pub fn frame_len(&self) -> usize {
    self.run.len()
  }

  /// The pipes' write ends, the stdin pipe's read end (if any), then the fds that passed the
  /// check (see `Plan::checked`).
  fn fds(&self, isolation: Option<&Plan>) -> Vec<RawFd> {
    let (out_w, err_w) = self.writes.as_ref().expect("kept until an answer");
    let mut fds = vec![out_w.as_raw_fd(), err_w.as_raw_fd()];
    fds.extend(self.stdin.as_ref().map(AsRawFd::as_raw_fd));
    fds.extend(isolation.map(|p| p.checked.raw_fds()).unwrap_or_default());
    fds.extend(self.egress.as_ref().map(AsRawFd::as_raw_fd));
    fds
  }

  /// For a plan with an allowlist: the job's channel to the pool's egress proxy, asked of the
  /// supervisor once (it starts the proxy at the first).
  fn egress_channel(
    &mut self,
    supervisor: &Supervisor,
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
  ) -> Result<(), RunError> {
    let Some(network) = isolation.and_then(|p| p.egress.as_ref()) else {
      return Ok(());
    };
    if self.egress.is_none() {
      let network = serde_json::to_string(network).expect("options always serialize");
      let job = format!("{}:{}", std::process::id(), next_egress_job());
      self.egress = Some(
        supervisor
          .egress_channel(&job, &network)
          .map_err(|e| checkout_failed(e, spec))?,
      );
    }
    Ok(())
  }

  /// Sends the frame to `reaper`; false when it had closed (retired) before reading it.
  fn send_to(&self, reaper: &Reaper, isolation: Option<&Plan>) -> io::Result<bool> {
    match reaper.conn.send(&self.run, &self.fds(isolation)) {
      // The reaper closed before reading the whole frame, so it cannot have started it.
      Err(e) if e.raw_os_error() == Some(libc::EPIPE) => Ok(false),
      Err(e) => Err(e),
      Ok(()) => Ok(true),
    }
  }

  /// Sends the job to a reaper (starting the supervisor or a reaper if needed), blocking,
  /// and returns the reaper it went to (no reaper to be had for `spec` is its spawn failure).
  /// `later` is done once it is on its way, if due by then.
  pub fn send(
    mut self,
    supervisor: &Supervisor,
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
    later: &mut dyn Later,
  ) -> Result<(Reaper, Outgoing), RunError> {
    self.egress_channel(supervisor, spec, isolation)?;
    let reaper = supervisor
      .checkout(supervisor.landlock_for(isolation.is_some()))
      .map_err(|e| checkout_failed(e, spec))?;
    match self.send_to(&reaper, isolation) {
      Ok(sent) => {
        later.run_if_due();
        // Unread, it reads as the `Retired` it is: `resume` takes another reaper.
        Ok((
          reaper,
          Outgoing {
            unread: !sent,
            ..self
          },
        ))
      }
      Err(e) => Err(crashed(&reaper, e)),
    }
  }

  /// Sends the job to an idle reaper without blocking (the frame must be small: an idle
  /// reaper's socket is empty, so it never fills). `Err` gives the job back when no idle
  /// reaper is at hand or the one taken had closed; nothing was started then.
  pub fn send_to_idle(
    self,
    supervisor: &Supervisor,
    isolation: Option<&Plan>,
  ) -> Result<(Reaper, Outgoing), Outgoing> {
    // A job with an allowlist asks the supervisor for its channel first: not without waiting.
    if isolation.is_some_and(|p| p.egress.is_some()) && self.egress.is_none() {
      return Err(self);
    }
    let Some(reaper) = supervisor.checkout_idle(supervisor.landlock_for(isolation.is_some()))
    else {
      return Err(self);
    };
    match self.send_to(&reaper, isolation) {
      Ok(true) => Ok((reaper, self)),
      _ => Err(self),
    }
  }
}

/// A name for each job's channel in the egress audit: unique within the process.
pub(crate) fn next_egress_job() -> u64 {
  static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
  NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A checkout's failure as the job's: a reaper that could not be made is a spawn failure
/// (exit code 126, the process limit named), a failed supervisor a crash.
fn checkout_failed(e: CheckoutError, spec: &SpawnSpec) -> RunError {
  match e {
    CheckoutError::Failed(crash) => RunError::Crashed(crash),
    CheckoutError::NoReaper(source) => classify_exec_error(spec, source).into(),
  }
}

fn crashed(reaper: &Reaper, e: io::Error) -> RunError {
  RunError::Crashed(Crash::Reaper {
    pid: reaper.pid,
    source: e.into(),
  })
}

/// What a reaper has answered so far, read without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
  /// The whole end of the job is there: [`resume`] runs to the end without blocking.
  Ended,
  /// Only progress (the spawn, the leader's exit) or nothing yet.
  Running,
  /// Anything else: a retired or failed reaper, a spawn failure, garbage. [`resume`] deals
  /// with it.
  Other,
}

/// Reads what `reaper`'s socket has now, without waiting, and says how far its job got.
pub fn answered_now(reaper: &mut Reaper) -> Answered {
  if !matches!(reaper.conn.fill_now(), Ok(true)) {
    return Answered::Other;
  }
  let mut answered = Answered::Running;
  let peeked = reaper.conn.peek_frames(|frame| {
    answered = match (answered, FromReaper::decode(frame)) {
      (Answered::Other, _) => Answered::Other,
      (_, Ok(FromReaper::TreeGone)) => Answered::Ended,
      (a, Ok(FromReaper::Spawned { .. } | FromReaper::TimedOut | FromReaper::Exited(_))) => a,
      _ => Answered::Other,
    }
  });
  if peeked.is_err() {
    return Answered::Other;
  }
  answered
}

/// The rest of [`run_blocking`] once the job is on its way to `reaper`: its first answer,
/// the job's supervision until the tree is gone, and the final drain of the pipes. `stop` is
/// `None` only when the reaper's whole answer is already read ([`Answered::Ended`]): nothing
/// is waited for then, and no stop request could change the outcome. `later` is done from the
/// waits once due (see [`run_blocking`]).
pub fn resume<R>(
  supervisor: &Supervisor,
  reaper: Reaper,
  outgoing: Outgoing,
  job: JobTerms,
  stop: Option<&StopCell<R>>,
  later: &mut dyn Later,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, RunError> {
  let cap = Capture::new(job.limits.max_output_bytes);
  let reads = if stop.is_some() {
    FINAL_READS
  } else {
    FINAL_READS_INLINE
  };
  let followed = follow(
    supervisor,
    reaper,
    outgoing,
    job,
    stop,
    later,
    |reaper, _| on_spawn(reaper),
    cap,
    reads,
  )?;
  let (stdout, stderr, truncated) = followed.sink.finish();
  Ok(Finished {
    status: followed.status,
    stdout,
    stderr,
    truncated,
    ended_by: followed.ended_by,
    duration: followed.duration,
    survivors: followed.survivors,
  })
}

/// A job followed to its end with its output read into a sink of the caller's.
pub struct Followed<R, S> {
  /// `None` only when the leader could not be reaped within the hard bound.
  pub status: Option<ExitStatus>,
  pub sink: S,
  pub ended_by: EndedBy<R>,
  /// From the send until the tree was gone.
  pub duration: Duration,
  /// Pids of the tree still alive when the hard bound gave up on them.
  pub survivors: Vec<i32>,
}

/// A job whose output streams into `sink` as it is read (a background process), on the
/// calling thread from the send to the end of its tree. `on_spawn` gets the reaper's pid and
/// the command's (the leader's) once it runs. The output cap of `job.limits` does not apply:
/// the sink bounds what it keeps.
pub fn run_streaming<R, S: Sink>(
  supervisor: &Supervisor,
  outgoing: Outgoing,
  job: JobTerms,
  stop: &StopCell<R>,
  sink: S,
  on_spawn: impl FnOnce(i32, i32),
) -> Result<Followed<R, S>, RunError> {
  let (reaper, outgoing) = outgoing.send(supervisor, job.spec, job.isolation, &mut Nothing)?;
  follow(
    supervisor,
    reaper,
    outgoing,
    job,
    Some(stop),
    &mut Nothing,
    on_spawn,
    sink,
    FINAL_READS,
  )
}

/// The job from its first answer to its end, its output into `sink`; `final_reads` bounds the
/// drain once the tree is gone. `on_spawn` gets the reaper's pid and the leader's.
#[expect(clippy::too_many_arguments)]
fn follow<R, S: Sink>(
  supervisor: &Supervisor,
  mut reaper: Reaper,
  mut outgoing: Outgoing,
  job: JobTerms,
  stop: Option<&StopCell<R>>,
  later: &mut dyn Later,
  on_spawn: impl FnOnce(i32, i32),
  sink: S,
  final_reads: usize,
) -> Result<Followed<R, S>, RunError> {
  let JobTerms {
    spec,
    isolation,
    limits,
  } = job;
  let stop = stop
    .map(StopCell::attach)
    .transpose()
    .map_err(SpawnError::Setup)?;
  let started = outgoing.started;
  let deadline = limits.timeout.and_then(|t| started.checked_add(t));
  let mut life = Lifecycle::watcher(deadline, limits.kill_grace);
  let mut retired = 0;
  let first = loop {
    let reply = if std::mem::take(&mut outgoing.unread) {
      Ok(FromReaper::Retired)
    } else {
      first_answer(supervisor, &mut reaper, &mut life, stop.as_ref(), later)
    };
    match reply {
      // An idle reaper retiring as the job came: the job was not started; take another.
      Ok(FromReaper::Retired) if retired < MAX_RETIRED => {
        retired += 1;
        reaper = supervisor
          .checkout(supervisor.landlock_for(isolation.is_some()))
          .map_err(|e| checkout_failed(e, spec))?;
        match outgoing.send_to(&reaper, isolation) {
          Ok(true) => {}
          Ok(false) => outgoing.unread = true,
          Err(e) => return Err(crashed(&reaper, e)),
        }
        life.on(Event::Resent, Instant::now());
      }
      Ok(msg) => break msg,
      Err(e) => return Err(crashed(&reaper, e)),
    }
  };
  // The reaper and the child hold the write ends now; ours would keep EOF from arriving.
  drop(outgoing.writes.take());
  drop(outgoing.stdin.take());
  let (out_r, err_r) = outgoing.reads;
  let leader = match first {
    FromReaper::Spawned { pid } => {
      life.on(Event::Spawned, Instant::now());
      pid
    }
    FromReaper::SpawnFailed { errno } => {
      life.on(Event::SpawnFailed, Instant::now());
      supervisor.checkin(reaper);
      return Err(classify_exec_error(spec, io::Error::from_raw_os_error(errno)).into());
    }
    FromReaper::PrepareFailed(failed) => {
      life.on(Event::SpawnFailed, Instant::now());
      supervisor.checkin(reaper);
      return Err(RunError::Isolation(failed));
    }
    other => {
      return Err(RunError::Crashed(Crash::Unexpected {
        pid: reaper.pid,
        message: other,
        retired,
      }));
    }
  };
  on_spawn(reaper.pid, leader);
  let mut job = AddonJob {
    pipes: Pipes::with_sink(Some(out_r), Some(err_r), sink),
    status: None,
    retired: false,
  };
  if let Err(e) = job.supervise(supervisor, &mut reaper, &mut life, stop.as_ref(), later) {
    return Err(crashed(&reaper, e));
  }
  let mut survivors = Vec::new();
  if life.settled() == Some(End::TreeGone) {
    if !job.retired {
      supervisor.checkin(reaper);
    }
  } else {
    // Past the reap bound: list what is left, and let this reaper go (it keeps killing and
    // exits; the supervisor inherits anything it leaves).
    survivors = descendants::descendants(&finn_exec::tree::scan(), reaper.pid, &|_| false)
      .iter()
      .map(|p| p.pid)
      .collect();
    tracing::warn!(?survivors, "processes survived SIGKILL past the reap bound");
  }
  job.pipes.drain_final(final_reads);
  Ok(Followed {
    status: job.status,
    sink: job.pipes.into_sink(),
    ended_by: life.take_ended_by(),
    duration: started.elapsed(),
    survivors,
  })
}

/// SIGKILLs every process of the jobs run by the reapers `reaper_pids` now, and waits (up to
/// [`EXIT_KILL_WAIT`]) until they are dead: for the host's exit, when nothing will be awaited
/// any more. Without the wait, a victim not yet scheduled (SIGKILL pending, on a busy CPU)
/// would still be running after Node has gone.
pub fn kill_trees_now(reaper_pids: &[i32]) {
  descendants::kill_and_wait(reaper_pids, Instant::now() + EXIT_KILL_WAIT);
}

/// How long the host's exit waits for the trees it SIGKILLed to be gone; bounds a process in
/// uninterruptible sleep (the reapers still finish the job once the host is gone).
pub const EXIT_KILL_WAIT: Duration = Duration::from_millis(200);

/// The reaper's first answer to a `Run`. Past the job's deadline (or once a stop is asked)
/// without one, the command may have stopped its reaper and the supervisor (it runs as their
/// user, and SIGSTOP cannot be blocked): the watcher's [`Lifecycle`] has them sent SIGCONT every
/// `NUDGE_EVERY`, and once the grace and `FALLBACK_AFTER` have passed too, has the addon kill
/// the reaper's tree itself (the machine remembers it: the job then ends as what the kill was
/// for). Past the grace by `REAP_BOUND`, the reaper counts as failed. A stop request is
/// taken here and kept by the machine until the job runs.
fn first_answer<R>(
  supervisor: &Supervisor,
  reaper: &mut Reaper,
  life: &mut Lifecycle<R>,
  stop: Option<&Attached<R>>,
  later: &mut dyn Later,
) -> io::Result<FromReaper> {
  loop {
    if let Some(frame) = reaper.conn.take_frame()? {
      return FromReaper::decode(&frame);
    }
    if reaper.conn.at_eof() {
      return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "it exited"));
    }
    let now = Instant::now();
    let due = life.on(Event::Tick, now);
    carry_out(supervisor, reaper, due)?;
    if life.settled() == Some(End::Unanswered) {
      return Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "it stopped answering",
      ));
    }
    let mut fds = [
      watch(Some(reaper.conn.raw())),
      watch(stop.map(Attached::fd)),
    ];
    poll(&mut fds, wake_for(life.next_wake(now), later));
    later.run_if_due();
    if fds[0].revents != 0 {
      reaper.conn.fill()?;
    }
    if fds[1].revents != 0
      && let Some(request) = stop.and_then(Attached::take)
    {
      // Its time is now, after the poll (not before it, or the grace would seem to have
      // passed already).
      life.on(Event::Stop(request), Instant::now());
    }
  }
}

/// SIGCONTs the job's reaper and the supervisor (harmless when they run). The command runs as
/// their user and may have stopped them; the supervisor also continues a reaper it sees
/// stopped, but not itself.
fn nudge(supervisor: &Supervisor, reaper: &Reaper) {
  let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(reaper.pid), Signal::SIGCONT);
  supervisor.nudge();
}

/// Does what the watcher's machine asks of the addon's side.
fn carry_out(supervisor: &Supervisor, reaper: &mut Reaper, actions: Actions) -> io::Result<()> {
  for action in actions.iter() {
    match action {
      Action::Nudge => nudge(supervisor, reaper),
      Action::AskTerminate { grace } => {
        nudge(supervisor, reaper);
        let msg = ToReaper::Terminate {
          grace_ms: grace.as_millis() as u64,
        };
        reaper.conn.send(&msg.encode(), &[])?;
      }
      Action::KillTree => descendants::kill_now(reaper.pid, &|_| false),
      // The reaper's own: it signals its tree and reports its timeout. A pool job is no
      // session: its machine never ends a command alone.
      Action::SignalTerm
      | Action::SignalKill
      | Action::ReportTimedOut
      | Action::EndCommand
      | Action::Background => {}
    }
  }
  Ok(())
}

struct AddonJob<S = Capture> {
  pipes: Pipes<S>,
  status: Option<ExitStatus>,
  /// The reaper retired after the job (idle past its limit before we read the end).
  retired: bool,
}

impl<S: Sink> AddonJob<S> {
  /// Until the tree is gone (or past the reap bound after a termination), as `life` says.
  /// `Err` when the reaper failed. `later` is done once due.
  fn supervise<R>(
    &mut self,
    supervisor: &Supervisor,
    reaper: &mut Reaper,
    life: &mut Lifecycle<R>,
    stop: Option<&Attached<R>>,
    later: &mut dyn Later,
  ) -> io::Result<()> {
    // Asked while the job was on its way: the stop cell's wake-up was taken then.
    forward_signals(reaper, stop)?;
    loop {
      let now = Instant::now();
      while let Some(frame) = reaper.conn.take_frame()? {
        match FromReaper::decode(&frame)? {
          FromReaper::Exited(status) => {
            self.status = Some(status);
            life.on(Event::LeaderExited, now);
          }
          // The reaper kept the deadline before the addon did (or while it could not).
          FromReaper::TimedOut => {
            life.on(Event::OwnerTimedOut, now);
          }
          FromReaper::TreeGone => {
            life.on(Event::TreeGone, now);
          }
          // The reaper went idle after this job and retired before the addon read the
          // `TreeGone` in front of it: the job is over, and the reaper is not checked in.
          FromReaper::Retired if life.settled() == Some(End::TreeGone) => self.retired = true,
          other => {
            return Err(io::Error::new(
              io::ErrorKind::InvalidData,
              format!("unexpected {other:?} while the job ran"),
            ));
          }
        }
      }
      if life.settled().is_some() {
        return Ok(());
      }
      let now = Instant::now();
      let due = life.on(Event::Tick, now);
      carry_out(supervisor, reaper, due)?;
      if life.settled().is_some() {
        return Ok(());
      }
      let mut fds = [
        watch(self.pipes.fd(0)),
        watch(self.pipes.fd(1)),
        watch(Some(reaper.conn.raw())),
        watch(stop.map(Attached::fd)),
      ];
      poll(&mut fds, wake_for(life.next_wake(now), later));
      later.run_if_due();
      for (slot, ready) in fds[..2].iter().enumerate() {
        if ready.revents != 0 && self.pipes.drain(slot) {
          let over = life.on(Event::OutputOverCap, Instant::now());
          carry_out(supervisor, reaper, over)?;
        }
      }
      if fds[2].revents != 0 && !reaper.conn.fill()? {
        return Err(io::Error::new(
          io::ErrorKind::UnexpectedEof,
          "it exited mid-job",
        ));
      }
      if fds[3].revents != 0 {
        if let Some(request) = stop.and_then(Attached::take) {
          let asked = life.on(Event::Stop(request), Instant::now());
          carry_out(supervisor, reaper, asked)?;
        }
        forward_signals(reaper, stop)?;
      }
    }
  }
}

/// Sends the reaper the signals asked for its running tree (see `StopCell::send_signal`).
fn forward_signals<R>(reaper: &mut Reaper, stop: Option<&Attached<R>>) -> io::Result<()> {
  for signo in stop.map(Attached::take_signals).unwrap_or_default() {
    reaper
      .conn
      .send(&ToReaper::Signal { signo }.encode(), &[])?;
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;
  use finn_exec::later::Nothing;
  use finn_exec::lifecycle::{FALLBACK_AFTER, Phase, REAP_BOUND};

  use finn_exec::{EndedBy, Stop};

  /// `supervise` of a job its reaper has answered, started at `start`, without a stop cell or
  /// deferred work: how it ended, and whether its tree was reported gone.
  fn supervise_plain(
    job: &mut AddonJob,
    sup: &Supervisor,
    reaper: &mut Reaper,
    limits: &RunLimits,
    start: Instant,
  ) -> (io::Result<EndedBy<()>>, bool) {
    let deadline = limits.timeout.and_then(|t| start.checked_add(t));
    let mut life = Lifecycle::watcher(deadline, limits.kill_grace);
    life.on(Event::Spawned, Instant::now());
    let ended = job
      .supervise::<()>(sup, reaper, &mut life, None, &mut Nothing)
      .map(|()| life.take_ended_by());
    (ended, life.settled() == Some(End::TreeGone))
  }
  use crate::wire::{self, Conn};

  /// What `answered_now` says after the reaper's side sent `frames` (and closed, if `close`).
  fn answered_after(frames: &[&[u8]], close: bool) -> Answered {
    let (ours, theirs) = wire::pair().unwrap();
    let theirs = Conn::new(theirs);
    if !frames.is_empty() {
      theirs.send_all(frames).unwrap();
    }
    let _open = (!close).then_some(theirs);
    answered_now(&mut Reaper::on(0, Conn::new(ours)))
  }

  /// Only a whole, well-formed end lets a job finish on Node's thread without waiting: any
  /// other answer goes to a worker thread, where waiting is allowed. A `TreeGone` behind
  /// something else (a retirement, a failed spawn, garbage) must not pass for an end: the
  /// inline finish would then wait on Node's thread for a reaper that is not running the job.
  #[test]
  fn only_a_whole_end_reads_as_ended() {
    let spawned = FromReaper::Spawned { pid: 7 }.encode();
    let exited = FromReaper::Exited(ExitStatus::Exited(0)).encode();
    let gone = FromReaper::TreeGone.encode();
    let retired = FromReaper::Retired.encode();
    let failed = FromReaper::SpawnFailed { errno: 2 }.encode();
    let timed_out = FromReaper::TimedOut.encode();
    let garbage = [0xEEu8, 1, 2];
    let cases: [(&[&[u8]], bool, Answered); 11] = [
      (&[], false, Answered::Running),
      (&[&spawned], false, Answered::Running),
      (&[&spawned, &exited], false, Answered::Running),
      (&[&spawned, &timed_out], false, Answered::Running),
      (
        &[&spawned, &timed_out, &exited, &gone],
        false,
        Answered::Ended,
      ),
      (&[&spawned, &exited, &gone], false, Answered::Ended),
      (&[&spawned, &exited, &gone], true, Answered::Ended),
      (&[&retired, &gone], false, Answered::Other),
      (&[&failed, &gone], false, Answered::Other),
      (&[&spawned, &garbage, &gone], false, Answered::Other),
      (&[], true, Answered::Other),
    ];
    for (i, (frames, close, want)) in cases.into_iter().enumerate() {
      assert_eq!(answered_after(frames, close), want, "case {i}");
    }
  }

  /// A process standing in for a reaper that never answers: a shell (`pid`) with one child
  /// (`child`). Both are killed when it is dropped, however the test ends.
  struct FakeReaper {
    shell: std::process::Child,
    pid: i32,
    child: i32,
  }

  impl FakeReaper {
    fn start() -> FakeReaper {
      let (shell, child) = super::descendants::tests::shell("sleep 1000 & echo $!; wait");
      let pid = shell.id() as i32;
      FakeReaper { shell, pid, child }
    }
  }

  impl Drop for FakeReaper {
    fn drop(&mut self) {
      let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child), Signal::SIGKILL);
      let _ = self.shell.kill();
      let _ = self.shell.wait();
    }
  }

  /// A job being supervised with `stdout` as its only open pipe, under a cap of `cap` bytes.
  fn job_reading(stdout: Option<OwnedFd>, cap: usize) -> AddonJob {
    AddonJob {
      pipes: Pipes::new(stdout, None, cap),
      status: None,
      retired: false,
    }
  }

  /// A reaper that takes the job but never reports its tree gone (stopped again and again,
  /// say): past the deadline it is asked to terminate; once the grace and [`FALLBACK_AFTER`]
  /// have passed (not before) the addon SIGKILLs its tree itself; and the job ends as a
  /// timeout at the grace plus [`REAP_BOUND`]. Takes about 10.5 s, the bound itself.
  #[test]
  fn a_job_whose_tree_is_never_reported_gone_is_killed_then_given_up() {
    let reaper_process = FakeReaper::start();
    let (fake, child) = (reaper_process.pid, reaper_process.child);
    let (ours, theirs) = wire::pair().unwrap();
    // Output during the grace wakes the addon between its planned wake-ups: the kill must
    // still wait for the grace and FALLBACK_AFTER.
    let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap();
    let (timeout, grace) = (Duration::from_millis(200), Duration::from_millis(300));
    let start = Instant::now();
    let supervising = std::thread::spawn(move || {
      let sup = Supervisor::new("/nonexistent/finn-supervisor".into());
      let mut reaper = Reaper::on(fake, Conn::new(ours));
      let mut job = job_reading(Some(out_r), 1024);
      let limits = RunLimits {
        timeout: Some(timeout),
        max_output_bytes: 1024,
        kill_grace: grace,
      };
      let (ended, tree_gone) = supervise_plain(&mut job, &sup, &mut reaper, &limits, start);
      (ended, start.elapsed(), tree_gone)
    });
    let kill_at = timeout + grace;
    // Within the grace, after kill_at - FALLBACK_AFTER: a kill now would be early.
    std::thread::sleep(
      (start + kill_at - FALLBACK_AFTER / 5).saturating_duration_since(Instant::now()),
    );
    nix::unistd::write(&out_w, b"still here\n").unwrap();
    let killed = dead_after(child, start, Duration::from_secs(5));
    assert!(
      killed >= kill_at + FALLBACK_AFTER
        && killed < kill_at + FALLBACK_AFTER + Duration::from_millis(500),
      "the tree was killed {killed:?} after the start"
    );
    let (ended, gave_up, tree_gone) = supervising.join().unwrap();
    assert!(matches!(ended, Ok(EndedBy::Timeout)), "{ended:?}");
    assert!(!tree_gone);
    assert!(
      gave_up >= kill_at + REAP_BOUND && gave_up < kill_at + REAP_BOUND + Duration::from_secs(2),
      "gave up after {gave_up:?}"
    );
    // The reaper was asked to terminate with the job's grace.
    let mut theirs = Conn::new(theirs);
    let frame = theirs.recv().unwrap().expect("a Terminate");
    assert!(matches!(
      ToReaper::decode(&frame),
      Ok(ToReaper::Terminate { grace_ms: 300 })
    ));
  }

  /// A `Retired` is the end of a reaper only behind its job's `TreeGone`. Before it, the reaper
  /// is confused (or the frames forged): the job fails at once as a crashed reaper, instead of
  /// waiting for a `TreeGone` that will not come (with the guard gone, this waited for the
  /// timeout, the grace and the 10 s reap bound, then settled as a timeout).
  #[test]
  fn a_retirement_in_the_middle_of_a_job_fails_it_at_once() {
    let fake = FakeReaper::start();
    let (ours, theirs) = wire::pair().unwrap();
    let theirs = Conn::new(theirs);
    theirs.send_all(&[&FromReaper::Retired.encode()]).unwrap();
    let sup = Supervisor::new("/nonexistent/finn-supervisor".into());
    let mut reaper = Reaper::on(fake.pid, Conn::new(ours));
    let mut job = job_reading(None, 1024);
    let limits = RunLimits {
      timeout: Some(Duration::from_millis(200)),
      max_output_bytes: 1024,
      kill_grace: Duration::from_millis(100),
    };
    let start = Instant::now();
    let (ended, tree_gone) = supervise_plain(&mut job, &sup, &mut reaper, &limits, start);
    let took = start.elapsed();
    let err = ended.expect_err("a retirement before TreeGone");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(!job.retired && !tree_gone);
  }

  /// A job whose reaper kept the deadline (its `TimedOut` before the leader's end) is a
  /// timeout, even when the addon's own deadline is far (it could not look in time); an
  /// output cap hit first stays what ended it.
  #[test]
  fn a_deadline_kept_by_the_reaper_ends_the_job_as_a_timeout() {
    let frames = [
      FromReaper::TimedOut.encode(),
      FromReaper::Exited(ExitStatus::Signaled(libc::SIGTERM)).encode(),
      FromReaper::TreeGone.encode(),
    ];
    let limits = RunLimits {
      timeout: Some(Duration::from_secs(60)),
      max_output_bytes: 4,
      kill_grace: Duration::ZERO,
    };
    let sup = Supervisor::new("/nonexistent/finn-supervisor".into());
    for flood in [false, true] {
      let (ours, theirs) = wire::pair().unwrap();
      let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap();
      if flood {
        nix::unistd::write(&out_w, b"more than four bytes").unwrap();
      }
      drop(out_w);
      let mut job = job_reading(Some(out_r), 4);
      // Flooded, the reaper's frames come once the addon has asked it to terminate for the
      // cap: the cap is seen before the `TimedOut`.
      let mut theirs = Conn::new(theirs);
      let mut reaper = Reaper::on(0, Conn::new(ours));
      let frames = frames.clone();
      let sent = std::thread::spawn(move || {
        if flood {
          let asked = theirs.recv().unwrap().expect("a Terminate");
          assert!(matches!(
            ToReaper::decode(&asked),
            Ok(ToReaper::Terminate { grace_ms: 0 })
          ));
        }
        theirs
          .send_all(&[&frames[0], &frames[1], &frames[2]])
          .unwrap();
        theirs
      });
      let (ended, _) = supervise_plain(&mut job, &sup, &mut reaper, &limits, Instant::now());
      let want = if flood {
        EndedBy::OutputLimit
      } else {
        EndedBy::Timeout
      };
      assert_eq!(ended.unwrap(), want);
      assert_eq!(job.status, Some(ExitStatus::Signaled(libc::SIGTERM)));
      drop(sent.join().unwrap());
    }
  }

  /// The state letter of `pid` from /proc (`None`: gone).
  fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
  }

  /// Polls /proc until `pid` is dead (a zombie or gone); the time it took from `since`.
  fn dead_after(pid: i32, since: Instant, bound: Duration) -> Duration {
    while state(pid).is_some_and(|s| s != 'Z' && s != 'X') {
      assert!(since.elapsed() < bound, "{pid} still alive after {bound:?}");
      std::thread::sleep(Duration::from_millis(2));
    }
    since.elapsed()
  }

  /// A reaper that never answers its `Run` (here a stopped shell with a child, on a socket
  /// nobody writes): past the deadline it is continued at once, its tree is SIGKILLed by the
  /// addon once the grace and [`FALLBACK_AFTER`] have passed (not before: the reaper's own
  /// TERM and grace come first when it answers), and the wait gives up only at the grace plus
  /// [`REAP_BOUND`]. Takes about 10.5 s, the bound itself.
  #[test]
  fn a_reaper_that_never_answers_is_continued_then_its_tree_killed_then_given_up() {
    let reaper_process = FakeReaper::start();
    let (fake, child) = (reaper_process.pid, reaper_process.child);
    let pid = nix::unistd::Pid::from_raw(fake);
    nix::sys::signal::kill(pid, Signal::SIGSTOP).unwrap();
    while state(fake) != Some('T') {
      std::thread::sleep(Duration::from_millis(1));
    }
    let (ours, theirs) = wire::pair().unwrap();
    let grace = Duration::from_millis(500);
    let start = Instant::now();
    let waiting = std::thread::spawn(move || {
      // Never started: nudging it does nothing, the reaper gets the SIGCONTs.
      let sup = Supervisor::new("/nonexistent/finn-supervisor".into());
      let mut reaper = Reaper::on(fake, Conn::new(ours));
      let mut life = Lifecycle::<()>::watcher(Some(start), grace);
      let answer = first_answer(&sup, &mut reaper, &mut life, None, &mut Nothing);
      (answer, start.elapsed(), life.settled())
    });
    // Continued at the first look past the deadline (which is the start).
    while state(fake) == Some('T') {
      assert!(
        start.elapsed() < Duration::from_millis(500),
        "never continued"
      );
      std::thread::sleep(Duration::from_millis(1));
    }
    let killed = dead_after(child, start, Duration::from_secs(3));
    assert!(
      killed >= grace + FALLBACK_AFTER
        && killed < grace + FALLBACK_AFTER + Duration::from_millis(500),
      "the tree was killed {killed:?} after the deadline"
    );
    let (answer, gave_up, settled) = waiting.join().unwrap();
    assert_eq!(settled, Some(End::Unanswered));
    let err = answer.expect_err("no answer can come");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(
      gave_up >= grace + REAP_BOUND && gave_up < grace + REAP_BOUND + Duration::from_secs(2),
      "gave up after {gave_up:?}"
    );
    drop(theirs);
  }

  /// A job whose tree the addon killed while the reaper had not answered (stopped, and stopped
  /// again, by its command past the deadline) ends as what the kill was for: the reaper,
  /// continued, then reports the leader dead by SIGKILL and the tree gone, which alone reads as
  /// an exit. Past the deadline that is a timeout; after a stop request, that stop (seen by
  /// `a_command_that_stops_its_reaper_or_the_supervisor_still_times_out_and_leaves_nothing`
  /// when a job settled `Exit` with the SIGKILL's status). Here the reaper answers only once
  /// `first_answer` has killed its tree.
  #[test]
  fn a_tree_killed_before_the_first_answer_ends_the_job_as_its_timeout_or_stop() {
    let frames = [
      FromReaper::Spawned { pid: 1 }.encode(),
      FromReaper::Exited(ExitStatus::Signaled(libc::SIGKILL)).encode(),
      FromReaper::TreeGone.encode(),
    ];
    let limits = RunLimits {
      timeout: Some(Duration::from_millis(1)),
      max_output_bytes: 1024,
      kill_grace: Duration::ZERO,
    };
    let sup = Supervisor::new("/nonexistent/finn-supervisor".into());
    for (request, want) in [
      (None, EndedBy::Timeout),
      (Some("abort"), EndedBy::Stopped("abort")),
    ] {
      let fake = FakeReaper::start();
      let (ours, theirs) = wire::pair().unwrap();
      let (child, answer) = (fake.child, frames.clone());
      let start = Instant::now();
      let answering = std::thread::spawn(move || {
        dead_after(child, start, Duration::from_secs(5));
        Conn::new(theirs)
          .send_all(&[&answer[0], &answer[1], &answer[2]])
          .unwrap();
      });
      let mut reaper = Reaper::on(fake.pid, Conn::new(ours));
      let cell = StopCell::new();
      if let Some(reason) = request {
        cell.request(Stop {
          grace: Duration::ZERO,
          reason,
        });
      }
      let stop = cell.attach().unwrap();
      let mut life =
        Lifecycle::watcher(start.checked_add(Duration::from_millis(1)), Duration::ZERO);
      let first = first_answer(&sup, &mut reaper, &mut life, Some(&stop), &mut Nothing).unwrap();
      assert!(matches!(first, FromReaper::Spawned { .. }), "{first:?}");
      assert!(matches!(life.phase(), Phase::Sending { killed: true, .. }));
      life.on(Event::Spawned, Instant::now());
      let mut job = job_reading(None, 1024);
      job
        .supervise(&sup, &mut reaper, &mut life, Some(&stop), &mut Nothing)
        .unwrap();
      assert_eq!(life.take_ended_by(), want);
      assert_eq!(job.status, Some(ExitStatus::Signaled(libc::SIGKILL)));
      answering.join().unwrap();
      // Not killed by the addon, the same frames are the leader's own end.
      let (ours, theirs) = wire::pair().unwrap();
      Conn::new(theirs)
        .send_all(&[&frames[1], &frames[2]])
        .unwrap();
      let mut reaper = Reaper::on(0, Conn::new(ours));
      let (ended, _) = supervise_plain(
        &mut job_reading(None, 1024),
        &sup,
        &mut reaper,
        &limits,
        Instant::now(),
      );
      assert_eq!(ended.unwrap(), EndedBy::Exit);
    }
  }
}
