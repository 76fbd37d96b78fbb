//! The isolation layers against real processes: each attack runs from inside a shell started with
//! `pre_exec(|| prepared.apply_in_child())`, and is judged from the host (files, listeners,
//! /proc), never from the command's own output. Each attack also runs with `mode: "off"`, where
//! it must succeed: that proves the probe can fail.
//!
//! Forking the test process is fine here; the product path is the supervisor's reaper.
//! Run as root and as nobody (`.ci/run` does both; see `nonroot`):
//! `setpriv --reuid=65534 --regid=65534 --clear-groups target/debug/deps/isolate-*`.
#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use finn_sandbox::core::isolate::{IsolationOptions, Plan, Prepared, prepare, probe};
use serde_json::{Value, json};

mod common;
use common::isolate_attacks::{
  self as attacks, Backend, DeniedDirProbe, FdScope, Jail, KillOnDrop, Started, SwapRace, exists,
  find_git, is_root, kill_all, merge, off, pids_with, proc_field, rand_suffix, victim,
};

/// Mount, pid and net namespaces can be made: directly (CAP_SYS_ADMIN) or inside a user namespace.
fn can_ns() -> bool {
  probe().sys_admin || probe().userns
}

/// The native backend: the command itself, with `prepared.apply_in_child()` in its pre_exec.
struct Native;

impl Backend for Native {
  const JAIL_PREFIX: &'static str = "finn-iso";
  type Prepared = Prepared;

  fn try_command(
    &self,
    opts: &Value,
    cwd: &Path,
    argv: &[&str],
  ) -> Result<Started<Prepared>, String> {
    let opts = IsolationOptions::from_json(opts.clone()).unwrap();
    let p = match Plan::resolve(&opts, cwd, probe()).unwrap() {
      None => None,
      Some(plan) => Some(Arc::new(prepare(&plan).map_err(|e| e.to_string())?)),
    };
    let mut cmd = Command::new(argv[0]);
    cmd
      .args(&argv[1..])
      .current_dir(cwd)
      .stdin(Stdio::null())
      .stdout(Stdio::piped())
      .stderr(Stdio::piped());
    if let Some(p) = p.clone() {
      // SAFETY: apply_in_child is async-signal-safe: syscalls on data prepared before the fork.
      unsafe {
        cmd.pre_exec(move || p.apply_in_child().map_err(std::io::Error::from));
      }
    }
    Ok((cmd, p))
  }
}

fn jail() -> Jail {
  Native.jail()
}

fn prepared(opts: &Value, cwd: &Path) -> Option<Arc<Prepared>> {
  let opts = IsolationOptions::from_json(opts.clone()).unwrap();
  let plan = Plan::resolve(&opts, cwd, probe()).unwrap()?;
  Some(Arc::new(prepare(&plan).unwrap()))
}

fn command(opts: &Value, cwd: &Path, argv: &[&str]) -> (Command, Option<Arc<Prepared>>) {
  Native.command(opts, cwd, argv)
}

type Ran = attacks::Ran<Prepared>;

fn sh(opts: &Value, cwd: &Path, script: &str) -> Ran {
  attacks::sh(&Native, opts, cwd, script)
}

fn run(opts: &Value, cwd: &Path, argv: &[&str]) -> Ran {
  attacks::run(&Native, opts, cwd, argv)
}

/// Runs this test binary's `attack_helper` inside the sandbox.
fn helper(opts: &Value, cwd: &Path, attack: &str, arg: &str) -> Ran {
  attacks::helper(&Native, opts, cwd, attack, arg)
}

/// Waits for `line` on the child's stdout: the real signal that it did what it was told.
fn wait_line(child: &mut Child, line: &str) {
  assert!(
    attacks::wait_line(child, line),
    "child closed stdout before {line:?}"
  );
}

fn auto() -> Value {
  json!({"mode": "auto"})
}

/// Each isolation setting an attack is tried under, with whether it must be stopped.
fn settings(extra: Value) -> Vec<(Value, bool)> {
  let mut on = auto();
  // The network namespace is opt-in; ask for it where the host can make one, so it is tested.
  merge(&mut on, &json!({"namespaces": {"net": can_ns()}}));
  merge(&mut on, &extra);
  let mut no_ns = on.clone();
  merge(
    &mut no_ns,
    &json!({"namespaces": {"net": false, "mount": false}}),
  );
  vec![(off(), false), (on, true), (no_ns, true)]
}

#[test]
fn writes_outside_the_jail() {
  attacks::writes_outside_the_jail(&Native, settings(json!({})));
}

