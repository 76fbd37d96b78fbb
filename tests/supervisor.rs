//! finn-supervisor with real processes: a supervisor binary, its reapers, and trees built to
//! escape. Survivors are found by scanning every /proc/<pid>/cmdline for a token unique to the
//! test, not by recorded pids.
//!
//! `FINN_TEST_DIRECT=1` (with `--features test-hooks`) runs the same bodies through the direct
//! path, a test fixture (`exec::direct`: process groups and a /proc walk from the caller): the
//! containment tests then fail, which is how they were shown to test something.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use finn_sandbox::core::exec::{
  EndedBy, ExitStatus, Finished, RunLimits, SpawnSpec, Stop, StopCell, TRUNCATION_MARKER,
};
use finn_sandbox::core::supervisor::{self, JobTerms, RunError, Supervisor};

mod common;
use common::{fifo, holders, open_fifo};

fn supervisor() -> Supervisor {
  Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")))
}

fn direct() -> bool {
  std::env::var_os("FINN_TEST_DIRECT").is_some_and(|v| v == "1")
}

fn sh(script: &str) -> SpawnSpec {
  let c = |s: &str| CString::new(s).unwrap();
  SpawnSpec {
    program: c("/bin/sh"),
    argv: vec![c("sh"), c("-c"), c(script)],
    env: vec![c("PATH=/usr/bin:/bin")],
    cwd: c("/"),
  }
}

fn limits(timeout_ms: u64, grace_ms: u64) -> RunLimits {
  RunLimits {
    timeout: Some(Duration::from_millis(timeout_ms)),
    max_output_bytes: 1 << 20,
    kill_grace: Duration::from_millis(grace_ms),
  }
}

/// A token no other process on the machine has in its command line: `sleep 9999.<digits>` is
/// both a valid duration and a unique string.
fn token() -> String {
  let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000;
  format!("9999.{n:012}")
}

/// Waits until no process holds `token`, up to `bound`; returns the holders left then.
fn survivors_after(token: &str, bound: Duration) -> Vec<i32> {
  let until = Instant::now() + bound;
  loop {
    let left = holders(token);
    if left.is_empty() || Instant::now() >= until {
      return left;
    }
    std::thread::sleep(Duration::from_millis(5));
  }
}

/// Waits until `n` processes hold `token` (the tree is fully built), up to 10 s.
fn wait_for_holders(token: &str, n: usize) {
  let until = Instant::now() + Duration::from_secs(10);
  while holders(token).len() < n {
    assert!(Instant::now() < until, "the tree for {token} never started");
    std::thread::sleep(Duration::from_millis(5));
  }
}

/// Waits, up to 10 s, until the `sleep` holding `token` has exec'd, and returns its pid. Counting
/// holders is not enough: the leader shell holds the token in its own command line from the
/// start, and its forked child, before exec, is a shell too.
fn wait_for_sleeper(token: &str) -> i32 {
  let until = Instant::now() + Duration::from_secs(10);
  loop {
    let sleeper = holders(token)
      .into_iter()
      .find(|&p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c == "sleep\n"));
    if let Some(pid) = sleeper {
      return pid;
    }
    assert!(
      Instant::now() < until,
      "the sleeper for {token} never started"
    );
    std::thread::sleep(Duration::from_millis(5));
  }
}

type Outcome = Result<Finished<&'static str>, RunError>;

/// Runs `spec` on a thread through the supervisor (or the direct path); `stop` lets the test
/// ask for termination.
fn run_on_thread(
  sup: &Arc<Supervisor>,
  spec: SpawnSpec,
  limits: RunLimits,
) -> (
  Arc<StopCell<&'static str>>,
  std::thread::JoinHandle<Outcome>,
) {
  let cell = Arc::new(StopCell::new());
  let runner = Arc::clone(&cell);
  let sup = Arc::clone(sup);
  let handle = std::thread::spawn(move || {
    if direct() {
      run_direct(&spec, &limits, &runner)
    } else {
      supervisor::run_blocking(
        &sup,
        JobTerms {
          spec: &spec,
          isolation: None,
          limits: &limits,
        },
        Duration::from_millis(100),
        &runner,
        &mut finn_sandbox::core::exec::later::Nothing,
        |_| (),
      )
    }
  });
  (cell, handle)
}

#[cfg(feature = "test-hooks")]
fn run_direct(spec: &SpawnSpec, limits: &RunLimits, stop: &StopCell<&'static str>) -> Outcome {
  finn_sandbox::core::exec::direct::run_blocking(spec, limits, stop, |_| ())
    .map_err(RunError::Spawn)
}

#[cfg(not(feature = "test-hooks"))]
fn run_direct(_: &SpawnSpec, _: &RunLimits, _: &StopCell<&'static str>) -> Outcome {
  panic!("FINN_TEST_DIRECT=1 needs --features test-hooks: the direct path is a fixture of it")
}

fn run(sup: &Arc<Supervisor>, spec: SpawnSpec, limits: RunLimits) -> Outcome {
  run_on_thread(sup, spec, limits).1.join().unwrap()
}

/// A tree built to escape: two `setsid` escapees (one of them double-forked), a double-forked
/// background child, a TERM-immune child, all holding the stdout pipe; the leader itself
/// ignores SIGTERM and waits. Seven processes carry the token once it is fully up.
fn nasty(tok: &str) -> String {
  format!(
    "trap '' TERM; \
     setsid sleep {tok} & \
     (setsid sh -c 'sleep {tok}; :' &) ; \
     (sleep {tok} &) ; \
     sh -c 'trap \"\" TERM; sleep {tok}; :' & \
     echo started; wait; : {tok}"
  )
}

/// The zombie-leader program (`tests/fixtures/zombie-leader.s`), written once per test binary.
fn zombie_program() -> &'static str {
  static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
  PATH.get_or_init(|| {
    let dir = tempfile::tempdir().unwrap().keep();
    common::zombie_leader(&dir).to_str().unwrap().to_owned()
  })
}

/// Two processes whose leader thread has exited while a second thread runs on (one in the
/// background, one `setsid` and double-forked), beside a TERM-immune shell that waits. Once
/// both have started, three processes carry the token, and `/proc/<pid>/stat` shows each
/// program's leader as `Z`.
fn zombie_leaders(tok: &str) -> String {
  let z = zombie_program();
  format!("trap '' TERM; {z} {tok} & (setsid {z} {tok} &); echo started; wait; : {tok}")
}

/// Waits until both zombie-leader programs of `tok` show their leader as `Z`: a tree walk that
/// took `Z` for dead would skip them from then on.
fn wait_for_zombie_leaders(tok: &str) {
  let until = Instant::now() + Duration::from_secs(10);
  loop {
    let zombies = holders(tok)
      .into_iter()
      .filter(|&p| proc_state(p) == Some('Z'))
      .count();
    if zombies == 2 {
      return;
    }
    assert!(Instant::now() < until, "{zombies} zombie leaders of {tok}");
    std::thread::sleep(Duration::from_millis(5));
  }
}

/// A process whose main thread ends with the raw `exit` syscall lives on in its other thread
/// while its leader shows `Z`: a walk that took it for dead left it running past the timeout,
/// and the reaper waited its 10 s reap bound for a tree that never emptied.
#[test]
fn a_timeout_or_an_abort_kills_processes_whose_leader_thread_has_exited() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let started = Instant::now();
  let (_cell, handle) = run_on_thread(&sup, sh(&zombie_leaders(&tok)), limits(1000, 100));
  wait_for_zombie_leaders(&tok);
  let done = handle.join().unwrap().unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  let took = started.elapsed();
  assert!(took < Duration::from_secs(5), "settled after {took:?}");
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );

  let tok = token();
  let (cell, handle) = run_on_thread(&sup, sh(&zombie_leaders(&tok)), limits(60_000, 100));
  wait_for_zombie_leaders(&tok);
  let asked = Instant::now();
  cell.request(Stop {
    grace: Duration::from_millis(100),
    reason: "abort",
  });
  let done = handle.join().unwrap().unwrap();
  assert_eq!(done.ended_by, EndedBy::Stopped("abort"));
  let took = asked.elapsed();
  assert!(took < Duration::from_secs(5), "settled after {took:?}");
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

/// A zombie-leader process left in the background when the leader exits is killed after the
/// drain like any other, and the job settles without waiting for the reap bound.
#[test]
fn a_background_process_whose_leader_thread_has_exited_is_killed_after_the_drain() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let z = zombie_program();
  let started = Instant::now();
  let done = run(
    &sup,
    sh(&format!(
      "(setsid {z} {tok} &); {z} {tok} & echo done; exit 3"
    )),
    limits(20_000, 100),
  )
  .unwrap();
  let took = started.elapsed();
  assert_eq!(done.status, Some(ExitStatus::Exited(3)));
  assert!(took < Duration::from_secs(5), "settled after {took:?}");
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

/// The states program (`tests/fixtures/states.s`), written once per test binary.
fn states_program() -> &'static str {
  static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
  PATH.get_or_init(|| {
    let dir = tempfile::tempdir().unwrap().keep();
    common::states(&dir).to_str().unwrap().to_owned()
  })
}

/// A holder of a token as the tree walk meets it: its state letter and its `stat` fields.
struct Holder {
  state: char,
  stat: finn_sandbox::core::exec::tree::Proc,
  comm: String,
}

/// The live holders of `tok`, with their `/proc/<pid>/stat` as it reads now.
fn holders_of(tok: &str) -> Vec<Holder> {
  holders(tok)
    .into_iter()
    .filter_map(|pid| {
      let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
      Some(Holder {
        state: text.rsplit_once(')')?.1.trim_start().chars().next()?,
        stat: finn_sandbox::core::exec::tree::parse_stat(&text)?,
        comm: std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?,
      })
    })
    .collect()
}

/// A process state a tree walk may misjudge, as a command controlling its tree can make it:
/// `script` puts processes carrying the token in it, `ready` says from the holders that the
/// tree is there. Each leaves a TERM-immune or paused leader, so only a kill ends the job.
struct State {
  name: &'static str,
  script: fn(&str) -> String,
  ready: fn(&[Holder]) -> bool,
}

