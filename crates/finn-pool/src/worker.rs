//! The worker threads: each runs its job, then its lane's queued jobs back to back, then parks
//! in its [`Mailbox`] for the next submitted job.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::config::Lane;
use super::job::{self, JobOutcome, Tally};
use super::state::{Inner, Parked, Queued, Reply, Started};
use finn_exec::later::Later;

/// Where a parked worker thread receives its next job, or is told to exit.
pub struct Mailbox<T> {
  slot: Mutex<Slot<T>>,
  wake: Condvar,
}

enum Slot<T> {
  Empty,
  Job(Box<T>),
  Retire,
}

/// What [`Mailbox::wait_until`] found.
pub enum Waited<T> {
  Job(T),
  Retired,
  /// Nothing came before the deadline.
  Idle,
}

impl<T> Default for Mailbox<T> {
  fn default() -> Self {
    Mailbox {
      slot: Mutex::new(Slot::Empty),
      wake: Condvar::new(),
    }
  }
}

impl<T> Mailbox<T> {
  fn lock(&self) -> MutexGuard<'_, Slot<T>> {
    self.slot.lock().unwrap_or_else(|e| e.into_inner())
  }

  fn put(&self, slot: Slot<T>) {
    *self.lock() = slot;
    self.wake.notify_one();
  }

  pub fn hand(&self, job: T) {
    self.put(Slot::Job(Box::new(job)));
  }

  pub fn retire(&self) {
    self.put(Slot::Retire);
  }

  /// Takes a job or a retirement, waiting for one until `until` (a job already there is
  /// taken even after it).
  pub fn wait_until(&self, until: Instant) -> Waited<T> {
    let mut slot = self.lock();
    loop {
      match std::mem::replace(&mut *slot, Slot::Empty) {
        Slot::Job(job) => return Waited::Job(*job),
        Slot::Retire => return Waited::Retired,
        Slot::Empty => {}
      }
      let now = Instant::now();
      if now >= until {
        return Waited::Idle;
      }
      slot = self
        .wake
        .wait_timeout(slot, until - now)
        .unwrap_or_else(|e| e.into_inner())
        .0;
    }
  }
}

impl Inner {
  /// A worker thread: runs its job, then the queued jobs of the same lane back to back; when
  /// none is queued it parks, to take the next submitted job without a new thread, and exits
  /// after [`WORKER_IDLE`] without one.
  pub(super) fn work(self: Arc<Self>, mut started: Started) {
    let me = Arc::new(Parked::default());
    // The previous job's outcome while the next queued job is being started: replying first
    // would wake Node's thread, which would compete with this one and the reaper for the CPU
    // until the next child runs. Sent as soon as the next job is on its way to its reaper (or
    // its child runs, without a supervisor; or anything goes wrong first). Sending it at the
    // reaper's first answer instead costs 7% of the throughput at concurrency 8
    // (`node bench/probe.js throughput addon-2 --total 3000 --concurrency 8`, 3 runs each:
    // 2369-2450/s -> 2597-2619/s): Node's thread woke just before the reaper's next fork and
    // ran first. With a backlog, replies are held a little longer (see `Carried`).
    let mut carried = Carried::default();
    loop {
      let span = tracing::info_span!(
        "job",
        id = %uuid::Uuid::new_v4(),
        seq = started.queued.id,
        lane = ?started.queued.job.lane,
        binary = %started.queued.job.binary_path,
      );
      let next = match span.in_scope(|| self.run_job(started, &me, &mut carried)) {
        Some(next) => Some(next),
        None => {
          carried.flush();
          self.wait_parked(&me)
        }
      };
      match next {
        Some(next) => started = next,
        None => return,
      }
    }
  }

  /// Runs one job (sending `carried` once its child runs); returns the lane's next job, already
  /// counted as running, with this job's outcome left in `carried`. Without a next job, this
  /// thread is parked (in the same lock that freed the slot, so the job its reply triggers
  /// finds it).
  fn run_job(
    self: &Arc<Self>,
    started: Started,
    me: &Arc<Parked>,
    carried: &mut Carried,
  ) -> Option<Started> {
    let Started {
      queued: Queued { id, job, reply },
      stop,
      leader,
      resume,
      behind,
    } = started;
    carried.holding = behind >= HOLD_BEHIND && carried.held.len() < HOLD_MAX;
    // Frees the slot even if the job panics; the dropped `reply` then reads as a crash.
    let slot = SlotGuard::new(self, id, job.lane);
    #[cfg(feature = "test-hooks")]
    super::test_hooks::before_run(self.test_hooks, job.session_id.as_deref(), id);
    let (outcome, tally) = match resume {
      Some(resume) => job::resume(*resume, Some(&stop), self, &leader, &mut *carried),
      None => job::execute(job, &stop, self, &leader, &mut *carried),
    };
    carried.run_if_due();
    tracing::debug!(?outcome, "job settled");
    let next = slot.finish(tally, Some(me));
    match next {
      Some(_) => carried.hold(reply, outcome),
      None => {
        carried.flush();
        reply.send(outcome);
      }
    }
    next
  }

