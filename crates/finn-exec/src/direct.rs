//! A test fixture, compiled only with the `test-hooks` feature: one command run from this
//! process without the supervisor, contained by its process group and a `/proc` walk only.
//! The tests and the bench hold the supervisor against it (`FINN_TEST_DIRECT=1` in
//! `tests/supervisor.rs`, `FINN_SANDBOX_SUPERVISOR=off` for a pool). No shipped job takes it.
//!
//! It drives the owner's [`Lifecycle`] like the reaper does, without a drain (the job ends once
//! the leader is reaped and both pipes are closed); what differs is only how the tree is
//! signalled and found gone, here by process group and escapees' pidfds.

use std::os::fd::OwnedFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::lifecycle::{Action, Actions, End, Event, Lifecycle, Phase, backoff};
use super::outcome::Finished;
use super::pipes::{Pipes, READS_PER_WAKE};
use super::poll::{earliest, poll, watch};
use super::spawn::{SpawnError, SpawnSpec, spawn};
use super::stop::StopCell;
use super::{RunLimits, pidfd, tree};

/// Runs `spec` to the end on the calling thread. A request in `stop` asks for termination.
///
/// Returns once the leader is reaped and, if the run was stopped, no process of its tree is
/// left (or [`super::REAP_BOUND`] passed after SIGKILL). `on_spawn` receives the leader's pid
/// (= its pgid and sid) right after the spawn.
pub fn run_blocking<R>(
  spec: &SpawnSpec,
  limits: &RunLimits,
  stop: &StopCell<R>,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, SpawnError> {
  let stop = stop.attach().map_err(SpawnError::Setup)?;
  let started = Instant::now();
  let mut child = spawn(spec)?;
  let leader = child.pid();
  on_spawn(leader.as_raw());
  let mut pipes = Pipes::new(
    child.stdout.take(),
    child.stderr.take(),
    limits.max_output_bytes,
  );
  let deadline = limits.timeout.and_then(|t| started.checked_add(t));
  let mut life = Lifecycle::owner(deadline, limits.kill_grace, None);
  let mut group = Group::new(leader);
  let mut survivors = Vec::new();
  // The leader could not be waited for (someone else reaped it): end once its tree is gone.
  let mut lost = false;
  // Without a subreaper nothing says when the tree is gone: while terminating, it is looked
  // for at these times.
  let mut probe_at: Option<Instant> = None;

  loop {
    let reaped = child.status().is_some();
    let terminating = matches!(life.phase(), Phase::Terminating(_));
    let now = Instant::now();
    let gone = if terminating || lost {
      (reaped || lost) && group.gone()
    } else {
      reaped && pipes.fd(0).is_none() && pipes.fd(1).is_none()
    };
    if gone {
      life.on(Event::TreeGone, now);
      break;
    }
    let due = life.on(Event::Tick, now);
    group.carry_out(due);
    if life.settled() == Some(End::GaveUp) {
      survivors = group.survivors();
      break;
    }
    if matches!(life.phase(), Phase::Terminating(_)) && probe_at.is_none_or(|at| now >= at) {
      probe_at = Some(now + backoff(group.probes));
      group.probes += 1;
    }
    let wake = earliest([life.next_wake(now), probe_at]);

    // Slots: stdout, stderr, pidfd, stop. A negative fd is ignored by poll.
    let mut fds = [
      watch(pipes.fd(0)),
      watch(pipes.fd(1)),
      watch((!reaped && !lost).then(|| child.pidfd())),
      watch(Some(stop.fd())),
    ];
    poll(&mut fds, wake);

    for (slot, ready) in fds[..2].iter().enumerate() {
      if ready.revents != 0 && pipes.drain(slot) {
        let over = life.on(Event::OutputOverCap, Instant::now());
        group.carry_out(over);
      }
    }
    if fds[2].revents != 0
      && let Err(e) = child.try_reap()
    {
      tracing::warn!(error = %e, "waiting for the child failed");
      lost = true;
      group.signal(Signal::SIGKILL);
    }
    if fds[3].revents != 0
      && let Some(request) = stop.take()
    {
      let asked = life.on(Event::Stop(request), Instant::now());
      group.carry_out(asked);
    }
  }

  // Whatever the dead tree left buffered in the pipes (a stderr line written during a flood).
  pipes.drain_final(READS_PER_WAKE);
  let status = child.status();
  if status.is_none() && !lost {
    // Gave up after SIGKILL: keep reaping in the background so no zombie is left.
    std::thread::spawn(move || child.wait_blocking());
  }
  let (stdout, stderr, truncated) = pipes.finish();
  Ok(Finished {
    status,
    stdout,
    stderr,
    truncated,
    ended_by: life.take_ended_by(),
    duration: started.elapsed(),
    survivors,
  })
}

/// SIGKILLs the tree led by `leader` at once, escapees included, without waiting: for the
/// host's exit, when nothing will be awaited any more.
pub fn kill_tree_now(leader: i32) {
  Group::new(Pid::from_raw(leader)).signal(Signal::SIGKILL);
}

/// One process group and the members that left it (found in /proc).
struct Group {
  leader: Pid,
  escapees: Vec<Escapee>,
  /// Looks for the tree's end so far.
  probes: u32,
}

struct Escapee {
  pid: i32,
  pidfd: OwnedFd,
}

impl Group {
  fn new(leader: Pid) -> Self {
    Group {
      leader,
      escapees: Vec::new(),
      probes: 0,
    }
  }

  fn carry_out(&mut self, actions: Actions) {
    for action in actions.iter() {
      match action {
        Action::SignalTerm => self.signal(Signal::SIGTERM),
        Action::SignalKill => self.signal(Signal::SIGKILL),
        Action::ReportTimedOut
        | Action::Nudge
        | Action::AskTerminate { .. }
        | Action::KillTree
        | Action::EndCommand
        | Action::Background => {}
      }
    }
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

  /// True when no process of the tree is left. Only meaningful once the leader is reaped.
  fn gone(&self) -> bool {
    if self.escapees.iter().any(|e| !pidfd::exited(&e.pidfd)) {
      return false;
    }
    match killpg(self.leader, None) {
      Err(Errno::ESRCH) => true,
      // Members left, or only zombies that a non-reaping init keeps in the group.
      _ if self.probes >= 3 => !tree::group_alive(&tree::scan(), self.leader.as_raw()),
      _ => false,
    }
  }

  /// The processes still alive past the reap bound.
  fn survivors(&self) -> Vec<i32> {
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
    left
  }
}
