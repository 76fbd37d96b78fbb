//! The TERM -> grace -> KILL sequence for one process tree, escapees included, and the check
//! that the tree is gone. A run drives it from its poll loop (`run.rs`); [`kill_tree_now`]
//! uses it once, without waiting, for the host's exit.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{pidfd, tree};

/// After SIGKILL, how long to wait for the tree to disappear before giving up on it (a child
/// stuck in uninterruptible sleep). The caller is answered then; reaping goes on in the
/// background.
pub const REAP_BOUND: Duration = Duration::from_secs(10);

/// SIGKILLs the tree led by `leader` at once, escapees included, without waiting: for the
/// host's exit, when nothing will be awaited any more.
pub fn kill_tree_now(leader: i32) {
  Terminator::start(Pid::from_raw(leader), Duration::ZERO);
}

/// The TERM -> grace -> KILL sequence for one tree, and the check that it is gone.
pub(super) struct Terminator {
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
  pub(super) fn start(leader: Pid, grace: Duration) -> Self {
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

  pub(super) fn shorten_grace(&mut self, grace: Duration) {
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

  pub(super) fn next_wake(&self) -> Instant {
    let phase_end = if self.killed {
      self.give_up_at.unwrap_or(self.kill_at)
    } else {
      self.kill_at
    };
    self.next_check.min(phase_end)
  }

  /// Escalates when the grace is over; returns the survivors when the hard bound is reached.
  pub(super) fn on_tick(&mut self, leader_reaped: bool) -> Option<Vec<i32>> {
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
  pub(super) fn tree_gone(&self) -> bool {
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