#[test]
fn protected_paths_stay_read_only() {
  if !can_ns() {
    let p = prepared(&auto(), Path::new("/tmp")).unwrap();
    assert!(
      p.report()
        .degraded
        .iter()
        .any(|d| d.starts_with("protect:")),
      "{:?}",
      p.report()
    );
    return;
  }
  for (opts, stopped) in settings(json!({})).into_iter().take(2) {
    let j = jail();
    std::fs::create_dir_all(j.root.join(".git/hooks")).unwrap();
    std::fs::write(j.root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(j.root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let r = sh(
      &opts,
      &j.root,
      "echo evil > .git/hooks/pre-commit; echo evil >> .git/config; echo ok > .git/HEAD",
    );
    let wrote = [
      exists(&j.root.join(".git/hooks/pre-commit")),
      std::fs::read_to_string(j.root.join(".git/config")).unwrap_or_default() != "[core]\n",
    ];
    let r2 = sh(
      &opts,
      &j.root,
      "mv .git .git-old && mkdir -p .git/hooks && echo evil > .git/hooks/post-checkout",
    );
    // From a working directory inside `.git` (entered before the mounts were made), with the
    // jail as the writable root.
    let mut inside = opts.clone();
    merge(
      &mut inside,
      &json!({"fs": {"writable": [j.root.to_str().unwrap()]}}),
    );
    let r3 = sh(
      &inside,
      &j.root.join(".git"),
      "echo evil > hooks/from-inside; echo evil >> config",
    );
    let hit = [
      wrote[0],
      wrote[1],
      exists(&j.root.join(".git-old")) || exists(&j.root.join(".git/hooks/post-checkout")),
      exists(&j.root.join(".git/hooks/from-inside")),
    ];
    if stopped {
      assert_eq!(
        hit, [false; 4],
        "{opts}: {} / {} / {}",
        r.stderr, r2.stderr, r3.stderr
      );
      // The rest of .git stays writable (git needs its index and refs).
      assert_eq!(
        std::fs::read_to_string(j.root.join(".git/HEAD")).unwrap(),
        "ok\n",
        "{opts}: {}",
        r.stderr
      );
    } else {
      assert_eq!(hit, [true; 4], "off: {}", r.stderr);
    }
  }
}

#[test]
fn denied_reads() {
  // Not `settings()`: no network namespace, and the mount namespace where the host can make
  // one, then landlock alone.
  attacks::denied_reads(
    &Native,
    vec![
      (off(), false),
      (
        json!({"mode": "auto", "namespaces": {"mount": can_ns()}}),
        true,
      ),
      (
        json!({"mode": "auto", "namespaces": {"mount": false}}),
        true,
      ),
    ],
    DeniedDirProbe::ReadThroughSiblingSymlink,
  );
}

#[test]
fn default_deny_list_covers_shadow() {
  if !is_root() {
    return; // nobody cannot read /etc/shadow with or without isolation: nothing to prove.
  }
  // `/etc/shadow-` is the previous shadow file (same hashes), left by shadow's tools.
  let files: Vec<&str> = ["/etc/shadow", "/etc/shadow-", "/etc/gshadow-"]
    .into_iter()
    .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0))
    .collect();
  for (opts, stopped) in settings(json!({})) {
    for f in &files {
      let j = jail();
      let r = sh(&opts, &j.root, &format!("cat {f} > leak"));
      let leaked = !std::fs::read_to_string(j.root.join("leak"))
        .unwrap()
        .is_empty();
      assert_eq!(leaked, !stopped, "{opts}: {f}: {}", r.stderr);
    }
  }
}

#[test]
fn root_operations_fail() {
  if !is_root() {
    // As nobody, mount and mknod fail without isolation too (the root run proves them); an
    // unprivileged user namespace does not, where the host allows it, and seccomp must stop it.
    if !probe().userns {
      return;
    }
    for (opts, stopped) in settings(json!({})) {
      let j = jail();
      let r = sh(&opts, &j.root, "unshare -U -r touch unshared");
      assert_eq!(
        exists(&j.root.join("unshared")),
        !stopped,
        "{opts}: {}",
        r.stderr
      );
    }
    return;
  }
  attacks::root_operations_fail(&Native, settings(json!({})), false);
}

#[test]
fn fork_bomb_is_bounded_and_cleaned_up() {
  for (opts, stopped) in settings(json!({"limits": {"maxProcesses": 20}}))
    .into_iter()
    .take(2)
  {
    let j = jail();
    let token = format!("3600.{}{}", std::process::id(), rand_suffix());
    // Whatever happens below (a failed assertion included), no sleeper outlives the test.
    let _reap = KillOnDrop(token.clone());
    // 100 detached sleepers (setsid: nothing but the cgroup or a uid limit holds them). A shell
    // cannot do this: bash retries a failed fork for 15 s, dash exits on the first failure.
    let r = helper(&opts, &j.root, "fork-many", &token);
    assert!(r.status.success(), "{opts}: {}", r.stderr);
    let prepared = r.prepared;
    let n = pids_with(&token).len();
    if stopped {
      assert!(n < 20, "{opts}: {n} sleepers despite maxProcesses 20");
      let mut p = Arc::into_inner(prepared.unwrap()).expect("no other handle");
      if p.report().applied.contains(&"cgroup") {
        // RLIMIT_NPROC (without a cgroup) counts every process and thread of the uid, the test
        // runner's included, so only the cgroup run can show that some forks still succeed.
        assert!(n > 0, "{opts}: the limit must bound, not forbid");
        assert!(p.cgroup_events().pids_max_hits > 0);
        p.cleanup();
        assert_eq!(
          pids_with(&token),
          Vec::<i32>::new(),
          "cgroup cleanup left sleepers"
        );
      } else {
        kill_all(&token);
      }
    } else {
      assert_eq!(n, 100, "off: every sleeper runs");
      kill_all(&token);
    }
  }
}

#[test]
fn memory_bomb_is_stopped_and_reported() {
  for (opts, stopped) in settings(json!({"limits": {"maxMemoryBytes": 64 << 20}}))
    .into_iter()
    .take(2)
  {
    let j = jail();
    // `tail -n 1` holds a newline-free 256 MiB line in memory.
    let r = sh(
      &opts,
      &j.root,
      "set -o pipefail; head -c 268435456 /dev/zero | tail -n 1 | wc -c",
    );
    assert_eq!(r.status.success(), !stopped, "{opts}: {}", r.stderr);
    if let Some(p) = &r.prepared
      && p.report().applied.contains(&"cgroup")
    {
      assert!(
        p.cgroup_events().oom_kills > 0,
        "the OOM kill is visible in the cgroup's counters"
      );
    }
  }
}

