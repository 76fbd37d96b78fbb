//! One child from spawn to a dead tree: capture, timeout, caller stops, termination.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::pin;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::{Instant, sleep_until};

use super::capture::{Capture, Pushed, Stream};
use super::outcome::{EndedBy, Finished};
use super::spawn::{SpawnError, SpawnSpec, spawn};
use super::{pidfd, tree};

/// After SIGKILL, how long to wait for the tree to disappear before giving up on it (a child
/// stuck in uninterruptible sleep). The caller is answered then; reaping goes on in the
/// background.
pub const REAP_BOUND: Duration = Duration::from_secs(10);

const READ_CHUNK: usize = 32 * 1024;

#[derive(Debug, Clone)]
pub struct Limits {
  /// Counted from spawn. `None`: no timeout.
  pub timeout: Option<Duration>,
  /// Cap on stdout+stderr bytes, marker included.
  pub max_output_bytes: usize,
  /// SIGTERM-to-SIGKILL grace after a timeout.
  pub kill_grace: Duration,
}

/// A caller's request to stop a running child.
#[derive(Debug, Clone)]
pub struct Stop<R> {
  /// Time between SIGTERM and SIGKILL; zero kills at once.
  pub grace: Duration,
  pub reason: R,
}

/// Runs `spec` to the end. `stop` resolving asks for termination (abort, shutdown); it is
/// polled until it resolves once, and during a timeout's grace it can bring SIGKILL forward.
///
/// Returns once the leader is reaped and, if the run was stopped, no process of its tree is
/// left (or [`REAP_BOUND`] passed after SIGKILL).
///
/// `on_spawn` receives the leader's pid (= its pgid and sid) right after the spawn, so a caller
/// can reach the tree synchronously, e.g. with [`kill_tree_now`] when the host process exits.
pub async fn run<R, F>(
  spec: &SpawnSpec,
  limits: &Limits,
  stop: F,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, SpawnError>
where
  F: Future<Output = Stop<R>>,
{
  let started = Instant::now();
  let mut child = spawn(spec)?;
  let leader = child.pid();
  on_spawn(leader.as_raw());
  let mut stdout = child.stdout.take();
  let mut stderr = child.stderr.take();
  let mut capture = Capture::new(limits.max_output_bytes);
  let mut out_buf = vec![0u8; READ_CHUNK];
  let mut err_buf = vec![0u8; READ_CHUNK];

  let far = started + Duration::from_secs(86_400 * 365);
  let deadline = limits
    .timeout
    .and_then(|t| started.checked_add(t))
    .unwrap_or(far);
  let mut timeout = pin!(sleep_until(deadline));
  let mut stop = pin!(stop);
  let mut stop_pending = true;
  let mut ended_by: Option<EndedBy<R>> = None;
  let mut term: Option<Terminator> = None;
  let mut survivors = Vec::new();
  // The leader could not be waited for (someone else reaped it): end once its tree is gone.
  let mut lost = false;

  loop {
    let reaped = child.status().is_some();
    match &mut term {
      None if reaped && stdout.is_none() && stderr.is_none() => {
        ended_by = Some(EndedBy::Exit);
        break;
      }
      Some(t) if (reaped || lost) && t.tree_gone() => break,
      _ => {}
    }
    let tick_at = term.as_ref().map_or(far, Terminator::next_wake);

    tokio::select! {
      read = read_pipe(&mut stdout, &mut out_buf), if stdout.is_some() => {
        if on_read(read, &mut stdout, &mut capture, Stream::Stdout, &out_buf) && term.is_none() {
          ended_by = Some(EndedBy::OutputLimit);
          term = Some(Terminator::start(leader, Duration::ZERO));
        }
      }
      read = read_pipe(&mut stderr, &mut err_buf), if stderr.is_some() => {
        if on_read(read, &mut stderr, &mut capture, Stream::Stderr, &err_buf) && term.is_none() {
          ended_by = Some(EndedBy::OutputLimit);
          term = Some(Terminator::start(leader, Duration::ZERO));
        }
      }
      waited = child.wait(), if !reaped && !lost => {
        if let Err(e) = waited {
          tracing::warn!(error = %e, "waiting for the child failed");
          lost = true;
          term.get_or_insert_with(|| Terminator::start(leader, Duration::ZERO));
        }
      }
      () = &mut timeout, if term.is_none() && limits.timeout.is_some() => {
        ended_by = Some(EndedBy::Timeout);
        term = Some(Terminator::start(leader, limits.kill_grace));
      }
      request = &mut stop, if stop_pending => {
        stop_pending = false;
        match &mut term {
          // Already terminating: only bring the SIGKILL forward.
          Some(t) => t.shorten_grace(request.grace),
          None => {
            ended_by = Some(EndedBy::Stopped(request.reason));
            term = Some(Terminator::start(leader, request.grace));
          }
        }
      }
      () = sleep_until(tick_at), if term.is_some() => {
        if let Some(t) = &mut term
          && let Some(left) = t.on_tick(reaped)
        {
          survivors = left;
          break;
        }
      }
    }
  }

  // Whatever the dead tree left buffered in the pipes (a stderr line written during a flood).
  // Bounded: a survivor past the reap bound could write forever.
  for (pipe, stream) in [(&stdout, Stream::Stdout), (&stderr, Stream::Stderr)] {
    let Some(p) = pipe else { continue };
    for _ in 0..64 {
      match p.try_read(&mut out_buf) {
        Ok(n) if n > 0 => {
          capture.push(stream, &out_buf[..n]);
        }
        _ => break,
      }
    }
  }
  let status = child.status();
  if status.is_none() && !lost {
    // Gave up after SIGKILL: keep reaping in the background so no zombie is left.
    tokio::spawn(async move {
      let _ = child.wait().await;
    });
  }
  let (stdout, stderr, truncated) = capture.finish();
  Ok(Finished {
    status,
    stdout,
    stderr,
    truncated,
    ended_by: ended_by.unwrap_or(EndedBy::Exit),
    duration: started.elapsed(),
    survivors,
  })
}

async fn read_pipe(pipe: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> io::Result<usize> {
  match pipe {
    Some(p) => p.read(buf).await,
    None => std::future::pending().await,
  }
}

/// Handles one read; returns true when this read went over the output cap.
fn on_read(
  read: io::Result<usize>,
  pipe: &mut Option<pipe::Receiver>,
  capture: &mut Capture,
  stream: Stream,
  buf: &[u8],
) -> bool {
  match read {
    Ok(0) | Err(_) => {
      *pipe = None;
      false
    }
    Ok(n) => capture.push(stream, &buf[..n]) == Pushed::Overflowed,
  }
}

/// SIGKILLs the tree led by `leader` at once, escapees included, without waiting: for the
/// host's exit, when nothing will be awaited any more.
pub fn kill_tree_now(leader: i32) {
  Terminator::start(Pid::from_raw(leader), Duration::ZERO);
}

/// The TERM -> grace -> KILL sequence for one tree, and the check that it is gone.
struct Terminator {
  leader: Pid,
  kill_at: Instant,
  killed: bool,
  give_up_at: Option<Instant>,
  next_check: Instant,
  checks: u32,
  escapees: Vec<Escapee>,
}

struct Escapee {
  pid: i32,
  pidfd: OwnedFd,
}

impl Terminator {
  fn start(leader: Pid, grace: Duration) -> Self {
    let now = Instant::now();
    let mut t = Terminator {
      leader,
      kill_at: now + grace,
      killed: false,
      give_up_at: None,
      next_check: now + Duration::from_millis(1),
      checks: 0,
      escapees: Vec::new(),
    };
    if grace.is_zero() {
      t.kill();
    } else {
      t.signal(Signal::SIGTERM);
    }
    t
  }

  fn kill(&mut self) {
    self.signal(Signal::SIGKILL);
    self.killed = true;
    self.give_up_at = Some(Instant::now() + REAP_BOUND);
  }

  fn shorten_grace(&mut self, grace: Duration) {
    self.kill_at = self.kill_at.min(Instant::now() + grace);
  }

  /// Signals the whole tree. It is frozen first (SIGSTOP to the group, then to every escapee
  /// found in /proc, until a scan finds no new one): a stopped process can neither fork nor
  /// die, so parent links stay intact while the tree is walked. Then the signal, then SIGCONT
  /// so that stopped processes act on it.
  fn signal(&mut self, signal: Signal) {
    let _ = killpg(self.leader, Signal::SIGSTOP);
    for _ in 0..8 {
      let procs = tree::scan();
      let mut found_new = false;
      for pid in tree::escapees(&procs, self.leader.as_raw()) {
        if self.escapees.iter().any(|e| e.pid == pid) {
          continue;
        }
        if let Ok(pidfd) = pidfd::open(pid) {
          pidfd::send_signal(&pidfd, Signal::SIGSTOP);
          self.escapees.push(Escapee { pid, pidfd });
          found_new = true;
        }
      }
      if !found_new {
        break;
      }
    }
    for sig in [signal, Signal::SIGCONT] {
      let _ = killpg(self.leader, sig);
      for e in &self.escapees {
        pidfd::send_signal(&e.pidfd, sig);
      }
    }
  }

  fn next_wake(&self) -> Instant {
    let phase_end = if self.killed {
      self.give_up_at.unwrap_or(self.kill_at)
    } else {
      self.kill_at
    };
    self.next_check.min(phase_end)
  }

  /// Escalates when the grace is over; returns the survivors when the hard bound is reached.
  fn on_tick(&mut self, leader_reaped: bool) -> Option<Vec<i32>> {
    let now = Instant::now();
    if !self.killed && now >= self.kill_at {
      self.kill();
    } else if self.killed && !leader_reaped {
      // Something may have been forked between the scan and the kill: look again.
      self.signal(Signal::SIGKILL);
    }
    if let Some(limit) = self.give_up_at
      && now >= limit
    {
      let mut left: Vec<i32> = self
        .escapees
        .iter()
        .filter(|e| !pidfd::exited(&e.pidfd))
        .map(|e| e.pid)
        .collect();
      let procs = tree::scan();
      left.extend(
        procs
          .iter()
          .filter(|p| p.pgrp == self.leader.as_raw() && !p.zombie)
          .map(|p| p.pid),
      );
      tracing::warn!(?left, "processes survived SIGKILL past the reap bound");
      return Some(left);
    }
    // Back off from 1 ms to 16 ms: quick for trees that obey, cheap for ones that linger.
    self.checks += 1;
    self.next_check = now + Duration::from_millis(1 << self.checks.min(4));
    None
  }

  /// True when no process of the tree is left. Only meaningful once the leader is reaped.
  fn tree_gone(&self) -> bool {
    if self.escapees.iter().any(|e| !pidfd::exited(&e.pidfd)) {
      return false;
    }
    match killpg(self.leader, None) {
      Err(Errno::ESRCH) => true,
      // Members left, or only zombies that a non-reaping init keeps in the group.
      _ if self.checks >= 3 => !tree::group_alive(&tree::scan(), self.leader.as_raw()),
      _ => false,
    }
  }
}
