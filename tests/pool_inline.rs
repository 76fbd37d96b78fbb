//! finn-pool's inline jobs (`inline.rs`) with real processes: started on the caller's thread,
//! finished there when the command ends at once, handed to a worker thread otherwise. The
//! host here is a plain `poll` loop standing in for Node's event loop.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use finn_sandbox::core::isolate::{IsolationOptions, Mode};
use finn_sandbox::core::pool::{
  INLINE_WINDOW, InlineHost, InlineJob, JobOutcome, JobSpec, Lane, Pool, PoolConfig, RawJob,
};
use tokio::runtime::Handle;

fn job(script: &str) -> JobSpec {
  job_in(script, "/", None)
}

fn job_in(script: &str, cwd: &str, jail_root: Option<&str>) -> JobSpec {
  JobSpec::new(RawJob {
    binary_path: "/bin/sh".into(),
    args: vec!["-c".into(), script.into()],
    cwd: cwd.into(),
    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
    lane: Some(Lane::Interactive),
    jail_root: jail_root.map(Into::into),
    timeout_ms: Some(5_000),
    ..RawJob::default()
  })
  .unwrap()
}

fn pool(workers: usize) -> Pool {
  let config = PoolConfig {
    interactive_workers: workers,
    kill_grace: Duration::from_millis(200),
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  Pool::new(config, Handle::current())
}

/// The watched jobs, and how many were stepped (readable) or handed off (window passed).
#[derive(Default)]
struct Host {
  jobs: RefCell<Vec<InlineJob>>,
  watched: RefCell<usize>,
  handed_off: RefCell<usize>,
}

impl InlineHost for Host {
  fn watch(&self, job: InlineJob) {
    *self.watched.borrow_mut() += 1;
    self.jobs.borrow_mut().push(job);
  }
}

impl Host {
  /// Runs the loop until nothing is watched: steps each job whose socket is readable, hands
  /// off each that waited past the window.
  fn run(&self) {
    loop {
      let jobs: Vec<InlineJob> = self.jobs.borrow_mut().drain(..).collect();
      if jobs.is_empty() {
        return;
      }
      let mut fds: Vec<libc::pollfd> = jobs
        .iter()
        .map(|j| libc::pollfd {
          fd: j.fd(),
          events: libc::POLLIN,
          revents: 0,
        })
        .collect();
      // SAFETY: a valid array of pollfd.
      unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1) };
      for (job, fd) in jobs.into_iter().zip(fds) {
        if fd.revents != 0 {
          job.step();
        } else if job.since().elapsed() >= INLINE_WINDOW {
          *self.handed_off.borrow_mut() += 1;
          job.hand_off();
        } else {
          self.jobs.borrow_mut().push(job);
        }
      }
    }
  }
}

type Settled = Arc<Mutex<Vec<(u64, JobOutcome, ThreadId)>>>;

fn submit(p: &Pool, host: &Host, settled: &Settled, job: JobSpec) -> u64 {
  let settled = Arc::clone(settled);
  p.submit_inline(
    job,
    Box::new(move |id, outcome| {
      settled
        .lock()
        .unwrap()
        .push((id, outcome, std::thread::current().id()))
    }),
    host,
  )
  .unwrap()
}

/// Waits (bounded) until `n` jobs have settled.
fn wait_for(settled: &Settled, n: usize) -> Vec<(u64, JobOutcome, ThreadId)> {
  let until = Instant::now() + Duration::from_secs(10);
  while settled.lock().unwrap().len() < n {
    assert!(Instant::now() < until, "jobs did not settle within 10 s");
    std::thread::sleep(Duration::from_millis(5));
  }
  std::mem::take(&mut *settled.lock().unwrap())
}

/// A pool with `workers` slots whose first jobs ran (overlapping, so each started a reaper of
/// its own): `workers` reapers are idle when this returns, and no job went inline yet.
fn warmed(workers: usize) -> (Pool, Host, Settled) {
  let p = pool(workers);
  let host = Host::default();
  let settled = Settled::default();
  // The first jobs start the supervisor and their reapers, which waits: worker threads send them.
  for _ in 0..workers {
    submit(&p, &host, &settled, job("sleep 0.2; echo warm"));
  }
  host.run();
  for (_, outcome, _) in wait_for(&settled, workers) {
    assert_eq!(stdout(&outcome), "warm\n");
  }
  assert_eq!(*host.watched.borrow(), 0, "no idle reaper yet: not inline");
  (p, host, settled)
}

