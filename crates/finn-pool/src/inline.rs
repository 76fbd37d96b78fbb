//! Jobs started, and when they end quickly also finished, on the host's own thread (Node's),
//! with no worker thread in between.
//!
//! Through a worker thread, a job's critical path has four wake-ups of a thread on another CPU:
//! Node's thread wakes the worker, the worker the reaper, the reaper the worker, the worker
//! Node's thread. On a VM whose idle vCPUs halt at once, each costs about 40 us (`perf sched
//! timehist`, README, Benchmarks). Inline, Node's thread sends the `Run` to an idle reaper
//! itself and watches the reaper's socket in its own event loop: two wake-ups. The reaper
//! sends `Spawned`, `Exited` and `TreeGone` in one write when the command ends within 1 ms;
//! then the end is read, and the pipes drained, without waiting. Anything else (a longer
//! command, a retired or failed reaper, no answer within [`INLINE_WINDOW`]) hands the job to a
//! worker thread, which sees it through exactly as a job it had started itself.
//!
//! Only jobs without isolation go inline (preparing a plan opens the cwd's directories, which
//! stays off Node's thread), and only to a reaper that is already idle (starting one waits for
//! the supervisor).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::JobSpec;
use super::job::{self, JobOutcome, Resume, Tally};
use super::state::{Inner, Queued, Started};
use super::worker::SlotGuard;
use finn_isolate::Mode;
use finn_supervisor::run::{self, Answered, Outgoing};

/// The host's event loop, as the pool sees it: where an inline job waits for its reaper.
pub trait InlineHost {
  /// Calls [`InlineJob::step`] when `job.fd()` is readable, or [`InlineJob::hand_off`] once
  /// it has waited [`INLINE_WINDOW`] (or when the host goes away: dropping it hands it off).
  fn watch(&self, job: InlineJob);
}

/// How long an inline job waits for its reaper's first answer before a worker thread takes
/// it over. The reaper answers within 1 ms of the spawn; this only bounds a reaper that does
/// not answer (stopped, or starved of CPU), whose job still needs its timeout applied.
pub const INLINE_WINDOW: Duration = Duration::from_millis(5);

/// How long a reaper that ran an inline job polls for its next `Run` before it sleeps. A job
/// sent from Node's thread means the pool was idle: in sequential use the next one follows
/// within a few hundred microseconds (Node wakes, runs its JS, sends), and a reaper found
/// running saves the job a cross-CPU wake-up. A worker running a queue never asks for it: the
/// polling would take a CPU from the thread about to send the next `Run`; with 4 workers at
/// concurrency 8 that took throughput from 0.87x to 0.70x the native loop (`npm run bench`).
const INLINE_LINGER: Duration = Duration::from_micros(600);

/// The largest `Run` frame sent from the host's thread: an idle reaper's socket is empty, and
/// takes this much without blocking.
const INLINE_MAX_FRAME: usize = 64 * 1024;

/// A job sent to a reaper from the host's thread, waiting for the reaper's first answer.
pub struct InlineJob {
  inner: Arc<Inner>,
  /// Taken when the job is finished or handed off.
  job: Option<(Started, Box<Resume>)>,
  since: Instant,
  fd: RawFd,
}

impl InlineJob {
  /// The reaper's socket, to watch for input.
  pub fn fd(&self) -> RawFd {
    self.fd
  }

  /// When the job was sent.
  pub fn since(&self) -> Instant {
    self.since
  }

  /// The reaper's socket is readable: finishes the job on this thread when its whole end is
  /// there (nothing then waits; the lane's next queued job goes to a worker thread); anything
  /// else hands it to a worker thread.
  pub fn step(mut self) {
    let Some((started, mut resume)) = self.job.take() else {
      return;
    };
    let answered = resume
      .reaper
      .as_mut()
      .map_or(Answered::Other, run::answered_now);
    match answered {
      Answered::Ended => {}
      // The reaper answered without the end: the command runs past the reaper's 1 ms batch.
      // A worker thread takes it now, not at the window's end: nobody reads its pipes before
      // that, and a command writing more than a pipe holds (64 KiB) would wait for it (`yes`
      // under a 1 MiB cap took 1.24x execFile's time with the job kept here up to 5 ms).
      answered => {
        tracing::debug!(?answered, "inline job handed to a worker thread");
        self.inner.elsewhere(Started {
          resume: Some(resume),
          ..started
        });
        return;
      }
    }
    // Frees the slot even if finishing panics (the dropped reply then reads as a crash).
    let slot = SlotGuard::new(&self.inner, started.queued.id, started.queued.job.lane);
    // The whole end is read: nothing waits, and no stop request could change it.
    let (outcome, tally) = job::resume(
      *resume,
      None,
      &self.inner,
      &started.leader,
      &mut finn_exec::later::Nothing,
    );
    started.queued.reply.send(outcome);
    if let Some(next) = slot.finish(tally, None) {
      self.inner.elsewhere(next);
    }
  }

