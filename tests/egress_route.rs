//! A job with a network allowlist, through the product path: the pool asks the supervisor for
//! the job's channel to the egress proxy, the job's child listens on its own loopback, and its
//! reaper passes each connection to the proxy. Servers on 127.0.0.1 (allowed.test) and
//! 127.0.0.2 (denied.test) stand in for the internet: nothing here sends a byte elsewhere.
//! Every refusal is judged by the server: it accepted no connection.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use finn_sandbox::core::isolate::{IsolationOptions, probe};
use finn_sandbox::core::pool::{JobResult, JobSpec, Pool, PoolConfig, PoolError, RawJob};
use serde_json::{Value, json};
use tokio::runtime::Handle;

/// A plain HTTP server: answers every request with `body`, counting the connections it took.
struct Server {
  port: u16,
  accepted: Arc<AtomicUsize>,
}

impl Server {
  fn start(ip: &str, body: &'static str) -> Server {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
      for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        count.fetch_add(1, Ordering::SeqCst);
        std::thread::spawn(move || {
          let mut head = Vec::new();
          let mut byte = [0u8; 1];
          while !head.ends_with(b"\r\n\r\n") {
            match conn.read(&mut byte) {
              Ok(1) => head.push(byte[0]),
              _ => return,
            }
          }
          let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
          );
          let _ = conn.write_all(reply.as_bytes());
        });
      }
    });
    Server { port, accepted }
  }

  fn accepted(&self) -> usize {
    self.accepted.load(Ordering::SeqCst)
  }
}

fn job(script: &str, cwd: &Path, isolation: Value) -> Result<JobSpec, PoolError> {
  JobSpec::new(RawJob {
    binary_path: "/bin/bash".into(),
    args: vec!["-c".into(), script.into()],
    cwd: cwd.to_str().unwrap().into(),
    env: vec![("PATH".into(), "/usr/bin:/bin:/usr/local/bin".into())],
    isolation: Some(IsolationOptions::from_json(isolation).unwrap()),
    ..RawJob::default()
  })
}

fn pool() -> Pool {
  let config = PoolConfig {
    supervisor: Some(env!("CARGO_BIN_EXE_finn-supervisor").into()),
    ..PoolConfig::default()
  };
  Pool::new(config, Handle::current())
}

async fn run(p: &Pool, job: JobSpec) -> Result<JobResult, PoolError> {
  let s = p.submit(job).unwrap();
  tokio::time::timeout(Duration::from_secs(60), s.result)
    .await
    .expect("settled")
    .expect("a reply")
}

/// Where this host can make no network namespace (no CAP_SYS_ADMIN, no user namespaces) the
/// route cannot exist; those tests skip, saying so.
fn no_route_here() -> bool {
  let p = probe();
  if !p.sys_admin && !p.userns {
    eprintln!(
      "skipped: no network namespace can be made here ({:?})",
      p.userns_reason
    );
    return true;
  }
  false
}

