//! The bwrap backend against real processes: each attack runs in a shell under
//! `bwrap <flags from the plan>` started with `pre_exec(|| isolated.apply_in_child())` (as the
//! job's reaper starts it), and is judged from the host (files, listeners, /proc), never from the
//! command's own output. Each attack also runs with `mode: "off"`, where it must land: that proves
//! the probe can fail. `the_pool_runs_jobs_under_bwrap_and_says_so` takes the product path
//! (pool -> supervisor -> reaper).
//!
//! Skipped, saying why, only when bwrap is not installed. Run as root and as nobody (`.ci/run`
//! does both): `setpriv --reuid=65534 --regid=65534 --clear-groups target/debug/deps/isolate_bwrap-*`.
#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use finn_sandbox::core::isolate::{
  Isolated, IsolationError, IsolationOptions, Plan, prepare_job, probe,
};
use serde_json::{Value, json};

mod common;
use common::isolate_attacks::{
  self as attacks, Backend, DeniedDirProbe, FdScope, Jail, Started, SwapRace, exists, off,
  pids_with, rand_suffix, tree, victim, wait_line,
};

/// bwrap is installed; otherwise says why the test is skipped.
fn have_bwrap(test: &str) -> bool {
  if probe().bwrap.is_none() {
    eprintln!(
      "{test}: skipped: bubblewrap is not installed (no `bwrap` in the system directories)"
    );
    return false;
  }
  true
}

/// bwrap can run here (root, or a user namespace). Where it cannot, `mode: "bwrap"` must
/// refuse: checked by `mode_bwrap_refuses_where_it_cannot_run`.
fn bwrap_runs(test: &str) -> bool {
  if !have_bwrap(test) {
    return false;
  }
  if !probe().sys_admin && !probe().userns {
    eprintln!("{test}: skipped: bwrap cannot run as uid {}", probe().uid);
    return false;
  }
  true
}

fn bwrap() -> Value {
  json!({"mode": "bwrap"})
}

/// Each setting an attack is tried under, with whether it must be stopped.
fn settings() -> Vec<(Value, bool)> {
  vec![(off(), false), (bwrap(), true)]
}

/// The reapers run `finn-supervisor` as the bind verifier inside bwrap; here the test process
/// prepares the jobs, so it names the binary.
fn verifier() {
  finn_sandbox::core::isolate::set_bind_verifier(PathBuf::from(env!(
    "CARGO_BIN_EXE_finn-supervisor"
  )));
}

/// The job's preparation under `opts` (None for `mode: "off"`); `Err` when it refuses.
fn try_isolated(opts: &Value, cwd: &Path) -> Result<Option<Arc<Isolated>>, String> {
  verifier();
  let opts = IsolationOptions::from_json(opts.clone()).unwrap();
  let Some(plan) = Plan::resolve(&opts, cwd, probe()).unwrap() else {
    return Ok(None);
  };
  assert_eq!(plan.report().backend, "bwrap");
  Ok(Some(Arc::new(
    prepare_job(&plan).map_err(|e| e.to_string())?,
  )))
}

fn isolated(opts: &Value, cwd: &Path) -> Option<Arc<Isolated>> {
  try_isolated(opts, cwd).unwrap()
}

/// The bwrap backend: `bwrap <flags from the plan> argv`, started with
/// `pre_exec(|| isolated.apply_in_child())` as the job's reaper starts it, with only PATH in
/// its environment.
struct Bwrap;

impl Backend for Bwrap {
  const JAIL_PREFIX: &'static str = "finn-bwrap";
  type Prepared = Isolated;