const STATES: &[State] = &[
  // Stopped by its own tree: a sleep stopped by the leader, a shell that stops itself.
  State {
    name: "stopped",
    script: |tok| {
      format!(
        "trap '' TERM; sleep {tok} & kill -STOP $!; sh -c 'kill -STOP $$; : {tok}' & exec sleep {tok}"
      )
    },
    ready: |h| h.iter().filter(|h| h.state == 'T').count() >= 2,
  },
  // In a ptrace stop: a sleep seized and interrupted by its sibling, and a child that traces
  // itself through its parent (PTRACE_TRACEME) and stops; neither tracer ever resumes them.
  State {
    name: "traced",
    script: |tok| {
      format!(
        "trap '' TERM; sleep {tok} & \
         perl -e 'syscall(101, 0x4206, $ARGV[0] + 0, 0, 0) == 0 or die \"seize: $!\"; syscall(101, 0x4207, $ARGV[0] + 0, 0, 0); sleep' $! {tok} & \
         perl -e 'if (!fork) {{ syscall(101, 0, 0, 0, 0); kill STOP => $$; exit }} sleep' {tok} & \
         exec sleep {tok}"
      )
    },
    ready: |h| h.iter().filter(|h| h.state == 't').count() >= 2,
  },
  // A vfork() parent waiting (D) for a child that neither execs nor exits.
  State {
    name: "vfork",
    script: |tok| {
      format!(
        "trap '' TERM; {} v {tok} & exec sleep {tok}",
        states_program()
      )
    },
    ready: |h| h.iter().any(|h| h.state == 'D'),
  },
  // A process whose leader thread has exited, whose other thread then made it a session (and
  // group) leader of its own and forked a child.
  State {
    name: "zombie leader, setsid",
    script: |tok| {
      format!(
        "trap '' TERM; {} z {tok} & exec sleep {tok}",
        states_program()
      )
    },
    ready: |h| {
      h.iter().any(|z| {
        z.state == 'Z'
          && z.stat.session == z.stat.pid
          && h.iter().any(|c| c.stat.ppid == z.stat.pid)
      })
    },
  },
  // A subreaper of its own with orphans (one of them setsid): they are its children, not the
  // reaper's.
  State {
    name: "subreaper",
    script: |tok| {
      format!(
        "trap '' TERM; \
         perl -e 'syscall(157, 36, 1, 0, 0, 0) == 0 or die \"subreaper: $!\"; exec @ARGV' \
         sh -c 'trap \"\" TERM; (sleep {tok} &); (setsid sleep {tok} &); wait; exec sleep {tok}' & \
         exec sleep {tok}"
      )
    },
    ready: |h| {
      h.iter()
        .filter(|o| o.comm == "sleep\n" && h.iter().any(|p| p.stat.pid == o.stat.ppid))
        .count()
        >= 2
    },
  },
  // clone(CLONE_PARENT): a background process's sibling (the shell's child), and the leader's
  // (the reaper's own child).
  State {
    name: "CLONE_PARENT",
    script: |tok| {
      let s = states_program();
      format!("{s} p {tok} & exec {s} p {tok}")
    },
    ready: |h| h.len() >= 4,
  },
  // A clone() child with no exit signal, which waitpid() without __WALL does not see, orphaned
  // by its parent's exit: the kernel gives it SIGCHLD again as it reparents it to the reaper.
  State {
    name: "clone child without exit signal",
    script: |tok| {
      format!(
        "trap '' TERM; {} c {tok}; exec sleep {tok}",
        states_program()
      )
    },
    ready: |h| {
      h.iter()
        .any(|o| o.comm == "s\n" && !h.iter().any(|p| p.stat.pid == o.stat.ppid))
    },
  },
  // A fork bomb of 2000 forks still growing, its forking processes exiting as they finish.
  State {
    name: "fork bomb",
    script: |tok| {
      format!(
        "trap '' TERM; {} b {tok} & exec sleep {tok}",
        states_program()
      )
    },
    ready: |h| h.len() >= 20,
  },
];

/// Waits, up to 10 s, until the tree of `tok` is in `state`.
fn wait_for_state(state: &State, tok: &str) {
  let until = Instant::now() + Duration::from_secs(10);
  while !(state.ready)(&holders_of(tok)) {
    assert!(
      Instant::now() < until,
      "{}: the tree never got there",
      state.name
    );
    std::thread::sleep(Duration::from_millis(5));
  }
}

/// What ends the jobs of [`every_state_leaves_no_survivor`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Trigger {
  Timeout,
  Abort,
  /// The host's exit (`kill_all_now`): its reapers' trees, SIGKILLed and waited for at once.
  KillTreesNow,
  /// Each job's reaper SIGKILLed: the supervisor inherits the trees and kills them.
  ReaperKilled,
}

/// Runs every state of [`STATES`] as a job at once, waits until each tree is there, ends them
/// by `trigger`, and checks, by a per-thread token scan, that no process of any is left.
fn every_state_leaves_no_survivor(trigger: Trigger) {
  let sup = Arc::new(supervisor());
  // Long enough for every tree to get there on a loaded machine, short for the test.
  let timeout_ms = if trigger == Trigger::Timeout {
    6000
  } else {
    60_000
  };
  let jobs: Vec<_> = STATES
    .iter()
    .map(|state| {
      let tok = token();
      let (cell, handle) = run_on_thread(&sup, sh(&(state.script)(&tok)), limits(timeout_ms, 100));
      (state, tok, cell, handle)
    })
    .collect();
  for (state, tok, _, handle) in &jobs {
    wait_for_state(state, tok);
    assert!(
      !handle.is_finished(),
      "{}: ended before the trigger",
      state.name
    );
  }
  let mut left = Vec::new();
  match trigger {
    Trigger::Timeout => {}
    Trigger::Abort => {
      for (_, _, cell, _) in &jobs {
        cell.request(Stop {
          grace: Duration::from_millis(100),
          reason: "abort",
        });
      }
    }
    Trigger::KillTreesNow | Trigger::ReaperKilled => {
      // The one parent of the holders that is a child of the supervisor: the job's reaper.
      // (A fork bomb's processes exit as it grows: the parent of one read a moment ago may be
      // gone.)
      let supervisor_pid = sup.pid().expect("the supervisor runs");
      let parent_of = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(finn_sandbox::core::exec::tree::parse_stat(&stat)?.ppid)
      };
      let reapers: Vec<i32> = jobs
        .iter()
        .map(|(state, tok, _, _)| {
          let mut parents: Vec<i32> = holders(tok).into_iter().filter_map(parent_of).collect();
          parents.retain(|&p| parent_of(p) == Some(supervisor_pid));
          parents.sort_unstable();
          parents.dedup();
          assert_eq!(parents.len(), 1, "{}: {parents:?}", state.name);
          parents[0]
        })
        .collect();
      if trigger == Trigger::ReaperKilled {
        for reaper in reapers {
          nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(reaper),
            nix::sys::signal::Signal::SIGKILL,
          )
          .unwrap();
        }
      } else {
        supervisor::kill_trees_now(&reapers);
        // At once: Node exits right after it.
        for (state, tok, _, _) in &jobs {
          let now = holders(tok);
          if !now.is_empty() {
            left.push(format!("{} at once: {now:?}", state.name));
          }
        }
      }
    }
  }
  for (state, tok, _, handle) in jobs {
    let done = handle.join().unwrap();
    match trigger {
      Trigger::Timeout => assert_eq!(done.unwrap().ended_by, EndedBy::Timeout, "{}", state.name),
      Trigger::Abort => assert_eq!(
        done.unwrap().ended_by,
        EndedBy::Stopped("abort"),
        "{}",
        state.name
      ),
      Trigger::KillTreesNow => {}
      Trigger::ReaperKilled => assert!(
        matches!(done, Err(RunError::Crashed(_))),
        "{}: {done:?}",
        state.name
      ),
    }
    // The supervisor kills what a dead reaper left as its SIGCHLDs come in.
    let bound = if trigger == Trigger::ReaperKilled {
      2000
    } else {
      500
    };
    let survivors = survivors_after(&tok, Duration::from_millis(bound));
    if !survivors.is_empty() {
      left.push(format!("{}: {survivors:?}", state.name));
    }
  }
  assert!(left.is_empty(), "{trigger:?}: {left:?}");
}

/// Stopped, traced, vfork, zombie-leader-with-setsid, subreaper, CLONE_PARENT, quiet-clone and
/// fork-bomb trees at their timeout: nothing of any is left.
#[test]
fn a_timeout_leaves_no_survivor_in_any_process_state() {
  every_state_leaves_no_survivor(Trigger::Timeout);
}

#[test]
fn an_abort_leaves_no_survivor_in_any_process_state() {
  every_state_leaves_no_survivor(Trigger::Abort);
}

/// Each job's reaper killed mid-job: the jobs crash, and the supervisor, which inherits the
/// trees, kills every process of them.
#[test]
fn a_reaper_killed_mid_job_leaves_no_survivor_in_any_process_state() {
  if direct() {
    return;
  }
  every_state_leaves_no_survivor(Trigger::ReaperKilled);
}

/// Node's exit: `kill_trees_now` returns only once every process of those trees is dead.
#[test]
fn kill_trees_now_leaves_no_survivor_in_any_process_state() {
  if direct() {
    return;
  }
  every_state_leaves_no_survivor(Trigger::KillTreesNow);
}

#[test]
fn runs_a_command_and_reports_its_exit_and_output() {
  let sup = Arc::new(supervisor());
  for _ in 0..3 {
    let done = run(
      &sup,
      sh("echo out; echo err >&2; exit 42"),
      limits(5000, 100),
    )
    .unwrap();
    assert_eq!(done.status, Some(ExitStatus::Exited(42)));
    assert_eq!(
      (done.stdout.as_str(), done.stderr.as_str()),
      ("out\n", "err\n")
    );
    assert_eq!(done.ended_by, EndedBy::Exit);
  }
  let missing = SpawnSpec {
    program: CString::new("/nonexistent/prog").unwrap(),
    ..sh("")
  };
  match run(&sup, missing, limits(5000, 100)) {
    Err(RunError::Spawn(e)) => assert_eq!(e.exit_code(), 127),
    other => panic!("{other:?}"),
  }
  // The reaper that reported the failure still serves.
  assert_eq!(
    run(&sup, sh("exit 3"), limits(5000, 100))
      .unwrap()
      .exit_code(),
    3
  );
}