  /// Gives the job to a worker thread, which sees it through.
  pub fn hand_off(mut self) {
    self.release();
  }

  fn release(&mut self) {
    if let Some((started, resume)) = self.job.take() {
      tracing::debug!("inline job handed to a worker thread (its window passed, or its host went)");
      self.inner.elsewhere(Started {
        resume: Some(resume),
        ..started
      });
    }
  }
}

impl Drop for InlineJob {
  fn drop(&mut self) {
    self.release();
  }
}

impl Inner {
  /// Whether `job` may start on the host's thread.
  pub(super) fn inline_ok(&self, job: &JobSpec) -> bool {
    #[cfg(feature = "test-hooks")]
    if self.test_hooks {
      return false;
    }
    let isolated = job
      .isolation
      .as_ref()
      .or(self.config.isolation.as_ref())
      .is_some_and(|o| o.mode != Mode::Off);
    self.supervisor.is_some() && !isolated
  }

  /// Starts `started` (its slot taken, [`Self::inline_ok`]) on the host's thread. A job queued
  /// behind it goes to a worker thread: a worker runs its lane's queue back to back, sending
  /// the next `Run` as soon as a job ends, where inline the next would wait for Node's thread
  /// (that halved throughput with 2 workers at concurrency 8).
  pub(super) fn start_inline(self: &Arc<Self>, started: Started, host: &dyn InlineHost) {
    if let Some(next) = self.inline_one(started, host) {
      self.elsewhere(next);
    }
  }

  /// One job on the host's thread; returns the lane's next job when this one ended at once.
  fn inline_one(self: &Arc<Self>, mut started: Started, host: &dyn InlineHost) -> Option<Started> {
    let supervisor = self
      .supervisor
      .as_ref()
      .expect("inline_ok: only jobs through the supervisor");
    let prepared = match job::prepare(&mut started.queued.job, self) {
      Ok(prepared) => prepared,
      Err(done) => return self.complete(started, *done),
    };
    let outgoing = match Outgoing::new(
      &prepared.spec,
      prepared.isolation.as_ref(),
      &prepared.limits,
      self.config.drain,
      INLINE_LINGER,
    ) {
      Ok(outgoing) => outgoing,
      Err(e) => return self.complete(started, job::conclude(prepared, Err(e))),
    };
    let sent = if outgoing.frame_len() > INLINE_MAX_FRAME {
      Err(outgoing)
    } else {
      outgoing.send_to_idle(supervisor, prepared.isolation.as_ref())
    };
    match sent {
      Ok((reaper, outgoing)) => {
        job::register(self, &started.leader, reaper.pid);
        let fd = reaper.conn.raw();
        let resume = Box::new(Resume {
          prepared,
          reaper: Some(reaper),
          outgoing,
        });
        host.watch(InlineJob {
          inner: Arc::clone(self),
          job: Some((started, resume)),
          since: Instant::now(),
          fd,
        });
      }
      Err(outgoing) => {
        started.resume = Some(Box::new(Resume {
          prepared,
          reaper: None,
          outgoing,
        }));
        self.elsewhere(started);
      }
    }
    None
  }

  /// Delivers a job's outcome and frees its slot; returns the lane's next job.
  fn complete(self: &Arc<Self>, started: Started, done: (JobOutcome, Tally)) -> Option<Started> {
    let Started {
      queued: Queued { id, job, reply },
      ..
    } = started;
    let (outcome, tally) = done;
    reply.send(outcome);
    self.finish(id, job.lane, tally, None)
  }

  /// Runs `started` (its slot taken) on a parked worker thread, or a new one.
  pub(super) fn elsewhere(self: &Arc<Self>, started: Started) {
    let parked = self.lock().parked.pop();
    match parked {
      Some(worker) => worker.hand(started),
      None => self.launch_or_fail(started),
    }
  }
}
