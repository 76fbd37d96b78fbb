//! The per-exec cost of each isolation layer: N spawns of /bin/true through the fork + pre_exec
//! path, with layers added one at a time. Ignored by default (it measures, it does not test):
//! `cargo test --release --test isolate_cost -- --ignored --nocapture` (FINN_ISO_N=500 to change N).
#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use finn_sandbox::core::isolate::{IsolationOptions, Layers, Plan, prepare, probe};

fn median(mut v: Vec<Duration>) -> f64 {
  v.sort();
  v[v.len() / 2].as_secs_f64() * 1e3
}

#[test]
#[ignore = "measurement; run by hand"]
fn cost_per_layer() {
  let n: usize = std::env::var("FINN_ISO_N")
    .ok()
    .and_then(|s| s.parse().ok())
    .unwrap_or(300);
  let dir = tempfile::tempdir().unwrap();
  let ns = probe().sys_admin || probe().userns;
  let opts = IsolationOptions::from_json(
    serde_json::json!({"mode": "auto", "namespaces": {"net": ns, "pid": ns}}),
  )
  .unwrap();
  let full = Plan::resolve(&opts, dir.path(), probe()).unwrap().unwrap();
  let none = Layers::default();
  let steps: &[(&str, Layers)] = &[
    ("rlimits+privileges+fds", none),
    (
      "+cgroup",
      Layers {
        cgroup: true,
        ..none
      },
    ),
    (
      "+landlock, no denyRead",
      Layers {
        cgroup: true,
        landlock: true,
        ..none
      },
    ),
    (
      "+landlock",
      Layers {
        cgroup: true,
        landlock: true,
        ..none
      },
    ),
    (
      "+seccomp",
      Layers {
        cgroup: true,
        landlock: true,
        seccomp: true,
        ..none
      },
    ),
    (
      "+mountns",
      Layers {
        mountns: true,
        netns: false,
        pidns: false,
        ..full.layers
      },
    ),
    (
      "+pidns",
      Layers {
        netns: false,
        ..full.layers
      },
    ),
    ("+netns (all)", full.layers),
  ];
  println!("| layers | prepare ms | spawn+exec+wait ms | cleanup ms | total over baseline ms |");
  println!("| --- | --- | --- | --- | --- |");
  let mut base = Vec::new();
  for _ in 0..n {
    let t = Instant::now();
    let mut cmd = Command::new("/bin/true");
    cmd
      .current_dir(dir.path())
      .stdin(Stdio::null())
      .stdout(Stdio::null())
      .stderr(Stdio::null());
    // SAFETY: a no-op hook, to stay on the same fork path as the isolated runs.
    unsafe {
      cmd.pre_exec(|| Ok(()));
    }
    assert!(cmd.status().unwrap().success());
    base.push(t.elapsed());
  }
  let base_ms = median(base);
  println!("| none (fork + exec) | 0 | {base_ms:.3} | 0 | 0 |");
  for (name, layers) in steps {
    // Only what this host can apply (as nobody: no cgroup, no namespaces).
    let f = full.layers;
    let (mountns, netns, pidns) = (
      layers.mountns && f.mountns,
      layers.netns && f.netns,
      layers.pidns && f.pidns,
    );
    let layers = &Layers {
      cgroup: layers.cgroup && f.cgroup,
      landlock: layers.landlock && f.landlock,
      seccomp: layers.seccomp && f.seccomp,
      mountns,
      netns,
      pidns,
      // As nobody, the namespaces are made inside a user namespace.
      userns: f.userns && (mountns || netns || pidns),
    };
    if (name.contains("cgroup") && !f.cgroup) || (name.ends_with("ns") && !(f.mountns || f.netns)) {
      println!("| {name} | not on this host | | | |");
      continue;
    }
    let mut plan = Plan {
      layers: *layers,
      ..full.clone()
    };
    if name.contains("no denyRead") {
      plan.deny_read.clear();
    }
    let (mut prep, mut run, mut clean) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
      let t = Instant::now();
      let p = std::sync::Arc::new(prepare(&plan).unwrap());
      prep.push(t.elapsed());
      let t = Instant::now();
      let mut cmd = Command::new("/bin/true");
      cmd
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
      let hook = p.clone();
      // SAFETY: apply_in_child is async-signal-safe: syscalls on data prepared before the fork.
      unsafe {
        cmd.pre_exec(move || hook.apply_in_child().map_err(std::io::Error::from));
      }
      assert!(cmd.status().unwrap().success(), "{name}");
      drop(cmd);
      run.push(t.elapsed());
      let t = Instant::now();
      drop(p); // cgroup removal counts as part of the exec's cost
      clean.push(t.elapsed());
    }
    let (pm, rm, cm) = (median(prep), median(run), median(clean));
    println!(
      "| {name} | {pm:.3} | {rm:.3} | {cm:.3} | {:.3} |",
      pm + rm + cm - base_ms
    );
  }
  let t = Instant::now();
  let d = finn_sandbox::core::isolate::doctor(finn_sandbox::core::isolate::probe());
  println!(
    "doctor(): {:.3} ms (cached probes; reported {:.3} ms)",
    t.elapsed().as_secs_f64() * 1e3,
    d.ms
  );
}

