//! The proxy as a service: a control socket from its supervisor, one channel per job, the
//! connections passed as fds, audit entries sent back. Here the service runs on a thread and
//! the test plays the supervisor and the reapers; servers are on 127.0.0.1 and 127.0.0.2.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use finn_egress::proxy::Resolve;
use finn_egress::service::{self, seqpacket_pair};
use serde_json::{Value, json};

/// Every name the tests use has a `hosts` entry: any other would be a lookup, which fails here.
struct NoDns;

impl Resolve for NoDns {
  fn resolve(&self, _: &str) -> std::io::Result<Vec<IpAddr>> {
    Err(std::io::Error::new(ErrorKind::NotFound, "no DNS in tests"))
  }
}

fn network(allow: &[String]) -> Value {
  json!({
    "allow": allow, "allowLocal": true,
    "hosts": { "allowed.test": "127.0.0.1", "denied.test": "127.0.0.2" }
  })
}

/// A job as its reaper would hold it: the channel's other end, and a listener standing for the
/// one inside the job's network namespace.
struct JobRoute {
  channel: OwnedFd,
  listener: TcpListener,
}

impl JobRoute {
  fn add(control: &OwnedFd, job: &str, network: Value) -> JobRoute {
    let (mine, proxys) = seqpacket_pair().unwrap();
    let msg = json!({ "addJob": { "job": job, "network": network } }).to_string();
    service::send(control, msg.as_bytes(), Some(proxys.as_raw_fd())).unwrap();
    JobRoute {
      channel: mine,
      listener: TcpListener::bind("127.0.0.1:0").unwrap(),
    }
  }

