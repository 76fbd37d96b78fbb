//! A command's start, capture and end against real processes, through the path that ships: a
//! reaper of the supervisor (`finn_supervisor::run_blocking`), which starts the command with
//! `posix_spawn` and ends its tree as `finn_exec::lifecycle` says.

use std::ffi::CString;
use std::future::pending;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use finn_sandbox::core::exec::later::Nothing;
use finn_sandbox::core::exec::{
  EndedBy, ExitStatus, Finished, RunLimits, SpawnError, SpawnSpec, Stop, StopCell,
  TRUNCATION_MARKER,
};
use finn_sandbox::core::supervisor::{self, JobTerms, RunError, Supervisor};

/// One supervisor for the tests of this file (its reapers run one job each at a time).
fn sup() -> &'static Supervisor {
  static SUPERVISOR: OnceLock<Supervisor> = OnceLock::new();
  SUPERVISOR.get_or_init(|| Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor"))))
}

/// Runs `spec` through a reaper on tokio's blocking pool; `stop` resolving asks for termination.
async fn run<R: Send + 'static>(
  spec: &SpawnSpec,
  limits: &RunLimits,
  stop: impl Future<Output = Stop<R>>,
  on_spawn: impl FnOnce(i32) + Send + 'static,
) -> Result<Finished<R>, SpawnError> {
  let cell = Arc::new(StopCell::new());
  let runner = Arc::clone(&cell);
  let (spec, limits) = (spec.clone(), limits.clone());
  let mut worker = pin!(tokio::task::spawn_blocking(move || {
    let drain = Duration::from_millis(100);
    supervisor::run_blocking(
      sup(),
      JobTerms {
        spec: &spec,
        isolation: None,
        limits: &limits,
      },
      drain,
      &runner,
      &mut Nothing,
      on_spawn,
    )
  }));
  let mut stop = pin!(stop);
  let mut stop_pending = true;
  loop {
    tokio::select! {
      done = &mut worker => {
        return match done.unwrap() {
          Ok(finished) => Ok(finished),
          Err(RunError::Spawn(e)) => Err(e),
          Err(e) => panic!("{e}"),
        };
      }
      request = &mut stop, if stop_pending => {
        stop_pending = false;
        cell.request(request);
      }
    }
  }
}

fn spec(program: &str, args: &[&str]) -> SpawnSpec {
  let c = |s: &str| CString::new(s).unwrap();
  let mut argv = vec![c(program)];
  argv.extend(args.iter().map(|a| c(a)));
  SpawnSpec {
    program: c(program),
    argv,
    env: vec![c("PATH=/usr/bin:/bin")],
    cwd: c("/"),
  }
}

fn limits(timeout_ms: u64, cap: usize, grace_ms: u64) -> RunLimits {
  RunLimits {
    timeout: Some(Duration::from_millis(timeout_ms)),
    max_output_bytes: cap,
    kill_grace: Duration::from_millis(grace_ms),
  }
}

/// The pid a test script printed as `<name> <pid>`.
fn printed_pid(stdout: &str, name: &str) -> i32 {
  let prefix = format!("{name} ");
  let line = stdout
    .lines()
    .find(|l| l.starts_with(&prefix))
    .unwrap_or_else(|| panic!("{name} in {stdout}"));
  line[prefix.len()..].trim().parse().unwrap()
}

fn never() -> impl Future<Output = Stop<()>> {
  pending()
}

/// A pid is gone when it no longer exists or is a zombie awaiting a reaper that is not us.
fn gone(pid: i32) -> bool {
  match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
    Err(_) => true,
    Ok(stat) => {
      let state = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
      state == "Z" || state == "X"
    }
  }
}

#[tokio::test]
async fn captures_output_and_real_exit_codes() {
  let done = run(
    &spec("/bin/sh", &["-c", "echo out; echo err >&2; exit 42"]),
    &limits(5000, 1 << 20, 100),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.status, Some(ExitStatus::Exited(42)));
  assert_eq!(done.exit_code(), 42);
  assert_eq!(done.stdout, "out\n");
  assert_eq!(done.stderr, "err\n");
  assert!(!done.truncated);
  assert_eq!(done.ended_by, EndedBy::Exit);
}

#[tokio::test]
async fn signal_death_is_128_plus_signo() {
  let done = run(
    &spec("/bin/sh", &["-c", "kill -USR1 $$"]),
    &limits(5000, 1024, 100),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.status, Some(ExitStatus::Signaled(libc::SIGUSR1)));
  assert_eq!(done.exit_code(), 128 + libc::SIGUSR1);
}

