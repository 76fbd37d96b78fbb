//! A job's life as one state machine: the phases a job goes through, the events that move it,
//! and the actions each move asks for. Both ends of a job drive it: the reaper that owns the
//! job's tree ([`Role::Owner`]) and the addon's side that sent the job and waits for its end
//! ([`Role::Watcher`]). Their poll loops only turn descriptors and timers into [`Event`]s and
//! carry out the returned [`Action`]s; every decision about when a tree is terminated, killed,
//! looked at again or given up on is made here, in [`Lifecycle::on`], from the state, the event
//! and the time the caller read. Nothing here reads a clock or makes a syscall, so the whole
//! table is tested without processes (see the tests at the end).
//!
//! ```text
//!            Spawned                LeaderExited               TreeGone
//!  Sending ───────────▶ Running ───────────────▶ Draining ──────────────▶ Settled
//!   (watcher)             │ deadline, Stop,          │ drain over, Stop,        ▲
//!                         │ OutputOverCap            │ OutputOverCap            │ TreeGone,
//!                         ▼                          ▼                          │ give up
//!                     Terminating: Graceful { kill_at } ──▶ Killed { next_check, give_up_at }
//! ```
//!
//! The two roles differ only in what an action is carried out on:
//! - the owner signals the tree itself: SIGTERM (frozen first) when termination starts with a
//!   grace, SIGKILL at `kill_at` (at once with no grace), SIGKILL again at each check (anything
//!   forked between a scan and the kill), and gives up [`REAP_BOUND`] after the SIGKILL;
//! - the watcher asks the owner (`Terminate` with the grace; a later request only brings the
//!   SIGKILL forward), and keeps its own bounds on an owner that does not answer (the command
//!   runs as the owner's user and may stop it): it sends SIGCONT every [`NUDGE_EVERY`] once a
//!   deadline has passed before the first answer, kills the owner's tree itself
//!   [`FALLBACK_AFTER`] after the SIGKILL was due, and gives up [`REAP_BOUND`] after that due
//!   time.
//!
//! How a timeout ends a tree is changed here, and only here: the grace, the escalation, the
//! checks and the bounds.
//!
//! # Sessions and background commands
//!
//! They grow this machine; they do not copy it. Each is a phase or an event more, handled in
//! [`Lifecycle::on`] and driven by the same two loops, and each ends through the same
//! [`Phase::Terminating`]:
//! - **A session's long-lived shell** is a job whose leader is the shell, with no deadline of
//!   its own. A command written to it is an event ([`Event::CommandSent`]) that moves `Running`
//!   into [`Phase::Busy`] and back on the command's end ([`Event::CommandEnded`], the record on
//!   the session's done fd, `finn-session`): the shell outlives its commands, so a command's end
//!   is not `LeaderExited`. The command's deadline, its idle deadline (moved by
//!   [`Event::CommandOutput`]) or [`Event::StopCommand`] asks the owner to end the command's
//!   tree alone ([`Action::EndCommand`]: every process but the shell); a shell that has not
//!   reported the command's end [`COMMAND_END_BOUND`] later (the command is its own loop, or
//!   keeps forking) is terminated as a whole, and the session replaces it. The shell's exit or
//!   a stop terminates the whole tree as for any job.
//! - **A session's command moved to the background** (its `onTimeout: "background"`) is the
//!   same `Busy` phase with a hard deadline in reserve ([`Command::background`]): when its
//!   deadline or idle deadline comes, the machine does not end its tree but asks the driver to
//!   answer the caller now ([`Action::Background`]) and lets the command run on under that
//!   hard deadline alone, at which its tree is ended as for any cut. A yielded command is the
//!   same phase with no result given yet: it keeps its deadlines; the driver only stops
//!   waiting for it.

use std::time::{Duration, Instant};

use super::outcome::EndedBy;
use super::stop::Stop;

/// After SIGKILL, how long to wait for the tree to disappear before giving up on it (a child
/// stuck in uninterruptible sleep). The caller is answered then; reaping goes on in the
/// background.
pub const REAP_BOUND: Duration = Duration::from_secs(10);

/// How long after the SIGKILL was due the watcher kills the owner's tree itself, when the owner
/// has not reported it gone (it may be stopped again and again).
pub const FALLBACK_AFTER: Duration = Duration::from_millis(100);

/// How often the watcher sends SIGCONT to an owner (and the supervisor) that a command may have
/// stopped, and kills the owner's tree again once its own fallback has started.
pub const NUDGE_EVERY: Duration = Duration::from_millis(50);

/// How long a session's shell has, once its command's tree was killed, to report the command's
/// end before the whole shell is terminated.
pub const COMMAND_END_BOUND: Duration = Duration::from_millis(500);

/// What ended a session's command before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandCut {
  /// Its deadline.
  Wall,
  /// No output for its idle time.
  Idle,
  /// The caller's request ([`Event::StopCommand`]).
  Stopped,
}

/// A session's command in the shell: the terms of [`Phase::Busy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
  pub seq: u64,
  pub deadline: Option<Instant>,
  pub idle: Option<Duration>,
  pub last_output: Instant,
  /// The command's tree was asked to end; the shell is terminated if its end has not come
  /// by then.
  pub ending: Option<Instant>,
  /// `Some`: the deadline or idle deadline does not end the command but moves it to the
  /// background ([`Action::Background`]), with this much time left before its tree is ended.
  pub background: Option<Duration>,
}

/// The terms a job runs under.
#[derive(Debug, Clone)]
pub struct RunLimits {
  /// Counted from the job's start. `None`: no timeout.
  pub timeout: Option<Duration>,
  /// Cap on stdout+stderr bytes, marker included.
  pub max_output_bytes: usize,
  /// SIGTERM-to-SIGKILL grace after a timeout.
  pub kill_grace: Duration,
}

/// Backoff between the owner's checks of a killed tree: 1 ms, doubling up to 16 ms.
pub fn backoff(checks: u32) -> Duration {
  Duration::from_millis(1 << checks.min(4))
}