fn network(allowed_port: u16) -> Value {
  json!({
    "allow": [format!("allowed.test:{allowed_port}")],
    "allowPlainHttp": true,
    "allowLocal": true,
    "hosts": { "allowed.test": "127.0.0.1", "denied.test": "127.0.0.2" }
  })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reaches_the_allowed_host_through_the_proxy_and_nothing_else() {
  if no_route_here() {
    return;
  }
  let allowed = Server::start("127.0.0.1", "allowed-body-7f3a");
  let denied = Server::start("127.0.0.2", "denied-body-91c2");
  let p = pool();
  // Every connection's audit entry, as the pool's audit writer would get it.
  let (audit_tx, audit_rx) = std::sync::mpsc::channel::<Value>();
  let audit_tx = std::sync::Mutex::new(audit_tx);
  let (supervisor, _lease) = p.lease_supervisor().unwrap();
  supervisor.set_egress_audit(Arc::new(move |bytes: &[u8]| {
    let v: Value = serde_json::from_slice(bytes).unwrap();
    let _ = audit_tx.lock().unwrap().send(v);
  }));
  let d = tempfile::tempdir().unwrap();
  let script = format!(
    "echo \"proxy=$HTTP_PROXY\"; \
     curl -sS --max-time 20 http://allowed.test:{a}/; echo; \
     curl -sS --max-time 20 -o /dev/null -w 'denied=%{{http_code}}\\n' http://denied.test:{b}/; \
     (exec 3<>/dev/tcp/127.0.0.2/{b}) 2>/dev/null && echo direct-denied-open || echo direct-denied-refused; \
     (exec 3<>/dev/tcp/127.0.0.1/{a}) 2>/dev/null && echo direct-allowed-open || echo direct-allowed-refused",
    a = allowed.port,
    b = denied.port
  );
  let r = run(
    &p,
    job(
      &script,
      d.path(),
      json!({"mode": "auto", "required": true, "network": network(allowed.port)}),
    )
    .unwrap(),
  )
  .await
  .unwrap();
  let out = &r.stdout;
  assert!(
    out.contains("proxy=http://127.0.0.1:3128"),
    "{out}\n{}",
    r.stderr
  );
  assert!(out.contains("allowed-body-7f3a"), "{out}\n{}", r.stderr);
  assert!(out.contains("denied=403"), "{out}\n{}", r.stderr);
  assert!(out.contains("direct-denied-refused"), "{out}");
  assert!(out.contains("direct-allowed-refused"), "{out}");
  assert!(!out.contains("denied-body"), "{out}");
  assert_eq!(denied.accepted(), 0, "the denied server saw a connection");
  assert_eq!(allowed.accepted(), 1, "only the proxy's connection: {out}");
  // One entry per connection through the proxy, each naming the host and the decision.
  let mut entries: Vec<Value> = (0..2)
    .map(|_| audit_rx.recv_timeout(Duration::from_secs(20)).unwrap())
    .collect();
  entries.sort_by_key(|e| {
    e["audit"]["egress"]["host"]
      .as_str()
      .unwrap_or("")
      .to_string()
  });
  assert_eq!(
    entries[0]["audit"]["egress"]["host"], "allowed.test",
    "{entries:?}"
  );
  assert_eq!(entries[0]["audit"]["action"], "allow", "{entries:?}");
  assert_eq!(
    entries[1]["audit"]["egress"]["host"], "denied.test",
    "{entries:?}"
  );
  assert_eq!(entries[1]["audit"]["action"], "deny", "{entries:?}");
  let report = r.isolation.unwrap();
  assert!(report.applied.contains(&"egress"), "{report:?}");
  assert!(report.applied.contains(&"netns"), "{report:?}");
  p.shutdown().await;
}

/// Processes running `finn-supervisor --finn-egress`, of any build: the callers keep those whose
/// parent is their pool's supervisor. By command line only: the proxy makes itself
/// non-dumpable, so as a non-root user its `/proc/<pid>/exe` cannot be read.
fn proxies() -> Vec<i32> {
  let mut out = Vec::new();
  for entry in std::fs::read_dir("/proc").unwrap().flatten() {
    let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
      continue;
    };
    let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
    if cmdline
      .split(|&b| b == 0)
      .any(|arg| arg == b"--finn-egress")
    {
      out.push(pid);
    }
  }
  out
}

/// The proxy is the pool's supervisor's child: started at the first job with an allowlist, and
/// gone, with the supervisor, once the pool is shut down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_starts_with_the_first_allowlist_and_ends_with_the_pool() {
  if no_route_here() {
    return;
  }
  let p = pool();
  let d = tempfile::tempdir().unwrap();
  let r = run(&p, job("true", d.path(), json!({"mode": "auto"})).unwrap())
    .await
    .unwrap();
  assert_eq!(r.exit_code, 0);
  let (supervisor, lease) = p.lease_supervisor().unwrap();
  let sup_pid = supervisor.pid().unwrap();
  let ppid = |pid: i32| -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat
      .rsplit_once(')')?
      .1
      .split_whitespace()
      .nth(1)?
      .parse()
      .ok()
  };
  let ours = |all: Vec<i32>| -> Vec<i32> {
    all
      .into_iter()
      .filter(|&pid| ppid(pid) == Some(sup_pid))
      .collect()
  };
  assert!(ours(proxies()).is_empty(), "no proxy before an allowlist");
  let r = run(
    &p,
    job(
      "true",
      d.path(),
      json!({"mode": "auto", "network": {"allow": ["a.test"]}}),
    )
    .unwrap(),
  )
  .await
  .unwrap();
  assert_eq!(r.exit_code, 0, "{}", r.stderr);
  let started = ours(proxies());
  assert_eq!(started.len(), 1, "one proxy per pool");
  // A second job reuses it.
  run(
    &p,
    job(
      "true",
      d.path(),
      json!({"mode": "auto", "network": {"allow": ["b.test"]}}),
    )
    .unwrap(),
  )
  .await
  .unwrap();
  assert_eq!(ours(proxies()), started, "the same proxy");
  drop((supervisor, lease));
  p.shutdown().await;
  let left: Vec<i32> = proxies()
    .into_iter()
    .filter(|pid| started.contains(pid))
    .collect();
  assert!(left.is_empty(), "the proxy outlived its pool: {left:?}");
}