#[test]
fn cpu_and_file_size_limits() {
  use std::os::unix::process::ExitStatusExt;
  for (opts, stopped) in settings(json!({"limits": {"cpuSeconds": 1, "maxFileBytes": 1048576}}))
    .into_iter()
    .take(2)
  {
    let j = jail();
    let r = sh(&opts, &j.root, "head -c 2097152 /dev/zero > big");
    let size = std::fs::metadata(j.root.join("big")).unwrap().len();
    assert_eq!(
      size,
      if stopped { 1 << 20 } else { 2 << 20 },
      "{opts}: {}",
      r.stderr
    );
    if stopped {
      let t0 = std::time::Instant::now();
      let r = run(&opts, &j.root, &["/bin/bash", "-c", "while :; do :; done"]);
      let sig = r.status.signal();
      assert!(
        matches!(sig, Some(libc::SIGXCPU) | Some(libc::SIGKILL)),
        "{opts}: {:?}",
        r.status
      );
      assert!(t0.elapsed().as_secs() < 30);
    } else {
      // Without the limit the loop runs until the timeout command ends it.
      let r = run(
        &opts,
        &j.root,
        &["timeout", "2", "/bin/bash", "-c", "while :; do :; done"],
      );
      assert_eq!(r.status.code(), Some(124));
    }
  }
}

#[test]
fn network_tcp_udp_and_unix_socket_by_path() {
  attacks::network_tcp_udp_and_unix_socket_by_path(&Native, settings(json!({})));
}

/// Not a test on its own: the attacks that need a syscall no shell tool makes. Does nothing
/// unless `FINN_ATTACK` is set.
#[test]
fn attack_helper() {
  attacks::attack_helper();
}

#[test]
fn the_parent_cannot_be_read_traced_or_stopped() {
  for (opts, stopped) in settings(json!({})) {
    let j = jail();
    let token = format!("sk-{}", rand_suffix());
    let mut v = victim(&token);
    let pid = v.id();

    let r = sh(&opts, &j.root, &format!("cat /proc/{pid}/environ > leak"));
    let leaked = std::fs::read(j.root.join("leak"))
      .map(|b| String::from_utf8_lossy(&b).contains(&token))
      .unwrap();
    assert_eq!(
      leaked, !stopped,
      "{opts}: /proc/<parent>/environ: {}",
      r.stderr
    );

    helper(&opts, &j.root, "sigstop", &pid.to_string());
    // kill(2) has queued the signal before it returned: the victim is stopped already or has
    // SIGSTOP pending in its shared queue.
    let state = proc_field(pid, "State:");
    let pending = u64::from_str_radix(&proc_field(pid, "ShdPnd:"), 16).unwrap();
    let got_stop = state.starts_with('T') || pending & (1 << (libc::SIGSTOP - 1)) != 0;
    assert_eq!(
      got_stop, !stopped,
      "{opts}: SIGSTOP: {state}, pending {pending:x}"
    );
    let _ = nix::sys::signal::kill(
      nix::unistd::Pid::from_raw(pid as i32),
      nix::sys::signal::Signal::SIGCONT,
    );

    let exe = std::env::current_exe().unwrap();
    let (mut cmd, _p) = command(
      &opts,
      &j.root,
      &[
        exe.to_str().unwrap(),
        "--exact",
        "attack_helper",
        "--nocapture",
        "--test-threads=1",
      ],
    );
    cmd
      .env("FINN_ATTACK", "ptrace-hold")
      .env("FINN_ATTACK_ARG", pid.to_string())
      .stdin(Stdio::piped());
    let mut h = cmd.spawn().unwrap();
    wait_line(&mut h, "ready");
    let tracer = proc_field(pid, "TracerPid:");
    drop(h.stdin.take());
    h.wait().unwrap();
    assert_eq!(
      tracer != "0",
      !stopped,
      "{opts}: ptrace: TracerPid {tracer}"
    );

    v.kill().unwrap();
    v.wait().unwrap();
  }
}

#[test]
fn only_fds_0_to_2_are_inherited() {
  attacks::only_fds_0_to_2_are_inherited(&Native, settings(json!({})), FdScope::Command);
}

#[test]
fn the_report_says_what_applied_and_what_degraded() {
  let asked = json!({"mode": "auto", "namespaces": {"net": can_ns(), "pid": can_ns()}});
  let p = prepared(&asked, Path::new("/tmp")).unwrap();
  let r = p.report();
  assert!(
    r.applied.contains(&"landlock") && r.applied.contains(&"seccomp"),
    "{r:?}"
  );
  if can_ns() {
    assert!(
      ["netns", "mountns", "pidns", "protect"]
        .iter()
        .all(|l| r.applied.contains(l)),
      "{r:?}"
    );
    // As nobody, inside a user namespace; root makes them directly.
    assert_eq!(r.applied.contains(&"userns"), !probe().sys_admin, "{r:?}");
  } else {
    for layer in ["mountns", "protect"] {
      assert!(
        r.degraded.iter().any(|d| d.starts_with(layer)),
        "{layer} not in {r:?}"
      );
    }
  }
  if probe().cgroup.is_none() {
    assert!(r.degraded.iter().any(|d| d.starts_with("cgroup")), "{r:?}");
  }
  let d = finn_sandbox::core::isolate::doctor(finn_sandbox::core::isolate::probe());
  assert!(d.ms < 50.0, "doctor from cached probes: {} ms", d.ms);
  assert!(
    d.layers.iter().all(|l| l.available || l.reason.is_some()),
    "{d:?}"
  );
}

