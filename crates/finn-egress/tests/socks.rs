//! SOCKS5 on the proxy: how a command that reaches the proxy only through a pathname Unix
//! socket names its destination. The same leaks as through CONNECT are tests here (unlisted
//! names, ports and IP literals, a server name or Host that disagrees with the target, a relay
//! inside the tunnel), plus what SOCKS adds (BIND, UDP ASSOCIATE, plain HTTP on a tunnel,
//! malformed negotiation). Every refusal is judged from the server's side, as in `proxy.rs`.
//! Then curl and git, driven through the proxy on a pathname Unix socket.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;
use finn_egress::Decision;
use finn_egress::sni::client_hello_bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A SOCKS5 destination as the client writes it.
enum Dest<'a> {
  Name(&'a str),
  V4([u8; 4]),
  V6(Ipv6Addr),
}

fn request(command: u8, dest: &Dest, port: u16) -> Vec<u8> {
  let mut r = vec![5, command, 0];
  match dest {
    Dest::Name(n) => {
      r.push(3);
      r.push(n.len() as u8);
      r.extend_from_slice(n.as_bytes());
    }
    Dest::V4(a) => {
      r.push(1);
      r.extend_from_slice(a);
    }
    Dest::V6(a) => {
      r.push(4);
      r.extend_from_slice(&a.octets());
    }
  }
  r.extend_from_slice(&port.to_be_bytes());
  r
}

/// Greets ("no authentication"), sends the request, gives the reply code.
async fn negotiate<S: AsyncRead + AsyncWrite + Unpin>(c: &mut S, request: &[u8]) -> u8 {
  c.write_all(&[5, 1, 0]).await.unwrap();
  let mut choice = [0u8; 2];
  c.read_exact(&mut choice).await.unwrap();
  assert_eq!(choice, [5, 0]);
  c.write_all(request).await.unwrap();
  let mut reply = [0u8; 10];
  c.read_exact(&mut reply).await.unwrap();
  assert_eq!((reply[0], reply[2]), (5, 0), "{reply:?}");
  reply[1]
}

/// A SOCKS5 CONNECT that succeeds, then `inner`; gives what came back until the close.
async fn through_socks(proxy: SocketAddr, dest: &Dest<'_>, port: u16, inner: &[u8]) -> Vec<u8> {
  let mut c = TcpStream::connect(proxy).await.unwrap();
  assert_eq!(negotiate(&mut c, &request(1, dest, port)).await, 0);
  c.write_all(inner).await.unwrap();
  let mut out = Vec::new();
  read_to_close(&mut c, &mut out).await;
  out
}

/// A request the proxy refuses: its reply code, and that nothing follows it but the close.
async fn refused_code(proxy: SocketAddr, command: u8, dest: &Dest<'_>, port: u16) -> u8 {
  let mut c = TcpStream::connect(proxy).await.unwrap();
  let code = negotiate(&mut c, &request(command, dest, port)).await;
  let mut rest = Vec::new();
  read_to_close(&mut c, &mut rest).await;
  assert!(rest.is_empty(), "{rest:?}");
  code
}

#[tokio::test(flavor = "current_thread")]
async fn socks5_to_an_allowed_name_reaches_its_server_and_is_audited() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), false, true))
    .await;
  let served = server.serve_one();
  let hello = client_hello_bytes(Some("allowed.test"));
  let back = through_socks(proxy, &Dest::Name("Allowed.Test"), server.port(), &hello).await;
  assert_eq!(back, RESPONSE);
  assert_eq!(served.join().unwrap(), hello);
  let r = h.record().await;
  assert_eq!(r.decision, Decision::Allowed);
  assert_eq!(
    (r.kind, r.job.as_str(), r.host.as_str(), r.port),
    ("SOCKS5", "j1", "allowed.test", server.port())
  );
  assert_eq!(r.rule.as_deref(), Some(target.as_str()));
  assert_eq!(r.address, Some(server.addr));
  assert_eq!(r.bytes_down, RESPONSE.len() as u64);
  assert_eq!(r.bytes_up as usize, 3 + 5 + 12 + 2 + hello.len());
}