/// Which end of the job drives the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
  /// Owns the tree and signals it: the job's reaper.
  Owner,
  /// Asks the owner and bounds its wait on it: the addon's side.
  Watcher,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
  /// The watcher has sent the job and has no answer yet. `due`: from when the owner is nudged
  /// (the deadline, or a stop request's arrival); `killed`: the watcher killed the owner's tree
  /// itself, past `due` and the grace.
  Sending { due: Option<Instant>, killed: bool },
  /// The leader runs; the deadline counts.
  Running,
  /// A session's shell runs a command (see the module's doc).
  Busy(Command),
  /// The leader has exited; the rest of the tree may run until `until` (the owner's drain; the
  /// watcher leaves it to the owner: `None`). The deadline no longer counts.
  Draining { until: Option<Instant> },
  /// The tree is being ended.
  Terminating(Termination),
  /// Nothing more happens.
  Settled(End),
}

/// How far a termination has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
  /// SIGTERM was sent (owner) or asked for (watcher); SIGKILL is due at `kill_at`.
  Graceful { kill_at: Instant },
  /// SIGKILL was sent; it is sent again at `next_check` (`checks` so far), until the tree is
  /// gone or `give_up_at`.
  Killed {
    next_check: Instant,
    checks: u32,
    give_up_at: Instant,
  },
}

/// Why a job settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
  /// No process of the tree is left.
  TreeGone,
  /// The command could not be started.
  SpawnFailed,
  /// Processes outlived [`REAP_BOUND`] after SIGKILL.
  GaveUp,
  /// The watcher's owner never answered the job, past the deadline, the grace and
  /// [`REAP_BOUND`].
  Unanswered,
}

/// What happened, as a driver's loop saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<R> {
  /// The command started (watcher: the owner said so).
  Spawned,
  /// The command could not be started.
  SpawnFailed,
  /// The watcher sent the job again, to another owner (the first retired before reading it).
  Resent,
  /// The leader exited (owner: reaped it; watcher: the owner said so).
  LeaderExited,
  /// No process of the tree is left.
  TreeGone,
  /// Watcher: the owner kept the deadline before the watcher did.
  OwnerTimedOut,
  /// A request to end the job: the caller's abort or shutdown, the watcher's `Terminate` at the
  /// owner, or (owner, grace zero) the host gone.
  Stop(Stop<R>),
  /// The output went over its cap.
  OutputOverCap,
  /// Time passed: whatever is due by `now` happens.
  Tick,
  /// A session's command was written to its shell.
  CommandSent {
    seq: u64,
    deadline: Option<Instant>,
    idle: Option<Duration>,
    /// Its `onTimeout: "background"` hard deadline (see [`Command::background`]).
    background: Option<Duration>,
  },
  /// The running command wrote output (its idle deadline moves).
  CommandOutput,
  /// The shell reported the end of command `seq`.
  CommandEnded { seq: u64 },
  /// The caller wants the running command ended (its abort), the shell kept.
  StopCommand,
}

/// What a driver carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
  /// Owner: freeze the tree, SIGTERM it, let it run on.
  SignalTerm,
  /// Owner: freeze the tree and SIGKILL it (again: whatever forked since the last time).
  SignalKill,
  /// Owner: tell the watcher the deadline was kept here.
  ReportTimedOut,
  /// Watcher: SIGCONT the owner and the supervisor.
  Nudge,
  /// Watcher: SIGCONT the owner, then ask it to terminate with `grace`.
  AskTerminate { grace: Duration },
  /// Watcher: kill the owner's tree itself.
  KillTree,
  /// Watcher: ask the owner to kill every process of the session's tree but the shell.
  EndCommand,
  /// Watcher: the session's command timed out and runs on in the background: answer its
  /// caller now; its tree is ended at its hard deadline.
  Background,
}

/// The actions of one transition, in order (at most three).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions {
  items: [Option<Action>; 3],
}

impl Actions {
  fn push(&mut self, action: Action) {
    let slot = self
      .items
      .iter_mut()
      .find(|a| a.is_none())
      .expect("at most three actions per transition");
    *slot = Some(action);
  }

  pub fn is_empty(&self) -> bool {
    self.items[0].is_none()
  }

  pub fn iter(&self) -> impl Iterator<Item = Action> + '_ {
    self.items.iter().map_while(|a| *a)
  }
}

impl<const N: usize> From<[Action; N]> for Actions {
  fn from(list: [Action; N]) -> Self {
    let mut actions = Actions::default();
    list.into_iter().for_each(|a| actions.push(a));
    actions
  }
}

/// One job's machine: its fixed terms, its phase, and why it ended (or is ending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle<R> {
  role: Role,
  /// When the tree is terminated if the leader still runs.
  deadline: Option<Instant>,
  /// The grace a deadline gives (SIGTERM to SIGKILL); the watcher's bounds before the first
  /// answer count it too.
  grace: Duration,
  /// Owner: how long the rest of the tree may run once the leader has exited (`None`: until it
  /// ends by itself).
  drain: Option<Duration>,
  phase: Phase,
  /// Watcher: a stop request that came before the first answer, applied at the first tick of
  /// the running job (after the answers that came with the first).
  pending: Option<Stop<R>>,
  ended_by: Option<EndedBy<R>>,
  /// What ended the last session command early, if anything did.
  cut: Option<CommandCut>,
}

impl<R> Lifecycle<R> {
  /// The owner's machine for a command that has just started.
  pub fn owner(deadline: Option<Instant>, grace: Duration, drain: Option<Duration>) -> Self {
    Lifecycle {
      role: Role::Owner,
      deadline,
      grace,
      drain,
      phase: Phase::Running,
      pending: None,
      ended_by: None,
      cut: None,
    }
  }

  /// The watcher's machine for a job just sent.
  pub fn watcher(deadline: Option<Instant>, grace: Duration) -> Self {
    Lifecycle {
      role: Role::Watcher,
      deadline,
      grace,
      drain: None,
      phase: Phase::Sending {
        due: deadline,
        killed: false,
      },
      pending: None,
      ended_by: None,
      cut: None,
    }
  }

  pub fn phase(&self) -> Phase {
    self.phase
  }

  /// How the job settled, once it has.
  pub fn settled(&self) -> Option<End> {
    match self.phase {
      Phase::Settled(end) => Some(end),
      _ => None,
    }
  }

  /// Why the job ended (or is ending); `None` for a job that ends by itself.
  pub fn ended_by(&self) -> Option<&EndedBy<R>> {
    self.ended_by.as_ref()
  }