fn stdout(outcome: &JobOutcome) -> &str {
  &outcome.as_ref().expect("a result").stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_job_ends_on_the_callers_thread_once_a_reaper_is_idle() {
  let (p, host, settled) = warmed(1);
  // Now a reaper is idle: the job goes from this thread and, ending within the window, ends
  // here. A loaded machine may stretch a run past the window (then a worker ends it, with the
  // same result): one of 20 runs must end here.
  let mut inline = 0;
  for round in 1..=20 {
    submit(&p, &host, &settled, job("echo out; echo err >&2; exit 3"));
    assert!(*host.watched.borrow() >= round, "sent from this thread");
    host.run();
    let done = wait_for(&settled, 1);
    let result = done[0].1.as_ref().unwrap();
    assert_eq!(
      (
        result.stdout.as_str(),
        result.stderr.as_str(),
        result.exit_code
      ),
      ("out\n", "err\n", 3)
    );
    if done[0].2 == std::thread::current().id() {
      inline += 1;
      break;
    }
  }
  assert_eq!(inline, 1, "no job ended on the caller's thread");
  let totals = p.stats().totals;
  assert_eq!(totals.failed, 0);
  assert_eq!(p.stats().interactive.active, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_job_or_a_missed_window_goes_to_a_worker_and_still_ends_whole() {
  let (p, host, settled) = warmed(3);
  // Runs past the reaper's 1 ms: its `Spawned` comes alone, and a worker takes the job.
  submit(&p, &host, &settled, job("sleep 0.05; echo slow"));
  // Never stepped: handed off as a host does when the window passes with no answer.
  submit(&p, &host, &settled, job("echo quick"));
  // Dropped by its host (a panic, or a host going away): it goes to a worker all the same.
  submit(&p, &host, &settled, job("echo dropped"));
  assert_eq!(*host.watched.borrow(), 3);
  let mut unwatched: Vec<InlineJob> = host.jobs.borrow_mut().drain(1..).collect();
  drop(unwatched.pop());
  unwatched.pop().unwrap().hand_off();
  host.run();
  let mut done = wait_for(&settled, 3);
  done.sort_by_key(|d| d.0);
  assert_eq!(stdout(&done[0].1), "slow\n");
  assert_eq!(stdout(&done[1].1), "quick\n");
  assert_eq!(stdout(&done[2].1), "dropped\n");
  for d in &done {
    assert_ne!(d.2, std::thread::current().id(), "a worker settled it");
  }
  assert_eq!(p.stats().totals.completed, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_jobs_and_large_frames_go_to_a_worker_the_rest_inline() {
  let (p, host, settled) = warmed(1);
  let isolated = |mode| {
    let mut j = job("echo iso");
    j.isolation = Some(IsolationOptions {
      mode,
      ..IsolationOptions::default()
    });
    j
  };
  // `off` said outright is no isolation: inline.
  submit(&p, &host, &settled, isolated(Mode::Off));
  assert_eq!(*host.watched.borrow(), 1);
  host.run();
  assert_eq!(stdout(&wait_for(&settled, 1)[0].1), "iso\n");
  // Isolated: its plan opens the cwd's directories, which stays off the host's thread.
  submit(&p, &host, &settled, isolated(Mode::Auto));
  assert_eq!(*host.watched.borrow(), 1, "an isolated job went inline");
  host.run();
  assert_ne!(wait_for(&settled, 1)[0].2, std::thread::current().id());
  // A 16 KiB argument: the frame is well under the inline bound (64 KiB).
  let with_arg = |len: usize| {
    let mut j = job("echo ${#0}");
    j.argv
      .push(std::ffi::CString::new("x".repeat(len)).unwrap());
    j
  };
  submit(&p, &host, &settled, with_arg(16 * 1024));
  assert_eq!(
    *host.watched.borrow(),
    2,
    "a 16 KiB frame did not go inline"
  );
  host.run();
  assert_eq!(stdout(&wait_for(&settled, 1)[0].1), "16384\n");
  // 100 KiB: over the bound; a worker sends it (it may fill the socket and wait).
  submit(&p, &host, &settled, with_arg(100 * 1024));
  assert_eq!(*host.watched.borrow(), 2, "a 100 KiB frame went inline");
  host.run();
  assert_eq!(stdout(&wait_for(&settled, 1)[0].1), "102400\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_go_to_a_worker_in_order_and_a_rejected_cwd_ends_at_once() {
  let (p, host, settled) = warmed(1);
  let jail = std::env::temp_dir();
  let jail = jail.to_str().unwrap();
  // Outside the jail: loa-finn's sanitized result, without running anything, on this thread.
  let rejected = submit(&p, &host, &settled, job_in("echo never", "/", Some(jail)));
  let done = wait_for(&settled, 1);
  assert_eq!(done[0].0, rejected);
  let result = done[0].1.as_ref().unwrap();
  assert_eq!(
    (result.exit_code, result.stderr.as_str()),
    (1, "Working directory validation failed")
  );
  assert_eq!(done[0].2, std::thread::current().id());
  assert_eq!(*host.watched.borrow(), 0);
  // The first goes inline; the two queued behind it go to a worker thread, in order.
  let first = submit(&p, &host, &settled, job("echo 1"));
  submit(&p, &host, &settled, job_in("echo never", "/", Some(jail)));
  submit(&p, &host, &settled, job("echo 3"));
  assert_eq!(p.stats().interactive.queued, 2);
  assert_eq!(*host.watched.borrow(), 1);
  host.run();
  let done = wait_for(&settled, 3);
  let ids: Vec<u64> = done.iter().map(|d| d.0).collect();
  assert_eq!(ids, vec![first, first + 1, first + 2]);
  assert_eq!(stdout(&done[0].1), "1\n");
  assert_eq!(done[1].1.as_ref().unwrap().exit_code, 1);
  assert_eq!(stdout(&done[2].1), "3\n");
  for d in &done[1..] {
    assert_ne!(d.2, std::thread::current().id(), "queued: run by a worker");
  }
  assert_eq!(p.stats().totals.completed, 5);
}

/// A job sent inline whose host then does not run (Node's thread in a long synchronous loop,
/// or a worker thread blocked in `Atomics.wait`) still ends at its deadline: its reaper keeps
/// it, and the job settles as a timeout once the host looks again. The command marks its
/// SIGTERM in a file; the marker must appear while the host is not running at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_job_is_terminated_at_its_deadline_while_its_host_does_not_run() {
  let (p, host, settled) = warmed(1);
  let dir = tempfile::tempdir().unwrap();
  let marker = dir.path().join("terminated");
  let mut spec = job(&format!(
    "trap ': > {}; exit 143' TERM; sleep 30 & wait",
    marker.display()
  ));
  spec.timeout_ms = 200;
  let sent = std::time::SystemTime::now();
  submit(&p, &host, &settled, spec);
  assert_eq!(*host.watched.borrow(), 1, "sent from this thread");
  // The host does not run: nothing on this side can keep the deadline.
  let bound = Instant::now() + Duration::from_secs(10);
  while !marker.exists() {
    assert!(
      Instant::now() < bound,
      "the command was not terminated while its host did not run"
    );
    std::thread::sleep(Duration::from_millis(10));
  }
  let terminated = std::fs::metadata(&marker).unwrap().modified().unwrap();
  // File times come from the kernel's coarse clock (a tick, up to 10 ms, behind).
  let after = terminated.duration_since(sent).unwrap();
  assert!(
    after >= Duration::from_millis(180) && after < Duration::from_secs(3),
    "terminated {after:?} after it was sent (timeout 200 ms)"
  );
  host.run();
  let done = wait_for(&settled, 1);
  assert!(
    matches!(
      done[0].1,
      Err(finn_sandbox::core::pool::PoolError::Timeout(200))
    ),
    "{:?}",
    done[0].1
  );
  assert_eq!(p.stats().totals.timed_out, 1);
}

/// The deadline counts until the leader exits, on the reaper's side as on the addon's: a
/// leader that exits at once leaves its background child to the drain, and the job is the
/// leader's exit, not a timeout, however long past the deadline the child lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_stops_counting_once_the_leader_has_exited() {
  let config = PoolConfig {
    interactive_workers: 1,
    kill_grace: Duration::from_millis(200),
    drain: Duration::from_secs(5),
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  let p = Pool::new(config, Handle::current());
  let host = Host::default();
  let settled = Settled::default();
  let mut spec = job("sleep 0.6 & echo leader done");
  spec.timeout_ms = 100;
  submit(&p, &host, &settled, spec);
  host.run();
  let done = wait_for(&settled, 1);
  assert_eq!(stdout(&done[0].1), "leader done\n");
  assert_eq!(done[0].1.as_ref().unwrap().exit_code, 0);
  assert_eq!(p.stats().totals.timed_out, 0);
}