/// A SOCKS proxy that checks only names lets an IP literal, another port or a local address
/// through.
#[tokio::test(flavor = "current_thread")]
async fn socks5_to_an_unlisted_name_port_or_ip_literal_is_reply_0x02_and_no_connection() {
  let mut h = Harness::new();
  let allowed = Server::on("127.0.0.1");
  let other_port = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let v6 = TcpListener::bind("[::1]:0").ok();
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", allowed.port())], true, true),
    )
    .await;
  let mut cases = vec![
    (Dest::Name("denied.test"), denied.port(), "denied.test"),
    (Dest::V4([127, 0, 0, 2]), denied.port(), "127.0.0.2"),
    (Dest::V4([127, 0, 0, 1]), allowed.port(), "127.0.0.1"),
    (Dest::Name("127.0.0.1"), allowed.port(), "127.0.0.1"),
    (
      Dest::Name("allowed.test"),
      other_port.port(),
      "allowed.test",
    ),
    (
      Dest::Name("sub.allowed.test"),
      allowed.port(),
      "sub.allowed.test",
    ),
  ];
  if let Some(l) = &v6 {
    let port = l.local_addr().unwrap().port();
    cases.push((Dest::V6(Ipv6Addr::LOCALHOST), port, "[::1]"));
    let mapped = "::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap();
    cases.push((Dest::V6(mapped), allowed.port(), "[::ffff:127.0.0.1]"));
  }
  for (dest, port, host) in &cases {
    assert_eq!(refused_code(proxy, 1, dest, *port).await, 2, "{host}");
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
    assert_eq!((r.kind, r.host.as_str(), r.port), ("SOCKS5", *host, *port));
    let reason = r.reason.unwrap();
    assert!(
      reason.contains(&format!("{host}:{port}")) && reason.contains("network.allow"),
      "{reason}"
    );
  }
  assert!(allowed.saw_nothing() && other_port.saw_nothing() && denied.saw_nothing());
  if let Some(l) = v6 {
    let addr = l.local_addr().unwrap();
    assert!(Server { listener: l, addr }.saw_nothing());
  }
}

#[tokio::test(flavor = "current_thread")]
async fn socks5_to_a_listed_name_that_resolves_to_a_local_address_is_refused_without_allow_local() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", server.port())], false, false),
    )
    .await;
  let code = refused_code(proxy, 1, &Dest::Name("allowed.test"), server.port()).await;
  assert_eq!(code, 2);
  let reason = h.record().await.reason.unwrap();
  assert!(
    reason.contains("loopback") && reason.contains("network.allowLocal"),
    "{reason}"
  );
  assert!(server.saw_nothing());
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_hello_naming_another_host_closes_the_socks5_tunnel() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", server.port())], false, true),
    )
    .await;
  for sni in ["denied.test", "allowed.test.evil"] {
    let hello = client_hello_bytes(Some(sni));
    let back = through_socks(proxy, &Dest::Name("allowed.test"), server.port(), &hello).await;
    assert!(back.is_empty(), "{back:?}");
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.unwrap().contains(sni));
  }
  // An IP literal target has no name a ClientHello could match.
  let proxy = h
    .job(
      "j2",
      options(&[format!("127.0.0.1:{}", server.port())], false, true),
    )
    .await;
  let hello = client_hello_bytes(Some("allowed.test"));
  let back = through_socks(proxy, &Dest::V4([127, 0, 0, 1]), server.port(), &hello).await;
  assert!(back.is_empty());
  assert_eq!(h.record().await.decision, Decision::Refused);
  assert!(server.saw_nothing());
}