#[tokio::test]
async fn child_gets_exact_env_dev_null_stdin_own_session_default_signals() {
  let script = "echo \"env=$(env | sort | tr '\\n' ' ')\"; cat; echo \"sid=$(ps -o sid= -p $$) pid=$$\"; \
                grep -E '^(SigIgn|SigBlk)' /proc/self/status";
  let done = run(
    &spec("/bin/sh", &["-c", script]),
    &limits(5000, 1 << 16, 100),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert!(
    done.stdout.contains("env=PATH=/usr/bin:/bin PWD=/ "),
    "{}",
    done.stdout
  );
  let line = done.stdout.lines().find(|l| l.starts_with("sid=")).unwrap();
  let sid: i32 = line["sid=".len()..]
    .split_whitespace()
    .next()
    .unwrap()
    .parse()
    .unwrap();
  let pid: i32 = line.rsplit_once("pid=").unwrap().1.parse().unwrap();
  assert_eq!(sid, pid, "the child leads its own session");
  assert!(
    done.stdout.contains("SigBlk:\t0000000000000000"),
    "{}",
    done.stdout
  );
}

#[tokio::test]
async fn timeout_kills_the_whole_tree_including_term_ignorers_and_setsid_escapees() {
  // The leader and a child ignore SIGTERM; a grandchild; a child that moved to its own session.
  let script = "trap '' TERM; echo leader $$; \
                sh -c 'trap \"\" TERM; echo ignorer $$; exec sleep 60' & \
                (sleep 61 & echo grandchild $!) ; \
                setsid sleep 62 & echo escapee $!; \
                sleep 0.3; echo escapee-sid $(cut -d' ' -f6 /proc/$!/stat); wait";
  let done = run(
    &spec("/bin/sh", &["-c", script]),
    &limits(700, 1 << 16, 200),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  let (leader, escapee) = (
    printed_pid(&done.stdout, "leader"),
    printed_pid(&done.stdout, "escapee"),
  );
  assert_ne!(
    printed_pid(&done.stdout, "escapee-sid"),
    leader,
    "the escapee left the session"
  );
  for pid in [
    leader,
    printed_pid(&done.stdout, "ignorer"),
    printed_pid(&done.stdout, "grandchild"),
    escapee,
  ] {
    assert!(gone(pid), "pid {pid} survived: {}", done.stdout);
  }
  assert!(done.survivors.is_empty());
  // The leader ignores SIGTERM, so it took the grace and a SIGKILL.
  assert_eq!(done.status, Some(ExitStatus::Signaled(libc::SIGKILL)));
  assert!(done.duration >= Duration::from_millis(900));
}

#[tokio::test]
async fn a_tree_that_obeys_sigterm_dies_without_waiting_for_the_grace() {
  let done = run(
    &spec("/bin/sh", &["-c", "sleep 60 & sleep 60"]),
    &limits(200, 1024, 30_000),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert_eq!(done.status, Some(ExitStatus::Signaled(libc::SIGTERM)));
  assert!(
    done.duration < Duration::from_secs(5),
    "{:?}",
    done.duration
  );
}

#[tokio::test]
async fn output_cap_stops_an_endless_producer_and_keeps_earlier_stderr() {
  let done = run(
    &spec("/bin/sh", &["-c", "echo oops >&2; exec yes"]),
    &limits(30_000, 4096, 5000),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::OutputLimit);
  assert!(done.truncated);
  assert_eq!(done.stderr, "oops\n");
  assert!(done.stdout.ends_with(TRUNCATION_MARKER));
  assert_eq!(done.stdout.len() + done.stderr.len(), 4096);
  assert!(done.duration < Duration::from_secs(5));
}

#[tokio::test]
async fn caller_stop_terminates_with_its_reason() {
  let stop = async {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Stop {
      grace: Duration::from_millis(50),
      reason: "abort",
    }
  };
  let done = run(
    &spec("/bin/sleep", &["60"]),
    &limits(60_000, 1024, 5000),
    stop,
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Stopped("abort"));
  assert_eq!(done.status, Some(ExitStatus::Signaled(libc::SIGTERM)));
}

#[tokio::test]
async fn spawn_failures_say_why() {
  let err = run(
    &spec("/no/such/binary", &[]),
    &limits(1000, 1024, 100),
    never(),
    |_| (),
  )
  .await
  .unwrap_err();
  assert_eq!(err.exit_code(), 127);
  assert!(err.to_string().contains("No such file"), "{err}");
  let mut s = spec("/bin/true", &[]);
  s.cwd = CString::new("/no/such/dir").unwrap();
  let err = run(&s, &limits(1000, 1024, 100), never(), |_| ())
    .await
    .unwrap_err();
  assert!(
    err.to_string().contains("working directory /no/such/dir"),
    "{err}"
  );
}

#[tokio::test]
async fn an_escapee_is_found_even_when_its_leader_dies_on_sigterm_at_once() {
  // The leader obeys SIGTERM: without freezing the tree first, it would die before the /proc
  // walk and take the escapee's parent link with it.
  let script = "echo leader $$; setsid sleep 63 & echo escapee $!; sleep 0.2; \
                echo escapee-sid $(cut -d' ' -f6 /proc/$!/stat); wait";
  let done = run(
    &spec("/bin/sh", &["-c", script]),
    &limits(500, 1 << 16, 5_000),
    never(),
    |_| (),
  )
  .await
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert_ne!(
    printed_pid(&done.stdout, "escapee-sid"),
    printed_pid(&done.stdout, "leader")
  );
  assert!(
    gone(printed_pid(&done.stdout, "escapee")),
    "escapee survived: {}",
    done.stdout
  );
  assert!(
    done.duration < Duration::from_secs(3),
    "no grace was needed: {:?}",
    done.duration
  );
}