/// A command that writes a full pipe (64 KiB) and exits within the reaper's 1 ms batch: its
/// `Spawned`, `Exited` and `TreeGone` come in one read, before the addon has read any output,
/// so all of it is read by the final drain, two reads of 32 KiB. All of it must be returned.
#[test]
fn a_full_pipe_written_by_a_quick_command_is_returned_whole() {
  let sup = Arc::new(supervisor());
  let head = SpawnSpec {
    program: CString::new("/usr/bin/head").unwrap(),
    argv: ["head", "-c", "65536", "/dev/zero"]
      .iter()
      .map(|a| CString::new(*a).unwrap())
      .collect(),
    ..sh("")
  };
  for i in 0..20 {
    let done = run(&sup, head.clone(), limits(5000, 100)).unwrap();
    assert_eq!(
      (done.stdout.len(), done.truncated, done.exit_code()),
      (65536, false, 0),
      "run {i}"
    );
  }
}

/// A flood through the supervisor: cut at the cap (bytes returned, marker included), the tree
/// stopped at once rather than at its timeout, nothing left.
#[test]
fn a_flood_is_cut_at_the_cap_and_stopped_at_once() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let mut l = limits(30_000, 100);
  l.max_output_bytes = 64 * 1024;
  let start = Instant::now();
  let done = run(&sup, sh(&format!("yes {tok}; : {tok}")), l).unwrap();
  assert_eq!(done.ended_by, EndedBy::OutputLimit);
  assert!(done.truncated);
  assert!(done.stdout.len() + done.stderr.len() <= 64 * 1024);
  assert!(done.stdout.starts_with(&format!("{tok}\n{tok}\n")));
  assert!(done.stdout.ends_with(TRUNCATION_MARKER));
  assert!(
    start.elapsed() < Duration::from_secs(5),
    "{:?}",
    start.elapsed()
  );
  assert_eq!(holders(&tok), Vec::<i32>::new());
}

#[test]
fn a_timeout_leaves_no_survivor_of_a_tree_that_escapes() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let started = Instant::now();
  let done = run(&sup, sh(&nasty(&tok)), limits(1000, 200)).unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert_eq!(done.stdout, "started\n");
  assert!(
    started.elapsed() < Duration::from_secs(5),
    "{:?}",
    started.elapsed()
  );
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

#[test]
fn an_abort_leaves_no_survivor_and_during_a_timeout_grace_brings_the_kill_forward() {
  let sup = Arc::new(supervisor());
  // Plain abort.
  let tok = token();
  let (cell, handle) = run_on_thread(&sup, sh(&nasty(&tok)), limits(60_000, 200));
  wait_for_holders(&tok, 7);
  cell.request(Stop {
    grace: Duration::from_millis(200),
    reason: "abort",
  });
  let done = handle.join().unwrap().unwrap();
  assert_eq!(done.ended_by, EndedBy::Stopped("abort"));
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );

  // Timeout after 300 ms with a 30 s grace the tree ignores SIGTERM through; an abort with
  // zero grace must end it at once instead of 30 s later.
  let tok = token();
  let (cell, handle) = run_on_thread(&sup, sh(&nasty(&tok)), limits(300, 30_000));
  wait_for_holders(&tok, 7);
  std::thread::sleep(Duration::from_millis(600));
  let asked = Instant::now();
  cell.request(Stop {
    grace: Duration::ZERO,
    reason: "abort",
  });
  let done = handle.join().unwrap().unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert!(
    asked.elapsed() < Duration::from_secs(2),
    "{:?}",
    asked.elapsed()
  );
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