/// A relay on an allowed host reached through the tunnel: an HTTP proxy there would take a
/// CONNECT or an absolute-form request to anywhere.
#[tokio::test(flavor = "current_thread")]
async fn a_relay_request_inside_a_socks5_tunnel_is_refused_before_anything_is_connected() {
  let mut h = Harness::new();
  let relay = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let target = format!("allowed.test:{}", relay.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), true, true))
    .await;
  let d = format!("denied.test:{}", denied.port());
  for inner in [
    format!("CONNECT {d} HTTP/1.1\r\nHost: {d}\r\n\r\n"),
    format!("CONNECT {d} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    format!("GET http://{d}/ HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    format!("GET http://x@{d}/ HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    format!("GET / HTTP/1.1\r\nHost: {d}\r\n\r\n"),
  ] {
    let back = through_socks(
      proxy,
      &Dest::Name("allowed.test"),
      relay.port(),
      inner.as_bytes(),
    )
    .await;
    let back = String::from_utf8(back).unwrap();
    assert!(
      back.starts_with("HTTP/1.1 403 ") && back.contains("denied.test"),
      "{inner}: {back}"
    );
    assert_eq!(h.record().await.decision, Decision::Refused);
  }
  assert!(relay.saw_nothing() && denied.saw_nothing());
}

/// Through SOCKS, `curl http://..` is plain HTTP on a tunnel: it follows allowPlainHttp as
/// through the HTTP proxy.
#[tokio::test(flavor = "current_thread")]
async fn plain_http_through_socks5_follows_allow_plain_http() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let request = format!("GET /x HTTP/1.1\r\nHost: {target}\r\n\r\n");
  let off = h
    .job("off", options(std::slice::from_ref(&target), false, true))
    .await;
  let back = through_socks(
    off,
    &Dest::Name("allowed.test"),
    server.port(),
    request.as_bytes(),
  )
  .await;
  let back = String::from_utf8(back).unwrap();
  assert!(
    back.starts_with("HTTP/1.1 403 ") && back.contains("network.allowPlainHttp"),
    "{back}"
  );
  let r = h.record().await;
  assert_eq!(
    (r.kind, r.decision),
    ("SOCKS5 plain HTTP", Decision::Refused)
  );
  assert!(server.saw_nothing());
  // A name without a port opens 80 for plain HTTP, 443 for a tunnel, and no other port.
  let portless = h
    .job("portless", options(&["allowed.test".into()], true, true))
    .await;
  let code = refused_code(portless, 1, &Dest::Name("allowed.test"), server.port()).await;
  assert_eq!(code, 2);
  h.record().await;
  assert!(server.saw_nothing());
  let on = h
    .job("on", options(std::slice::from_ref(&target), true, true))
    .await;
  let served = server.serve_one();
  let back = through_socks(
    on,
    &Dest::Name("allowed.test"),
    server.port(),
    request.as_bytes(),
  )
  .await;
  assert_eq!(back, RESPONSE);
  assert_eq!(served.join().unwrap(), request.as_bytes());
  let r = h.record().await;
  assert_eq!(
    (r.kind, r.decision),
    ("SOCKS5 plain HTTP", Decision::Allowed)
  );
}

#[tokio::test(flavor = "current_thread")]
async fn bind_udp_associate_and_unknown_commands_are_reply_0x07() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", server.port())], true, true),
    )
    .await;
  for command in [2u8, 3, 0, 9] {
    let code = refused_code(proxy, command, &Dest::Name("allowed.test"), server.port()).await;
    assert_eq!(code, 7, "command {command}");
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.unwrap().contains("only CONNECT"));
  }
  assert!(server.saw_nothing());
}