  fn try_command(
    &self,
    opts: &Value,
    cwd: &Path,
    argv: &[&str],
  ) -> Result<Started<Isolated>, String> {
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let argv_c: Vec<_> = argv.iter().map(|a| c(a)).collect();
    let iso = try_isolated(opts, cwd)?;
    let wrapped = iso
      .as_ref()
      .and_then(|i| i.wrap(&argv_c[0], &argv_c, &c(cwd.to_str().unwrap())));
    let mut cmd = match &wrapped {
      Some((program, args)) => {
        let mut cmd = Command::new(program.to_str().unwrap());
        cmd
          .arg0(args[0].to_str().unwrap())
          .args(args[1..].iter().map(|a| a.to_str().unwrap()));
        cmd
      }
      None => {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]);
        cmd
      }
    };
    cmd
      .current_dir(cwd)
      .env_clear()
      .env("PATH", "/usr/bin:/bin")
      .stdin(Stdio::null())
      .stdout(Stdio::piped())
      .stderr(Stdio::piped());
    if let Some(iso) = iso.clone() {
      // SAFETY: apply_in_child is async-signal-safe: syscalls on data prepared before the fork.
      unsafe {
        cmd.pre_exec(move || iso.apply_in_child().map_err(std::io::Error::from));
      }
    }
    Ok((cmd, iso))
  }
}

fn jail() -> Jail {
  Bwrap.jail()
}

/// `argv` in `cwd` with only PATH in its environment, under `opts`. The command holds the job's
/// preparation (and its cgroup, which dropping it empties).
fn command(opts: &Value, cwd: &Path, argv: &[&str]) -> Command {
  Bwrap.command(opts, cwd, argv).0
}

type Ran = attacks::Ran<Isolated>;

fn run(opts: &Value, cwd: &Path, argv: &[&str]) -> Ran {
  attacks::run(&Bwrap, opts, cwd, argv)
}

fn sh(opts: &Value, cwd: &Path, script: &str) -> Ran {
  attacks::sh(&Bwrap, opts, cwd, script)
}

fn token() -> String {
  format!("finn-bwrap-{}-{}", std::process::id(), rand_suffix())
}

#[test]
fn mode_bwrap_refuses_where_it_cannot_run() {
  let opts = IsolationOptions::from_json(bwrap()).unwrap();
  let r = Plan::resolve(&opts, Path::new("/tmp"), probe());
  match (&probe().bwrap, probe().sys_admin || probe().userns) {
    (None, _) => {
      let e = r.unwrap_err();
      assert!(matches!(e, IsolationError::Unavailable(_)), "{e}");
      assert!(e.to_string().contains("bubblewrap is not installed"), "{e}");
    }
    (Some(_), false) => {
      let e = r.unwrap_err();
      assert!(matches!(e, IsolationError::Unavailable(_)), "{e}");
      assert!(e.to_string().contains("user namespace"), "{e}");
    }
    (Some(path), true) => {
      let plan = r.unwrap().unwrap();
      assert_eq!(plan.bwrap.as_ref(), Some(path));
      // A bwrap that fails to set up (here: a denyRead mount over a missing parent is fine,
      // so a real run) still starts: the plan is usable.
      let report = plan.report();
      assert_eq!(report.backend, "bwrap");
      for layer in [
        "rlimits",
        "privileges",
        "mountns",
        "protect",
        "netns",
        "pidns",
        "seccomp",
      ] {
        assert!(report.applied.contains(&layer), "{layer}: {report:?}");
      }
    }
  }
}

#[test]
fn writes_outside_the_jail() {
  if !bwrap_runs("writes_outside_the_jail") {
    return;
  }
  attacks::writes_outside_the_jail(&Bwrap, settings());
}