#[test]
fn a_background_setsid_child_is_killed_after_the_drain_and_the_job_settles_at_once() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let started = Instant::now();
  // The escapee keeps stdout open: before the supervisor, this waited for the full timeout.
  let done = run(
    &sup,
    sh(&format!("(setsid sleep {tok} &); echo done; exit 5")),
    limits(20_000, 100),
  )
  .unwrap();
  let took = started.elapsed();
  assert_eq!(done.ended_by, EndedBy::Exit);
  assert_eq!(done.status, Some(ExitStatus::Exited(5)));
  assert_eq!(done.stdout, "done\n");
  assert!(took < Duration::from_secs(2), "settled after {took:?}");
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(200)),
    Vec::<i32>::new()
  );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_survivor_of_trees_that_escape() {
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, PoolError, RawJob};
  let config = PoolConfig {
    interactive_workers: 4,
    kill_grace: Duration::from_millis(200),
    shutdown_deadline: Duration::from_millis(300),
    supervisor: (!direct()).then(|| env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  let pool = Pool::new(config, tokio::runtime::Handle::current());
  let tok = token();
  // Three escaping trees and one of processes whose leader thread has exited.
  let scripts = [nasty(&tok), nasty(&tok), nasty(&tok), zombie_leaders(&tok)];
  let jobs: Vec<_> = scripts
    .iter()
    .map(|script| {
      let job = JobSpec::new(RawJob {
        binary_path: "/bin/sh".into(),
        args: vec!["-c".into(), script.clone()],
        cwd: "/".into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout_ms: Some(60_000),
        ..RawJob::default()
      })
      .unwrap();
      pool.submit(job).unwrap()
    })
    .collect();
  let waiting = tok.clone();
  tokio::task::spawn_blocking(move || {
    wait_for_holders(&waiting, 24);
    wait_for_zombie_leaders(&waiting);
  })
  .await
  .unwrap();
  pool.shutdown().await;
  for job in jobs {
    assert_eq!(job.result.await.unwrap(), Err(PoolError::ShutDown));
  }
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

/// `shutdown()` with a job in each state of [`STATES`] running: nothing of any is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_survivor_in_any_process_state() {
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, PoolError, RawJob};
  let config = PoolConfig {
    interactive_workers: STATES.len(),
    kill_grace: Duration::from_millis(200),
    shutdown_deadline: Duration::from_millis(300),
    supervisor: (!direct()).then(|| env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  let pool = Pool::new(config, tokio::runtime::Handle::current());
  let jobs: Vec<_> = STATES
    .iter()
    .map(|state| {
      let tok = token();
      let job = JobSpec::new(RawJob {
        binary_path: "/bin/sh".into(),
        args: vec!["-c".into(), (state.script)(&tok)],
        cwd: "/".into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout_ms: Some(60_000),
        ..RawJob::default()
      })
      .unwrap();
      (state, tok, pool.submit(job).unwrap())
    })
    .collect();
  let waiting: Vec<(usize, String)> = jobs
    .iter()
    .enumerate()
    .map(|(i, (_, tok, _))| (i, tok.clone()))
    .collect();
  tokio::task::spawn_blocking(move || {
    for (i, tok) in waiting {
      wait_for_state(&STATES[i], &tok);
    }
  })
  .await
  .unwrap();
  pool.shutdown().await;
  let mut left = Vec::new();
  for (state, tok, job) in jobs {
    assert_eq!(
      job.result.await.unwrap(),
      Err(PoolError::ShutDown),
      "{}",
      state.name
    );
    let survivors = survivors_after(&tok, Duration::from_millis(500));
    if !survivors.is_empty() {
      left.push(format!("{}: {survivors:?}", state.name));
    }
  }
  assert!(left.is_empty(), "{left:?}");
}

/// The parent pid of `pid`.
fn ppid(pid: i32) -> i32 {
  let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
  finn_sandbox::core::exec::tree::parse_stat(&stat)
    .unwrap()
    .ppid
}

/// For the host's exit (`kill_all_now` from `process.on('exit')`): every process of the tree is
/// dead, not merely sent SIGKILL, when `kill_trees_now` returns, because Node exits right after
/// it. CheckedRoots at once, with no wait of the test's own.
#[test]
fn kill_trees_now_returns_once_every_process_of_the_tree_is_dead() {
  if direct() {
    return;
  }
  let sup = Arc::new(supervisor());
  // Without the wait, some process was still alive in about one round of eight.
  for round in 0..30 {
    let tok = token();
    let (_cell, handle) = run_on_thread(&sup, sh(&nasty(&tok)), limits(60_000, 200));
    wait_for_holders(&tok, 7);
    let held = holders(&tok);
    let top = held.iter().find(|&&p| !held.contains(&ppid(p))).unwrap();
    let reaper = ppid(*top);
    // Every holder's ancestry reaches the reaper (the escapees are its children now).
    assert!(held.iter().all(|&p| {
      let mut at = p;
      while at > 1 && at != reaper {
        at = ppid(at);
      }
      at == reaper
    }));
    supervisor::kill_trees_now(&[reaper]);
    assert_eq!(holders(&tok), Vec::<i32>::new(), "round {round}");
    // The job itself ends as killed (its reaper reports the tree gone).
    let _ = handle.join().unwrap();
  }
}

#[test]
fn a_reaper_or_supervisor_killed_mid_job_crashes_the_job_kills_its_tree_and_the_next_job_runs() {
  if direct() {
    // Nothing to kill on the direct path: the test is about the supervisor's processes.
    return;
  }
  let sup = Arc::new(supervisor());
  for victim in ["reaper", "supervisor"] {
    let tok = token();
    let (_cell, handle) = run_on_thread(
      &sup,
      sh(&format!(
        "(sleep {tok} &); setsid sleep {tok} & wait; : {tok}"
      )),
      limits(60_000, 200),
    );
    wait_for_holders(&tok, 3);
    let leader = holders(&tok)
      .into_iter()
      .find(|&p| !holders(&tok).contains(&ppid(p)))
      .unwrap();
    let reaper = ppid(leader);
    let supervisor_pid = ppid(reaper);
    assert_eq!(sup.pid(), Some(supervisor_pid));
    let target = if victim == "reaper" {
      reaper
    } else {
      supervisor_pid
    };
    nix::sys::signal::kill(
      nix::unistd::Pid::from_raw(target),
      nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    match handle.join().unwrap() {
      Err(RunError::Crashed(crash)) => {
        assert!(crash.to_string().contains("reaper"), "{crash}")
      }
      other => panic!("{victim}: {other:?}"),
    }
    assert_eq!(
      survivors_after(&tok, Duration::from_secs(2)),
      Vec::<i32>::new(),
      "{victim}"
    );
    let next = run(&sup, sh("echo $PPID"), limits(5000, 100)).unwrap();
    assert_eq!(next.exit_code(), 0);
    let next_reaper: i32 = next.stdout.trim().parse().unwrap();
    if victim == "supervisor" {
      assert_ne!(sup.pid(), Some(supervisor_pid), "a new supervisor serves");
    }
    assert_eq!(sup.pid(), Some(ppid(next_reaper)));
  }
}

#[test]
fn dropping_the_handle_ends_the_supervisor_and_its_idle_reapers() {
  let sup = Arc::new(supervisor());
  run(&sup, sh("true"), limits(5000, 100)).unwrap();
  let pid = sup.pid().unwrap();
  let reapers: Vec<i32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
    .unwrap()
    .split_whitespace()
    .map(|p| p.parse().unwrap())
    .collect();
  assert_eq!(reapers.len(), 1);
  drop(sup);
  let until = Instant::now() + Duration::from_secs(2);
  while [pid, reapers[0]]
    .iter()
    .any(|&p| std::path::Path::new(&format!("/proc/{p}")).exists())
  {
    assert!(
      Instant::now() < until,
      "supervisor {pid} or its reaper still there"
    );
    std::thread::sleep(Duration::from_millis(5));
  }
}

#[test]
fn a_missing_supervisor_binary_is_named_in_the_error() {
  let sup = Arc::new(Supervisor::new("/nonexistent/finn-supervisor".into()));
  match run(&sup, sh("true"), limits(5000, 100)) {
    Err(RunError::Crashed(crash)) => {
      let supervisor::Crash::Start { program, source } = &crash else {
        panic!("{crash:?}")
      };
      assert_eq!(program, &PathBuf::from("/nonexistent/finn-supervisor"));
      assert_eq!(source.get().raw_os_error(), Some(libc::ENOENT));
      assert!(
        crash
          .to_string()
          .contains("cannot start the supervisor /nonexistent/finn-supervisor"),
        "{crash}"
      );
    }
    other => panic!("{other:?}"),
  }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_supervisor_go() {
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, RawJob};
  if direct() {
    return;
  }
  let config = PoolConfig {
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  let pool = Pool::new(config, tokio::runtime::Handle::current());
  let job = JobSpec::new(RawJob {
    binary_path: "/bin/sh".into(),
    args: vec!["-c".into(), "echo $PPID".into()],
    cwd: "/".into(),
    ..RawJob::default()
  })
  .unwrap();
  let out = pool.submit(job).unwrap().result.await.unwrap().unwrap();
  let reaper: i32 = out.stdout.trim().parse().unwrap();
  let supervisor_pid = ppid(reaper);
  pool.shutdown().await;
  let until = Instant::now() + Duration::from_secs(2);
  while [supervisor_pid, reaper]
    .iter()
    .any(|&p| std::path::Path::new(&format!("/proc/{p}")).exists())
  {
    assert!(Instant::now() < until, "the supervisor outlived shutdown()");
    tokio::time::sleep(Duration::from_millis(5)).await;
  }
}

/// The reaper of a job that ran and was checked in as idle, taken back out (its pid, and the
/// lease). On a loaded machine a reaper may retire before the addon reads its job's end; it is
/// then not checked in, the job still settles, and checkout gives a fresh reaper: try again.
fn checked_in_reaper(sup: &Arc<Supervisor>) -> (i32, supervisor::client::Reaper) {
  for _ in 0..50 {
    let pid: i32 = run(sup, sh("echo $PPID"), limits(5000, 100))
      .unwrap()
      .stdout
      .trim()
      .parse()
      .unwrap();
    let reaper = sup.checkout(u8::MAX).unwrap();
    if reaper.pid == pid {
      return (pid, reaper);
    }
    sup.checkin(reaper);
  }
  panic!("no job's reaper was ever checked in");
}

#[test]
fn idle_reapers_retire_and_a_job_meeting_a_retiring_reaper_runs_on_another() {
  let sup = Arc::new(Supervisor::with_reaper_idle(
    PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")),
    Duration::from_millis(50),
  ));
  // A reaper that ran a job and was checked in, taken back at once so that it retires in our
  // hands.
  let (first, stale) = checked_in_reaper(&sup);
  // It exits on its own once idle; the supervisor stays.
  let until = Instant::now() + Duration::from_secs(2);
  while std::path::Path::new(&format!("/proc/{first}")).exists() {
    assert!(
      Instant::now() < until,
      "the idle reaper {first} did not retire"
    );
    std::thread::sleep(Duration::from_millis(5));
  }
  assert!(sup.pid().is_some());
  // A job handed to a reaper that retired meanwhile (it left `Retired` and closed its end)
  // runs on another one, once.
  let stale_pid = stale.pid;
  sup.checkin(stale);
  let done = run(&sup, sh("echo $PPID"), limits(5000, 100)).unwrap();
  let ran_on: i32 = done.stdout.trim().parse().unwrap();
  assert_ne!(ran_on, stale_pid);
  // Jobs keep running however their start meets a retirement.
  for i in 0..20 {
    std::thread::sleep(Duration::from_millis(i % 4 * 20));
    let done = run(&sup, sh("echo ok"), limits(5000, 100)).unwrap();
    assert_eq!(done.stdout, "ok\n", "job {i}");
  }
}

/// An idle reaper killed meanwhile (the OOM killer, a stray `kill -9`) left no `Retired`: the
/// job sent to it meets a closed socket (EPIPE), and must run on another reaper, not fail.
#[test]
fn a_job_sent_to_an_idle_reaper_killed_meanwhile_runs_on_another() {
  if direct() {
    return;
  }
  let sup = Arc::new(supervisor());
  let (dead, stale) = checked_in_reaper(&sup);
  nix::sys::signal::kill(
    nix::unistd::Pid::from_raw(dead),
    nix::sys::signal::Signal::SIGKILL,
  )
  .unwrap();
  // Dead (a zombie until the supervisor reaps it, or gone): its socket is closed.
  let until = Instant::now() + Duration::from_secs(5);
  while proc_state(dead).is_some_and(|s| s != 'Z' && s != 'X') {
    assert!(Instant::now() < until, "reaper {dead} did not die");
    std::thread::sleep(Duration::from_millis(2));
  }
  sup.checkin(stale);
  let done = run(&sup, sh("echo $PPID"), limits(5000, 100))
    .unwrap_or_else(|e| panic!("the job met the killed reaper {dead}: {e:?}"));
  assert_eq!(done.exit_code(), 0);
  let ran_on: i32 = done.stdout.trim().parse().unwrap();
  assert_ne!(ran_on, dead);
  assert_eq!(sup.pid(), Some(ppid(ran_on)));
}

/// A reaper that retires right after a job (idle limit 0) sends `Retired` behind `TreeGone`,
/// and the addon, late to read (a loaded machine; with the default 10 s, a stopped Node), gets
/// both in one read. The job ended well: it must settle with its output, and the next job must
/// run on another reaper.
#[test]
fn a_reaper_retiring_right_after_its_job_fails_neither_that_job_nor_the_next() {
  let sup = Arc::new(Supervisor::with_reaper_idle(
    PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")),
    Duration::ZERO,
  ));
  let mut reapers = std::collections::HashSet::new();
  for i in 0..20 {
    let done =
      run(&sup, sh("echo $PPID"), limits(5000, 100)).unwrap_or_else(|e| panic!("job {i}: {e:?}"));
    let reaper: i32 = done.stdout.trim().parse().unwrap();
    reapers.insert(reaper);
    // The next job goes only once this reaper has retired. Sent earlier, it may find the reaper
    // still before its idle check (preempted right after `TreeGone`, as on a loaded machine),
    // and the reaper would rightly take it.
    let until = Instant::now() + Duration::from_secs(5);
    while proc_state(reaper).is_some_and(|s| s != 'Z') {
      assert!(
        Instant::now() < until,
        "job {i}: the reaper {reaper} did not retire"
      );
      std::thread::sleep(Duration::from_millis(1));
    }
  }
  // Each job met the retired reaper of the one before, and ran on a new one.
  assert_eq!(reapers.len(), 20, "{reapers:?}");
}

/// Runs `spec` on this thread with a 20 s timeout and the given drain; it must finish.
fn run_with_drain(spec: SpawnSpec, drain: Duration) -> Finished<&'static str> {
  let sup = Arc::new(supervisor());
  let cell: StopCell<&'static str> = StopCell::new();
  supervisor::run_blocking(
    &sup,
    JobTerms {
      spec: &spec,
      isolation: None,
      limits: &limits(20_000, 100),
    },
    drain,
    &cell,
    &mut finn_sandbox::core::exec::later::Nothing,
    |_| (),
  )
  .unwrap()
}

/// What the drain is for: a background child that finishes within it is waited for, and its
/// output is part of the result (the drain kills only what outlives it).
#[test]
fn a_background_child_that_ends_within_the_drain_is_waited_for() {
  let done = run_with_drain(
    sh("(sleep 0.1; echo late) & echo early"),
    Duration::from_secs(5),
  );
  assert_eq!(done.ended_by, EndedBy::Exit);
  assert_eq!(done.stdout, "early\nlate\n");
}

/// The timeout counts until the leader exits; after that only the drain bounds the rest. A
/// leader that exits at 0.2 s with a background child holding on settles as its own exit when
/// the drain (2 s) ends, not as a timeout at 1 s.
#[test]
fn the_timeout_stops_counting_when_the_leader_exits() {
  let sup = Arc::new(supervisor());
  let cell: StopCell<&'static str> = StopCell::new();
  let tok = token();
  let done = supervisor::run_blocking(
    &sup,
    JobTerms {
      spec: &sh(&format!("sleep {tok} & sleep 0.2; exit 0")),
      isolation: None,
      limits: &limits(1000, 100),
    },
    Duration::from_secs(2),
    &cell,
    &mut finn_sandbox::core::exec::later::Nothing,
    |_| (),
  )
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Exit);
  assert_eq!(done.status, Some(ExitStatus::Exited(0)));
  assert!(
    done.duration >= Duration::from_secs(2),
    "{:?}",
    done.duration
  );
  assert_eq!(holders(&tok), Vec::<i32>::new());
}

/// The job's exit status is its leader's, never that of an orphan the reaper reaps later: the
/// leader exits 3, its background child (an orphan of the reaper by then) exits 7 within the
/// drain.
#[test]
fn the_exit_status_is_the_leaders_not_an_orphans() {
  let done = run_with_drain(
    sh("(sleep 0.1; echo orphan; exit 7) & exit 3"),
    Duration::from_secs(5),
  );
  // The orphan ran to its end within the drain: its exit was reaped after the leader's.
  assert_eq!(done.stdout, "orphan\n");
  assert_eq!(done.status, Some(ExitStatus::Exited(3)));
}

/// A leader killed by a signal reports that signal (a reaper that took only exits would report
/// no status at all).
#[test]
fn a_leader_killed_by_a_signal_reports_it() {
  let done = run_with_drain(sh("kill -KILL $$"), Duration::from_millis(100));
  assert_eq!(done.status, Some(ExitStatus::Signaled(libc::SIGKILL)));
}

/// A timeout sends SIGTERM and leaves the grace to the tree: a command that cleans up on TERM
/// gets to finish doing so (a SIGKILL sent with the TERM, or at once after it, would cut it).
#[test]
fn the_grace_after_a_timeouts_sigterm_lets_a_term_handler_finish() {
  let sup = Arc::new(supervisor());
  let done = run(
    &sup,
    // The handler leaves an orphan that exits 10 ms in (the reaper, its new parent, wakes for
    // it within the grace), then takes 100 ms: a SIGKILL sent at any point of the grace, at
    // once or at a wake-up, cuts it.
    sh("trap '(sleep 0.01 &); sleep 0.1; echo cleaned; exit 0' TERM; echo ready; sleep 100 & wait"),
    limits(300, 5_000),
  )
  .unwrap();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert_eq!(done.stdout, "ready\ncleaned\n");
  assert_eq!(done.status, Some(ExitStatus::Exited(0)));
  // Well before the grace's end: the SIGKILL was never needed.
  assert!(
    done.duration < Duration::from_secs(3),
    "{:?}",
    done.duration
  );
}

/// An abort with a shorter, non-zero grace during a timeout's grace: the SIGKILL comes when the
/// shorter grace ends, neither at once nor when the timeout's own grace would have ended.
#[test]
fn an_abort_during_a_timeouts_grace_kills_when_its_own_shorter_grace_ends() {
  let sup = Arc::new(supervisor());
  let tok = token();
  let dir = tempfile::tempdir().unwrap();
  let termed = dir.path().join("termed");
  // Survives SIGTERM (its loop goes on), and says when the first one came.
  let script = format!(
    ": {tok}; trap 'touch {}' TERM; while :; do sleep 0.02; done",
    termed.display()
  );
  let (cell, handle) = run_on_thread(&sup, sh(&script), limits(200, 30_000));
  let until = Instant::now() + Duration::from_secs(10);
  while !termed.exists() {
    assert!(Instant::now() < until, "the timeout's SIGTERM never came");
    std::thread::sleep(Duration::from_millis(2));
  }
  let asked = Instant::now();
  cell.request(Stop {
    grace: Duration::from_millis(400),
    reason: "abort",
  });
  let done = handle.join().unwrap().unwrap();
  let took = asked.elapsed();
  assert_eq!(done.ended_by, EndedBy::Timeout);
  assert!(
    took >= Duration::from_millis(350) && took < Duration::from_secs(5),
    "{took:?}"
  );
  assert_eq!(
    survivors_after(&tok, Duration::from_millis(500)),
    Vec::<i32>::new()
  );
}

/// The command runs as its reaper's and the supervisor's user, and SIGSTOP cannot be blocked:
/// it stops them (once, or in a loop), and the job must still time out on time and leave no
/// process. Before, the first hung (the wait for the reaper's first answer had no bound) and
/// the others took the 10 s reap bound.
#[test]
fn a_command_that_stops_its_reaper_or_the_supervisor_still_times_out_and_leaves_nothing() {
  if direct() {
    // $PPID would be this test process.
    return;
  }
  let sup = Arc::new(supervisor());
  run(&sup, sh("true"), limits(5000, 100)).unwrap();
  let supervisor_pid = sup.pid().expect("started");
  // The command stops its reaper (once, or in a loop); the supervisor is stopped by this test
  // (once, or in a loop), as a command could where no seccomp filter can be set (`shield.rs`;
  // here the command's own `kill` of it is refused, see
  // `a_command_can_neither_signal_nor_limit_the_supervisor_or_the_host`).
  let stops = [
    ("kill -STOP $PPID", None),
    ("kill -STOP $PPID", Some(false)),
    ("while :; do kill -STOP $PPID; done", Some(true)),
  ];
  for (stop, stop_supervisor) in stops {
    let tok = token();
    let started = Instant::now();
    let script = format!("(setsid sleep {tok} &); {stop} & sleep {tok}; : {tok}");
    let (_, job) = run_on_thread(&sup, sh(&script), limits(300, 100));
    if let Some(again) = stop_supervisor {
      loop {
        let _ = nix::sys::signal::kill(
          nix::unistd::Pid::from_raw(supervisor_pid),
          nix::sys::signal::Signal::SIGSTOP,
        );
        if !again || job.is_finished() {
          break;
        }
        std::thread::sleep(Duration::from_millis(1));
      }
    }
    let done = job.join().unwrap().unwrap();
    assert_eq!(
      done.ended_by,
      EndedBy::Timeout,
      "{stop} {stop_supervisor:?}"
    );
    assert!(
      started.elapsed() < Duration::from_millis(1500),
      "{stop} {stop_supervisor:?}: {:?}",
      started.elapsed()
    );
    assert_eq!(
      survivors_after(&tok, Duration::from_secs(2)),
      Vec::<i32>::new(),
      "{stop} {stop_supervisor:?}"
    );
  }
  // The supervisor alone, stopped while no job needs it: the next job that needs a new
  // reaper (three at once, where one reaper is idle) still gets one.
  nix::sys::signal::kill(
    nix::unistd::Pid::from_raw(supervisor_pid),
    nix::sys::signal::Signal::SIGSTOP,
  )
  .unwrap();
  let (tx, rx) = std::sync::mpsc::channel();
  for i in 0..3 {
    let (sup, tx) = (Arc::clone(&sup), tx.clone());
    std::thread::spawn(move || {
      let done = run(&sup, sh(&format!("sleep 0.2; echo {i}")), limits(5000, 100));
      let _ = tx.send(done.map(|d| d.stdout));
    });
  }
  for _ in 0..3 {
    let out = rx
      .recv_timeout(Duration::from_secs(5))
      .expect("a job waited for a stopped supervisor");
    assert!(out.is_ok(), "{out:?}");
  }
  assert_eq!(
    sup.pid(),
    Some(supervisor_pid),
    "the same supervisor, continued"
  );
}

/// Whether the reapers' shield stands here (`supervisor/shield.rs`): it is a seccomp filter.
/// The tests that need it say why they skip.
/// Whether reapers for jobs without isolation scope their commands' signals (landlock ABI 6).
fn scoped() -> bool {
  let ok = finn_sandbox::core::isolate::probe()
    .landlock
    .is_some_and(|abi| abi >= 6);
  if !ok {
    eprintln!("no landlock signal scope here (ABI < 6): the scope's refusals are not expected");
  }
  ok
}

/// The landlock ABI caps to run a test under (`FINN_SANDBOX_LANDLOCK_ABI_MAX`): the kernel's
/// where it has the signal scope, then 5 (a domain that only keeps ptrace in: the guard's watch
/// alone judges signals) and 1 (no domain at all: the watch alone).
fn abi_caps() -> Vec<Option<i32>> {
  let mut caps = vec![Some(5), Some(1)];
  if scoped() {
    caps.insert(0, None);
  }
  caps
}

/// The landlock ABI in use under `cap`.
fn abi_under(cap: Option<i32>) -> i32 {
  let kernel = finn_sandbox::core::isolate::probe().landlock.unwrap_or(0);
  cap.map_or(kernel, |c| c.min(kernel))
}

fn shielded() -> bool {
  let ok = finn_sandbox::core::isolate::probe().seccomp;
  if !ok {
    eprintln!("skipped: no seccomp filter mode here, so no shield (shield.rs)");
  }
  ok
}

/// A command that starts a `setsid` child, then SIGKILLs its reaper and the supervisor
/// together: before the shield, the child was reparented to init and lived on with the host
/// alive (1 survivor of 1). Now the supervisor is out of the command's reach: the reaper dies
/// alone, the supervisor inherits the orphans and kills them, the job fails `Crashed`, and the
/// same supervisor runs the next job.
#[test]
fn a_command_that_kills_its_reaper_and_the_supervisor_leaves_no_orphan() {
  if direct() || !shielded() {
    return;
  }
  let sup = Arc::new(supervisor());
  run(&sup, sh("true"), limits(5000, 100)).unwrap();
  let before = sup.pid().expect("started");
  let tok = token();
  let script = format!(
    "(setsid sh -c 'sleep {tok}; :' &); S=$(cut -d' ' -f4 /proc/$PPID/stat); \
     kill -9 $S $PPID; sleep {tok}"
  );
  let done = run(&sup, sh(&script), limits(5000, 100));
  assert!(matches!(done, Err(RunError::Crashed(_))), "{done:?}");
  assert_eq!(
    survivors_after(&tok, Duration::from_secs(2)),
    Vec::<i32>::new()
  );
  assert_eq!(sup.pid(), Some(before));
  let next = run(&sup, sh("echo next"), limits(5000, 100)).unwrap();
  assert_eq!(next.stdout, "next\n");
}

/// What the shield refuses a command, each by the exit status of the command's own attempt:
/// signals to the supervisor, its process group and this process (the host, as Node would be),
/// also by a pidfd made of its `/proc` directory (syscall 424, `pidfd_send_signal` on x86_64),
/// as the owner of a pipe's I/O signals (`F_SETOWN`; the command's own shell may be), by
/// `kill -1`, by `tkill` (names any thread: refused even for the command's own shell), by
/// `F_SETOWN_EX` and `FIOSETOWN` (their owner sits behind a pointer: refused for its own shell
/// too); tracing it (`PTRACE_SEIZE`), reading its memory (`process_vm_readv`: EPERM, where an
/// unguarded root read of a bad address gets EFAULT), its CPU affinity (`taskset`), by its
/// scheduling class, nice value (also a whole uid's: asked for an unused uid, where the kernel
/// alone answers ESRCH, so a regression renices nothing) or I/O class
/// (`chrt -i`, `renice`, `ionice`: a supervisor at SCHED_IDLE or nice 19 could be starved),
/// and setting the supervisor's limits (a CPU limit of 0 would have the kernel kill it); as
/// non-root also its `/proc` files (environment, memory, fds, `oom_score_adj`: root-owned, the supervisor is
/// non-dumpable). The command still signals its own reaper and its own children.
#[test]
fn a_command_can_neither_signal_nor_limit_the_supervisor_or_the_host() {
  if direct() || !shielded() {
    return;
  }
  let sup = Arc::new(supervisor());
  let me = std::process::id();
  let script = format!(
    "S=$(cut -d' ' -f4 /proc/$PPID/stat); \
     for t in $S -$S {me}; do kill -CONT $t 2>/dev/null; echo cont=$?; kill -0 $t 2>/dev/null; echo probe=$?; done; \
     prlimit --pid $S --cpu=0:0 2>/dev/null; echo limit=$?; \
     perl -e 'sysopen(my $d, \"/proc/$ARGV[0]\", 0) or die; exit(syscall(424, fileno($d), 0, 0, 0) == -1 ? 1 : 0)' $S; echo pidfd=$?; \
     for t in $S $$; do perl -e 'use Fcntl; pipe(my $r, my $w) or die; exit(fcntl($r, F_SETOWN, $ARGV[0] + 0) ? 0 : 1)' $t; echo setown=$?; done; \
     kill -CONT -1 2>/dev/null; echo all=$?; \
     perl -e 'exit(syscall(200, $ARGV[0] + 0, 0) == -1 && $!{{EPERM}} ? 1 : 0)' $$; echo tkill=$?; \
     perl -e 'pipe(my $r, my $w) or die; exit(fcntl($r, 15, pack(\"iI\", 1, $ARGV[0])) ? 0 : 1)' $$; echo setown_ex=$?; \
     perl -e 'use Socket; socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die; exit(ioctl($s, 0x8901, pack(\"i\", $ARGV[0])) ? 0 : 1)' $$; echo fiosetown=$?; \
     perl -e 'exit(syscall(101, 0x4206, $ARGV[0] + 0, 0, 0) == -1 && $!{{EPERM}} ? 1 : 0)' $S; echo ptrace=$?; \
     perl -e 'my $b = \"x\" x 8; my $l = pack(\"QQ\", unpack(\"Q\", pack(\"p\", $b)), 8); my $r = pack(\"QQ\", 4096, 8); exit(syscall(310, $ARGV[0] + 0, $l, 1, $r, 1, 0) == -1 && $!{{EPERM}} ? 1 : 0)' $S; echo memory=$?; \
     taskset -p 1 $S >/dev/null 2>&1; echo affinity=$?; \
     chrt -i -p 0 $S >/dev/null 2>&1; echo sched=$?; renice -n 19 -p $S >/dev/null 2>&1; echo nice=$?; \
     perl -e 'exit(setpriority(2, 4242424, 19) ? 0 : $!{{EPERM}} ? 1 : 0)'; echo nice_user=$?; ionice -c 3 -p $S >/dev/null 2>&1; echo io=$?; \
     renice -n 19 -p $$ >/dev/null 2>&1; echo nice_own=$?; \
     cat /proc/$S/environ >/dev/null 2>&1; echo environ=$?; \
     (exec 3< /proc/$S/mem) 2>/dev/null && echo mem=0 || echo mem=1; \
     ls /proc/$S/fd >/dev/null 2>&1 && echo fds=0 || echo fds=1; \
     (echo 1000 > /proc/$S/oom_score_adj) 2>/dev/null && echo oom=0 || echo oom=1; \
     kill -CONT $PPID; echo reaper=$?; sleep 5 & kill $!; echo child=$?"
  );
  let done = run(&sup, sh(&script), limits(5000, 100)).unwrap();
  // SAFETY: geteuid has no preconditions.
  let root = unsafe { libc::geteuid() } == 0;
  let (environ, oom) = if root { (0, 0) } else { (1, 1) };
  // The reaper's signal scope also refuses opening the supervisor's memory, even to root.
  let mem = if root && !scoped() { 0 } else { 1 };
  assert_eq!(
    done.stdout,
    format!(
      "cont=1\nprobe=1\ncont=1\nprobe=1\ncont=1\nprobe=1\nlimit=1\npidfd=1\nsetown=1\nsetown=0\nall=1\ntkill=1\nsetown_ex=1\nfiosetown=1\nptrace=1\nmemory=1\naffinity=1\nsched=1\nnice=1\nnice_user=1\nio=1\nnice_own=0\nenviron={environ}\nmem={mem}\nfds={environ}\noom={oom}\nreaper=0\nchild=0\n"
    ),
    "{}",
    done.stderr
  );
}

/// A reaper stopped by its command is continued by the supervisor at once: a job that stops
/// it and exits resolves long before its timeout (before: at the timeout, 10 s).
#[test]
fn a_reaper_stopped_by_its_command_is_continued_at_once() {
  if direct() {
    return;
  }
  let sup = Arc::new(supervisor());
  let started = Instant::now();
  let done = run(&sup, sh("kill -STOP $PPID; echo done"), limits(10_000, 100)).unwrap();
  assert_eq!((done.exit_code(), done.stdout.as_str()), (0, "done\n"));
  assert!(
    started.elapsed() < Duration::from_secs(2),
    "{:?}",
    started.elapsed()
  );
}

/// Live children of `parent`.
fn children_of(parent: i32) -> Vec<i32> {
  std::fs::read_dir("/proc")
    .unwrap()
    .flatten()
    .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
    .filter(|&pid| {
      std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| finn_sandbox::core::exec::tree::parse_stat(&stat))
        .is_some_and(|p| p.ppid == parent)
    })
    .collect()
}

/// The state letter of `pid` (`None`: gone).
fn proc_state(pid: i32) -> Option<char> {
  let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
  stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// An idle reaper and the supervisor, both stopped before the job comes (an earlier job's
/// command can do that): the reaper cannot answer the `Run`, not even with `Spawned`. The
/// addon's wait for that first answer must end at the job's deadline, or at once at a stop
/// request, by continuing them; unbounded, the job would wait for good.
#[test]
fn a_reaper_stopped_while_idle_is_continued_at_the_deadline_or_at_a_stop() {
  if direct() {
    return;
  }
  let sup = Arc::new(supervisor());
  for stop_request in [false, true] {
    run(&sup, sh("true"), limits(5000, 100)).unwrap();
    let supervisor_pid = sup.pid().unwrap();
    let reapers = children_of(supervisor_pid);
    assert!(!reapers.is_empty(), "an idle reaper");
    // The supervisor first: running, it would see a stopped reaper (it reaps with WUNTRACED)
    // and continue it at once (the old order failed 12 of 30 runs next to two busy loops).
    let until = Instant::now() + Duration::from_secs(5);
    for group in [vec![supervisor_pid], reapers] {
      for &pid in &group {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGSTOP).unwrap();
      }
      while group.iter().any(|&pid| proc_state(pid) != Some('T')) {
        assert!(Instant::now() < until, "they never stopped");
        std::thread::yield_now();
      }
    }
    let started = Instant::now();
    let timeout_ms = if stop_request { 10_000 } else { 300 };
    let (cell, handle) = run_on_thread(&sup, sh("sleep 10"), limits(timeout_ms, 100));
    if stop_request {
      // An abort while the job waits for the first answer.
      std::thread::sleep(Duration::from_millis(200));
      cell.request(Stop {
        grace: Duration::from_millis(100),
        reason: "abort",
      });
    }
    let done = handle.join().unwrap().unwrap();
    let expected = if stop_request {
      EndedBy::Stopped("abort")
    } else {
      EndedBy::Timeout
    };
    assert_eq!(done.ended_by, expected);
    assert!(
      started.elapsed() < Duration::from_millis(1500),
      "stop request {stop_request}: {:?}",
      started.elapsed()
    );
  }
}

/// A command that fills its process limit (here a pids cgroup holding the supervisor, as a
/// container's `--pids-limit` holds everything) while another job needs a new reaper: the
/// supervisor cannot fork one. That job fails as a spawn does (exit code 126, the limit
/// named); the supervisor goes on, and so does the job that filled the limit. Before, the
/// supervisor exited on the failed fork, and every running job crashed with it. Needs a
/// writable cgroup v1 `pids` hierarchy (root here); skipped without one.
#[test]
fn a_filled_process_limit_fails_only_the_job_that_needs_a_new_reaper() {
  if direct() {
    return;
  }
  let sup = Arc::new(supervisor());
  assert_eq!(
    run(&sup, sh("true"), limits(5000, 100))
      .unwrap()
      .exit_code(),
    0
  );
  let pid = sup.pid().expect("the supervisor runs");
  let cg = PathBuf::from(format!(
    "/sys/fs/cgroup/pids/finn-test-{}",
    std::process::id()
  ));
  if std::fs::create_dir(&cg).is_err() {
    eprintln!("skipped: no writable cgroup v1 pids hierarchy here");
    return;
  }
  // Emptied and removed however the test ends.
  let group = PidsGroup(cg.clone());
  // The supervisor, the command's shell and three sleepers: the limit is full.
  std::fs::write(cg.join("pids.max"), "5").unwrap();
  std::fs::write(cg.join("cgroup.procs"), pid.to_string()).unwrap();
  let (_dir, gate) = fifo();
  let t = token();
  let (_, filler) = run_on_thread(
    &sup,
    sh(&format!(
      "echo $$ > {procs}; for i in 1 2 3; do sleep {t} & done; echo filled; read x < {gate}; echo a",
      procs = cg.join("cgroup.procs").display(),
      gate = gate.display(),
    )),
    limits(10_000, 100),
  );
  wait_for_holders(&t, 3);
  // The only idle reaper is the filler's: this job needs a new one.
  let refused = run(&sup, sh("echo b"), limits(5000, 100));
  // Never blocks, reader or not (the filler's shell is gone when its supervisor took it down).
  let opened = open_fifo(&gate);
  let filled = filler.join().unwrap();
  drop(opened);
  assert!(survivors_after(&t, Duration::from_secs(5)).is_empty());
  // The supervisor back to the root group (gone, if it exited: the asserts below say so).
  drop(group);
  assert!(!cg.exists());
  match refused {
    Err(RunError::Spawn(e)) => {
      assert_eq!(e.exit_code(), 126, "{e}");
      assert!(e.to_string().contains("process limit reached"), "{e}");
    }
    other => panic!("expected a spawn failure, got {other:?}"),
  }
  let filled = filled.unwrap();
  assert_eq!(
    (filled.exit_code(), filled.stdout.as_str()),
    (0, "filled\na\n"),
    "{}",
    filled.stderr
  );
  // The same supervisor runs the next job.
  assert_eq!(
    run(&sup, sh("echo c"), limits(5000, 100)).unwrap().stdout,
    "c\n"
  );
  assert_eq!(sup.pid(), Some(pid));
}

/// One job's command against another job running beside it on the same supervisor: it finds
/// the other job's command and reaper through `/proc` (the same user's processes) and tries to
/// SIGKILL the reaper, SIGSTOP the command, trace it (`PTRACE_SEIZE`) and write into its
/// stdout through `/proc/<pid>/fd/1`, and lower the reaper's RLIMIT_NOFILE to 3. Each reaper
/// for jobs without isolation keeps its commands in a landlock domain of its own that scopes
/// signals and ptrace access, and its seccomp guard refuses limits set on any process but the
/// caller, so every attempt is refused and the other job ends as it would alone. Before, the
/// reaper died (the job crashed `WORKER_CRASHED`) and the forged line showed up in the other
/// job's output; before the guard's limit rule, the lowered RLIMIT_NOFILE alone crashed it.
#[test]
fn a_command_cannot_reach_another_job_beside_it() {
  if direct() || !shielded() {
    return;
  }
  for cap in abi_caps() {
    beside_another_job(cap);
  }
}

fn beside_another_job(cap: Option<i32>) {
  let sup = Arc::new(supervisor().with_landlock_abi_max(cap));
  let (dir, gate) = fifo();
  let t = token();
  let (_, victim) = run_on_thread(
    &sup,
    sh(&format!(
      "sleep {t} & read x < {}; echo own output",
      gate.display()
    )),
    limits(10_000, 100),
  );
  let sleeper = wait_for_sleeper(&t);
  // The victim's leader shell and reaper (the child of the supervisor above its sleeper), as
  // the attack must find them: it prints what it found, so an attack that missed its target
  // cannot pass for a refused one.
  let ppid = |pid: i32| {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    finn_sandbox::core::exec::tree::parse_stat(&stat)
      .unwrap()
      .ppid
  };
  let supervisor_pid = sup.pid().expect("the supervisor runs");
  let (mut shell, mut reaper) = (sleeper, ppid(sleeper));
  while ppid(reaper) != supervisor_pid {
    (shell, reaper) = (reaper, ppid(reaper));
  }
  let script = format!(
    "S=$(cut -d' ' -f4 /proc/$PPID/stat); \
     V=$(for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && grep -qa {t} $p/cmdline && echo ${{p#/proc/}}; done | head -1); \
     SH=$V; R=$(cut -d' ' -f4 /proc/$V/stat); \
     while [ \"$(cut -d' ' -f4 /proc/$R/stat)\" != \"$S\" ]; do SH=$R; R=$(cut -d' ' -f4 /proc/$R/stat); done; \
     echo found=$SH,$R; \
     kill -9 $R 2>/dev/null; echo reaper=$?; kill -STOP $SH 2>/dev/null; echo stop=$?; \
     prlimit --pid $R --nofile=3:3 2>/dev/null; echo limit=$?; prlimit --nofile=64:64 true; echo own=$?; \
     perl -e 'exit(syscall(101, 0x4206, $ARGV[0] + 0, 0, 0) == -1 ? 1 : 0)' $SH; echo trace=$?; \
     (echo FORGED > /proc/$SH/fd/1) 2>/dev/null && echo forge=0 || echo forge=1"
  );
  let attack = run(&sup, sh(&script), limits(5000, 100)).unwrap();
  let _open = open_fifo(&gate);
  let victim = victim.join().unwrap().unwrap();
  drop(dir);
  // Without REFER (ABI 1) no landlock domain can be made for a job without isolation, and
  // `/proc/<pid>/fd` of another process of the same uid opens as the kernel's DAC allows.
  let forge = if abi_under(cap) >= 2 { 1 } else { 0 };
  assert_eq!(
    attack.stdout,
    format!("found={shell},{reaper}\nreaper=1\nstop=1\nlimit=1\nown=0\ntrace=1\nforge={forge}\n"),
    "cap {cap:?}: {}",
    attack.stderr
  );
  let forged = if forge == 0 { "FORGED\n" } else { "" };
  assert_eq!(
    (victim.exit_code(), victim.stdout.as_str()),
    (0, format!("{forged}own output\n").as_str()),
    "{}",
    victim.stderr
  );
  assert!(survivors_after(&t, Duration::from_secs(5)).is_empty());
}

/// `__test__/fixtures/reach.pl`: tries every call that signals, traces or reads a process by
/// its number (kill by pid, tid and group, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
/// pidfd_open, pidfd_send_signal, pidfd_getfd, ptrace, process_vm_readv, kill -1) against its
/// targets, and prints each one that was not refused.
fn reach_pl() -> String {
  format!("{}/__test__/fixtures/reach.pl", env!("CARGO_MANIFEST_DIR"))
}

/// Two pools in one Node (loa-finn's `ChildProcessExecutor` makes a pool of its own), each
/// with a job running: a command of the first pool's second job SIGKILLs, by every call and
/// target form of `reach.pl`, every thread of the host (this test process stands for Node),
/// its own supervisor, the first job's reaper, and the other pool's supervisor and reapers.
/// With the landlock signal scope (ABI 6) and without it (a kernel before 6.12, or
/// `FINN_SANDBOX_LANDLOCK_ABI_MAX` below 6), where only the seccomp guard and the watch hold.
/// Attacks it guards against: the other pool's supervisor killed, so that its job's `setsid`
/// child is reparented to init and outlives everything; a SIGKILL to one of the host's threads
/// by its tid, which kills the whole host.
#[test]
fn a_command_reaches_no_process_outside_its_job() {
  if direct() || !shielded() {
    return;
  }
  for cap in abi_caps() {
    let ours = Arc::new(supervisor().with_landlock_abi_max(cap));
    let theirs = Arc::new(supervisor().with_landlock_abi_max(cap));
    let t = token();
    let gates = [fifo(), fifo()];
    let victim = |sup: &Arc<Supervisor>, gate: &std::path::Path| {
      run_on_thread(
        sup,
        sh(&format!(
          "setsid sleep {t} & read x < {}; echo done",
          gate.display()
        )),
        limits(20_000, 100),
      )
      .1
    };
    let (beside, other) = (victim(&ours, &gates[0].1), victim(&theirs, &gates[1].1));
    wait_for_holders(&t, 4);
    let other_pid = theirs.pid().expect("the other supervisor runs");
    let our_pid = ours.pid().expect("our supervisor runs");
    // Our reapers but the attack's own (its commands may signal their own reaper), the other
    // pool's supervisor and reapers, and the host's threads, last: a SIGKILL that lands there
    // ends this test process.
    let script = format!(
      "R=$(for r in $(cat /proc/{our_pid}/task/*/children); do [ $r != $PPID ] && echo $r; done); \
       exec perl {pl} {our_pid} $R {other_pid} children:{other_pid} tasks:{me}",
      pl = reach_pl(),
      me = std::process::id(),
    );
    let attack = run(&ours, sh(&script), limits(10_000, 100)).unwrap();
    let _open = gates.each_ref().map(|(_, gate)| open_fifo(gate));
    let (beside, other) = (beside.join().unwrap(), other.join().unwrap());
    // Both supervisors, a reaper beside the attack's, the other pool's reaper, and the host's
    // threads (the test harness runs at least two).
    let count: usize = attack
      .stdout
      .lines()
      .next()
      .and_then(|l| l.strip_prefix("targets="))
      .and_then(|n| n.parse().ok())
      .unwrap_or(0);
    assert!(
      count >= 6,
      "cap {cap:?}: {}{}",
      attack.stdout,
      attack.stderr
    );
    assert_eq!(
      attack.stdout.lines().skip(1).collect::<Vec<_>>(),
      Vec::<&str>::new(),
      "cap {cap:?}: {}",
      attack.stderr
    );
    for done in [beside, other] {
      let done = done.unwrap();
      assert_eq!((done.exit_code(), done.stdout.as_str()), (0, "done\n"));
    }
    assert!(survivors_after(&t, Duration::from_secs(5)).is_empty());
    assert_eq!(theirs.pid(), Some(other_pid));
    assert_eq!(ours.pid(), Some(our_pid));
  }
}

/// The landlock domain a reaper puts a job without isolation in (the signal scope, or below
/// ABI 6 one that keeps ptrace in) changes nothing the job does to files: a rename and a hard
/// link across directories (which any domain refuses unless it grants REFER) and a job's own
/// signals (`kill` of its child, `kill 0`, its own group) and renice of its child.
#[test]
fn a_job_without_isolation_renames_links_and_signals_its_own_under_every_cap() {
  if direct() {
    return;
  }
  for cap in abi_caps() {
    let sup = Arc::new(supervisor().with_landlock_abi_max(cap));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let script = format!(
      "mkdir {d}/a {d}/b && echo x > {d}/a/f && mv {d}/a/f {d}/b/f && ln {d}/b/f {d}/a/g && echo files; \
       sleep 30 & kill $! && wait $!; echo child=$?; \
       sleep 30 & renice -n 5 -p $! >/dev/null && echo nice; perl -e 'kill \"KILL\", -getpgrp'; echo after"
    );
    let done = run(&sup, sh(&script), limits(10_000, 100)).unwrap();
    assert_eq!(
      done.stdout, "files\nchild=143\nnice\n",
      "cap {cap:?}: {}",
      done.stderr
    );
    assert_eq!(
      done.exit_code(),
      137,
      "cap {cap:?}: killed by its own group's SIGKILL"
    );
  }
}

/// A cgroup v1 pids group made by a test: its processes go back to the root group and it is
/// removed when dropped, also when the test fails half-way.
struct PidsGroup(PathBuf);

impl Drop for PidsGroup {
  fn drop(&mut self) {
    let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines() {
      let _ = std::fs::write("/sys/fs/cgroup/pids/cgroup.procs", pid);
    }
    let _ = std::fs::remove_dir(&self.0);
  }
}

/// A request for a new reaper waits on the supervisor (up to 10 s), and the supervisor can be
/// slow: an attack SIGKILLed its own reaper with 8,000 processes below it, and the supervisor,
/// inheriting and killing them, answered late. Node's thread takes idle reapers and gives
/// reapers back (the inline path): it must not wait for that request. Here the supervisor is
/// held in a ptrace stop, which no SIGCONT ends, while a thread's request waits on it. Before,
/// the state's lock was held across the request: Node's `exec()` waited 0.65-1.7 s.
#[test]
fn taking_or_returning_an_idle_reaper_never_waits_for_a_request_in_flight() {
  if direct() || !shielded() {
    return;
  }
  // Ptrace of the (non-dumpable) supervisor needs root.
  // SAFETY: geteuid has no preconditions.
  if unsafe { libc::geteuid() } != 0 {
    return;
  }
  let sup = Arc::new(supervisor());
  let (_, idle) = checked_in_reaper(&sup);
  let pid = sup.pid().unwrap();
  // SAFETY: ptrace on a pid of ours, with no pointers.
  unsafe {
    assert_eq!(libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0), 0);
    assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0), 0);
  }
  let until = Instant::now() + Duration::from_secs(5);
  while proc_state(pid) != Some('t') {
    assert!(Instant::now() < until, "the supervisor did not stop");
    std::thread::sleep(Duration::from_millis(1));
  }
  // A request of the other kind: no idle reaper for it, so it asks the stopped supervisor.
  let (tid_tx, tid_rx) = std::sync::mpsc::channel();
  let asking = {
    let sup = sup.clone();
    std::thread::spawn(move || {
      // SAFETY: gettid has no preconditions.
      tid_tx.send(unsafe { libc::gettid() }).unwrap();
      sup.checkout(0).map(|r| r.pid).map_err(|e| format!("{e:?}"))
    })
  };
  // Until it waits in `ppoll` for the answer.
  let tid = tid_rx.recv().unwrap();
  let until = Instant::now() + Duration::from_secs(5);
  while std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
    .map_or(true, |s| !s.starts_with(&format!("{} ", libc::SYS_ppoll)))
  {
    assert!(Instant::now() < until, "the request never waited");
    std::thread::sleep(Duration::from_millis(1));
  }
  // Meanwhile, from another thread: give the idle reaper back and take it again.
  let (done_tx, done_rx) = std::sync::mpsc::channel();
  {
    let sup = sup.clone();
    std::thread::spawn(move || {
      sup.checkin(idle);
      done_tx
        .send(sup.checkout_idle(u8::MAX).map(|r| r.pid))
        .unwrap();
    });
  }
  // The supervisor is still stopped: an answer can only come without waiting for it.
  let taken = done_rx.recv_timeout(Duration::from_secs(2));
  assert_eq!(proc_state(pid), Some('t'));
  // SAFETY: as above.
  unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
  let asked = asking.join().unwrap();
  assert!(taken.as_ref().is_ok_and(|r| r.is_some()), "{taken:?}");
  assert!(asked.is_ok(), "{asked:?}");
}