#[tokio::test(flavor = "current_thread")]
async fn a_malformed_socks5_negotiation_is_closed() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", server.port())], true, true),
    )
    .await;
  let p = server.port().to_be_bytes();
  let with_port = |head: &[u8]| [head, &p[..]].concat();
  let greeting = [5u8, 1, 0];
  // (what is sent, what comes back before the close)
  let cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
    // No method offered.
    (vec![5, 0], vec![]),
    // No acceptable method: the client is told so.
    (vec![5, 1, 2], vec![5, 0xff]),
    // Requests after a good greeting: wrong version, reserved byte set, an empty name, a name
    // with a space, a name that is a number, an unknown address type.
    (
      [
        &greeting[..],
        &with_port(b"\x04\x01\x00\x01\x7f\x00\x00\x01"),
      ]
      .concat(),
      vec![5, 0],
    ),
    (
      [
        &greeting[..],
        &with_port(b"\x05\x01\x01\x01\x7f\x00\x00\x01"),
      ]
      .concat(),
      vec![5, 0],
    ),
    (
      [&greeting[..], &with_port(b"\x05\x01\x00\x03\x00")].concat(),
      vec![5, 0],
    ),
    (
      [
        &greeting[..],
        &with_port(b"\x05\x01\x00\x03\x0ballowed tes"),
      ]
      .concat(),
      vec![5, 0],
    ),
    (
      [&greeting[..], &with_port(b"\x05\x01\x00\x03\x0a2130706433")].concat(),
      vec![5, 0],
    ),
    (
      [&greeting[..], b"\x05\x01\x00\x05"].concat(),
      vec![5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0],
    ),
  ];
  for (sent, expected) in cases {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(&sent).await.unwrap();
    let mut back = Vec::new();
    read_to_close(&mut c, &mut back).await;
    assert_eq!(back, expected, "{sent:?}");
    assert_eq!(h.record().await.decision, Decision::Refused);
  }
  // A client that closes halfway is recorded and forgotten.
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(&[5, 1]).await.unwrap();
  drop(c);
  assert_eq!(h.record().await.decision, Decision::Refused);
  assert!(server.saw_nothing());
}

// Real clients through the proxy on a pathname Unix socket.

/// Runs a client program off the runtime's thread (the proxy runs on it).
async fn run(cmd: Command) -> Output {
  let mut cmd = cmd;
  for var in [
    "ALL_PROXY",
    "all_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
  ] {
    cmd.env_remove(var);
  }
  cmd.stdin(Stdio::null());
  tokio::task::spawn_blocking(move || cmd.output().expect("the client program runs"))
    .await
    .unwrap()
}

fn curl(sock: &Path, url: &str, extra: &[&str]) -> Command {
  let mut c = Command::new("curl");
  c.args(["-sS", "--max-time", "20", "--proxy"])
    .arg(format!("socks5h://localhost{}", sock.display()))
    .args(extra)
    .arg(url);
  c
}

#[tokio::test(flavor = "current_thread")]
async fn curl_through_a_unix_socket_socks5_proxy_gets_the_allowed_server_and_nothing_else() {
  let dir = tempfile::tempdir().unwrap();
  let mut h = Harness::new();
  let allowed = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let sock = h.job_unix(
    "j1",
    options(&[format!("allowed.test:{}", allowed.port())], true, true),
    dir.path(),
  );
  let served = allowed.serve_one();
  let url = format!("http://allowed.test:{}/hello", allowed.port());
  let out = run(curl(&sock, &url, &[])).await;
  assert!(out.status.success(), "{out:?}");
  assert_eq!(out.stdout, b"server-ok");
  let got = String::from_utf8(served.join().unwrap()).unwrap();
  assert!(got.starts_with("GET /hello HTTP/1.1\r\n"), "{got}");
  let r = h.record().await;
  assert_eq!(
    (r.kind, r.decision),
    ("SOCKS5 plain HTTP", Decision::Allowed)
  );
  for url in [
    format!("http://denied.test:{}/", denied.port()),
    format!("http://127.0.0.2:{}/", denied.port()),
    format!("https://denied.test:{}/", denied.port()),
  ] {
    let out = run(curl(&sock, &url, &["-k"])).await;
    assert!(!out.status.success(), "{url}: {out:?}");
    assert_eq!(h.record().await.decision, Decision::Refused);
  }
  assert!(denied.saw_nothing() && allowed.saw_nothing());
}

/// A TLS server on 127.0.0.1 (openssl s_server with a self-signed certificate for
/// allowed.test), answering one connection with its status page.
struct TlsServer {
  child: std::process::Child,
  port: u16,
}

