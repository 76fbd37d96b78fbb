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