  /// Why the job ended, taken out: what it was stopped for, else an exit.
  pub fn take_ended_by(&mut self) -> EndedBy<R> {
    self.ended_by.take().unwrap_or(EndedBy::Exit)
  }

  /// What ended the last session command early (`None`: it ended by itself).
  pub fn command_cut(&self) -> Option<CommandCut> {
    self.cut
  }

  /// [`Self::on`] as a function of the state: the next state and its actions.
  pub fn step(mut self, event: Event<R>, now: Instant) -> (Self, Actions) {
    let actions = self.on(event, now);
    (self, actions)
  }

  /// Moves the machine by `event`, seen at `now`; returns what the driver must do, in order.
  pub fn on(&mut self, event: Event<R>, now: Instant) -> Actions {
    let mut actions = Actions::default();
    match event {
      Event::Spawned => self.spawned(),
      Event::SpawnFailed => {
        if matches!(self.phase, Phase::Sending { .. }) {
          self.phase = Phase::Settled(End::SpawnFailed);
        }
      }
      Event::Resent => {
        // The new owner is nudged from the deadline, or from now for a stop already asked.
        if let Phase::Sending { due, .. } = &mut self.phase {
          *due = match (self.deadline, self.pending.is_some()) {
            (at, false) => at,
            (at, true) => Some(at.map_or(now, |at| at.min(now))),
          };
        }
      }
      Event::LeaderExited => {
        if matches!(self.phase, Phase::Running | Phase::Busy(_)) {
          let until = self.drain.map(|d| now + d);
          self.phase = Phase::Draining { until };
        }
      }
      Event::TreeGone => {
        if self.is_live() {
          self.phase = Phase::Settled(End::TreeGone);
        }
      }
      Event::OwnerTimedOut => {
        if self.is_live() {
          self.ended_by.get_or_insert(EndedBy::Timeout);
        }
      }
      Event::Stop(stop) => self.stop(stop, now, &mut actions),
      Event::OutputOverCap => {
        if self.is_live() && self.ended_by.is_none() {
          self.ended_by = Some(EndedBy::OutputLimit);
          self.terminate(Duration::ZERO, now, &mut actions);
        }
      }
      Event::Tick => self.tick(now, &mut actions),
      Event::CommandSent {
        seq,
        deadline,
        idle,
        background,
      } => {
        if self.phase == Phase::Running {
          self.cut = None;
          self.phase = Phase::Busy(Command {
            seq,
            deadline,
            idle,
            last_output: now,
            ending: None,
            background,
          });
        }
      }
      Event::CommandOutput => {
        if let Phase::Busy(command) = &mut self.phase {
          command.last_output = now;
        }
      }
      Event::CommandEnded { seq } => {
        if let Phase::Busy(command) = self.phase
          && command.seq == seq
        {
          self.phase = Phase::Running;
        }
      }
      Event::StopCommand => self.cut_command(CommandCut::Stopped, now, &mut actions),
    }
    actions
  }

  /// Asks for the end of the running command's tree, once.
  fn cut_command(&mut self, cut: CommandCut, now: Instant, actions: &mut Actions) {
    if let Phase::Busy(command) = &mut self.phase
      && command.ending.is_none()
    {
      command.ending = Some(now + COMMAND_END_BOUND);
      self.cut = Some(cut);
      actions.push(Action::EndCommand);
    }
  }

  /// When the driver must tick next, at the latest (`None`: only an event moves it).
  pub fn next_wake(&self, now: Instant) -> Option<Instant> {
    if self.pending.is_some() && self.is_live() {
      return Some(now);
    }
    match (self.phase, self.role) {
      (Phase::Sending { due, .. }, _) => {
        due.map(|at| if now >= at { now + NUDGE_EVERY } else { at })
      }
      (Phase::Running, _) => self.deadline,
      (Phase::Busy(c), _) => match c.ending {
        Some(at) => Some(at),
        None => [c.deadline, c.idle.map(|idle| c.last_output + idle)]
          .into_iter()
          .flatten()
          .min(),
      },
      (Phase::Draining { until }, _) => until,
      (Phase::Terminating(Termination::Graceful { kill_at }), Role::Owner) => Some(kill_at),
      (Phase::Terminating(Termination::Graceful { kill_at }), Role::Watcher) => {
        Some(kill_at + FALLBACK_AFTER)
      }
      (
        Phase::Terminating(Termination::Killed {
          next_check,
          give_up_at,
          ..
        }),
        _,
      ) => Some(next_check.min(give_up_at)),
      (Phase::Settled(_), _) => None,
    }
  }

  /// Running, draining or terminating: the tree may still be there.
  fn is_live(&self) -> bool {
    matches!(
      self.phase,
      Phase::Running | Phase::Busy(_) | Phase::Draining { .. } | Phase::Terminating(_)
    )
  }

  fn spawned(&mut self) {
    let Phase::Sending { killed, .. } = self.phase else {
      return;
    };
    self.phase = Phase::Running;
    if killed {
      // The watcher killed the tree before the owner answered: the job ends by what the kill
      // was for, whatever the owner reports after (a tree killed so reads as an exit).
      self.ended_by = Some(match self.pending.take() {
        Some(stop) => EndedBy::Stopped(stop.reason),
        None => EndedBy::Timeout,
      });
    }
  }

  fn stop(&mut self, stop: Stop<R>, now: Instant, actions: &mut Actions) {
    match &mut self.phase {
      Phase::Sending { due, .. } => {
        if self.pending.is_none() {
          *due = Some(due.map_or(now, |at| at.min(now)));
          self.pending = Some(stop);
        }
      }
      Phase::Settled(_) => {}
      _ => {
        if self.ended_by.is_none() {
          self.ended_by = Some(EndedBy::Stopped(stop.reason));
        }
        self.terminate(stop.grace, now, actions);
      }
    }
  }