/// Runs `script` under a plan with only the given layers (to test one layer on its own).
fn sh_with_layers(cwd: &Path, layers: finn_sandbox::core::isolate::Layers, script: &str) -> Ran {
  let opts =
    IsolationOptions::from_json(json!({"mode": "auto", "namespaces": {"pid": true}})).unwrap();
  let plan = Plan {
    layers,
    ..Plan::resolve(&opts, cwd, probe()).unwrap().unwrap()
  };
  let p = Arc::new(prepare(&plan).unwrap());
  let hook = p.clone();
  let mut cmd = Command::new("/bin/bash");
  cmd
    .args(["-c", script])
    .current_dir(cwd)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
  // SAFETY: apply_in_child is async-signal-safe.
  unsafe {
    cmd.pre_exec(move || hook.apply_in_child().map_err(std::io::Error::from));
  }
  let out = cmd.output().unwrap();
  Ran {
    status: out.status,
    stderr: String::from_utf8_lossy(&out.stderr).into(),
    prepared: Some(p),
  }
}

#[test]
fn pid_namespace_ends_setsid_children_and_hides_outside_processes() {
  use finn_sandbox::core::isolate::Layers;
  use std::os::unix::process::ExitStatusExt;
  if !can_ns() {
    let opts =
      IsolationOptions::from_json(json!({"mode": "auto", "namespaces": {"pid": true}})).unwrap();
    assert!(
      Plan::resolve(&opts, Path::new("/tmp"), probe()).is_err(),
      "an asked-for pidns is refused, not faked"
    );
    return;
  }
  let only_pidns = Layers {
    mountns: true,
    pidns: true,
    userns: !probe().sys_admin,
    ..Layers::default()
  };
  for pidns in [false, true] {
    let j = jail();
    let token = format!("3600.{}{}", std::process::id(), rand_suffix());
    let victim_token = format!("sk-{}", rand_suffix());
    let mut v = victim(&victim_token);
    let script = format!(
      "setsid sleep {token} >/dev/null 2>&1 & cat /proc/{}/environ > leak; exit 7",
      v.id()
    );
    let r = if pidns {
      sh_with_layers(&j.root, only_pidns, &script)
    } else {
      sh(&off(), &j.root, &script)
    };
    assert_eq!(
      r.status.code(),
      Some(7),
      "the exit status passes through the waiter: {}",
      r.stderr
    );
    // The command has exited; with a pid namespace the kernel has already killed the rest of it.
    // Without one the sleeper lives on: looked for until it shows, since a scan that meets it
    // inside execve reads an empty command line (that missed it in 1 run of 10).
    let mut left = pids_with(&token);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !pidns && left.is_empty() && std::time::Instant::now() < until {
      std::thread::sleep(std::time::Duration::from_millis(1));
      left = pids_with(&token);
    }
    let leaked = std::fs::read(j.root.join("leak"))
      .map(|b| String::from_utf8_lossy(&b).contains(&victim_token));
    kill_all(&token);
    v.kill().unwrap();
    v.wait().unwrap();
    assert_eq!(
      left.is_empty(),
      pidns,
      "setsid sleeper after exit: {left:?}"
    );
    assert_eq!(
      leaked.unwrap_or(false),
      !pidns,
      "/proc/<outside pid>/environ: {}",
      r.stderr
    );
  }
  // A signal death passes through too: SIGKILL the command (pid 1 inside, shielded from its own
  // namespace's signals) from the host, as the supervisor would.
  let j = jail();
  let opts =
    IsolationOptions::from_json(json!({"mode": "auto", "namespaces": {"pid": true}})).unwrap();
  let plan = Plan {
    layers: only_pidns,
    ..Plan::resolve(&opts, &j.root, probe()).unwrap().unwrap()
  };
  let p = Arc::new(prepare(&plan).unwrap());
  let mut cmd = Command::new("/bin/bash");
  cmd
    .args(["-c", "echo ready; exec sleep 60"])
    .stdout(Stdio::piped());
  // SAFETY: apply_in_child is async-signal-safe.
  unsafe {
    cmd.pre_exec(move || p.apply_in_child().map_err(std::io::Error::from));
  }
  let mut child = cmd.spawn().unwrap();
  wait_line(&mut child, "ready");
  let waiter = child.id();
  let kids = std::fs::read_to_string(format!("/proc/{waiter}/task/{waiter}/children")).unwrap();
  let command: i32 = kids.split_whitespace().next().unwrap().parse().unwrap();
  nix::sys::signal::kill(
    nix::unistd::Pid::from_raw(command),
    nix::sys::signal::Signal::SIGKILL,
  )
  .unwrap();
  assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
}