#[test]
fn protected_paths_stay_read_only() {
  if !bwrap_runs("protected_paths_stay_read_only") {
    return;
  }
  for (opts, stopped) in settings() {
    let j = jail();
    let git = j.root.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("config"), "[core]\n").unwrap();
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let r = sh(
      &opts,
      &j.root,
      "echo '[core] fsmonitor = evil' >> .git/config
       echo evil > .git/hooks/pre-commit
       mv .git .git-away
       mkdir -p .git/hooks && echo evil > .git/hooks/post-checkout
       echo ok > .git/HEAD-write-test; echo ok > plain",
    );
    let hits = [
      [git.join("config"), j.root.join(".git-away/config")]
        .iter()
        .any(|c| std::fs::read_to_string(c).is_ok_and(|s| s.contains("evil"))),
      exists(&git.join("hooks/pre-commit")) || exists(&j.root.join(".git-away/hooks/pre-commit")),
      exists(&j.root.join(".git-away")),
      exists(&git.join("hooks/post-checkout")) || exists(&j.root.join(".git-away/hooks")),
    ];
    assert!(
      exists(&j.root.join("plain")),
      "{opts}: the jail stays writable: {}",
      r.stderr
    );
    if stopped {
      assert_eq!(hits, [false; 4], "{opts}: {}", r.stderr);
      // The rest of .git stays writable (git must write objects and refs).
      assert!(exists(&git.join("HEAD-write-test")), "{opts}: {}", r.stderr);
    } else {
      assert_eq!(hits, [true; 4], "off: {}", r.stderr);
    }
  }
}

#[test]
fn denied_reads() {
  if !bwrap_runs("denied_reads") {
    return;
  }
  attacks::denied_reads(&Bwrap, settings(), DeniedDirProbe::ListIt);
}

/// Also `remount,rw /`, and as nobody too (bwrap's own user namespace): see the shared body.
#[test]
fn root_operations_fail() {
  if !bwrap_runs("root_operations_fail") {
    return;
  }
  attacks::root_operations_fail(&Bwrap, settings(), true);
}

#[test]
fn host_devices_cannot_be_read() {
  if !bwrap_runs("host_devices_cannot_be_read") {
    return;
  }
  attacks::host_devices_cannot_be_read(&Bwrap, settings());
}

#[test]
fn network_tcp_udp_and_unix_socket_by_path() {
  if !bwrap_runs("network_tcp_udp_and_unix_socket_by_path") {
    return;
  }
  attacks::network_tcp_udp_and_unix_socket_by_path(&Bwrap, settings());
}

/// Not a test on its own: the attacks no shell tool makes. Does nothing unless `FINN_ATTACK`.
#[test]
fn attack_helper() {
  attacks::attack_helper();
}

/// The whole tree is checked, bwrap included, and the command holds fds 0 to 2 only.
#[test]
fn only_fds_0_to_2_are_inherited() {
  if !bwrap_runs("only_fds_0_to_2_are_inherited") {
    return;
  }
  attacks::only_fds_0_to_2_are_inherited(&Bwrap, settings(), FdScope::Tree);
}

#[test]
fn nodes_env_secrets_stay_out_of_reach() {
  if !bwrap_runs("nodes_env_secrets_stay_out_of_reach") {
    return;
  }
  for (opts, stopped) in settings() {
    let j = jail();
    let secret = token();
    let mut v = victim(&secret);
    let pid = v.id();
    let r = sh(
      &opts,
      &j.root,
      &format!("cat /proc/{pid}/environ > leak; env > env; kill -STOP {pid}"),
    );
    let leaked = std::fs::read_to_string(j.root.join("leak")).unwrap_or_default();
    let env = std::fs::read_to_string(j.root.join("env")).unwrap_or_default();
    // kill(2) has queued the signal before it returned: the victim is stopped already or has
    // SIGSTOP pending in its shared queue.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |f: &str| {
      status
        .lines()
        .find_map(|l| l.strip_prefix(f))
        .unwrap()
        .trim()
        .to_string()
    };
    let pending = u64::from_str_radix(&field("ShdPnd:"), 16).unwrap();
    let stopped_state =
      field("State:").starts_with('T') || pending & (1 << (libc::SIGSTOP - 1)) != 0;
    v.kill().unwrap();
    v.wait().unwrap();
    // The command's own environment is the spec's (PATH only), in both modes.
    assert!(!env.contains("OPENAI_API_KEY"), "{opts}: {env}");
    assert_eq!(
      leaked.contains(&secret),
      !stopped,
      "{opts}: /proc/<pid>/environ: {}",
      r.stderr
    );
    assert_eq!(
      stopped_state, !stopped,
      "{opts}: SIGSTOP of an outside process: {}",
      r.stderr
    );
  }
}