  /// Starts the termination with `grace`, or brings its SIGKILL forward.
  fn terminate(&mut self, grace: Duration, now: Instant, actions: &mut Actions) {
    let kill_at = now + grace;
    match (&mut self.phase, self.role) {
      (Phase::Terminating(Termination::Killed { .. }), _) => {}
      (Phase::Terminating(Termination::Graceful { kill_at: at }), Role::Owner) => {
        *at = (*at).min(kill_at);
        if now >= *at {
          self.kill(now, actions);
        }
      }
      (Phase::Terminating(Termination::Graceful { kill_at: at }), Role::Watcher) => {
        if kill_at < *at {
          *at = kill_at;
          actions.push(Action::AskTerminate { grace });
        }
      }
      (_, Role::Owner) if grace.is_zero() => self.kill(now, actions),
      (_, Role::Owner) => {
        self.phase = Phase::Terminating(Termination::Graceful { kill_at });
        actions.push(Action::SignalTerm);
      }
      (_, Role::Watcher) => {
        self.phase = Phase::Terminating(Termination::Graceful { kill_at });
        actions.push(Action::AskTerminate { grace });
      }
    }
  }

  /// The owner's SIGKILL.
  fn kill(&mut self, now: Instant, actions: &mut Actions) {
    self.phase = Phase::Terminating(Termination::Killed {
      next_check: now + backoff(0),
      checks: 0,
      give_up_at: now + REAP_BOUND,
    });
    actions.push(Action::SignalKill);
  }

  fn tick(&mut self, now: Instant, actions: &mut Actions) {
    match self.phase {
      Phase::Sending { due: Some(at), .. } if now >= at => {
        actions.push(Action::Nudge);
        if now >= at + self.grace + FALLBACK_AFTER {
          actions.push(Action::KillTree);
          self.phase = Phase::Sending {
            due: Some(at),
            killed: true,
          };
        }
        if now >= at + self.grace + REAP_BOUND {
          self.phase = Phase::Settled(End::Unanswered);
        }
        return;
      }
      Phase::Running => {
        if let Some(at) = self.deadline
          && now >= at
        {
          self.ended_by = Some(EndedBy::Timeout);
          self.terminate(self.grace, now, actions);
          if self.role == Role::Owner {
            actions.push(Action::ReportTimedOut);
          }
        }
      }
      Phase::Draining { until: Some(at) } if now >= at => {
        self.terminate(Duration::ZERO, now, actions);
      }
      Phase::Busy(c) => match c.ending {
        // The shell has not finished the command by the kill of its tree: it goes.
        Some(at) if now >= at => {
          self.ended_by = Some(EndedBy::Timeout);
          self.terminate(Duration::ZERO, now, actions);
        }
        Some(_) => {}
        None => {
          let cut = if c.deadline.is_some_and(|at| now >= at) {
            Some(CommandCut::Wall)
          } else if c.idle.is_some_and(|idle| now >= c.last_output + idle) {
            Some(CommandCut::Idle)
          } else {
            None
          };
          match (cut, c.background) {
            (Some(cut), Some(hard)) => {
              // Timed out, not ended: it runs on under its hard deadline alone.
              self.cut = Some(cut);
              self.phase = Phase::Busy(Command {
                deadline: Some(now + hard),
                idle: None,
                background: None,
                ..c
              });
              actions.push(Action::Background);
            }
            (Some(cut), None) => self.cut_command(cut, now, actions),
            (None, _) => {}
          }
        }
      },
      Phase::Terminating(Termination::Graceful { kill_at }) => match self.role {
        Role::Owner if now >= kill_at => self.kill(now, actions),
        Role::Watcher if now >= kill_at + FALLBACK_AFTER => {
          // The owner has not reported the tree gone: it may be stopped (again and again).
          actions.push(Action::Nudge);
          actions.push(Action::KillTree);
          let give_up_at = kill_at + REAP_BOUND;
          self.phase = if now >= give_up_at {
            Phase::Settled(End::GaveUp)
          } else {
            Phase::Terminating(Termination::Killed {
              next_check: now + NUDGE_EVERY,
              checks: 1,
              give_up_at,
            })
          };
        }
        _ => {}
      },
      Phase::Terminating(Termination::Killed {
        next_check,
        checks,
        give_up_at,
      }) => {
        if now >= give_up_at {
          self.phase = Phase::Settled(End::GaveUp);
        } else if now >= next_check {
          let next_check = match self.role {
            Role::Owner => {
              // Anything forked between the last scan and the kill: look again.
              actions.push(Action::SignalKill);
              now + backoff(checks + 1)
            }
            Role::Watcher => {
              actions.push(Action::Nudge);
              actions.push(Action::KillTree);
              now + NUDGE_EVERY
            }
          };
          self.phase = Phase::Terminating(Termination::Killed {
            next_check,
            checks: checks + 1,
            give_up_at,
          });
        }
      }
      _ => {}
    }
    if self.is_live()
      && let Some(stop) = self.pending.take()
    {
      self.stop(stop, now, actions);
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::sync::OnceLock;

  type Job = Lifecycle<&'static str>;

  /// Times in the table are milliseconds after one fixed instant.
  fn t(ms: u64) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
  }

  fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
  }

  /// A deadline at 1000 ms with a 300 ms grace, a drain of 100 ms (owner).
  fn owner(phase: Phase) -> Job {
    Lifecycle {
      phase,
      ..Lifecycle::owner(Some(t(1000)), ms(300), Some(ms(100)))
    }
  }

  fn watcher(phase: Phase) -> Job {
    Lifecycle {
      phase,
      ..Lifecycle::watcher(Some(t(1000)), ms(300))
    }
  }

  fn ended(mut job: Job, by: EndedBy<&'static str>) -> Job {
    job.ended_by = Some(by);
    job
  }

  fn pending(mut job: Job, grace_ms: u64) -> Job {
    job.pending = Some(abort(grace_ms));
    job
  }

  fn no_deadline(mut job: Job) -> Job {
    job.deadline = None;
    job
  }