/// The path check's race (a check by path leaked 375 times in 39,554 tries of this loop): a host
/// thread swaps `x` between a directory in the jail and a symlink to outside while commands
/// write through `x/`. Landlock checks the path the kernel resolves at open time, so a swap
/// cannot win.
#[test]
fn the_symlink_swap_race_never_escapes() {
  use std::sync::atomic::{AtomicBool, Ordering};
  for (opts, stopped) in settings(json!({})).into_iter().take(2) {
    let j = jail();
    std::fs::create_dir(j.root.join("x")).unwrap();
    std::os::unix::fs::symlink(&j.out, j.root.join("alt")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
      let (stop, root) = (stop.clone(), j.root.clone());
      std::thread::spawn(move || {
        let x = std::ffi::CString::new(root.join("x").to_str().unwrap()).unwrap();
        let alt = std::ffi::CString::new(root.join("alt").to_str().unwrap()).unwrap();
        while !stop.load(Ordering::Relaxed) {
          // SAFETY: renameat2 on two NUL-terminated paths; RENAME_EXCHANGE swaps them atomically.
          unsafe {
            libc::renameat2(
              libc::AT_FDCWD,
              x.as_ptr(),
              libc::AT_FDCWD,
              alt.as_ptr(),
              libc::RENAME_EXCHANGE,
            );
          }
        }
      })
    };
    let escaped = |out: &Path| std::fs::read_dir(out).unwrap().count();
    let mut tries = 0;
    // Isolated: 150 commands of 20 writes each, and none may land outside. Off: the race must
    // be winnable at all, so stop at the first escape (or fail after the same number of tries).
    while tries < 150 && (stopped || escaped(&j.out) == 0) {
      sh(
        &opts,
        &j.root,
        "for i in $(seq 1 20); do echo pwn > x/f$i$RANDOM; done 2>/dev/null",
      );
      tries += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let n = escaped(&j.out);
    if stopped {
      assert_eq!(n, 0, "{opts}: {n} writes escaped in {tries} commands");
    } else {
      assert!(n > 0, "off: the race was never won in {tries} commands");
    }
  }
}

/// A malicious repository: its `core.fsmonitor` and hooks are programs git runs on the agent's
/// behalf. Inside the sandbox they cannot write outside.
#[test]
fn a_malicious_repositorys_fsmonitor_and_hooks_cannot_write_outside() {
  if find_git().is_none() {
    return; // git is not installed: nothing to attack with.
  }
  for (opts, stopped) in settings(json!({})).into_iter().take(2) {
    let j = jail();
    let o = j.out.display();
    let setup = format!(
      "git init -q . && git config user.email a@b && git config user.name a &&
       printf '#!/bin/sh\\necho x > {o}/fsmonitor\\n' > .git/fsm && chmod +x .git/fsm &&
       printf '#!/bin/sh\\necho x > {o}/hook\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"
    );
    // The repository is prepared from the host, as a cloned repository would arrive.
    let r = sh(&off(), &j.root, &setup);
    assert!(r.status.success(), "{}", r.stderr);
    let r = sh(
      &opts,
      &j.root,
      "git -c core.fsmonitor=.git/fsm status >/dev/null; touch f; git add f; git commit -qm m",
    );
    let landed = [
      j.out.join("fsmonitor").exists(),
      j.out.join("hook").exists(),
    ];
    assert_eq!(landed, [!stopped; 2], "{opts}: {}", r.stderr);
  }
}

/// The bind's own race, with the native backend (see the shared body): a start that meets the
/// symlink is refused by ELOOP, or at prepare.
#[test]
fn the_protect_swap_race_never_leaves_hooks_writable() {
  if !can_ns() {
    return; // protect needs the mount namespace (see protected_paths_stay_read_only).
  }
  attacks::the_protect_swap_race_never_leaves_hooks_writable(
    &Native,
    settings(json!({})).into_iter().take(2).collect(),
    SwapRace {
      starts: 150,
      bursts: false,
      relative_alt: false,
      started_means_exit_0: false,
    },
  );
}

/// Landlock (ABI 7) does not cover a file's metadata: chmod, utimes and user xattrs of a file
/// outside the writable roots need no capability from its owner (root's files for root, nobody's
/// own for nobody). The mount namespace makes every mount but the writable roots read-only; without
/// it (`namespaces.mount: false`) these land, as README says.
#[test]
fn metadata_of_outside_files_stays_unchanged() {
  use std::os::unix::fs::{MetadataExt, PermissionsExt};
  for (opts, stopped) in settings(json!({})) {
    let no_mountns = opts["namespaces"]["mount"] == json!(false);
    if no_mountns && !stopped {
      continue;
    }
    let mount_ns = stopped && !no_mountns;
    if mount_ns && !can_ns() {
      continue;
    }
    let j = jail();
    let v = j.out.join("victim");
    std::fs::write(&v, "orig").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(j.root.join("mine"), "data").unwrap();
    let before = std::fs::metadata(&v).unwrap();
    let script = format!(
      "chmod 4777 {v}; touch -d 2001-01-01 {v}; chmod 755 mine; touch -d 2001-01-01 mine",
      v = v.display()
    );
    let r = sh(&opts, &j.root, &script);
    let x = helper(&opts, &j.root, "setxattr", v.to_str().unwrap());
    let after = std::fs::metadata(&v).unwrap();
    let mut buf = [0u8; 16];
    let path = std::ffi::CString::new(v.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of its own length.
    let n = unsafe {
      libc::getxattr(
        path.as_ptr(),
        c"user.finn".as_ptr(),
        buf.as_mut_ptr().cast(),
        buf.len(),
      )
    };
    let escaped: Vec<&str> = [
      ("chmod", after.mode() != before.mode()),
      ("utimes", after.mtime() != before.mtime()),
      ("setxattr", n == 5 && &buf[..5] == b"pwned"),
    ]
    .into_iter()
    .filter_map(|(name, hit)| hit.then_some(name))
    .collect();
    if mount_ns {
      assert!(
        escaped.is_empty(),
        "{opts}: escaped via {escaped:?}; stderr: {} {}",
        r.stderr,
        x.stderr
      );
      // The jail's own files keep their metadata writable (git and npm chmod what they write).
      let mine = std::fs::metadata(j.root.join("mine")).unwrap();
      assert_eq!(mine.mode() & 0o777, 0o755, "{opts}: {}", r.stderr);
    } else {
      // Off, and landlock alone: every change lands (tmpfs /tmp may lack user xattrs).
      assert!(
        escaped.contains(&"chmod") && escaped.contains(&"utimes"),
        "{opts}: {escaped:?}: {} {}",
        r.stderr,
        x.stderr
      );
    }
  }
}

#[test]
fn host_devices_cannot_be_read() {
  attacks::host_devices_cannot_be_read(&Native, settings(json!({})));
}

#[test]
fn an_outside_terminal_cannot_be_read_or_written() {
  attacks::an_outside_terminal_cannot_be_read_or_written(&Native, settings(json!({})));
}

/// pidfds reach an outside process by pid: `pidfd_getfd` steals an fd it holds open (here on a
/// denied file), `pidfd_send_signal` kills it (Node, the supervisor). Landlock's ptrace rule and
/// signal scope refuse both.
#[test]
fn pidfds_cannot_steal_fds_or_signal_outside() {
  for (opts, stopped) in settings(json!({})) {
    let j = jail();
    let secret_file = j.out.join("secret");
    let token = format!("sk-{}", rand_suffix());
    std::fs::write(&secret_file, &token).unwrap();
    let mut deny = opts.clone();
    merge(
      &mut deny,
      &json!({"fs": {"denyRead": [secret_file.to_str().unwrap()]}}),
    );
    // The victim holds the secret open on fd 3.
    let f = std::fs::File::open(&secret_file).unwrap();
    let mut cmd = Command::new("sleep");
    cmd.arg("60").stdin(Stdio::null());
    {
      use std::os::fd::AsRawFd;
      let raw = f.as_raw_fd();
      // SAFETY: dup2 in the child before exec.
      unsafe {
        cmd.pre_exec(move || {
          if libc::dup2(raw, 3) < 0 || libc::fcntl(3, libc::F_SETFD, 0) < 0 {
            return Err(std::io::Error::last_os_error());
          }
          Ok(())
        });
      }
    }
    let mut v = cmd.spawn().unwrap();
    drop(f);
    let pid = v.id();
    let r = helper(&deny, &j.root, "pidfd-getfd", &format!("{pid}:3"));
    let stolen = std::fs::read_to_string(j.root.join("stolen")).unwrap_or_default();
    assert_eq!(
      stolen.contains(&token),
      !stopped,
      "{deny}: pidfd_getfd: {}",
      r.stderr
    );
    let r = helper(&opts, &j.root, "pidfd-kill", &pid.to_string());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let dead = matches!(v.try_wait(), Ok(Some(_)));
    assert_eq!(dead, !stopped, "{opts}: pidfd_send_signal: {}", r.stderr);
    let _ = v.kill();
    let _ = v.wait();
  }
}

/// NOT STOPPED (README says so): `protect` keeps `.git/config` and `.git/hooks` read-only, but a
/// new file `.git/commondir` (not there to bind over, and `.git` itself must stay writable for
/// git) points git at a directory the command made, whose `config` and `hooks` git then uses. The
/// next git run outside the sandbox (the operator's `git status`) runs the command's fsmonitor.
/// ToolSandbox pins `GIT_COMMON_DIR` for the git it runs; a plain `git` on the host does not.
#[test]
fn a_commondir_file_redirects_git_past_protect() {
  if find_git().is_none() || !can_ns() {
    return;
  }
  for (opts, _stopped) in settings(json!({})).into_iter().take(2) {
    let j = jail();
    let r = sh(
      &off(),
      &j.root,
      "git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m",
    );
    assert!(r.status.success(), "{}", r.stderr);
    let marker = j.out.join("pwned");
    let r = sh(
      &opts,
      &j.root,
      &format!(
        "mkdir evil && cp -r .git/. evil/ &&
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {m}; false\"\\n' > evil/config &&
         echo ../evil > .git/commondir",
        m = marker.display()
      ),
    );
    // The host's own git, later, outside any sandbox.
    let _ = sh(&off(), &j.root, "git status >/dev/null 2>&1");
    assert!(
      marker.exists(),
      "{opts}: the redirect is expected to land (README): {}",
      r.stderr
    );
  }
}

/// The i386 syscall ABI (`int 0x80`) from inside: seccomp's arch check kills the process rather
/// than let numbers it does not filter through.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_i386_syscall_abi_is_killed() {
  use std::os::unix::process::ExitStatusExt;
  for (opts, stopped) in settings(json!({})) {
    let j = jail();
    let r = helper(&opts, &j.root, "int80", "");
    let sig = r.status.signal();
    if stopped {
      assert_eq!(
        sig,
        Some(libc::SIGSYS),
        "{opts}: {:?} {}",
        r.status,
        r.stderr
      );
    } else {
      assert!(r.status.success(), "off: {:?} {}", r.status, r.stderr);
    }
  }
}

/// A `denyRead` path created by the host while the job runs: landlock carves the missing path
/// too, so it stays unreadable under every isolated setting.
#[test]
fn a_denied_path_created_during_the_job_stays_unreadable() {
  attacks::a_denied_path_created_during_the_job(&Native, settings(json!({})));
}

/// A repository without `.git/hooks`: the protect bind has nothing to cover.
#[test]
fn a_missing_hooks_directory_cannot_be_created_with_a_hook() {
  if find_git().is_none() || !can_ns() {
    return;
  }
  attacks::a_missing_hooks_directory_cannot_be_created_with_a_hook(
    &Native,
    settings(json!({})).into_iter().take(2).collect(),
  );
}

/// With `extensions.worktreeConfig` (what `git sparse-checkout init` sets), git also reads
/// `.git/config.worktree`: the next git outside the sandbox would run the fsmonitor the command
/// wrote there, past the `.git/config` protect.
#[test]
fn config_worktree_is_protected_like_config() {
  if find_git().is_none() || !can_ns() {
    return;
  }
  for (opts, stopped) in settings(json!({})).into_iter().take(2) {
    let j = jail();
    let r = sh(
      &off(),
      &j.root,
      "git init -q . && git config extensions.worktreeConfig true && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m",
    );
    assert!(r.status.success(), "{}", r.stderr);
    let marker = j.out.join("pwned");
    let r = sh(
      &opts,
      &j.root,
      &format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {m}; false\"\\n' >> .git/config.worktree",
        m = marker.display()
      ),
    );
    let _ = sh(&off(), &j.root, "git status >/dev/null 2>&1");
    assert_eq!(marker.exists(), !stopped, "{opts}: {}", r.stderr);
    // git still works on the repository afterwards.
    let r = sh(&off(), &j.root, "git status >/dev/null");
    assert!(r.status.success(), "{opts}: {}", r.stderr);
  }
}

