//! Isolation through the product path: the pool sends the resolved plan to the supervisor's job
//! reaper, which prepares it and applies it between fork and exec. Judged from the host.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::Duration;

use finn_sandbox::core::isolate::{IsolationOptions, probe};
use finn_sandbox::core::pool::{JobResult, JobSpec, Pool, PoolConfig, PoolError, RawJob};
use serde_json::{Value, json};
use tokio::runtime::Handle;

fn job(script: &str, cwd: &Path, isolation: Option<Value>) -> Result<JobSpec, PoolError> {
  JobSpec::new(RawJob {
    binary_path: "/bin/bash".into(),
    args: vec!["-c".into(), script.into()],
    cwd: cwd.to_str().unwrap().into(),
    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
    isolation: isolation.map(|v| serde_json::from_value::<IsolationOptions>(v).unwrap()),
    ..RawJob::default()
  })
}

fn pool(default: Option<Value>) -> Pool {
  let config = PoolConfig {
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    isolation: default.map(|v| IsolationOptions::from_json(v).unwrap()),
    ..PoolConfig::default()
  };
  Pool::new(config, Handle::current())
}

async fn run(p: &Pool, job: JobSpec) -> Result<JobResult, PoolError> {
  let s = p.submit(job).unwrap();
  tokio::time::timeout(Duration::from_secs(20), s.result)
    .await
    .expect("settled")
    .expect("a reply")
}

struct Dirs {
  _t: tempfile::TempDir,
  jail: std::path::PathBuf,
  out: std::path::PathBuf,
}