/// An isolation layer that fails in the command's process (here rlimits: RLIMIT_NOFILE above any
/// kernel's `fs.nr_open` is EPERM, even for root) rejects the job `ISOLATION_UNAVAILABLE` naming
/// the layer and the errno; the command never runs, and the pool runs the next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_that_fails_in_the_child_rejects_the_job_naming_the_layer() {
  use finn_sandbox::core::isolate::IsolationOptions;
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, RawJob};
  if direct() {
    return;
  }
  let config = PoolConfig {
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  let pool = Pool::new(config, tokio::runtime::Handle::current());
  let dir = tempfile::tempdir().unwrap();
  let cwd = dir.path().canonicalize().unwrap();
  let job = |limits: serde_json::Value| {
    let isolation = IsolationOptions::from_json(serde_json::json!({
      "mode": "auto",
      "limits": limits,
    }))
    .unwrap();
    JobSpec::new(RawJob {
      binary_path: "/bin/sh".into(),
      args: vec!["-c".into(), "touch ran; echo ok".into()],
      cwd: cwd.to_str().unwrap().into(),
      env: vec![("PATH".into(), "/usr/bin:/bin".into())],
      timeout_ms: Some(10_000),
      isolation: Some(isolation),
      ..RawJob::default()
    })
    .unwrap()
  };
  let failing = pool
    .submit(job(serde_json::json!({"maxOpenFiles": 1u64 << 32})))
    .unwrap();
  let err = failing.result.await.unwrap().unwrap_err();
  assert_eq!(err.code(), "ISOLATION_UNAVAILABLE", "{err}");
  let message = err.to_string();
  assert!(message.contains("rlimits"), "{message}");
  assert!(message.contains("EPERM"), "{message}");
  assert!(!cwd.join("ran").exists());
  let next = pool.submit(job(serde_json::json!({}))).unwrap();
  let done = next.result.await.unwrap().unwrap();
  assert_eq!((done.exit_code, done.stdout.as_str()), (0, "ok\n"));
  pool.shutdown().await;
}