/// Resource limits and scheduling of an outside process of the same uid (Node, the supervisor):
/// `prlimit` (RLIMIT_CPU 1 kills it once it has run a second), `renice`, `taskset`, `ionice`.
/// Landlock's scopes do not cover these calls; seccomp refuses them for any pid but the caller's.
#[test]
fn limits_and_scheduling_of_an_outside_process_stay_unchanged() {
  for (opts, stopped) in settings(json!({})) {
    let j = jail();
    let mut v = victim(&format!("sk-{}", rand_suffix()));
    let pid = v.id();
    let limits = || std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let affinity = || proc_field(pid, "Cpus_allowed_list:");
    let (l0, s0, a0) = (limits(), stat(), affinity());
    let nice = |s: &str| {
      s.rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(16)
        .unwrap()
        .to_string()
    };
    // The victim inherits this test's nice value, which may already be 19 (CI runs so): then
    // the attack asks for 18, which only root may set, so only root can show it working.
    let n0: i32 = nice(&s0).parse().unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (target, can_renice) = if n0 < 19 { (19, true) } else { (18, root) };
    let r = sh(
      &opts,
      &j.root,
      &format!(
        "prlimit --pid {pid} --cpu=1:1 --nofile=3:3; renice -n {target} -p {pid}; taskset -pc 0 {pid}; ionice -c 3 -p {pid}"
      ),
    );
    let ionice = Command::new("ionice")
      .args(["-p", &pid.to_string()])
      .output()
      .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
      .unwrap_or_default();
    let (l1, s1, a1) = (limits(), stat(), affinity());
    v.kill().unwrap();
    v.wait().unwrap();
    let changed: Vec<&str> = [
      ("prlimit", l1 != l0),
      ("renice", nice(&s1) != nice(&s0)),
      ("taskset", a1 != a0 && a0.contains('-')),
      ("ionice", ionice.contains("idle")),
    ]
    .into_iter()
    .filter_map(|(n, hit)| hit.then_some(n))
    .collect();
    if stopped {
      assert!(
        changed.is_empty(),
        "{opts}: changed {changed:?}: {}",
        r.stderr
      );
      // The command's own limits and priority stay its own to change.
      let own = sh(
        &opts,
        &j.root,
        "ulimit -S -n 100 && nice -n 5 true && taskset -c 0 true && ionice -c 3 true",
      );
      assert!(own.status.success(), "{opts}: {}", own.stderr);
    } else {
      assert!(
        changed.contains(&"prlimit") && changed.contains(&"renice") == can_renice,
        "off: {changed:?}: {}",
        r.stderr
      );
    }
  }
}