  fn abort(grace_ms: u64) -> Stop<&'static str> {
    Stop {
      grace: ms(grace_ms),
      reason: "abort",
    }
  }

  fn stop(grace_ms: u64) -> Event<&'static str> {
    Event::Stop(abort(grace_ms))
  }

  fn sending(due: Option<u64>, killed: bool) -> Phase {
    Phase::Sending {
      due: due.map(t),
      killed,
    }
  }

  fn draining(until: Option<u64>) -> Phase {
    Phase::Draining {
      until: until.map(t),
    }
  }

  fn graceful(kill_at: u64) -> Phase {
    Phase::Terminating(Termination::Graceful {
      kill_at: t(kill_at),
    })
  }

  fn killed(next_check: u64, checks: u32, give_up_at: u64) -> Phase {
    Phase::Terminating(Termination::Killed {
      next_check: t(next_check),
      checks,
      give_up_at: t(give_up_at),
    })
  }

  const RUNNING: Phase = Phase::Running;
  const GONE: Phase = Phase::Settled(End::TreeGone);
  const GAVE_UP: Phase = Phase::Settled(End::GaveUp);
  const TIMEOUT: EndedBy<&str> = EndedBy::Timeout;
  const ABORT: EndedBy<&str> = EndedBy::Stopped("abort");
  use Action::{AskTerminate, KillTree, Nudge, ReportTimedOut, SignalKill, SignalTerm};

  fn ask(grace_ms: u64) -> Action {
    AskTerminate {
      grace: ms(grace_ms),
    }
  }

  /// (what the row shows, state, event, now in ms, next state, actions).
  type Row = (&'static str, Job, Event<&'static str>, u64, Job, Actions);

  fn none() -> Actions {
    Actions::default()
  }

  #[rustfmt::skip]
  fn owner_rows() -> Vec<Row> {
    let timed_out = |p| ended(owner(p), TIMEOUT);
    let aborted = |p| ended(owner(p), ABORT);
    vec![
      ("before the deadline nothing happens", owner(RUNNING), Event::Tick, 999, owner(RUNNING), none()),
      ("the deadline sends SIGTERM and says so", owner(RUNNING), Event::Tick, 1000, timed_out(graceful(1300)), [SignalTerm, ReportTimedOut].into()),
      ("a deadline without grace kills at once", Lifecycle { grace: ms(0), ..owner(RUNNING) }, Event::Tick, 1000, Lifecycle { grace: ms(0), ..timed_out(killed(1001, 0, 11_000)) }, [SignalKill, ReportTimedOut].into()),
      ("no deadline: a tick does nothing", no_deadline(owner(RUNNING)), Event::Tick, 99_999, no_deadline(owner(RUNNING)), none()),
      ("the leader's exit starts the drain", owner(RUNNING), Event::LeaderExited, 500, owner(draining(Some(600))), none()),
      ("the deadline does not count while draining", owner(draining(Some(2000))), Event::Tick, 1500, owner(draining(Some(2000))), none()),
      ("the drain's end kills the rest", owner(draining(Some(600))), Event::Tick, 600, owner(killed(601, 0, 10_600)), [SignalKill].into()),
      ("before the drain's end nothing happens", owner(draining(Some(600))), Event::Tick, 599, owner(draining(Some(600))), none()),
      ("no drain: the tree ends by itself", owner(draining(None)), Event::Tick, 99_999, owner(draining(None)), none()),
      ("a stop while running sends SIGTERM", owner(RUNNING), stop(50), 200, aborted(graceful(250)), [SignalTerm].into()),
      ("a stop without grace kills at once", owner(RUNNING), stop(0), 200, aborted(killed(201, 0, 10_200)), [SignalKill].into()),
      ("a stop while draining sends SIGTERM", owner(draining(Some(600))), stop(50), 550, aborted(graceful(600)), [SignalTerm].into()),
      ("a shorter grace brings SIGKILL forward", timed_out(graceful(1300)), stop(100), 1100, timed_out(graceful(1200)), none()),
      ("a longer grace changes nothing", timed_out(graceful(1300)), stop(500), 1100, timed_out(graceful(1300)), none()),
      ("a stop without grace during the grace kills at once", timed_out(graceful(1300)), stop(0), 1100, timed_out(killed(1101, 0, 11_100)), [SignalKill].into()),
      ("a stop after SIGKILL changes nothing", timed_out(killed(1301, 0, 11_300)), stop(0), 1302, timed_out(killed(1301, 0, 11_300)), none()),
      ("within the grace nothing happens", owner(graceful(1300)), Event::Tick, 1299, owner(graceful(1300)), none()),
      ("the grace's end sends SIGKILL", owner(graceful(1300)), Event::Tick, 1300, owner(killed(1301, 0, 11_300)), [SignalKill].into()),
      ("between checks nothing happens", owner(killed(1301, 0, 11_300)), Event::Tick, 1300, owner(killed(1301, 0, 11_300)), none()),
      ("a check kills again and backs off", owner(killed(1301, 0, 11_300)), Event::Tick, 1301, owner(killed(1303, 1, 11_300)), [SignalKill].into()),
      ("the backoff doubles", owner(killed(1303, 1, 11_300)), Event::Tick, 1303, owner(killed(1307, 2, 11_300)), [SignalKill].into()),
      ("the backoff stops at 16 ms", owner(killed(1400, 4, 11_300)), Event::Tick, 1400, owner(killed(1416, 5, 11_300)), [SignalKill].into()),
      ("the reap bound gives up", owner(killed(11_301, 9, 11_300)), Event::Tick, 11_300, owner(GAVE_UP), none()),
      ("the reap bound gives up even at a check", owner(killed(11_300, 9, 11_300)), Event::Tick, 11_300, owner(GAVE_UP), none()),
      ("the leader's exit while terminating is no drain", owner(graceful(1300)), Event::LeaderExited, 1100, owner(graceful(1300)), none()),
      ("the tree gone while running settles", owner(RUNNING), Event::TreeGone, 10, owner(GONE), none()),
      ("the tree gone while draining settles", owner(draining(Some(600))), Event::TreeGone, 550, owner(GONE), none()),
      ("the tree gone while terminating settles", timed_out(killed(1301, 0, 11_300)), Event::TreeGone, 1302, timed_out(GONE), none()),
      ("output over the cap kills at once", owner(RUNNING), Event::OutputOverCap, 10, ended(owner(killed(11, 0, 10_010)), EndedBy::OutputLimit), [SignalKill].into()),
      ("a settled job ignores a tick", owner(GONE), Event::Tick, 99_999, owner(GONE), none()),
      ("a settled job ignores a stop", owner(GONE), stop(0), 10, owner(GONE), none()),
      ("a settled job ignores the tree gone", owner(GAVE_UP), Event::TreeGone, 10, owner(GAVE_UP), none()),
      ("an owner is never sending: a spawn changes nothing", owner(RUNNING), Event::Spawned, 10, owner(RUNNING), none()),
    ]
  }

  #[rustfmt::skip]
  fn watcher_rows() -> Vec<Row> {
    let timed_out = |p| ended(watcher(p), TIMEOUT);
    let aborted = |p| ended(watcher(p), ABORT);
    vec![
      ("no answer before the deadline: nothing", watcher(sending(Some(1000), false)), Event::Tick, 999, watcher(sending(Some(1000), false)), none()),
      ("no answer past the deadline: nudge", watcher(sending(Some(1000), false)), Event::Tick, 1000, watcher(sending(Some(1000), false)), [Nudge].into()),
      ("no answer within grace + fallback: nudge only", watcher(sending(Some(1000), false)), Event::Tick, 1399, watcher(sending(Some(1000), false)), [Nudge].into()),
      ("no answer past grace + fallback: kill the tree", watcher(sending(Some(1000), false)), Event::Tick, 1400, watcher(sending(Some(1000), true)), [Nudge, KillTree].into()),
      ("no answer past grace + reap bound: unanswered", watcher(sending(Some(1000), true)), Event::Tick, 11_300, watcher(Phase::Settled(End::Unanswered)), [Nudge, KillTree].into()),
      ("no answer just before the reap bound: kill again", watcher(sending(Some(1000), true)), Event::Tick, 11_299, watcher(sending(Some(1000), true)), [Nudge, KillTree].into()),
      ("no deadline and no stop: a tick does nothing", no_deadline(watcher(sending(None, false))), Event::Tick, 99_999, no_deadline(watcher(sending(None, false))), none()),
      ("a stop before the answer is kept and makes it due", watcher(sending(Some(1000), false)), stop(20), 500, pending(watcher(sending(Some(500), false)), 20), none()),
      ("a stop after the deadline keeps the deadline due", watcher(sending(Some(1000), false)), stop(20), 1200, pending(watcher(sending(Some(1000), false)), 20), none()),
      ("a stop without deadline makes it due", no_deadline(watcher(sending(None, false))), stop(20), 500, pending(no_deadline(watcher(sending(Some(500), false))), 20), none()),
      ("the first stop wins", pending(watcher(sending(Some(500), false)), 20), stop(0), 600, pending(watcher(sending(Some(500), false)), 20), none()),
      ("sent again: due at the deadline", watcher(sending(Some(1000), true)), Event::Resent, 700, watcher(sending(Some(1000), true)), none()),
      ("sent again with a stop: due now", pending(watcher(sending(Some(500), false)), 20), Event::Resent, 700, pending(watcher(sending(Some(700), false)), 20), none()),
      ("sent again with a stop, past the deadline", pending(watcher(sending(Some(500), false)), 20), Event::Resent, 1200, pending(watcher(sending(Some(1000), false)), 20), none()),
      ("sent again without deadline, with a stop", pending(no_deadline(watcher(sending(Some(500), false))), 20), Event::Resent, 700, pending(no_deadline(watcher(sending(Some(700), false))), 20), none()),
      ("sent again while running changes nothing", watcher(RUNNING), Event::Resent, 700, watcher(RUNNING), none()),
      ("the spawn failed: settled", watcher(sending(Some(1000), false)), Event::SpawnFailed, 10, watcher(Phase::Settled(End::SpawnFailed)), none()),
      ("a spawn failure once running changes nothing", watcher(RUNNING), Event::SpawnFailed, 10, watcher(RUNNING), none()),
      ("the answer: running", watcher(sending(Some(1000), false)), Event::Spawned, 10, watcher(RUNNING), none()),
      ("the answer after a kill: a timeout", watcher(sending(Some(1000), true)), Event::Spawned, 1500, timed_out(RUNNING), none()),
      ("the answer after a kill for a stop: that stop", pending(watcher(sending(Some(500), true)), 20), Event::Spawned, 1500, aborted(RUNNING), none()),
      ("the answer with a stop kept: still kept", pending(watcher(sending(Some(500), false)), 20), Event::Spawned, 600, pending(watcher(RUNNING), 20), none()),
      ("a kept stop is asked for at the first tick", pending(watcher(RUNNING), 20), Event::Tick, 600, aborted(graceful(620)), [ask(20)].into()),
      ("a kept stop while draining too", pending(watcher(draining(None)), 20), Event::Tick, 600, aborted(graceful(620)), [ask(20)].into()),
      ("a kept stop past the deadline: timeout, then the stop's grace", pending(watcher(RUNNING), 20), Event::Tick, 1000, timed_out(graceful(1020)), [ask(300), ask(20)].into()),
      ("a kept stop is dropped with the tree gone", pending(watcher(RUNNING), 20), Event::TreeGone, 600, pending(watcher(GONE), 20), none()),
      ("the tree is never gone before the answer", watcher(sending(Some(1000), false)), Event::TreeGone, 10, watcher(sending(Some(1000), false)), none()),
      ("the deadline asks the owner to terminate", watcher(RUNNING), Event::Tick, 1000, timed_out(graceful(1300)), [ask(300)].into()),
      ("the deadline after a kill's stop is a timeout", aborted(RUNNING), Event::Tick, 1000, timed_out(graceful(1300)), [ask(300)].into()),
      ("the leader's exit: draining, the owner's drain", watcher(RUNNING), Event::LeaderExited, 500, watcher(draining(None)), none()),
      ("the deadline does not count once the leader exited", watcher(draining(None)), Event::Tick, 5000, watcher(draining(None)), none()),
      ("the owner kept the deadline: a timeout", watcher(RUNNING), Event::OwnerTimedOut, 1000, timed_out(RUNNING), none()),
      ("the owner's timeout does not replace the cap", ended(watcher(graceful(10)), EndedBy::OutputLimit), Event::OwnerTimedOut, 1000, ended(watcher(graceful(10)), EndedBy::OutputLimit), none()),
      ("the owner's timeout before the answer counts for nothing", watcher(sending(Some(1000), false)), Event::OwnerTimedOut, 1000, watcher(sending(Some(1000), false)), none()),
      ("output over the cap: terminate without grace", watcher(RUNNING), Event::OutputOverCap, 10, ended(watcher(graceful(10)), EndedBy::OutputLimit), [ask(0)].into()),
      ("output over the cap while draining", watcher(draining(None)), Event::OutputOverCap, 10, ended(watcher(graceful(10)), EndedBy::OutputLimit), [ask(0)].into()),
      ("output over the cap after a timeout changes nothing", timed_out(graceful(1300)), Event::OutputOverCap, 1100, timed_out(graceful(1300)), none()),
      ("output over the cap after the owner's timeout changes nothing", timed_out(RUNNING), Event::OutputOverCap, 1100, timed_out(RUNNING), none()),
      ("a stop while running", watcher(RUNNING), stop(50), 200, aborted(graceful(250)), [ask(50)].into()),
      ("a stop while draining", watcher(draining(None)), stop(50), 500, aborted(graceful(550)), [ask(50)].into()),
      ("a stop's shorter grace is asked for", timed_out(graceful(1300)), stop(100), 1100, timed_out(graceful(1200)), [ask(100)].into()),
      ("a stop's longer grace is not", timed_out(graceful(1300)), stop(500), 1100, timed_out(graceful(1300)), none()),
      ("an equal SIGKILL time is not asked again", timed_out(graceful(1300)), stop(200), 1100, timed_out(graceful(1300)), none()),
      ("a stop once the fallback runs changes nothing", timed_out(killed(1450, 1, 11_300)), stop(0), 1420, timed_out(killed(1450, 1, 11_300)), none()),
      ("the owner's SIGKILL time is its own", timed_out(graceful(1300)), Event::Tick, 1399, timed_out(graceful(1300)), none()),
      ("past it by the fallback: kill the tree", timed_out(graceful(1300)), Event::Tick, 1400, timed_out(killed(1450, 1, 11_300)), [Nudge, KillTree].into()),
      ("past the reap bound at once: give up", timed_out(graceful(1300)), Event::Tick, 11_300, timed_out(GAVE_UP), [Nudge, KillTree].into()),
      ("between fallback kills nothing happens", timed_out(killed(1450, 1, 11_300)), Event::Tick, 1449, timed_out(killed(1450, 1, 11_300)), none()),
      ("the fallback kills again", timed_out(killed(1450, 1, 11_300)), Event::Tick, 1450, timed_out(killed(1500, 2, 11_300)), [Nudge, KillTree].into()),
      ("the fallback gives up at the reap bound", timed_out(killed(11_320, 9, 11_300)), Event::Tick, 11_300, timed_out(GAVE_UP), none()),
      ("the tree gone while terminating settles", timed_out(killed(1450, 1, 11_300)), Event::TreeGone, 1460, timed_out(GONE), none()),
      ("a settled job ignores a stop", watcher(GONE), stop(0), 10, watcher(GONE), none()),
      ("a settled job ignores the cap", watcher(GONE), Event::OutputOverCap, 10, watcher(GONE), none()),
    ]
  }

  /// A session's shell (watcher, no deadline of its own) running command 7: deadline at 1000,
  /// idle 200 ms, last output at `last`, its tree asked to end with the shell's bound at `ending`.
  fn busy(last: u64, ending: Option<u64>) -> Phase {
    Phase::Busy(Command {
      seq: 7,
      deadline: Some(t(1000)),
      idle: Some(ms(200)),
      last_output: t(last),
      ending: ending.map(t),
      background: None,
    })
  }

  /// [`busy`] with `onTimeout: "background"` and a hard deadline of 5 s.
  fn busy_bg(last: u64) -> Phase {
    let Phase::Busy(c) = busy(last, None) else {
      unreachable!()
    };
    Phase::Busy(Command {
      background: Some(ms(5000)),
      ..c
    })
  }

  fn ending(phase: Phase, at: u64) -> Phase {
    let Phase::Busy(c) = phase else {
      unreachable!()
    };
    Phase::Busy(Command {
      ending: Some(t(at)),
      ..c
    })
  }

  /// Command 7 in the background since `at`: its hard deadline only.
  fn backgrounded(last: u64, at: u64) -> Phase {
    let Phase::Busy(c) = busy(last, None) else {
      unreachable!()
    };
    Phase::Busy(Command {
      deadline: Some(t(at + 5000)),
      idle: None,
      ..c
    })
  }

  fn shell(phase: Phase) -> Job {
    Lifecycle {
      phase,
      ..Lifecycle::watcher(None, ms(0))
    }
  }

  fn cut(mut job: Job, cut: CommandCut) -> Job {
    job.cut = Some(cut);
    job
  }

  #[rustfmt::skip]
  fn session_rows() -> Vec<Row> {
    let sent = Event::CommandSent { seq: 7, deadline: Some(t(1000)), idle: Some(ms(200)), background: None };
    let bound = COMMAND_END_BOUND.as_millis() as u64;
    vec![
      ("a command sent to an idle shell: busy", shell(RUNNING), sent.clone(), 100, shell(busy(100, None)), none()),
      ("a command is never sent to a busy shell", shell(busy(100, None)), sent, 150, shell(busy(100, None)), none()),
      ("output moves the idle deadline", shell(busy(100, None)), Event::CommandOutput, 250, shell(busy(250, None)), none()),
      ("before both deadlines nothing happens", shell(busy(100, None)), Event::Tick, 299, shell(busy(100, None)), none()),
      ("no output for the idle time ends the command's tree", shell(busy(100, None)), Event::Tick, 300, cut(shell(busy(100, Some(300 + bound))), CommandCut::Idle), [Action::EndCommand].into()),
      ("the deadline ends the command's tree", shell(busy(990, None)), Event::Tick, 1000, cut(shell(busy(990, Some(1000 + bound))), CommandCut::Wall), [Action::EndCommand].into()),
      ("a stop ends the command's tree", shell(busy(100, None)), Event::StopCommand, 150, cut(shell(busy(100, Some(150 + bound))), CommandCut::Stopped), [Action::EndCommand].into()),
      ("the end is asked for once", cut(shell(busy(100, Some(800))), CommandCut::Wall), Event::StopCommand, 400, cut(shell(busy(100, Some(800))), CommandCut::Wall), none()),
      ("the command's end: idle again, the cut kept", cut(shell(busy(100, Some(800))), CommandCut::Wall), Event::CommandEnded { seq: 7 }, 400, cut(shell(RUNNING), CommandCut::Wall), none()),
      ("another command's end changes nothing", shell(busy(100, None)), Event::CommandEnded { seq: 6 }, 150, shell(busy(100, None)), none()),
      ("before the bound the command's tree may still end", cut(shell(busy(100, Some(800))), CommandCut::Wall), Event::Tick, 799, cut(shell(busy(100, Some(800))), CommandCut::Wall), none()),
      ("no end by the bound: the shell is terminated", cut(shell(busy(100, Some(800))), CommandCut::Wall), Event::Tick, 800, ended(cut(shell(graceful(800)), CommandCut::Wall), TIMEOUT), [ask(0)].into()),
      ("the shell's exit while busy: draining", shell(busy(100, None)), Event::LeaderExited, 150, shell(draining(None)), none()),
      ("a stop of the session while busy terminates the whole tree", shell(busy(100, None)), stop(0), 150, ended(shell(graceful(150)), ABORT), [ask(0)].into()),
      ("the tree gone while busy settles", shell(busy(100, None)), Event::TreeGone, 150, shell(GONE), none()),
      ("a new command clears the last cut", cut(shell(RUNNING), CommandCut::Idle), Event::CommandSent { seq: 8, deadline: None, idle: None, background: None }, 900, shell(Phase::Busy(Command { seq: 8, deadline: None, idle: None, last_output: t(900), ending: None, background: None })), none()),
      ("a deadline with onTimeout background: answered, not ended", shell(busy_bg(990)), Event::Tick, 1000, cut(shell(backgrounded(990, 1000)), CommandCut::Wall), [Action::Background].into()),
      ("an idle deadline with onTimeout background: answered, not ended", shell(busy_bg(100)), Event::Tick, 300, cut(shell(backgrounded(100, 300)), CommandCut::Idle), [Action::Background].into()),
      ("in the background, output no longer counts", cut(shell(backgrounded(100, 300)), CommandCut::Idle), Event::Tick, 5299, cut(shell(backgrounded(100, 300)), CommandCut::Idle), none()),
      ("the hard deadline ends the tree", cut(shell(backgrounded(100, 300)), CommandCut::Idle), Event::Tick, 5300, cut(shell(ending(backgrounded(100, 300), 5300 + bound)), CommandCut::Wall), [Action::EndCommand].into()),
      ("in the background, its end: idle again", cut(shell(backgrounded(100, 300)), CommandCut::Idle), Event::CommandEnded { seq: 7 }, 900, cut(shell(RUNNING), CommandCut::Idle), none()),
    ]
  }

  /// What cut the last command is what the session reports, until the next command.
  #[test]
  fn the_cut_is_read_back_until_the_next_command() {
    for cut_by in [CommandCut::Wall, CommandCut::Idle, CommandCut::Stopped] {
      assert_eq!(cut(shell(RUNNING), cut_by).command_cut(), Some(cut_by));
    }
    assert_eq!(shell(busy(100, None)).command_cut(), None);
  }

  /// Every transition of both roles, as (state, event, now) -> (state, actions).
  #[test]
  fn every_transition_of_a_job_is_a_row() {
    for (name, from, event, now, want, actions) in owner_rows()
      .into_iter()
      .chain(watcher_rows())
      .chain(session_rows())
    {
      let (got, did) = from.clone().step(event.clone(), t(now));
      assert_eq!(
        (&got, &did),
        (&want, &actions),
        "{name}: {from:?} on {event:?} at {now} ms"
      );
    }
  }

  /// When each phase wants its next tick, as (state, now in ms) -> wake in ms.
  #[test]
  #[rustfmt::skip]
  fn each_phase_wakes_its_driver_when_something_is_due() {
    let rows: Vec<(&str, Job, u64, Option<u64>)> = vec![
      ("running: the deadline", owner(RUNNING), 10, Some(1000)),
      ("running without deadline: never", no_deadline(owner(RUNNING)), 10, None),
      ("draining: the drain's end", owner(draining(Some(600))), 550, Some(600)),
      ("draining, the owner's drain: never", watcher(draining(None)), 550, None),
      ("graceful, owner: the SIGKILL", owner(graceful(1300)), 1100, Some(1300)),
      ("graceful, watcher: the fallback", watcher(graceful(1300)), 1100, Some(1400)),
      ("killed: the next check", owner(killed(1301, 0, 11_300)), 1300, Some(1301)),
      ("killed: the reap bound when sooner", watcher(killed(11_320, 9, 11_300)), 11_290, Some(11_300)),
      ("settled: never", owner(GONE), 10, None),
      ("sending: the deadline", watcher(sending(Some(1000), false)), 10, Some(1000)),
      ("sending past it: the next nudge", watcher(sending(Some(1000), false)), 1200, Some(1250)),
      ("sending with nothing due: never", watcher(sending(None, false)), 10, None),
      ("a stop kept while running: now", pending(watcher(RUNNING), 20), 600, Some(600)),
      ("a stop kept while sending: when due", pending(watcher(sending(Some(500), false)), 20), 400, Some(500)),
      ("a stop kept, settled: never", pending(watcher(GONE), 20), 600, None),
      ("busy: the idle deadline when sooner", shell(busy(100, None)), 150, Some(300)),
      ("busy: the deadline when sooner", shell(busy(950, None)), 960, Some(1000)),
      ("busy, its tree ending: the shell's bound", shell(busy(100, Some(800))), 400, Some(800)),
      ("busy without deadlines: never", shell(Phase::Busy(Command { seq: 1, deadline: None, idle: None, last_output: t(0), ending: None, background: None })), 400, None),
      ("in the background: the hard deadline", shell(backgrounded(100, 300)), 400, Some(5300)),
    ];
    for (name, job, now, want) in rows {
      assert_eq!(job.next_wake(t(now)), want.map(t), "{name}");
    }
  }

  #[test]
  fn the_end_says_why_and_defaults_to_an_exit() {
    let mut job = watcher(GONE);
    assert_eq!(job.settled(), Some(End::TreeGone));
    assert_eq!(job.take_ended_by(), EndedBy::Exit);
    let mut job = ended(owner(GAVE_UP), ABORT);
    assert_eq!(job.ended_by(), Some(&ABORT));
    assert_eq!(job.take_ended_by(), ABORT);
    assert_eq!(owner(RUNNING).settled(), None);
  }

  #[test]
  fn actions_keep_their_order() {
    let a: Actions = [Nudge, KillTree].into();
    assert_eq!(a.iter().collect::<Vec<_>>(), vec![Nudge, KillTree]);
    assert!(!a.is_empty());
    assert!(none().is_empty());
    assert_eq!(none().iter().count(), 0);
  }
}