impl TlsServer {
  fn start(dir: &Path) -> TlsServer {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let made = Command::new("openssl")
      .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
      .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
      .args(["-subj", "/CN=allowed.test", "-keyout"])
      .arg(&key)
      .arg("-out")
      .arg(&cert)
      .stdout(Stdio::null())
      .stderr(Stdio::null())
      .status()
      .expect("openssl runs");
    assert!(made.success());
    let mut child = Command::new("openssl")
      .args([
        "s_server",
        "-accept",
        "127.0.0.1:0",
        "-www",
        "-naccept",
        "1",
      ])
      .arg("-cert")
      .arg(&cert)
      .arg("-key")
      .arg(&key)
      .stdin(Stdio::null())
      .stdout(Stdio::piped())
      .stderr(Stdio::null())
      .spawn()
      .expect("openssl runs");
    // Its first line on stdout, once it listens: `ACCEPT 127.0.0.1:<port>`.
    let mut stdout = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.starts_with(b"ACCEPT") || !line.ends_with(b"\n") {
      assert_eq!(stdout.read(&mut b).unwrap(), 1, "openssl s_server ended");
      if b[0] == b'\n' && !line.starts_with(b"ACCEPT") {
        line.clear();
        continue;
      }
      line.push(b[0]);
    }
    let line = String::from_utf8(line).unwrap();
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    TlsServer { child, port }
  }
}

impl Drop for TlsServer {
  fn drop(&mut self) {
    let _ = self.child.kill();
    let _ = self.child.wait();
  }
}

#[tokio::test(flavor = "current_thread")]
async fn curl_https_through_a_unix_socket_socks5_proxy_reaches_the_allowed_tls_server() {
  let dir = tempfile::tempdir().unwrap();
  let tls = TlsServer::start(dir.path());
  let mut h = Harness::new();
  // Plain HTTP is off: https needs only the tunnel.
  let sock = h.job_unix(
    "j1",
    options(&[format!("allowed.test:{}", tls.port)], false, true),
    dir.path(),
  );
  let url = format!("https://allowed.test:{}/", tls.port);
  let out = run(curl(&sock, &url, &["-k"])).await;
  assert!(out.status.success(), "{out:?}");
  let body = String::from_utf8_lossy(&out.stdout);
  assert!(body.contains("s_server"), "{body}");
  let r = h.record().await;
  assert_eq!((r.kind, r.decision), ("SOCKS5", Decision::Allowed));
  assert_eq!(
    r.address,
    Some(SocketAddr::from(([127, 0, 0, 1], tls.port)))
  );
}

/// A dumb-HTTP git server for `git ls-remote`: `info/refs` lists one branch, `HEAD` points to
/// it; it serves `n` connections.
fn serve_git(server: &Server, n: usize) -> std::thread::JoinHandle<Vec<String>> {
  let listener = server.listener.try_clone().unwrap();
  std::thread::spawn(move || {
    let mut paths = Vec::new();
    for _ in 0..n {
      let (mut s, _) = listener.accept().unwrap();
      let mut got = Vec::new();
      let mut chunk = [0u8; 4096];
      while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let k = s.read(&mut chunk).unwrap();
        if k == 0 {
          break;
        }
        got.extend_from_slice(&chunk[..k]);
      }
      let head = String::from_utf8_lossy(&got).into_owned();
      let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
      let body = if path.starts_with("/repo/info/refs") {
        "0123456789012345678901234567890123456789\trefs/heads/main\n"
      } else if path == "/repo/HEAD" {
        "ref: refs/heads/main\n"
      } else {
        ""
      };
      let status = if body.is_empty() {
        "404 Not Found"
      } else {
        "200 OK"
      };
      let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
      );
      paths.push(path);
    }
    paths
  })
}