  /// Waits, parked, for a handed-over job; `None` when retired or idle for too long.
  fn wait_parked(self: &Arc<Self>, me: &Arc<Parked>) -> Option<Started> {
    let idle_until = std::time::Instant::now() + WORKER_IDLE;
    loop {
      match me.wait_until(idle_until) {
        Waited::Job(started) => return Some(started),
        Waited::Retired => return None,
        Waited::Idle => {
          let mut state = self.lock();
          if let Some(at) = state.parked.iter().position(|p| Arc::ptr_eq(p, me)) {
            state.parked.remove(at);
            // The pool's last worker thread leaves an idle pool: the supervisor goes too, with
            // the reapers it still has (they retire after as long without a job anyway). No
            // job holds a reaper: a job leases one only while it is running, and none is (in
            // this lock, which admits jobs). The next job starts a new supervisor. An idle pool
            // then costs no process, only Node's own share (`npm run bench`, idle RSS). A
            // session's shell runs under the supervisor too: it stays while one holds a lease.
            if state.parked.is_empty()
              && state.running.is_empty()
              && state.leases == 0
              && let Some(supervisor) = &self.supervisor
            {
              supervisor.stop();
            }
            return None;
          }
          // A job was handed over in the meantime: the next wait takes it at once.
        }
      }
    }
  }
}

/// Finished jobs' replies held back while their worker starts the next child. Dropped (a
/// panic unwinding the worker), it still sends the real outcomes.
///
/// Normally a reply goes as soon as the next job is on its way. With a backlog (the lane had
/// [`HOLD_BEHIND`] or more jobs queued behind the next one), up to [`HOLD_MAX`] replies are
/// held for at most [`HOLD_FOR`] and go together: Node's thread wakes once for them. The
/// backlog makes waiting for the replies cost no throughput (Node's next submissions only
/// queue), and Node's thread then takes 27-33 µs per command instead of 37-57 and sleeps
/// 0.31-0.34 times per command instead of 0.83-0.92 (8 paired runs of `node bench/probe.js
/// throughput addon-2 --total 3000 --concurrency 8`).
#[derive(Default)]
struct Carried {
  held: Vec<(Reply, JobOutcome)>,
  /// When the oldest held reply was held.
  since: Option<Instant>,
  /// The replies may wait until `since + HOLD_FOR`; else they go at the first chance.
  holding: bool,
}

/// Jobs queued behind the next one that make a backlog (see [`Carried`]).
const HOLD_BEHIND: usize = 2;
/// Replies held at most.
const HOLD_MAX: usize = 3;
/// How long a reply is held at most.
const HOLD_FOR: Duration = Duration::from_millis(2);

impl Carried {
  fn hold(&mut self, reply: Reply, outcome: JobOutcome) {
    self.since.get_or_insert_with(Instant::now);
    self.held.push((reply, outcome));
  }

  fn flush(&mut self) {
    self.since = None;
    for (reply, outcome) in self.held.drain(..) {
      reply.send(outcome);
    }
  }
}

impl Later for Carried {
  fn due(&self) -> Option<Instant> {
    let since = self.since?;
    Some(if self.holding {
      since + HOLD_FOR
    } else {
      since
    })
  }

  fn run(&mut self) {
    self.flush();
  }
}

impl Drop for Carried {
  fn drop(&mut self) {
    self.flush();
  }
}

/// How long a worker thread without a job stays parked before it exits.
const WORKER_IDLE: Duration = Duration::from_secs(10);

/// Frees a running job's slot exactly once: through [`SlotGuard::finish`], or when dropped by a
/// panic (then the lane's next job starts on a new thread). Used by worker threads and by jobs
/// finished on the host's thread (`inline.rs`).
pub(super) struct SlotGuard<'a> {
  inner: &'a Arc<Inner>,
  id: u64,
  lane: Lane,
  armed: bool,
}

impl<'a> SlotGuard<'a> {
  pub(super) fn new(inner: &'a Arc<Inner>, id: u64, lane: Lane) -> Self {
    SlotGuard {
      inner,
      id,
      lane,
      armed: true,
    }
  }

  /// See [`Inner::finish`]: without a next job, `parker` (a worker thread) is parked.
  pub(super) fn finish(mut self, tally: Tally, parker: Option<&Arc<Parked>>) -> Option<Started> {
    self.armed = false;
    self.inner.finish(self.id, self.lane, tally, parker)
  }
}

impl Drop for SlotGuard<'_> {
  fn drop(&mut self) {
    if self.armed
      && let Some(next) = self.inner.finish(self.id, self.lane, Tally::Failed, None)
    {
      self.inner.launch_or_fail(next);
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::sync::Arc;
  use std::time::Duration;

  #[test]
  fn a_job_handed_before_or_during_the_wait_is_taken() {
    let mailbox = Mailbox::default();
    mailbox.hand(1);
    assert!(matches!(mailbox.wait_until(Instant::now()), Waited::Job(1)));
    let mailbox = Arc::new(mailbox);
    let sender = Arc::clone(&mailbox);
    let handing = std::thread::spawn(move || sender.hand(2));
    let waited = mailbox.wait_until(Instant::now() + Duration::from_secs(10));
    handing.join().unwrap();
    assert!(matches!(waited, Waited::Job(2)));
  }

  #[test]
  fn retirement_and_idleness_end_the_wait() {
    let mailbox = Mailbox::<u8>::default();
    assert!(matches!(
      mailbox.wait_until(Instant::now() + Duration::from_millis(1)),
      Waited::Idle
    ));
    mailbox.retire();
    assert!(matches!(
      mailbox.wait_until(Instant::now()),
      Waited::Retired
    ));
  }
}