  /// A connection from the job's command, passed on to the proxy as the reaper would.
  fn connect(&self) -> TcpStream {
    let command = TcpStream::connect(self.listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = self.listener.accept().unwrap();
    service::send(&self.channel, b"c", Some(accepted.as_raw_fd())).unwrap();
    command
  }
}

fn exchange(mut c: TcpStream, request: &str) -> String {
  c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
    .unwrap();
  c.write_all(request.as_bytes()).unwrap();
  let mut out = Vec::new();
  c.read_to_end(&mut out)
    .expect("the proxy answers and closes");
  String::from_utf8_lossy(&out).into_owned()
}

fn next_message(control: &OwnedFd) -> Value {
  let (bytes, _) = service::recv(control.as_raw_fd()).unwrap().unwrap();
  serde_json::from_slice(&bytes).unwrap()
}

fn saw_nothing(l: &TcpListener) -> bool {
  l.set_nonblocking(true).unwrap();
  matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn each_job_s_channel_carries_its_own_list_and_every_connection_is_audited() {
  let (control, egress_end) = seqpacket_pair().unwrap();
  let service = std::thread::spawn(move || service::run(egress_end, None, Arc::new(NoDns)));
  let a_server = TcpListener::bind("127.0.0.1:0").unwrap();
  let b_server = TcpListener::bind("127.0.0.2:0").unwrap();
  let (a_port, b_port) = (
    a_server.local_addr().unwrap().port(),
    b_server.local_addr().unwrap().port(),
  );
  let job_a = JobRoute::add(&control, "a", network(&[format!("allowed.test:{a_port}")]));
  let job_b = JobRoute::add(&control, "b", network(&[format!("denied.test:{b_port}")]));

  // Job b asks for what only job a's list opens.
  let reply = exchange(
    job_b.connect(),
    &format!("CONNECT allowed.test:{a_port} HTTP/1.1\r\n\r\n"),
  );
  assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
  let m = next_message(&control);
  assert_eq!(m["audit"]["action"], "deny", "{m}");
  assert_eq!(m["audit"]["egress"]["job"], "b", "{m}");
  assert_eq!(m["audit"]["args"][1], format!("allowed.test:{a_port}"));
  assert!(saw_nothing(&a_server));
  a_server.set_nonblocking(false).unwrap();

  // Job a gets it, bytes both ways.
  let server = std::thread::spawn(move || {
    let (mut s, _) = a_server.accept().unwrap();
    let mut got = [0u8; 256];
    // The hello is one small record, written whole by the proxy.
    let n = s.read(&mut got).unwrap();
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
      .unwrap();
    got[..n].to_vec()
  });
  let reply = exchange(
    job_a.connect(),
    &format!("GET / HTTP/1.1\r\nHost: allowed.test:{a_port}\r\n\r\n"),
  );
  // Plain HTTP is off for job a: refused, and the server saw nothing yet.
  assert!(reply.contains("allowPlainHttp"), "{reply}");
  assert_eq!(next_message(&control)["audit"]["egress"]["job"], "a");
  let mut c = job_a.connect();
  c.write_all(format!("CONNECT allowed.test:{a_port} HTTP/1.1\r\n\r\n").as_bytes())
    .unwrap();
  let mut established = [0u8; 39];
  c.read_exact(&mut established).unwrap();
  let hello = finn_egress::sni::client_hello_bytes(Some("allowed.test"));
  c.write_all(&hello).unwrap();
  let mut back = Vec::new();
  c.read_to_end(&mut back).unwrap();
  assert_eq!(back, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  assert_eq!(server.join().unwrap(), hello);
  // The record comes once both directions are closed.
  drop(c);
  let m = next_message(&control);
  assert_eq!(m["audit"]["action"], "allow", "{m}");
  assert_eq!(m["audit"]["egress"]["job"], "a");
  assert_eq!(m["audit"]["egress"]["bytesDown"], back.len());
  drop(job_b);
  drop(control);
  service.join().unwrap().unwrap();
  assert!(saw_nothing(&b_server));
}

#[test]
fn a_bad_list_is_refused_naming_the_entry_and_closing_control_ends_the_service() {
  let (control, egress_end) = seqpacket_pair().unwrap();
  let service = std::thread::spawn(move || service::run(egress_end, None, Arc::new(NoDns)));
  let _job = JobRoute::add(&control, "bad", json!({ "allow": ["ok.test", "*"] }));
  let m = next_message(&control);
  assert_eq!(m["refused"]["job"], "bad", "{m}");
  assert!(
    m["refused"]["reason"]
      .as_str()
      .unwrap()
      .starts_with("network.allow[1]: "),
    "{m}"
  );
  drop(control);
  service.join().unwrap().unwrap();
}

/// Where a job has no network namespace, its command reaches the proxy through a pathname Unix
/// socket and speaks SOCKS5 there; the reaper passes each accepted Unix connection on the
/// job's channel as it passes a TCP one.
#[test]
fn a_unix_socket_connection_on_a_job_s_channel_is_served_as_socks5() {
  use std::os::unix::net::{UnixListener, UnixStream};
  let dir = tempfile::tempdir().unwrap();
  let (control, egress_end) = seqpacket_pair().unwrap();
  let service = std::thread::spawn(move || service::run(egress_end, None, Arc::new(NoDns)));
  let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
  let denied = TcpListener::bind("127.0.0.2:0").unwrap();
  let (a_port, d_port) = (
    allowed.local_addr().unwrap().port(),
    denied.local_addr().unwrap().port(),
  );
  let route = JobRoute::add(&control, "u", network(&[format!("allowed.test:{a_port}")]));
  let sock = UnixListener::bind(dir.path().join("egress.sock")).unwrap();
  let connect = || {
    let command = UnixStream::connect(dir.path().join("egress.sock")).unwrap();
    let (accepted, _) = sock.accept().unwrap();
    service::send(&route.channel, b"c", Some(accepted.as_raw_fd())).unwrap();
    command
      .set_read_timeout(Some(std::time::Duration::from_secs(20)))
      .unwrap();
    command
  };
  let socks_request = |name: &str, port: u16| {
    let mut r = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
    r.extend_from_slice(name.as_bytes());
    r.extend_from_slice(&port.to_be_bytes());
    r
  };

  let mut c = connect();
  c.write_all(&socks_request("denied.test", d_port)).unwrap();
  let mut back = Vec::new();
  c.read_to_end(&mut back)
    .expect("the proxy answers and closes");
  assert_eq!(back, [5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
  let m = next_message(&control);
  assert_eq!(m["audit"]["action"], "deny", "{m}");
  assert_eq!(m["audit"]["args"][0], "SOCKS5", "{m}");
  assert_eq!(m["audit"]["args"][1], format!("denied.test:{d_port}"));
  assert!(saw_nothing(&denied));

  let server = std::thread::spawn(move || {
    let (mut s, _) = allowed.accept().unwrap();
    let mut got = [0u8; 256];
    let n = s.read(&mut got).unwrap();
    s.write_all(b"ok").unwrap();
    got[..n].to_vec()
  });
  let mut c = connect();
  c.write_all(&socks_request("allowed.test", a_port)).unwrap();
  let mut reply = [0u8; 12];
  c.read_exact(&mut reply).unwrap();
  assert_eq!(reply, [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
  let hello = finn_egress::sni::client_hello_bytes(Some("allowed.test"));
  c.write_all(&hello).unwrap();
  let mut back = Vec::new();
  c.read_to_end(&mut back).unwrap();
  assert_eq!(back, b"ok");
  assert_eq!(server.join().unwrap(), hello);
  drop(c);
  let m = next_message(&control);
  assert_eq!(m["audit"]["action"], "allow", "{m}");
  assert_eq!(m["audit"]["egress"]["job"], "u");
  drop(route);
  drop(control);
  service.join().unwrap().unwrap();
}