#[tokio::test(flavor = "current_thread")]
async fn git_ls_remote_through_a_unix_socket_socks5_proxy_reaches_the_allowed_server_only() {
  let dir = tempfile::tempdir().unwrap();
  let mut h = Harness::new();
  let allowed = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let sock = h.job_unix(
    "j1",
    options(&[format!("allowed.test:{}", allowed.port())], true, true),
    dir.path(),
  );
  let git = |url: String| {
    let mut c = Command::new("git");
    c.env("HOME", dir.path())
      .env("GIT_CONFIG_NOSYSTEM", "1")
      .env("GIT_TERMINAL_PROMPT", "0")
      // A broken proxy that connects to a server that never answers must not hang the test.
      .args(["-c", "http.lowSpeedLimit=1", "-c", "http.lowSpeedTime=20"])
      .arg("-c")
      .arg(format!("http.proxy=socks5h://localhost{}", sock.display()))
      .args(["ls-remote", &url]);
    c
  };
  let version = Command::new("git").arg("--version").output().unwrap();
  let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
  if !git_passes_the_proxy_path(&version) {
    // Older git drops the proxy URL's path and connects to localhost:1080: it gets nowhere.
    let out = run(git(format!("http://allowed.test:{}/repo", allowed.port()))).await;
    assert!(!out.status.success(), "{version}: {out:?}");
    assert!(allowed.saw_nothing());
    eprintln!("{version}: older than 2.47, shown not to reach the proxy");
    return;
  }
  let served = serve_git(&allowed, 2);
  let out = run(git(format!("http://allowed.test:{}/repo", allowed.port()))).await;
  assert!(out.status.success(), "{out:?}");
  assert_eq!(
    String::from_utf8_lossy(&out.stdout),
    "0123456789012345678901234567890123456789\tHEAD\n0123456789012345678901234567890123456789\trefs/heads/main\n"
  );
  let paths = served.join().unwrap();
  assert!(paths[0].starts_with("/repo/info/refs"), "{paths:?}");
  for _ in 0..2 {
    assert_eq!(h.record().await.decision, Decision::Allowed);
  }
  let out = run(git(format!("http://denied.test:{}/repo", denied.port()))).await;
  assert!(!out.status.success(), "{out:?}");
  assert_eq!(h.record().await.decision, Decision::Refused);
  assert!(denied.saw_nothing() && allowed.saw_nothing());
}

/// A client that sends a byte now and then never completes its request; the bound is on the
/// whole request, so it cannot hold a task of the proxy for longer. Time is tokio's paused
/// clock: it advances only while every task waits, so nothing here depends on the machine's
/// speed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_request_dripped_a_byte_at_a_time_is_closed_at_the_first_bytes_bound() {
  use finn_egress::proxy::FIRST_BYTES_TIMEOUT;
  use tokio::time::{Duration, Instant, sleep};
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), true, true))
    .await;
  // An HTTP head, a SOCKS5 greeting offering 255 methods, a ClientHello in a SOCKS5 tunnel.
  let mut tunnel_request = vec![5, 1, 0, 5, 1, 0, 3, 12];
  tunnel_request.extend_from_slice(b"allowed.test");
  tunnel_request.extend_from_slice(&server.port().to_be_bytes());
  let hello = client_hello_bytes(Some("allowed.test"));
  for (opening, drip) in [
    (b"GET / HTTP/1.1\r\nX-Drip: ".to_vec(), b'a'),
    (vec![5, 255], 1),
    ([&tunnel_request[..], &hello[..5]].concat(), 0),
  ] {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(&opening).await.unwrap();
    let started = Instant::now();
    let mut back = Vec::new();
    loop {
      let mut b = [0u8; 64];
      tokio::select! {
        n = c.read(&mut b) => match n {
          // A close with a dripped byte unread is a reset.
          Ok(0) | Err(_) => break,
          Ok(n) => back.extend_from_slice(&b[..n]),
        },
        () = sleep(Duration::from_secs(10)) => {
          assert!(
            started.elapsed() < FIRST_BYTES_TIMEOUT * 4,
            "the proxy still reads a request dripped for {:?}",
            started.elapsed()
          );
          if c.write_all(&[drip]).await.is_err() {
            break;
          }
        }
      }
    }
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.unwrap().contains("within 30 s"));
    // The tunnel's bound starts when the client has its success reply.
    if opening[0] == 5 && opening.len() > 2 {
      assert_eq!(back, [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    }
  }
  assert!(server.saw_nothing());
}

/// Whether `git --version` names 2.47 or later, the first git that passes the proxy URL's path
/// (the socket) on to libcurl.
fn git_passes_the_proxy_path(version: &str) -> bool {
  let numbers: Vec<u32> = version
    .split_whitespace()
    .nth(2)
    .unwrap_or_default()
    .split('.')
    .take(2)
    .map_while(|n| n.parse().ok())
    .collect();
  numbers.as_slice() >= [2, 47].as_slice()
}