/// System V IPC outside: not files, so landlock does not see it; seccomp and the IPC namespace
/// must.
#[test]
fn an_outside_sysv_shared_memory_segment_stays_out_of_reach() {
  attacks::an_outside_sysv_shared_memory_segment_stays_out_of_reach(
    &Native,
    settings(json!({})),
    0x4649_0000,
  );
}

/// Every mount is read-only but the writable roots: a writable root that is a file stays
/// writable (bound back like a directory).
#[test]
fn a_writable_file_root_stays_writable() {
  for (opts, _stopped) in settings(json!({})) {
    let j = jail();
    let log = j.out.join("log");
    std::fs::write(&log, "").unwrap();
    let mut o = opts.clone();
    merge(
      &mut o,
      &json!({"fs": {"writable": [j.root.to_str().unwrap(), log.to_str().unwrap()]}}),
    );
    let r = sh(
      &o,
      &j.root,
      &format!("echo line >> {}; echo x > mine", log.display()),
    );
    assert_eq!(
      std::fs::read_to_string(&log).unwrap(),
      "line\n",
      "{o}: {}",
      r.stderr
    );
    assert!(exists(&j.root.join("mine")), "{o}: {}", r.stderr);
  }
}

/// The host's view of the network namespace `net`: its links, addresses and a sysctl, read by
/// `ip` and `cat` started in it.
fn view_of(net: &finn_sandbox::core::isolate::SharedNet) -> String {
  use std::os::fd::AsRawFd;
  let fd = net.as_fd().as_raw_fd();
  let mut cmd = Command::new("/bin/sh");
  cmd.args([
    "-c",
    "ip -o link show; ip -o addr show; ip route show table all; \
     cat /proc/sys/net/ipv4/ping_group_range /proc/sys/net/ipv4/ip_unprivileged_port_start",
  ]);
  // SAFETY: setns on an fd this process holds; no allocation.
  unsafe {
    cmd.pre_exec(move || {
      if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
        return Err(std::io::Error::last_os_error());
      }
      Ok(())
    });
  }
  let out = cmd.output().unwrap();
  assert!(out.status.success(), "{out:?}");
  String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Jobs of one reaper enter the same network namespace (`SharedNet`), so one job must leave