/// The mount namespaces the threads of process `pid` hold open, as `mnt:[inode]`; `None` when
/// its fds are not ours to read (a reaper is not dumpable: only root reads them).
fn mount_namespaces_held_by(pid: i32) -> Option<Vec<String>> {
  let mut held = Vec::new();
  for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
    let fds = format!("/proc/{pid}/task/{}/fd", task.ok()?.file_name().to_str()?);
    for fd in std::fs::read_dir(fds).ok()? {
      let link = std::fs::read_link(fd.ok()?.path()).ok();
      if let Some(link) = link.and_then(|l| l.to_str().map(str::to_owned))
        && link.starts_with("mnt:[")
      {
        held.push(link);
      }
    }
  }
  Some(held)
}

/// An isolated job's mount namespace is its own, held by its reaper while the command runs (so
/// that the command's exit is not where the kernel frees it) and released once the tree is gone:
/// after twenty jobs in a row, no thread of the reaper holds one. (The kernel hands a freed
/// namespace's number to the next: the jobs' numbers repeat.)
#[test]
fn the_reaper_holds_each_jobs_mount_namespace_until_its_tree_is_gone() {
  use finn_sandbox::core::isolate::{IsolationOptions, Plan, probe};
  let dir = tempfile::tempdir().unwrap();
  let cwd = dir.path().canonicalize().unwrap();
  let opts = IsolationOptions::from_json(serde_json::json!({"mode": "auto"})).unwrap();
  let plan = || Plan::resolve(&opts, &cwd, probe()).unwrap().unwrap();
  if !plan().layers.mountns {
    eprintln!("no mount namespace on this host: nothing to hold");
    return;
  }
  let sup = Arc::new(supervisor());
  let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
  let mut spec = sh("readlink /proc/self/ns/mnt; sleep 0.5");
  spec.cwd = CString::new(cwd.to_str().unwrap()).unwrap();
  let job = |spec: &SpawnSpec, reaper: &std::sync::mpsc::Sender<i32>| {
    let cell: StopCell<&'static str> = StopCell::new();
    let reaper = reaper.clone();
    supervisor::run_blocking(
      &sup,
      JobTerms {
        spec,
        isolation: Some(&plan()),
        limits: &limits(20_000, 100),
      },
      Duration::from_millis(100),
      &cell,
      &mut finn_sandbox::core::exec::later::Nothing,
      move |pid| reaper.send(pid).unwrap(),
    )
    .unwrap()
  };
  // While the command sleeps, its reaper holds its namespace.
  let (tx, rx) = std::sync::mpsc::channel();
  let running = std::thread::scope(|s| {
    let done = s.spawn(|| job(&spec, &tx));
    // The reaper takes the hold before it reports `Spawned`, which is what calls `on_spawn`.
    let reaper = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let held = mount_namespaces_held_by(reaper);
    (reaper, held, done.join().unwrap())
  });
  let (reaper, held_while_running, first) = running;
  assert_eq!(
    first.status,
    Some(ExitStatus::Exited(0)),
    "{}",
    first.stderr
  );
  let first_ns = first.stdout.trim().to_owned();
  assert_ne!(first_ns, ours.to_str().unwrap());
  if let Some(held) = held_while_running {
    assert_eq!(held, vec![first_ns.clone()]);
  }
  spec.argv[2] = CString::new("readlink /proc/self/ns/mnt").unwrap();
  for _ in 0..19 {
    let done = job(&spec, &tx);
    assert_eq!(done.status, Some(ExitStatus::Exited(0)), "{}", done.stderr);
    assert_ne!(done.stdout.trim(), ours.to_str().unwrap());
  }
  let reapers: std::collections::HashSet<i32> = rx.try_iter().chain([reaper]).collect();
  let until = Instant::now() + Duration::from_secs(5);
  for reaper in reapers {
    loop {
      match mount_namespaces_held_by(reaper) {
        Some(held) if !held.is_empty() && Instant::now() < until => {
          std::thread::sleep(Duration::from_millis(20))
        }
        Some(held) => {
          assert_eq!(held, Vec::<String>::new(), "reaper {reaper}");
          break;
        }
        None => break,
      }
    }
  }
}