#[test]
fn rlimits_set_before_bwrap_hold_for_the_command() {
  if !bwrap_runs("rlimits_set_before_bwrap_hold_for_the_command") {
    return;
  }
  for (opts, stopped) in [
    (off(), false),
    (
      json!({"mode": "bwrap", "limits": {"maxFileBytes": 4096}}),
      true,
    ),
  ] {
    let j = jail();
    let r = sh(&opts, &j.root, "head -c 100000 /dev/zero > big");
    let size = std::fs::metadata(j.root.join("big")).unwrap().len();
    assert_eq!(
      size,
      if stopped { 4096 } else { 100000 },
      "{opts}: {}",
      r.stderr
    );
  }
}

#[test]
fn the_cgroup_holds_bwrap_and_the_command_or_is_reported_missing() {
  if !bwrap_runs("the_cgroup_holds_bwrap_and_the_command_or_is_reported_missing") {
    return;
  }
  let j = jail();
  let iso = isolated(&bwrap(), &j.root).unwrap();
  if probe().cgroup.is_none() {
    // As nobody here: no writable cgroup, and the report says so.
    assert!(
      iso
        .report()
        .degraded
        .iter()
        .any(|d| d.starts_with("cgroup:")),
      "{:?}",
      iso.report()
    );
    return;
  }
  assert!(iso.report().applied.contains(&"cgroup"));
  let mut cmd = command(
    &bwrap(),
    &j.root,
    &["/bin/sh", "-c", "echo ready; exec sleep 60"],
  );
  let mut child = cmd.spawn().unwrap();
  assert!(wait_line(&mut child, "ready"));
  let procs = tree(child.id());
  let outside: Vec<(u32, String)> = procs
    .iter()
    .map(|p| {
      (
        *p,
        std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default(),
      )
    })
    .filter(|(_, cg)| !cg.lines().any(|l| l.contains(":pids:/finn-sandbox/")))
    .collect();
  child.kill().unwrap();
  child.wait().unwrap();
  drop(cmd);
  assert!(
    procs.len() >= 3,
    "bwrap, its pid 1 and the command: {procs:?}"
  );
  assert_eq!(outside, Vec::new(), "outside the job's pids cgroup");
}

#[test]
fn the_command_runs_with_its_args_cwd_and_exit_code() {
  if !bwrap_runs("the_command_runs_with_its_args_cwd_and_exit_code") {
    return;
  }
  let j = jail();
  let r = run(
    &bwrap(),
    &j.root,
    &[
      "/bin/sh",
      "-c",
      "pwd > where; echo \"$1\" > arg; exit 7",
      "sh",
      "a b",
    ],
  );
  assert_eq!(r.status.code(), Some(7), "{}", r.stderr);
  assert_eq!(
    std::fs::read_to_string(j.root.join("where"))
      .unwrap()
      .trim(),
    j.root.to_str().unwrap()
  );
  assert_eq!(
    std::fs::read_to_string(j.root.join("arg")).unwrap(),
    "a b\n"
  );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_runs_jobs_under_bwrap_and_says_so() {
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, RawJob};
  if !bwrap_runs("the_pool_runs_jobs_under_bwrap_and_says_so") {
    return;
  }
  let pool = Pool::new(
    PoolConfig {
      supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
      ..PoolConfig::default()
    },
    tokio::runtime::Handle::current(),
  );
  for (opts, stopped) in settings() {
    let j = jail();
    let script = format!("echo x > {}/escaped; echo y > inside", j.out.display());
    let spec = JobSpec::new(RawJob {
      binary_path: "/bin/bash".into(),
      args: vec!["-c".into(), script],
      cwd: j.root.to_str().unwrap().into(),
      env: vec![("PATH".into(), "/usr/bin:/bin".into())],
      isolation: Some(IsolationOptions::from_json(opts.clone()).unwrap()),
      ..RawJob::default()
    })
    .unwrap();
    let s = pool.submit(spec).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), s.result)
      .await
      .expect("settled")
      .expect("a reply")
      .unwrap();
    assert!(exists(&j.root.join("inside")), "{opts}: {}", r.stderr);
    assert_eq!(
      exists(&j.out.join("escaped")),
      !stopped,
      "{opts}: {}",
      r.stderr
    );
    if stopped {
      let iso = r.isolation.expect("a report");
      assert_eq!(iso.backend, "bwrap");
      assert!(
        iso.applied.contains(&"seccomp") && iso.applied.contains(&"mountns"),
        "{iso:?}"
      );
    } else {
      assert!(r.isolation.is_none());
    }
  }
  pool.shutdown().await;
}