/// Monotonic nanoseconds (vDSO: no syscall, safe between fork and exec).
fn now_ns() -> u64 {
  let mut ts = libc::timespec {
    tv_sec: 0,
    tv_nsec: 0,
  };
  // SAFETY: writes into `ts` on our stack.
  unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
  ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A page shared with the children forked after it is made: where a child writes what it measured.
struct Shared(*mut u64);

impl Shared {
  fn new() -> Shared {
    // SAFETY: a fresh anonymous shared mapping of one page; checked below.
    let p = unsafe {
      libc::mmap(
        std::ptr::null_mut(),
        4096,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED | libc::MAP_ANONYMOUS,
        -1,
        0,
      )
    };
    assert_ne!(p, libc::MAP_FAILED);
    Shared(p.cast())
  }
  fn set(&self, v: u64) {
    // SAFETY: the page is mapped for the life of the process, and u64-aligned.
    unsafe { self.0.write_volatile(v) }
  }
  fn get(&self) -> u64 {
    // SAFETY: as in `set`.
    unsafe { self.0.read_volatile() }
  }
}

fn median_ms(v: &mut [u64]) -> f64 {
  v.sort_unstable();
  v[v.len() / 2] as f64 / 1e6
}

/// Runs `f` in a forked child and returns the nanoseconds the child measured around it (the
/// child `_exit`s right after).
fn in_child(shared: &Shared, f: &dyn Fn() -> bool) -> u64 {
  shared.set(u64::MAX);
  // SAFETY: the child only runs `f` (syscalls on data built before the fork) and `_exit`s.
  match unsafe { libc::fork() } {
    0 => {
      let t = now_ns();
      let ok = f();
      shared.set(now_ns() - t);
      // SAFETY: exits the forked child.
      unsafe { libc::_exit(if ok { 0 } else { 1 }) }
    }
    pid => {
      let mut status = 0;
      // SAFETY: waits for our own child.
      unsafe { libc::waitpid(pid, &mut status, 0) };
      assert_eq!(status, 0, "the measured step failed in the child");
      shared.get()
    }
  }
}

/// The medians of one step's samples, in ms.
#[derive(Clone, Copy, Default)]
struct Step {
  prepare: f64,
  apply: f64,
  job: f64,
  teardown: f64,
}

/// One isolated `/bin/true` in mode `auto` (ToolSandbox's default), and with the pid and net
/// namespaces, taken apart with the crate's own functions on the reaper's path: the layers are
/// added one at a time, and each job is timed in its four parts: the preparation (in the
/// reaper, before the fork), the layers applied in the forked child (timed inside it), the
/// whole job from the preparation to the child reaped, and the teardown. Beside them: the
/// addon's share (the plan and its frame), the start path, and the seccomp programs a reaper
/// and its jobs load. Prints a table and one `BENCH_RESULT` line (for `bench/isolation.js`).
/// Ignored (it measures, it does not test); as root for the cgroup and the namespaces:
/// `cargo test --release --test isolate_cost -- --ignored --exact one_job_layer_by_layer
/// --nocapture` (FINN_ISO_N=300 by default, in 3 interleaved rounds).
#[test]
#[ignore = "measurement; run by hand or by bench/isolation.js"]
fn one_job_layer_by_layer() {
  use finn_sandbox::core::isolate::{guard_helpers, seccomp_instructions};
  use finn_sandbox::core::supervisor::child;
  use finn_sandbox::core::supervisor::shield::{Guard, install_watch, watch_program};
  use std::ffi::CString;
  use std::os::fd::AsRawFd;

  let n: usize = std::env::var("FINN_ISO_N")
    .ok()
    .and_then(|s| s.parse().ok())
    .unwrap_or(300);
  // A pause before each job (FINN_ISO_PAUSE_MS, default none): jobs that come seconds apart, as
  // an agent's do, find the kernel's state cold where jobs back to back find it warm.
  let pause = std::time::Duration::from_millis(
    std::env::var("FINN_ISO_PAUSE_MS")
      .ok()
      .and_then(|s| s.parse().ok())
      .unwrap_or(0),
  );
  let rounds = 3;
  let per_round = n.div_ceil(rounds);
  let load = || {
    std::fs::read_to_string("/proc/loadavg")
      .unwrap_or_default()
      .split(' ')
      .take(3)
      .collect::<Vec<_>>()
      .join(" ")
  };
  let load_start = load();
  let cwd = std::env::temp_dir().canonicalize().unwrap();
  let opts = |v| IsolationOptions::from_json(v).unwrap();
  let auto = opts(serde_json::json!({"mode": "auto"}));
  let full = Plan::resolve(&auto, &cwd, probe()).unwrap().unwrap();
  let with_ns = Plan::resolve(
    &opts(serde_json::json!({"mode": "auto", "namespaces": {"pid": true, "net": true}})),
    &cwd,
    probe(),
  )
  .unwrap()
  .unwrap();
  let (f, w) = (full.layers, with_ns.layers);
  let mut layers = Layers::default();
  // Cumulative, in the order `apply_in_child` applies them; the last two are `+pidns+netns`.
  let mut steps: Vec<(&str, Plan)> = vec![(
    "no layer",
    Plan {
      layers,
      ..full.clone()
    },
  )];
  for (name, add) in [
    (
      "+ cgroup",
      &(|l: &mut Layers| l.cgroup = f.cgroup) as &dyn Fn(&mut Layers),
    ),
    ("+ mount namespace", &|l| {
      l.mountns = f.mountns;
      l.userns = f.userns;
    }),
    ("+ landlock", &|l| l.landlock = f.landlock),
    ("+ seccomp (= `auto`)", &|l| l.seccomp = f.seccomp),
  ] {
    add(&mut layers);
    steps.push((
      name,
      Plan {
        layers,
        ..full.clone()
      },
    ));
  }
  assert_eq!(layers, f, "the steps add up to `auto`");
  layers.pidns = w.pidns;
  layers.userns = w.userns;
  steps.push((
    "+ pid namespace",
    Plan {
      layers,
      ..with_ns.clone()
    },
  ));
  layers.netns = w.netns;
  steps.push((
    "+ net namespace (= `+pidns+netns`)",
    Plan {
      layers,
      ..with_ns.clone()
    },
  ));

  let c = |s: &str| CString::new(s).unwrap();
  let spec = finn_sandbox::core::exec::SpawnSpec {
    program: c("/bin/true"),
    argv: vec![c("/bin/true")],
    env: vec![c("PATH=/usr/bin:/bin")],
    cwd: CString::new(cwd.as_os_str().as_encoded_bytes()).unwrap(),
  };
  let null = std::fs::OpenOptions::new()
    .write(true)
    .open("/dev/null")
    .unwrap();
  let out = null.as_raw_fd();
  let shared = Shared::new();
  let reap = |pid: nix::unistd::Pid| {
    nix::sys::wait::waitpid(pid, None).unwrap();
  };

  // The guard every reaper installs before its first job, and its commands inherit: its load
  // is timed before it is installed here, then it is, so that every job's filter stacks on it
  // as in a reaper.
  let guard_progs = guard_helpers(
    &[std::process::id() as i32],
    // SAFETY: getpgid takes an integer.
    &[unsafe { libc::getpgid(0) }],
  )
  .unwrap();
  let guard = Guard::around_me().unwrap();
  let mut guard_ns: Vec<u64> = (0..per_round)
    .map(|_| in_child(&shared, &|| guard.enter().is_ok()))
    .collect();
  guard.enter().unwrap();
  let watch = watch_program().unwrap();
  // The network namespace a reaper makes once and its jobs enter (where it can make one).
  let net = finn_sandbox::core::isolate::SharedNet::new().ok();

  let mut samples: Vec<[Vec<u64>; 4]> = steps.iter().map(|_| Default::default()).collect();
  let (mut resolve_ns, mut frame_ns, mut spawn_ns, mut fork_ns, mut watch_ns) =
    (vec![], vec![], vec![], vec![], vec![]);
  // Every kind once per iteration, in an order rotated each round (a slow minute of the
  // machine is spread over all of them), with a pause after a network namespace of the job's
  // own: the kernel tears one down on a worker thread after its job, which must not land on the
  // next runs.
  let kinds = steps.len() + 2;
  for round in 0..rounds {
    for _ in 0..per_round {
      for k in (0..kinds).map(|k| (k + round) % kinds) {
        if k < steps.len() {
          std::thread::sleep(pause);
          let (plan, s) = (&steps[k].1, &mut samples[k]);
          let t0 = now_ns();
          let mut prepared = prepare(plan).unwrap();
          let shared_net = match &net {
            Some(net) if prepared.may_share_net() => {
              prepared.enter_net(net);
              true
            }
            _ => false,
          };
          let t1 = now_ns();
          shared.set(u64::MAX);
          // As the reaper does: a pid namespace made by the fork itself.
          let at_fork = prepared.pid_namespace_at_fork();
          let timed = || {
            let t = now_ns();
            let r = prepared.apply_in_child();
            shared.set(now_ns() - t);
            r
          };
          let pid = child::start_with(&spec, out, out, &timed).unwrap();
          drop(at_fork);
          // As the reaper does once the command runs.
          prepared.hold_namespace(pid.as_raw());
          reap(pid);
          let t2 = now_ns();
          drop(prepared);
          let t3 = now_ns();
          s[0].push(t1 - t0);
          s[1].push(shared.get());
          s[2].push(t3 - t0);
          s[3].push(t3 - t2);
          if plan.layers.netns && !shared_net {
            std::thread::sleep(std::time::Duration::from_millis(5));
          }
        } else if k == steps.len() {
          // The addon's share, on the worker thread: the plan (the cwd and the writable roots
          // opened and checked, the deny list resolved) and its trip through the `Run` frame.
          let t = now_ns();
          let p = Plan::resolve(&auto, &cwd, probe()).unwrap().unwrap();
          resolve_ns.push(now_ns() - t);
          let t = now_ns();
          let _back: Plan = serde_json::from_slice(&serde_json::to_vec(&p).unwrap()).unwrap();
          frame_ns.push(now_ns() - t);
          // The watch's load (on the guard): jobs with no landlock signal scope only.
          watch_ns.push(in_child(&shared, &|| install_watch(&watch).is_ok()));
        } else {
          // The start path to /bin/true's exit: posix_spawn (jobs without isolation) and
          // fork + exec (isolated jobs: the layers are applied between the two).
          let t = now_ns();
          reap(child::start(&spec, out, out).unwrap());
          spawn_ns.push(now_ns() - t);
          let t = now_ns();
          reap(child::start_with(&spec, out, out, &|| Ok(())).unwrap());
          fork_ns.push(now_ns() - t);
        }
      }
    }
  }
  let load_end = load();

  let medians: Vec<Step> = samples
    .iter_mut()
    .map(|[p, a, j, t]| Step {
      prepare: median_ms(p),
      apply: median_ms(a),
      job: median_ms(j),
      teardown: median_ms(t),
    })
    .collect();
  // Absolute medians in the JSON (the bench's page takes the differences); the printed
  // table has each row as the difference to the one above, the first absolute.
  let rest = |m: &Step| m.job - m.prepare - m.apply - m.teardown;
  println!(
    "| layers (cumulative) | prepare (reaper) | apply (child) | fork, exec, exit, reap | teardown | job | added |"
  );
  println!("| --- | --- | --- | --- | --- | --- | --- |");
  let mut rows = Vec::new();
  for (i, ((name, _), m)) in steps.iter().zip(&medians).enumerate() {
    let p = if i == 0 {
      Step::default()
    } else {
      medians[i - 1]
    };
    let rest_p = if i == 0 { 0.0 } else { rest(&p) };
    println!(
      "| {name} | {:+.3} | {:+.3} | {:+.3} | {:+.3} | {:.3} | {:+.3} |",
      m.prepare - p.prepare,
      m.apply - p.apply,
      rest(m) - rest_p,
      m.teardown - p.teardown,
      m.job,
      m.job - medians[0].job
    );
    rows.push(serde_json::json!({
      "layers": name,
      "prepareMs": m.prepare,
      "applyMs": m.apply,
      "restMs": rest(m),
      "teardownMs": m.teardown,
      "jobMs": m.job,
    }));
  }
  let others = serde_json::json!({
    "resolveMs": median_ms(&mut resolve_ns),
    "frameMs": median_ms(&mut frame_ns),
    "posixSpawnMs": median_ms(&mut spawn_ns),
    "forkMs": median_ms(&mut fork_ns),
    "guardLoadMs": median_ms(&mut guard_ns),
    "watchLoadMs": median_ms(&mut watch_ns),
  });
  println!("{others}");
  let json = serde_json::json!({
    "n": per_round * rounds,
    "rounds": rounds,
    "loadAvgStart": load_start,
    "loadAvgEnd": load_end,
    "applied": full.report().applied,
    "landlockAbi": full.landlock_abi,
    "programs": {
      "sandbox": seccomp_instructions(),
      "guard": guard_progs.iter().map(Vec::len).collect::<Vec<_>>(),
      "watch": watch.len(),
    },
    "steps": rows,
    "others": others,
  });
  println!("BENCH_RESULT {json}");
}
