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