fn median(mut v: Vec<Duration>) -> f64 {
  v.sort();
  v[v.len() / 2].as_secs_f64() * 1e3
}

/// The per-exec cost of the bwrap backend over a plain fork + exec of /bin/true, beside the
/// native backend's. Ignored by default (it measures, it does not test):
/// `cargo test --test isolate_bwrap -- --ignored --nocapture` (FINN_ISO_N=300 to change N).
#[test]
#[ignore = "measurement; run by hand"]
fn cost_per_exec() {
  if !bwrap_runs("cost_per_exec") {
    return;
  }
  let n: usize = std::env::var("FINN_ISO_N")
    .ok()
    .and_then(|s| s.parse().ok())
    .unwrap_or(300);
  let j = jail();
  let time = |opts: Option<&Value>| -> f64 {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
      let t = std::time::Instant::now();
      let mut cmd = match opts {
        Some(o) => command(o, &j.root, &["/bin/true"]),
        None => {
          let mut cmd = Command::new("/bin/true");
          cmd.current_dir(&j.root).stdin(Stdio::null());
          // SAFETY: a no-op hook, to stay on the same fork path as the isolated runs.
          unsafe {
            cmd.pre_exec(|| Ok(()));
          }
          cmd
        }
      };
      let out = cmd.output().unwrap();
      assert!(out.status.success(), "{opts:?}: {out:?}");
      drop(cmd); // the cgroup's removal counts as part of the exec
      v.push(t.elapsed());
    }
    median(v)
  };
  let base = time(None);
  println!(
    "| backend | median ms per exec (prepare + spawn + wait + cleanup) | over plain fork+exec |"
  );
  println!("| --- | --- | --- |");
  println!("| none (fork + exec of /bin/true) | {base:.3} | 0 |");
  let runs = [
    ("native, auto (root: + mount ns)", json!({"mode": "auto"})),
    ("bwrap, defaults (net + pid ns)", bwrap()),
    (
      "bwrap, network allowed (no net ns)",
      json!({"mode": "bwrap", "network": "allow"}),
    ),
    (
      "bwrap, no net ns, no pid ns",
      json!({"mode": "bwrap", "network": "allow", "namespaces": {"pid": false}}),
    ),
  ];
  for (name, mut opts) in runs {
    // As a non-root user, bwrap's pid namespace inside a user namespace releases its processes'
    // RLIMIT_NPROC counts with a lag (~0.6 s here): ~250 back-to-back jobs under the default
    // limit of 256 then fail with "bwrap: Can't fork for pid 1" (README, isolation). The loop
    // measures the exec, so it lifts the limit for every backend alike.
    opts["limits"] = json!({"maxProcesses": 65536});
    let o = IsolationOptions::from_json(opts.clone()).unwrap();
    let plan = Plan::resolve(&o, &j.root, probe()).unwrap().unwrap();
    let ms = if plan.bwrap.is_some() {
      time(Some(&opts))
    } else {
      // `command` insists on bwrap; the native backend runs through its own hook.
      let mut v = Vec::with_capacity(n);
      for _ in 0..n {
        let t = std::time::Instant::now();
        let p = Arc::new(prepare_job(&plan).unwrap());
        let mut cmd = Command::new("/bin/true");
        cmd.current_dir(&j.root).stdin(Stdio::null());
        let hook = p.clone();
        // SAFETY: apply_in_child is async-signal-safe: syscalls on data prepared before the fork.
        unsafe {
          cmd.pre_exec(move || hook.apply_in_child().map_err(std::io::Error::from));
        }
        assert!(cmd.status().unwrap().success(), "{name}");
        drop((cmd, p));
        v.push(t.elapsed());
      }
      median(v)
    };
    println!("| {name} | {ms:.3} | +{:.3} |", ms - base);
  }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_reaches_the_command_inside_bwrap_and_ends_its_tree() {
  use finn_sandbox::core::pool::{JobSpec, Pool, PoolConfig, RawJob};
  if !bwrap_runs("a_timeout_reaches_the_command_inside_bwrap_and_ends_its_tree") {
    return;
  }
  let pool = Pool::new(
    PoolConfig {
      supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
      kill_grace: Duration::from_secs(10),
      ..PoolConfig::default()
    },
    tokio::runtime::Handle::current(),
  );
  let j = jail();
  let tok = token();
  // bwrap is pid 1 of the namespace, the shell is not: its SIGTERM trap runs, and takes its
  // time (a command cleaning up), while bwrap's own processes wait for it: a SIGTERM to the
  // outer bwrap would end the sandbox (--die-with-parent) under the handler. The background
  // child (named by the token) is gone once the job settles.
  let script = format!(
    "trap '/bin/sleep 0.3; echo term > got-term; exit 0' TERM; (exec -a {tok} sleep 60) & wait"
  );
  let spec = JobSpec::new(RawJob {
    binary_path: "/bin/bash".into(),
    args: vec!["-c".into(), script],
    cwd: j.root.to_str().unwrap().into(),
    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
    timeout_ms: Some(5000),
    isolation: Some(IsolationOptions::from_json(bwrap()).unwrap()),
    ..RawJob::default()
  })
  .unwrap();
  let s = pool.submit(spec).unwrap();
  let r = tokio::time::timeout(Duration::from_secs(30), s.result)
    .await
    .expect("settled")
    .expect("a reply");
  assert!(
    exists(&j.root.join("got-term")),
    "the command's TERM trap did not run: {r:?}"
  );
  assert_eq!(pids_with(&tok), Vec::<i32>::new(), "{r:?}");
  pool.shutdown().await;
}

