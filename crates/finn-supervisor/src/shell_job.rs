//! A session's shell as a job of one of the supervisor's reapers, from the addon's side.
//!
//! The shell is the job's leader: the reaper is its subreaper, so everything the session's
//! commands start stays below the reaper (double forks and `setsid` escapees included), and
//! the reaper kills it all when the addon or the supervisor goes away, as for any job. The job
//! has no deadline of its own; a command's time is kept by the session's driver, which asks
//! for [`ToReaper::EndCommand`] (every process of the tree but the shell is SIGKILLed, found
//! by the reaper's tree walk) or ends the whole job ([`ShellJob::end`]).
//!
//! The shell's pipes to the driver are fifos in the session's private directory, named in the
//! spec's arguments (bash opens them itself): a reaper's `Run` carries a command's stdout and
//! stderr, nothing more, and an isolated start closes every other descriptor before `exec`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::client::{CheckoutError, Reaper, Supervisor};
use super::protocol::{FromReaper, ToReaper};
use finn_exec::poll::{poll, watch};
use finn_exec::{ExitStatus, SpawnSpec, pidfd};
use finn_isolate::{LayerFailed, Plan};

/// Reapers that may turn out retired under one start before it gives up (as `run.rs`).
const MAX_RETIRED: usize = 64;

/// How long [`ShellJob::end`] waits for the reaper to report the tree gone.
pub const END_BOUND: Duration = Duration::from_secs(10);

/// Why a shell did not start.
#[derive(Debug, thiserror::Error)]
pub enum ShellStartError {
  #[error("no reaper: {0}")]
  Checkout(String),
  #[error("start the shell: {0}")]
  Spawn(io::Error),
  #[error(transparent)]
  Isolation(LayerFailed),
  #[error("the reaper failed: {0}")]
  Reaper(io::Error),
}

/// A running shell and the reaper that holds it.
pub struct ShellJob {
  reaper: Reaper,
  /// The shell's pid.
  pub pid: i32,
  /// The reaper's pid: every process of the session is its descendant.
  pub reaper_pid: i32,
  /// The shell's pidfd (`None` where the kernel has none): readable as soon as it exits,
  /// before its reaper has said so.
  pidfd: Option<OwnedFd>,
  status: Option<ExitStatus>,
  gone: bool,
  /// The reaper's answer to the last [`Self::end_command`]: the command's tree is gone.
  command_ended: bool,
}

impl ShellJob {
  /// Starts `spec` (the shell) under a reaper of `supervisor`, with `isolation` applied to its
  /// start; returns once it runs.
  pub fn start(
    supervisor: &Supervisor,
    spec: &SpawnSpec,
    isolation: Option<&Plan>,
  ) -> Result<ShellJob, ShellStartError> {
    let null = open(
      "/dev/null",
      OFlag::O_WRONLY | OFlag::O_CLOEXEC,
      Mode::empty(),
    )
    .map_err(|e| ShellStartError::Spawn(e.into()))?;
    let frame = ToReaper::encode_run(spec, 0, 0, None, isolation, false);
    let mut fds: Vec<RawFd> = vec![null.as_raw_fd(), null.as_raw_fd()];
    fds.extend(isolation.map(|p| p.checked.raw_fds()).unwrap_or_default());
    // A session with an allowlist: its shell's channel to the egress proxy, attached last.
    let egress = match isolation.and_then(|p| p.egress.as_ref()) {
      Some(network) => {
        let network = serde_json::to_string(network).expect("options always serialize");
        let job = format!(
          "{}:session:{}",
          std::process::id(),
          super::run::next_egress_job()
        );
        Some(
          supervisor
            .egress_channel(&job, &network)
            .map_err(|e| match e {
              CheckoutError::Failed(crash) => ShellStartError::Checkout(crash.to_string()),
              CheckoutError::NoReaper(e) => ShellStartError::Checkout(e.to_string()),
            })?,
        )
      }
      None => None,
    };
    fds.extend(egress.as_ref().map(AsRawFd::as_raw_fd));
    for _ in 0..MAX_RETIRED {
      let mut reaper = supervisor
        .checkout(supervisor.landlock_for(isolation.is_some()))
        .map_err(|e| match e {
          CheckoutError::Failed(crash) => ShellStartError::Checkout(crash.to_string()),
          CheckoutError::NoReaper(e) => ShellStartError::Checkout(e.to_string()),
        })?;
      match reaper.conn.send(&frame, &fds) {
        Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
        Err(e) => return Err(ShellStartError::Reaper(e)),
        Ok(()) => {}
      }
      let answer = match reaper.conn.recv() {
        Ok(Some(frame)) => FromReaper::decode(&frame).map_err(ShellStartError::Reaper)?,
        // Closed before answering: it retired as the job came.
        Ok(None) => continue,
        Err(e) => return Err(ShellStartError::Reaper(e)),
      };
      return match answer {
        FromReaper::Spawned { pid } => Ok(ShellJob {
          reaper_pid: reaper.pid,
          reaper,
          pid,
          // The shell is the reaper's child: its pid names it until the reaper reaps it, and
          // then the reaper's `Exited` comes.
          pidfd: pidfd::open(pid).ok(),
          status: None,
          gone: false,
          command_ended: false,
        }),
        FromReaper::Retired => continue,
        FromReaper::SpawnFailed { errno } => {
          Err(ShellStartError::Spawn(io::Error::from_raw_os_error(errno)))
        }
        FromReaper::PrepareFailed(failed) => Err(ShellStartError::Isolation(failed)),
        other => Err(ShellStartError::Reaper(io::Error::new(
          io::ErrorKind::InvalidData,
          format!("unexpected answer {other:?}"),
        ))),
      };
    }
    Err(ShellStartError::Checkout(
      "every reaper retired before the start".into(),
    ))
  }