/// A streaming job through a real reaper: the command reads what the addon writes to its stdin
/// pipe (the read end passed with the `Run`), its output reaches the sink chunk by chunk in
/// order, the leader's pid is the command's, and closing stdin gives it EOF.
#[test]
fn a_streaming_job_reads_its_stdin_pipe_and_streams_its_output() {
  use finn_sandbox::core::exec::capture::Stream;
  use finn_sandbox::core::exec::pipes::Streaming;
  use finn_sandbox::core::supervisor::run::{Outgoing, run_streaming};
  let sup = supervisor();
  let spec = sh("echo pid $$; cat; echo eof >&2");
  let limits = RunLimits {
    timeout: None,
    ..limits(0, 0)
  };
  let terms = JobTerms {
    spec: &spec,
    isolation: None,
    limits: &limits,
  };
  let (outgoing, stdin) = Outgoing::fed(&spec, None, &limits, Duration::from_millis(100)).unwrap();
  let writer = std::thread::spawn(move || {
    let mut f = std::fs::File::from(stdin);
    nix::fcntl::fcntl(
      &f,
      nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .unwrap();
    std::io::Write::write_all(&mut f, &vec![b'x'; 1 << 20]).unwrap();
    // Dropped: the command reads EOF.
  });
  let stop = StopCell::<()>::new();
  let (mut out, mut err) = (Vec::new(), Vec::new());
  let mut pids = (0, 0);
  let followed = run_streaming(
    &sup,
    outgoing,
    terms,
    &stop,
    Streaming(|stream: Stream, bytes: &[u8]| match stream {
      Stream::Stdout => out.extend_from_slice(bytes),
      Stream::Stderr => err.extend_from_slice(bytes),
    }),
    |reaper, leader| pids = (reaper, leader),
  )
  .unwrap();
  writer.join().unwrap();
  assert_eq!(followed.status, Some(ExitStatus::Exited(0)));
  assert_eq!(followed.ended_by, EndedBy::Exit);
  let head = format!("pid {}\n", pids.1);
  assert!(out.starts_with(head.as_bytes()), "{:?}", &out[..20]);
  assert_eq!(out.len(), head.len() + (1 << 20));
  assert_eq!(err, b"eof\n");
  assert_ne!(pids.0, pids.1);
}