/// The protect bind's own race, as `isolate.rs` runs it for the native backend (see the shared
/// body): bwrap binds the object the check opened (`--ro-bind-fd`, beneath the root's checked
/// fd), and the child re-opens each nested destination, with no symlink on the way, right before
/// bwrap's exec: a start that meets the symlink is refused.
#[test]
fn the_protect_swap_race_never_leaves_hooks_writable() {
  if !bwrap_runs("the_protect_swap_race_never_leaves_hooks_writable") {
    return;
  }
  attacks::the_protect_swap_race_never_leaves_hooks_writable(
    &Bwrap,
    settings(),
    SwapRace {
      starts: 100,
      bursts: true,
      relative_alt: true,
      started_means_exit_0: true,
    },
  );
}

/// Metadata of the user's own files outside the writable roots (chmod, utimes): landlock does not
/// cover them; bwrap's read-only root does.
#[test]
fn metadata_of_outside_files_stays_unchanged() {
  use std::os::unix::fs::{MetadataExt, PermissionsExt};
  if !bwrap_runs("metadata_of_outside_files_stays_unchanged") {
    return;
  }
  for (opts, stopped) in settings() {
    let j = jail();
    let v = j.out.join("victim");
    std::fs::write(&v, "orig").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(j.root.join("mine"), "data").unwrap();
    let before = std::fs::metadata(&v).unwrap();
    let script = format!(
      "chmod 4777 {v}; touch -d 2001-01-01 {v}; chmod 755 mine",
      v = v.display()
    );
    let r = sh(&opts, &j.root, &script);
    let after = std::fs::metadata(&v).unwrap();
    let changed = after.mode() != before.mode() || after.mtime() != before.mtime();
    assert_eq!(changed, !stopped, "{opts}: {}", r.stderr);
    let mine = std::fs::metadata(j.root.join("mine")).unwrap();
    assert_eq!(mine.mode() & 0o777, 0o755, "{opts}: {}", r.stderr);
  }
}