/// nothing in it that the next could see. Job A, uid 0 with its capabilities dropped, with
/// landlock and seccomp off so that only the namespaces and mounts hold (netlink allowed):
/// brings `lo` up, adds an address and a route, and writes the namespace's sysctls, through the
/// host's `/proc` (made read-only by the mount namespace) and through a pid namespace's fresh
/// `/proc`. The host then finds the namespace as it was made.
#[test]
fn a_shared_network_namespace_keeps_nothing_of_one_job_for_the_next() {
  use finn_sandbox::core::isolate::{Layers, SharedNet};
  if !probe().sys_admin {
    // SharedNet is made only by a reaper with CAP_SYS_ADMIN; without it each job makes its
    // own network namespace inside its own user namespace.
    assert!(SharedNet::new().is_err(), "made without CAP_SYS_ADMIN");
    return;
  }
  if !Path::new("/usr/sbin/ip").exists() && !Path::new("/sbin/ip").exists() {
    eprintln!("skipped: no `ip` (iproute2) to attack and inspect the namespace with");
    return;
  }
  let net = SharedNet::new().unwrap();
  let pristine = view_of(&net);
  assert!(pristine.contains("lo:"), "{pristine}");
  let ns = Layers {
    mountns: true,
    netns: true,
    ..Layers::default()
  };
  let attack = "export PATH=/usr/sbin:/usr/bin:/sbin:/bin; readlink /proc/self/ns/net >&2; \
    ip link set lo up; ip addr add 10.77.0.1/8 dev lo; ip route add 10.78.0.0/16 dev lo; \
    ip link add finn0 type dummy; \
    echo '0 2147483647' > /proc/sys/net/ipv4/ping_group_range; \
    echo 80 > /proc/sys/net/ipv4/ip_unprivileged_port_start; \
    echo 1 > /proc/sys/net/ipv4/conf/all/forwarding; exit 0";
  for layers in [ns, Layers { pidns: true, ..ns }] {
    let j = jail();
    let opts = IsolationOptions::from_json(json!({"mode": "auto", "network": "allow",
      "namespaces": {"pid": layers.pidns, "net": true}}))
    .unwrap();
    let plan = Plan {
      layers,
      ..Plan::resolve(&opts, &j.root, probe()).unwrap().unwrap()
    };
    let mut p = prepare(&plan).unwrap();
    assert!(p.may_share_net(), "{layers:?}");
    p.enter_net(&net);
    let p = Arc::new(p);
    let hook = p.clone();
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", attack]).current_dir(&j.root);
    // SAFETY: apply_in_child is async-signal-safe.
    unsafe {
      cmd.pre_exec(move || hook.apply_in_child().map_err(std::io::Error::from));
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
      stderr.starts_with(&format!("net:[{}]", net.inode())),
      "the job ran in the shared namespace: {stderr}"
    );
    assert_eq!(
      view_of(&net),
      pristine,
      "{layers:?}: the next job would see this; the job said: {stderr}"
    );
  }
}

/// A job that could write the network namespace's sysctls does not share one: without a mount
/// namespace `/proc/sys` is writable for uid 0, and with `/proc` among the writable roots too.
#[test]
fn a_job_that_could_change_a_shared_network_namespace_makes_its_own() {
  use finn_sandbox::core::isolate::Layers;
  let j = jail();
  let opts = IsolationOptions::from_json(json!({"mode": "auto", "namespaces": {"net": true}}));
  let Ok(Some(plan)) = Plan::resolve(&opts.unwrap(), &j.root, probe()) else {
    assert!(!can_ns(), "a network namespace can be made here");
    return;
  };
  let with = |layers: Layers, writable: &[&str]| {
    let mut plan = Plan {
      layers,
      ..plan.clone()
    };
    plan
      .writable
      .extend(writable.iter().map(std::path::PathBuf::from));
    prepare(&plan).unwrap().may_share_net()
  };
  let ns = Layers {
    netns: true,
    mountns: true,
    userns: plan.layers.userns,
    ..Layers::default()
  };
  assert_eq!(with(ns, &[]), !plan.layers.userns);
  assert!(!with(
    Layers {
      mountns: false,
      ..ns
    },
    &[]
  ));
  for writable in ["/", "/proc", "/proc/sys/net"] {
    assert!(!with(ns, &[writable]), "{writable}");
  }
  assert!(!with(Layers { netns: false, ..ns }, &[]));
}

/// A preparation whose pid namespace is made at the fork refuses to start a child that the fork
/// did not make pid 1 of it (a start path that forked the usual way, or after the guard was
/// dropped): that child would mount the /proc of the namespace it is in, the host's.
#[test]
fn a_pid_namespace_asked_of_the_fork_refuses_a_child_outside_it() {
  if !probe().sys_admin {
    // Inside a user namespace the child makes the pid namespace itself; nothing is asked of
    // the fork.
    return;
  }
  let j = jail();
  let opts = IsolationOptions::from_json(json!({"mode": "auto", "namespaces": {"pid": true}}));
  let plan = Plan::resolve(&opts.unwrap(), &j.root, probe())
    .unwrap()
    .unwrap();
  let mut p = prepare(&plan).unwrap();
  let guard = p.pid_namespace_at_fork().expect("made at the fork as root");
  drop(guard);
  let p = Arc::new(p);
  let mut cmd = Command::new("/bin/true");
  cmd.current_dir(&j.root);
  // SAFETY: apply_in_child is async-signal-safe.
  unsafe {
    cmd.pre_exec(move || p.apply_in_child().map_err(std::io::Error::from));
  }
  // std's pre_exec passes on the errno alone (the reaper's start path reports the layer too).
  let err = cmd.status().expect_err("refused before exec");
  assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
}