  /// Readable when the reaper has something to say (the shell's exit, the tree gone) or has
  /// died.
  pub fn fd(&self) -> RawFd {
    self.reaper.conn.raw()
  }

  /// Reads what the reaper said; the shell's status once it has exited. A reaper that is gone
  /// reads as a shell killed by SIGKILL (the reaper killed its tree as it went).
  pub fn poll_exit(&mut self) -> Option<ExitStatus> {
    if self.status.is_none() && !self.gone {
      if !matches!(self.reaper.conn.fill_now(), Ok(true)) {
        self.gone = true;
      }
      while let Ok(Some(frame)) = self.reaper.conn.take_frame() {
        match FromReaper::decode(&frame) {
          Ok(FromReaper::Exited(status)) => self.status = Some(status),
          Ok(FromReaper::TreeGone) => self.gone = true,
          Ok(FromReaper::CommandEnded { .. }) => self.command_ended = true,
          _ => {}
        }
      }
    }
    if self.gone && self.status.is_none() {
      self.status = Some(ExitStatus::Signaled(libc::SIGKILL));
    }
    self.status
  }

  /// Whether the shell is known to have exited: its status, waiting for the reaper's report
  /// when the shell's pidfd already says it is gone (a shell killed between two commands is
  /// then seen before the next is sent to it).
  pub fn exited(&mut self) -> Option<ExitStatus> {
    if let Some(status) = self.poll_exit() {
      return Some(status);
    }
    if !self.pidfd.as_ref().is_some_and(pidfd::exited) {
      return None;
    }
    let until = Instant::now() + END_BOUND;
    while self.status.is_none() && !self.gone {
      let mut fds = [watch(Some(self.reaper.conn.raw()))];
      poll(&mut fds, Some(until));
      if fds[0].revents == 0 {
        self.gone = true;
      }
      self.poll_exit();
    }
    self.poll_exit()
  }

  /// SIGKILLs every process of the session but the shell (a command's tree); the reaper
  /// answers once they are gone ([`Self::command_ended`]).
  pub fn end_command(&mut self) {
    self.command_ended = false;
    let _ = self.reaper.conn.send(&ToReaper::EndCommand.encode(), &[]);
  }

  /// Terminates the whole tree, the shell included: SIGTERM now, SIGKILL after `grace` (zero:
  /// SIGKILL now); a second call can bring the SIGKILL forward. The shell's exit and the
  /// tree's end are reported as for any end.
  pub fn terminate(&mut self, grace: Duration) {
    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    let _ = self
      .reaper
      .conn
      .send(&ToReaper::Terminate { grace_ms }.encode(), &[]);
  }

  /// Sends `signo` to every process of the tree (frozen first), the shell included.
  pub fn signal(&mut self, signo: i32) {
    let _ = self
      .reaper
      .conn
      .send(&ToReaper::Signal { signo }.encode(), &[]);
  }

  /// Whether the reaper has answered the last [`Self::end_command`] (read by [`Self::poll_exit`]).
  pub fn command_ended(&self) -> bool {
    self.command_ended
  }

  /// SIGKILLs the whole tree, the shell included, and waits (up to [`END_BOUND`]) until the
  /// reaper reports it gone; the reaper then goes back to the supervisor's stock. Returns
  /// whether the tree is known to be gone.
  pub fn end(mut self, supervisor: &Supervisor) -> bool {
    if !self.gone {
      let _ = self
        .reaper
        .conn
        .send(&ToReaper::Terminate { grace_ms: 0 }.encode(), &[]);
    }
    let until = Instant::now() + END_BOUND;
    while !self.gone {
      let mut fds = [watch(Some(self.reaper.conn.raw()))];
      poll(&mut fds, Some(until));
      if fds[0].revents == 0 {
        // The reaper does not answer: dropping its socket makes it kill the tree and exit.
        return false;
      }
      if !matches!(self.reaper.conn.fill(), Ok(true)) {
        // The reaper exited, which it does only with its tree dead or left to the supervisor.
        return true;
      }
      while let Ok(Some(frame)) = self.reaper.conn.take_frame() {
        if let Ok(FromReaper::TreeGone) = FromReaper::decode(&frame) {
          supervisor.checkin(self.reaper);
          return true;
        }
      }
    }
    true
  }
}
