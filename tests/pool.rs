//! finn-pool with real processes: dispatch, lanes, timeouts, abort, shutdown, stats.

use std::time::{Duration, Instant};

use finn_sandbox::core::pool::{JobSpec, Lane, Pool, PoolConfig, PoolError, RawJob, Submitted};
use tokio::runtime::Handle;

mod common;
use common::{fifo, open_fifo};

fn job(script: &str, lane: Lane) -> JobSpec {
  JobSpec::new(RawJob {
    binary_path: "/bin/sh".into(),
    args: vec!["-c".into(), script.into()],
    cwd: "/".into(),
    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
    lane: Some(lane),
    ..RawJob::default()
  })
  .unwrap()
}

fn pool(workers: usize, depth: usize) -> Pool {
  let config = PoolConfig {
    interactive_workers: workers,
    max_queue_depth: depth,
    kill_grace: Duration::from_millis(200),
    shutdown_deadline: Duration::from_millis(300),
    // Every job contained by the supervisor, as the addon runs them.
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  Pool::new(config, Handle::current())
}

/// A job's outcome, failing the test instead of hanging when it never comes.
async fn within_5s(
  result: tokio::sync::oneshot::Receiver<finn_sandbox::core::pool::JobOutcome>,
) -> finn_sandbox::core::pool::JobOutcome {
  tokio::time::timeout(Duration::from_secs(5), result)
    .await
    .expect("settled within 5 s")
    .expect("a reply")
}

async fn settle(s: Submitted) -> Result<String, PoolError> {
  s.result
    .await
    .expect("job task ended without a reply")
    .map(|r| r.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_have_their_own_slots_and_queues() {
  let p = pool(1, 1);
  let busy = p
    .submit(job("sleep 0.3; echo i1", Lane::Interactive))
    .unwrap();
  let queued = p.submit(job("echo i2", Lane::Interactive)).unwrap();
  assert_eq!(
    p.submit(job("echo i3", Lane::Interactive)).err(),
    Some(PoolError::QueueFull(Lane::Interactive))
  );
  // The system slot is free although the interactive lane is full.
  let started = Instant::now();
  assert_eq!(
    settle(p.submit(job("echo s", Lane::System)).unwrap())
      .await
      .unwrap(),
    "s\n"
  );
  assert!(started.elapsed() < Duration::from_millis(250));
  assert_eq!(p.stats().interactive.queued, 1);
  assert_eq!(settle(busy).await.unwrap(), "i1\n");
  assert_eq!(settle(queued).await.unwrap(), "i2\n");
  let totals = p.stats().totals;
  assert_eq!(
    (totals.completed, totals.failed, totals.timed_out),
    (3, 0, 0)
  );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_counted_and_frees_the_slot_for_the_queue() {
  let p = pool(1, 4);
  let mut spec = job("sleep 100", Lane::Interactive);
  spec.timeout_ms = 100;
  let slow = p.submit(spec).unwrap();
  let next = p.submit(job("echo next", Lane::Interactive)).unwrap();
  assert_eq!(settle(slow).await, Err(PoolError::Timeout(100)));
  assert_eq!(settle(next).await.unwrap(), "next\n");
  assert_eq!(p.stats().totals.timed_out, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_removes_a_queued_job_and_stops_a_running_one() {
  let p = pool(1, 4);
  let running = p.submit(job("sleep 100", Lane::Interactive)).unwrap();
  let queued = p.submit(job("echo never", Lane::Interactive)).unwrap();
  p.abort(queued.id);
  assert_eq!(settle(queued).await, Err(PoolError::Aborted));
  assert_eq!(p.stats().interactive.queued, 0);
  p.abort(running.id);
  assert_eq!(settle(running).await, Err(PoolError::Aborted));
  let stats = p.stats();
  assert_eq!((stats.interactive.active, stats.totals.timed_out), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_rejects_everything_and_waits_for_term_ignoring_trees() {
  let p = pool(1, 4);
  let dir = tempfile::tempdir().unwrap();
  let ready = dir.path().join("ready");
  let script = format!("trap '' TERM; touch {}; sleep 100", ready.display());
  let running = p.submit(job(&script, Lane::Interactive)).unwrap();
  let queued = p.submit(job("echo never", Lane::Interactive)).unwrap();
  // The child's own signal that its trap is installed.
  while !ready.exists() {
    tokio::time::sleep(Duration::from_millis(2)).await;
  }
  let started = Instant::now();
  let done = p.shutdown();
  assert_eq!(
    p.submit(job("echo late", Lane::System)).err(),
    Some(PoolError::Closed)
  );
  done.await;
  // SIGTERM was ignored: the deadline's SIGKILL ended it.
  assert!(
    started.elapsed() >= Duration::from_millis(290),
    "{:?}",
    started.elapsed()
  );
  assert_eq!(settle(running).await, Err(PoolError::ShutDown));
  assert_eq!(settle(queued).await, Err(PoolError::ShutDown));
  assert_eq!(p.stats().totals.timed_out, 0);
  p.shutdown().await; // idempotent
}

/// `shutdown_then` (what the addon's `shutdown()` uses) calls back on its own thread once the
/// running tree is dead and the supervisor has exited and been reaped: nothing of the pool is
/// left, not even a zombie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_then_calls_back_once_the_trees_and_the_supervisor_are_gone() {
  let p = pool(1, 4);
  let reaper: i32 = settle(p.submit(job("echo $PPID", Lane::Interactive)).unwrap())
    .await
    .unwrap()
    .trim()
    .parse()
    .unwrap();
  let parent = |pid: i32| -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
  };
  let supervisor = parent(reaper).expect("the reaper is alive between jobs");
  assert_eq!(parent(supervisor), Some(std::process::id() as i32));
  let running = p.submit(job("sleep 100", Lane::Interactive)).unwrap();
  let (tx, rx) = std::sync::mpsc::channel();
  p.shutdown_then(move || tx.send(()).unwrap()).unwrap();
  // A few ms here (SIGTERM ends the sleep, the supervisor exits once its socket closes); 3 s
  // is under the 5 s bound a shutdown waits for a supervisor that does not exit.
  tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(3)))
    .await
    .unwrap()
    .expect("shutdown_then called back within 3 s");
  assert!(
    parent(supervisor).is_none(),
    "the supervisor is still there"
  );
  assert_eq!(settle(running).await, Err(PoolError::ShutDown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_failures_resolve_and_count_as_failed() {
  let p = pool(1, 1);
  let mut spec = job("true", Lane::Interactive);
  spec.binary_path = "no-such-binary-here".into();
  let r = p.submit(spec).unwrap().result.await.unwrap().unwrap();
  assert_eq!(r.exit_code, 127);
  assert!(r.stderr.contains("not found in PATH"), "{}", r.stderr);
  assert_eq!(
    (p.stats().totals.failed, p.stats().totals.completed),
    (1, 0)
  );
}

#[test]
fn invalid_specs_name_the_field() {
  let bad = |raw: RawJob| JobSpec::new(raw).unwrap_err().to_string();
  let base = RawJob {
    binary_path: "/bin/true".into(),
    cwd: "/".into(),
    ..RawJob::default()
  };
  assert!(
    bad(RawJob {
      binary_path: String::new(),
      ..base.clone()
    })
    .contains("spec.binaryPath")
  );
  assert!(
    bad(RawJob {
      args: vec!["a\0".into()],
      ..base.clone()
    })
    .contains("spec.args[0]")
  );
  assert!(
    bad(RawJob {
      env: vec![("A=B".into(), "x".into())],
      ..base.clone()
    })
    .contains("spec.env key")
  );
  assert!(
    bad(RawJob {
      timeout_ms: Some(0),
      ..base.clone()
    })
    .contains("spec.timeoutMs")
  );
  assert!(
    bad(RawJob {
      max_buffer: Some(u64::MAX),
      ..base
    })
    .contains("spec.maxBuffer")
  );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_all_now_reaches_a_job_that_had_not_recorded_its_pid_yet() {
  let p = pool(2, 4);
  let dir = tempfile::tempdir().unwrap();
  let log = dir.path().join("pids");
  let script = format!(
    "echo $$ >> {0}; sleep 100 & echo $! >> {0}; wait",
    log.display()
  );
  let first = p.submit(job(&script, Lane::Interactive)).unwrap();
  let queued_later = p.submit(job("sleep 100", Lane::Interactive)).unwrap();
  let third = p.submit(job("sleep 100", Lane::Interactive)).unwrap();
  // Right after submit: the job's task has most likely not spawned yet.
  p.kill_all_now();
  let done = within_5s(first.result)
    .await
    .expect("the killed job still resolves");
  assert_eq!(done.exit_code, 137, "SIGKILLed: {done:?}");
  for pid in std::fs::read_to_string(&log)
    .unwrap_or_default()
    .split_whitespace()
  {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
      .rsplit_once(')')
      .map(|(_, rest)| rest.trim_start().chars().next());
    assert!(
      matches!(state, None | Some(Some('Z' | 'X'))),
      "pid {pid} survived: {stat}"
    );
  }
  assert_eq!(within_5s(queued_later.result).await.unwrap().exit_code, 137);
  assert!(
    third.result.await.unwrap().is_err(),
    "the queued job was dropped"
  );
  assert_eq!(
    p.submit(job("true", Lane::System)).err(),
    Some(PoolError::Closed)
  );
}

/// Parked worker threads hold the pool's state; dropping the last handle must let them go at
/// once, not after their 10 s idle timeout (a runtime's shutdown waits for its blocking
/// threads).
#[test]
fn dropping_the_last_handle_lets_parked_workers_exit() {
  let rt = tokio::runtime::Builder::new_multi_thread()
    .worker_threads(1)
    .enable_all()
    .build()
    .unwrap();
  rt.block_on(async {
    let p = pool(2, 4);
    let (a, b) = (
      p.submit(job("echo a", Lane::Interactive)).unwrap(),
      p.submit(job("echo b", Lane::Interactive)).unwrap(),
    );
    assert_eq!(settle(a).await.unwrap(), "a\n");
    assert_eq!(settle(b).await.unwrap(), "b\n");
    drop(p);
  });
  let started = Instant::now();
  rt.shutdown_timeout(Duration::from_secs(30));
  assert!(
    started.elapsed() < Duration::from_secs(5),
    "runtime shutdown waited {:?} for parked workers",
    started.elapsed()
  );
}

fn gated(fifo: &std::path::Path, out: &str) -> String {
  format!("read line < {}; echo {out}", fifo.display())
}

/// A finished job's reply goes once the worker's next job is on its way, not when that job
/// ends: here the next job waits on a FIFO the test opens only once the reply has come. A
/// reply held until then would never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_goes_while_the_next_job_still_runs() {
  let (_dir, fifo) = fifo();
  let p = pool(1, 10);
  let first = p.submit(job("echo a", Lane::Interactive)).unwrap();
  let next = p
    .submit(job(&gated(&fifo, "b"), Lane::Interactive))
    .unwrap();
  assert_eq!(within_5s(first.result).await.unwrap().stdout, "a\n");
  let mut next_result = next.result;
  assert!(next_result.try_recv().is_err());
  let _open = open_fifo(&fifo);
  assert_eq!(within_5s(next_result).await.unwrap().stdout, "b\n");
}

/// With a backlog, a worker holds finished jobs' replies while it runs the next ones, to wake
/// Node's thread once for several (`worker.rs`, `Carried`): a reply comes no earlier than
/// 2 ms (`HOLD_FOR`) after its job's end. It still comes within that bound while the next job
/// runs on: here the next job waits on a FIFO the test opens only once the reply has come.
/// Held until that job's end, it never would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_reply_goes_while_the_next_job_still_runs() {
  let (_dir, start) = fifo();
  let (_dir2, fifo) = fifo();
  let p = pool(1, 10);
  let submitted = Instant::now();
  // The first job waits until everything is queued: then two wait behind the gated one.
  let first = p
    .submit(job(&gated(&start, "a"), Lane::Interactive))
    .unwrap();
  let next = p
    .submit(job(&gated(&fifo, "b"), Lane::Interactive))
    .unwrap();
  let rest: Vec<_> = ["c", "d"]
    .iter()
    .map(|s| {
      p.submit(job(&format!("echo {s}"), Lane::Interactive))
        .unwrap()
    })
    .collect();
  let _started = open_fifo(&start);
  let a = within_5s(first.result).await.unwrap();
  let held = submitted.elapsed();
  assert_eq!(a.stdout, "a\n");
  // The job ended no earlier than `duration_ms` after it was submitted; its reply was held
  // 2 ms from then.
  assert!(
    held >= Duration::from_secs_f64(a.duration_ms / 1000.0) + Duration::from_millis(2),
    "{held:?} after the submission, the job took {} ms",
    a.duration_ms
  );
  let mut next_result = next.result;
  assert!(next_result.try_recv().is_err());
  let _open = open_fifo(&fifo);
  assert_eq!(within_5s(next_result).await.unwrap().stdout, "b\n");
  for (s, want) in rest.into_iter().zip(["c\n", "d\n"]) {
    assert_eq!(within_5s(s.result).await.unwrap().stdout, want);
  }
}