/// A terminal outside (the operator's): bwrap's `--dev` gives the command a devpts of its own.
#[test]
fn an_outside_terminal_cannot_be_read_or_written() {
  if !bwrap_runs("an_outside_terminal_cannot_be_read_or_written") {
    return;
  }
  attacks::an_outside_terminal_cannot_be_read_or_written(&Bwrap, settings());
}

/// A repository without `.git/hooks`: bwrap's read-only bind needs something to cover, so the
/// missing directory is created empty first.
#[test]
fn a_missing_hooks_directory_cannot_be_created_with_a_hook() {
  if !bwrap_runs("a_missing_hooks_directory_cannot_be_created_with_a_hook")
    || !Path::new("/usr/bin/git").exists()
  {
    return;
  }
  attacks::a_missing_hooks_directory_cannot_be_created_with_a_hook(&Bwrap, settings());
}

/// System V IPC outside (a shared memory segment of the same uid): `--unshare-ipc`.
#[test]
fn an_outside_sysv_shared_memory_segment_stays_out_of_reach() {
  if !bwrap_runs("an_outside_sysv_shared_memory_segment_stays_out_of_reach") {
    return;
  }
  attacks::an_outside_sysv_shared_memory_segment_stays_out_of_reach(
    &Bwrap,
    settings(),
    0x4662_0000,
  );
}

/// NOT STOPPED in bwrap (README says so): a `denyRead` path missing when the job starts has
/// nothing to mount over (the native backend has landlock carve it); created by the host while
/// the job runs, it is readable. So the one setting is passed as not stopped: the read must land.
#[test]
fn a_denied_path_created_during_the_job_is_readable_in_bwrap() {
  if !bwrap_runs("a_denied_path_created_during_the_job_is_readable_in_bwrap") {
    return;
  }
  attacks::a_denied_path_created_during_the_job(&Bwrap, vec![(bwrap(), false)]);
}

/// With `namespaces.pid: false` bwrap has nothing between the command and the same uid's
/// processes outside (no landlock scope): a signal lands, and the report says so.
#[test]
fn without_the_pid_namespace_outside_processes_can_be_signalled_and_degraded_says_so() {
  if !bwrap_runs("without_the_pid_namespace_outside_processes_can_be_signalled") {
    return;
  }
  let j = jail();
  let opts = json!({"mode": "bwrap", "namespaces": {"pid": false}});
  let plan = Plan::resolve(
    &IsolationOptions::from_json(opts.clone()).unwrap(),
    &j.root,
    probe(),
  )
  .unwrap()
  .unwrap();
  assert!(
    plan
      .degraded
      .iter()
      .any(|d| d.starts_with("pidns:") && d.contains("signalled")),
    "{:?}",
    plan.degraded
  );
  let mut v = victim(&token());
  let pid = v.id();
  let r = sh(&opts, &j.root, &format!("kill -KILL {pid}"));
  std::thread::sleep(Duration::from_millis(50));
  let dead = matches!(v.try_wait(), Ok(Some(_)));
  let _ = v.kill();
  let _ = v.wait();
  assert!(dead, "pid: false: {}", r.stderr);
}