fn dirs() -> Dirs {
  let t = tempfile::tempdir().unwrap();
  let base = t.path().canonicalize().unwrap();
  let (jail, out) = (base.join("jail"), base.join("out"));
  std::fs::create_dir(&jail).unwrap();
  std::fs::create_dir(&out).unwrap();
  Dirs { _t: t, jail, out }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_applies_the_jobs_isolation_and_reports_it() {
  let p = pool(None);
  for (isolation, stopped) in [
    (None, false),
    (Some(json!({"mode": "off"})), false),
    (Some(json!({"mode": "auto"})), true),
  ] {
    let d = dirs();
    let script = format!(
      "echo x > {}/escaped; echo y > inside; cat /proc/$PPID/environ >/dev/null",
      d.out.display()
    );
    let r = run(&p, job(&script, &d.jail, isolation.clone()).unwrap())
      .await
      .unwrap();
    assert_eq!(
      d.out.join("escaped").exists(),
      !stopped,
      "{isolation:?}: {}",
      r.stderr
    );
    assert!(
      d.jail.join("inside").exists(),
      "{isolation:?}: the jail stays writable: {}",
      r.stderr
    );
    match (&r.isolation, stopped) {
      (Some(rep), true) => {
        assert_eq!(rep.backend, "native");
        assert!(
          rep.applied.contains(&"landlock") && rep.applied.contains(&"seccomp"),
          "{rep:?}"
        );
      }
      (None, false) => {}
      other => panic!("{isolation:?}: report {other:?}"),
    }
  }
  p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_default_applies_to_jobs_without_their_own() {
  let p = pool(Some(json!({"mode": "auto"})));
  let d = dirs();
  let script = format!("echo x > {}/escaped", d.out.display());
  let r = run(&p, job(&script, &d.jail, None).unwrap()).await.unwrap();
  assert!(!d.out.join("escaped").exists(), "{}", r.stderr);
  assert!(r.isolation.is_some());
  // A job's own `mode: "off"` wins over the default.
  let r = run(
    &p,
    job(&script, &d.jail, Some(json!({"mode": "off"}))).unwrap(),
  )
  .await
  .unwrap();
  assert!(d.out.join("escaped").exists(), "{}", r.stderr);
  assert!(r.isolation.is_none());
  p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_isolation_that_cannot_apply_is_refused_with_its_code() {
  let p = pool(None);
  let d = dirs();
  // A pid namespace without a mount namespace (for its /proc) cannot apply on any host.
  let iso = json!({"mode": "auto", "required": true, "namespaces": {"pid": true, "mount": false}});
  let e = run(&p, job("touch ran", &d.jail, Some(iso)).unwrap())
    .await
    .unwrap_err();
  assert_eq!(e.code(), "ISOLATION_UNAVAILABLE", "{e}");
  assert!(e.to_string().contains("pidns"), "{e}");
  assert!(!d.jail.join("ran").exists(), "a refused job never runs");
  // Bad options are refused at submission, naming the field.
  let e = job(
    "true",
    &d.jail,
    Some(json!({"mode": "auto", "limits": {"cpuSeconds": 0}})),
  )
  .unwrap_err();
  assert_eq!(e.code(), "INVALID_SPEC");
  assert!(e.to_string().contains("limits.cpuSeconds"), "{e}");
  p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_in_the_reaper_is_bounded_and_its_cgroup_removed() {
  if probe().cgroup.is_none() {
    return; // Without a cgroup, RLIMIT_NPROC bounds per uid: tests/isolate.rs covers it.
  }
  let p = pool(None);
  let d = dirs();
  let iso = json!({"mode": "auto", "limits": {"maxProcesses": 10}});
  // The command names its own cgroup (a name only; whether it exists is judged from the host),
  // then dash forks until the limit stops it (bash would retry each failed fork for 15 s).
  let script = "grep pids /proc/self/cgroup | cut -d: -f3; \
    exec /bin/sh -c 'i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done' 2>/dev/null";
  let r = run(&p, job(script, &d.jail, Some(iso)).unwrap())
    .await
    .unwrap();
  assert!(r.isolation.unwrap().applied.contains(&"cgroup"));
  let group = Path::new("/sys/fs/cgroup/pids").join(r.stdout.trim().trim_start_matches('/'));
  assert!(
    group.starts_with("/sys/fs/cgroup/pids/finn-sandbox/"),
    "{group:?}"
  );
  // The job settled: its tree is gone and the reaper removed the cgroup before saying so.
  assert!(!group.exists(), "the job's cgroup {group:?} outlived it");
  p.shutdown().await;
}

/// The links, addresses, routes and two sysctls of the network namespace `net`, read by `ip`
/// and `cat` started in it from the host.
fn net_view(net: &std::fs::File) -> String {
  use std::os::fd::AsRawFd;
  use std::os::unix::process::CommandExt;
  let fd = net.as_raw_fd();
  let mut cmd = std::process::Command::new("/bin/sh");
  cmd.args([
    "-c",
    "export PATH=/usr/sbin:/usr/bin:/sbin:/bin; ip -o link show; ip -o addr show; \
     ip route show table all; \
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

/// Sequential jobs of one reaper enter the one network namespace it holds, not the host's; a job
/// that tries to change it (`lo` up, an address, a route, a device, sysctls) as uid 0 with
/// the network allowed leaves it as it was made, for the next job. Judged from the host, in the
/// namespace the reaper holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reapers_jobs_share_one_network_namespace_that_no_job_changes() {
  if !probe().sys_admin {
    eprintln!("skipped: a reaper shares a network namespace only with CAP_SYS_ADMIN");
    return;
  }
  if !Path::new("/usr/sbin/ip").exists() && !Path::new("/sbin/ip").exists() {
    eprintln!("skipped: no `ip` (iproute2) to attack and inspect the namespace with");
    return;
  }
  let p = pool(None);
  let d = dirs();
  let iso = json!({"mode": "auto", "network": "allow", "namespaces": {"net": true}});
  // The reaper is the command's parent (no pid namespace here).
  let who = "echo $PPID $(readlink /proc/self/ns/net)";
  let ran = |r: JobResult| {
    let line = r.stdout.lines().last().unwrap_or_default().to_owned();
    let (reaper, ns) = line.split_once(' ').expect("pid and namespace");
    (reaper.parse::<i32>().unwrap(), ns.to_owned(), r.stderr)
  };
  let (reaper, ns, _) = ran(
    run(&p, job(who, &d.jail, Some(iso.clone())).unwrap())
      .await
      .unwrap(),
  );
  assert_ne!(
    std::fs::read_link("/proc/self/ns/net")
      .unwrap()
      .to_string_lossy(),
    ns,
    "a namespace of the job's own, not the host's"
  );
  // The namespace as the reaper holds it, opened from its fd table.
  let held = std::fs::read_dir(format!("/proc/{reaper}/fd"))
    .unwrap()
    .flatten()
    .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == ns))
    .map(|e| std::fs::File::open(e.path()).unwrap())
    .expect("the reaper holds the job's network namespace");
  let pristine = net_view(&held);
  // It also leaves a `setsid` process behind, holding the namespace.
  let token = format!("3600.{}7", std::process::id());
  let attack = format!(
    "setsid sleep {token} >/dev/null 2>&1 & \
     export PATH=/usr/sbin:/usr/bin:/sbin:/bin; ip link set lo up; \
     ip addr add 10.77.0.1/8 dev lo; ip route add 10.78.0.0/16 dev lo; \
     ip link add finn0 type dummy; echo '0 2147483647' > /proc/sys/net/ipv4/ping_group_range; \
     echo 80 > /proc/sys/net/ipv4/ip_unprivileged_port_start; {who}"
  );
  let (again, ns_again, said) = ran(
    run(&p, job(&attack, &d.jail, Some(iso.clone())).unwrap())
      .await
      .unwrap(),
  );
  assert_eq!(again, reaper, "an idle reaper runs the next job");
  assert_eq!(ns_again, ns, "the reaper's jobs share its namespace");
  assert_eq!(net_view(&held), pristine, "the job said: {said}");
  // Settled: no process is left in the namespace for the next job to meet, the escapee
  // included (by its token, and by every process's namespace).
  assert!(pids_with(&token).is_empty(), "{:?}", pids_with(&token));
  let inside: Vec<i32> = std::fs::read_dir("/proc")
    .unwrap()
    .flatten()
    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    .filter(|pid| {
      std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l.to_string_lossy() == ns)
    })
    .collect();
  assert!(
    inside.is_empty(),
    "processes left in the namespace: {inside:?}"
  );
  p.shutdown().await;
}

/// Pids of processes whose command line holds `token`.
fn pids_with(token: &str) -> Vec<i32> {
  std::fs::read_dir("/proc")
    .unwrap()
    .flatten()
    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    .filter(|pid| {
      std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
    })
    .collect()
}

/// As root the reaper's fork makes a job's pid namespace: the command is pid 1 there and the
/// reaper's own child, with no waiter between them (as non-root, one waiter). Its `setsid` children are gone when the
/// job settles (a /proc scan for their token), its exit status passes through, and the
/// reaper's next fork is back in the host's pid namespace: a job without one sees the host's,
/// and a job with one gets a new one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_namespace_made_at_the_fork_holds_one_job_and_no_more() {
  if !probe().sys_admin && !probe().userns {
    eprintln!("skipped: no pid namespace can be made here (no CAP_SYS_ADMIN, no user namespace)");
    return;
  }
  let p = pool(None);
  let d = dirs();
  let host = std::fs::read_link("/proc/self/ns/pid").unwrap();
  let host = host.to_string_lossy();
  let pidns = json!({"mode": "auto", "namespaces": {"pid": true}});
  // The command's parent is the reaper, whose parent is the supervisor, this process's child.
  let token = format!("3600.{}9", std::process::id());
  let running = p
    .submit(job(&format!("exec sleep {token}"), &d.jail, Some(pidns.clone())).unwrap())
    .unwrap();
  let until = std::time::Instant::now() + Duration::from_secs(10);
  let command = loop {
    if let Some(&pid) = pids_with(&token).first() {
      break pid;
    }
    assert!(
      std::time::Instant::now() < until,
      "the command never showed"
    );
    std::thread::sleep(Duration::from_millis(1));
  };
  let parent = |pid: i32| -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(1).unwrap().parse().unwrap()
  };
  // Inside a user namespace (non-root) the child makes the namespace and a waiter stays
  // between them.
  let waiter = !probe().sys_admin;
  let reaper = if waiter {
    parent(parent(command))
  } else {
    parent(command)
  };
  assert_eq!(
    parent(parent(reaper)),
    std::process::id() as i32,
    "waiter {waiter}: between the command {command} and its reaper {reaper}"
  );
  nix::sys::signal::kill(
    nix::unistd::Pid::from_raw(command),
    nix::sys::signal::Signal::SIGKILL,
  )
  .unwrap();
  let r = tokio::time::timeout(Duration::from_secs(20), running.result)
    .await
    .unwrap()
    .unwrap()
    .unwrap();
  assert_eq!(r.exit_code, 128 + libc::SIGKILL, "{r:?}");
  let mut seen = Vec::new();
  for (i, isolation) in [pidns.clone(), json!({"mode": "auto"}), pidns]
    .into_iter()
    .enumerate()
  {
    let token = format!("3600.{}{i}", std::process::id());
    let script = format!(
      "setsid sleep {token} >/dev/null 2>&1 & echo $$ $(readlink /proc/self/ns/pid); exit 7"
    );
    let r = run(&p, job(&script, &d.jail, Some(isolation.clone())).unwrap())
      .await
      .unwrap();
    assert_eq!(r.exit_code, 7, "{isolation}: {}", r.stderr);
    let line = r.stdout.trim().to_owned();
    let (pid, ns) = line.split_once(' ').expect("pid and namespace");
    let in_pidns = isolation["namespaces"]["pid"] == json!(true);
    if in_pidns {
      assert_eq!(pid, "1", "{isolation}: the command is pid 1: {line}");
      assert_ne!(ns, host, "{isolation}");
      assert!(
        pids_with(&token).is_empty(),
        "the setsid child died with the namespace"
      );
    } else {
      assert_ne!(pid, "1");
      assert_eq!(ns, host, "back in the host's pid namespace: {line}");
      for pid in pids_with(&token) {
        let _ = nix::sys::signal::kill(
          nix::unistd::Pid::from_raw(pid),
          nix::sys::signal::Signal::SIGKILL,
        );
      }
    }
    seen.push(ns.to_owned());
  }
  assert_ne!(seen[0], seen[2], "each job gets a new pid namespace");
  p.shutdown().await;
}
