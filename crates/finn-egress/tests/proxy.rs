//! The proxy against real servers on 127.0.0.1 and 127.0.0.2 (and ::1), named through `hosts`.
//! Each way a naive allowlist proxy leaks is a test here that such a proxy fails. Every refusal is judged from the server's side: after the proxy's record of
//! the connection (sent once the connection is over), the server's listener holds no
//! connection, accepted or queued.

mod common;

use std::net::TcpListener;
use std::sync::atomic::Ordering;

use common::*;
use finn_egress::Decision;
use finn_egress::sni::client_hello_bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "current_thread")]
async fn an_allowed_plain_http_request_reaches_its_server_in_origin_form() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), true, true))
    .await;
  let served = server.serve_one();
  let reply = exchange(
    proxy,
    format!("GET http://{target}/path?q=1 HTTP/1.1\r\nHost: {target}\r\nProxy-Connection: keep-alive\r\n\r\n").as_bytes(),
  )
  .await;
  assert!(reply.ends_with("server-ok"), "{reply}");
  let got = String::from_utf8(served.join().unwrap()).unwrap();
  assert!(got.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{got}");
  assert!(
    got.contains("Connection: close\r\n") && !got.contains("Proxy-Connection"),
    "{got}"
  );
  let r = h.record().await;
  assert_eq!(r.decision, Decision::Allowed);
  assert_eq!(
    (r.job.as_str(), r.host.as_str(), r.port),
    ("j1", "allowed.test", server.port())
  );
  assert_eq!(r.rule.as_deref(), Some(target.as_str()));
  assert_eq!(r.bytes_down, RESPONSE.len() as u64);
  assert!(r.bytes_up > 0);
  assert_eq!(
    h.resolver.calls.load(Ordering::SeqCst),
    0,
    "hosts entries are used instead of DNS"
  );
}

/// A proxy that filters only CONNECT lets plain HTTP reach any host.
#[tokio::test(flavor = "current_thread")]
async fn plain_http_to_an_unlisted_host_is_refused_in_both_request_forms() {
  let mut h = Harness::new();
  let denied = Server::on("127.0.0.2");
  let allowed = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", allowed.port())], true, true),
    )
    .await;
  let target = format!("denied.test:{}", denied.port());
  for request in [
    format!("GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    format!("GET / HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    // The absolute form names the allowed host, Host the denied one.
    format!(
      "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: {target}\r\n\r\n",
      allowed.port()
    ),
  ] {
    let reply = exchange(proxy, request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{request}: {reply}");
    assert!(reply.contains("denied.test"), "{reply}");
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
  }
  assert!(denied.saw_nothing());
  assert!(allowed.saw_nothing());
}

#[tokio::test(flavor = "current_thread")]
async fn plain_http_is_refused_unless_the_job_allows_it_and_the_403_names_the_rule() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), false, true))
    .await;
  let reply = exchange(
    proxy,
    format!("GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
  )
  .await;
  assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
  assert!(
    reply.contains(&target) && reply.contains("network.allowPlainHttp"),
    "{reply}"
  );
  h.record().await;
  assert!(server.saw_nothing());
}

/// A proxy that checks only the name it is shown, not the port or a literal address, CONNECTs
/// to hosts not on the list.
#[tokio::test(flavor = "current_thread")]
async fn connect_reaches_only_listed_names_and_ports_never_an_unlisted_ip_literal() {
  let mut h = Harness::new();
  let allowed = Server::on("127.0.0.1");
  let other_port = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", allowed.port())], false, true),
    )
    .await;
  for target in [
    format!("denied.test:{}", denied.port()),
    format!("127.0.0.2:{}", denied.port()),
    format!("127.0.0.1:{}", allowed.port()),
    format!("allowed.test:{}", other_port.port()),
    format!("ALLOWED.test.:{}", other_port.port()),
  ] {
    let reply = exchange(
      proxy,
      format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{target}: {reply}");
    assert!(reply.contains("network.allow"), "{reply}");
    assert_eq!(h.record().await.decision, Decision::Refused);
  }
  assert!(allowed.saw_nothing() && other_port.saw_nothing() && denied.saw_nothing());
  // The listed one goes through.
  let served = allowed.serve_one();
  let hello = client_hello_bytes(Some("allowed.test"));
  let back = through_tunnel(proxy, &format!("allowed.test:{}", allowed.port()), &hello).await;
  assert_eq!(back, RESPONSE);
  assert_eq!(served.join().unwrap(), hello);
  let r = h.record().await;
  assert_eq!(r.decision, Decision::Allowed);
  assert_eq!(
    r.bytes_up as usize,
    format!(
      "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
      allowed.port()
    )
    .len()
      + hello.len()
  );
}

#[tokio::test(flavor = "current_thread")]
async fn an_ipv6_loopback_literal_is_refused_unless_listed() {
  let Ok(listener) = TcpListener::bind("[::1]:0") else {
    eprintln!("skipped: this host has no ::1");
    return;
  };
  let addr = listener.local_addr().unwrap();
  let server = Server { listener, addr };
  let mut h = Harness::new();
  let proxy = h
    .job("j1", options(&["allowed.test".into()], true, true))
    .await;
  for request in [
    format!("CONNECT [::1]:{} HTTP/1.1\r\n\r\n", server.port()),
    format!("GET http://[::1]:{}/ HTTP/1.1\r\n\r\n", server.port()),
    format!(
      "CONNECT [::ffff:127.0.0.1]:{} HTTP/1.1\r\n\r\n",
      server.port()
    ),
  ] {
    let reply = exchange(proxy, request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{request}: {reply}");
    h.record().await;
  }
  assert!(server.saw_nothing());
}

/// A CONNECT relay on an allowed host, reached through the tunnel, reaches any host. The
/// proxy reads the tunnel's first bytes before connecting, so not even the allowed server
/// (which would be the relay) sees a connection.
#[tokio::test(flavor = "current_thread")]
async fn a_connect_inside_a_tunnel_is_refused_before_anything_is_connected() {
  let mut h = Harness::new();
  let relay = Server::on("127.0.0.1");
  let denied = Server::on("127.0.0.2");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", relay.port())], false, true),
    )
    .await;
  let inner = format!(
    "CONNECT denied.test:{0} HTTP/1.1\r\nHost: denied.test:{0}\r\n\r\n",
    denied.port()
  );
  let back = String::from_utf8(
    through_tunnel(
      proxy,
      &format!("allowed.test:{}", relay.port()),
      inner.as_bytes(),
    )
    .await,
  )
  .unwrap();
  assert!(
    back.starts_with("HTTP/1.1 403 ") && back.contains("CONNECT"),
    "{back}"
  );
  assert_eq!(h.record().await.decision, Decision::Refused);
  // Sent in pieces, the inner CONNECT is still recognised.
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\nCON", relay.port()).as_bytes())
    .await
    .unwrap();
  let mut established = [0u8; 39];
  c.read_exact(&mut established).await.unwrap();
  c.write_all(format!("NECT denied.test:{} HTTP/1.1\r\n\r\n", denied.port()).as_bytes())
    .await
    .unwrap();
  let mut out = Vec::new();
  read_to_close(&mut c, &mut out).await;
  assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 403 "));
  assert_eq!(h.record().await.decision, Decision::Refused);
  assert!(relay.saw_nothing() && denied.saw_nothing());
}

#[tokio::test(flavor = "current_thread")]
async fn a_host_that_disagrees_with_the_connect_target_is_refused() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), false, true))
    .await;
  // On the CONNECT itself.
  let reply = exchange(
    proxy,
    format!("CONNECT {target} HTTP/1.1\r\nHost: denied.test\r\n\r\n").as_bytes(),
  )
  .await;
  assert!(
    reply.starts_with("HTTP/1.1 403 ") && reply.contains("denied.test"),
    "{reply}"
  );
  h.record().await;
  // On the first request inside the tunnel.
  let back = through_tunnel(
    proxy,
    &target,
    b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
  )
  .await;
  assert!(String::from_utf8_lossy(&back).starts_with("HTTP/1.1 403 "));
  h.record().await;
  // An absolute-form target inside the tunnel names the destination to a relay there.
  let back = through_tunnel(
    proxy,
    &target,
    format!("GET http://denied.test/ HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
  )
  .await;
  assert!(String::from_utf8_lossy(&back).starts_with("HTTP/1.1 403 "));
  h.record().await;
  assert!(server.saw_nothing());
  // A request naming the target goes through.
  let served = server.serve_one();
  let inner = format!("GET / HTTP/1.1\r\nHost: {target}\r\n\r\n");
  assert_eq!(
    through_tunnel(proxy, &target, inner.as_bytes()).await,
    RESPONSE
  );
  assert_eq!(served.join().unwrap(), inner.as_bytes());
  assert_eq!(h.record().await.decision, Decision::Allowed);
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_hello_naming_another_host_is_refused() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("j1", options(std::slice::from_ref(&target), false, true))
    .await;
  for sni in ["denied.test", "allowed.test.evil"] {
    let back = through_tunnel(proxy, &target, &client_hello_bytes(Some(sni))).await;
    assert!(back.is_empty(), "a TLS client is told nothing: {back:?}");
    let r = h.record().await;
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.unwrap().contains(sni));
  }
  // Split across writes, the hello is read whole before the decision.
  let hello = client_hello_bytes(Some("denied.test"));
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
    .await
    .unwrap();
  let mut established = [0u8; 39];
  c.read_exact(&mut established).await.unwrap();
  c.write_all(&hello[..10]).await.unwrap();
  c.flush().await.unwrap();
  c.write_all(&hello[10..]).await.unwrap();
  let mut out = Vec::new();
  read_to_close(&mut c, &mut out).await;
  assert!(out.is_empty());
  assert_eq!(h.record().await.decision, Decision::Refused);
  assert!(server.saw_nothing());
}

/// One proxy for many jobs must not let a job reach what only another job's list opens.
#[tokio::test(flavor = "current_thread")]
async fn jobs_of_one_proxy_each_get_their_own_list() {
  let mut h = Harness::new();
  let a_server = Server::on("127.0.0.1");
  let b_server = Server::on("127.0.0.2");
  let job_a = h
    .job(
      "a",
      options(&[format!("allowed.test:{}", a_server.port())], false, true),
    )
    .await;
  let job_b = h
    .job(
      "b",
      options(&[format!("denied.test:{}", b_server.port())], false, true),
    )
    .await;
  let reply = exchange(
    job_b,
    format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\n", a_server.port()).as_bytes(),
  )
  .await;
  assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
  let r = h.record().await;
  assert_eq!((r.job.as_str(), r.decision), ("b", Decision::Refused));
  let reply = exchange(
    job_a,
    format!("CONNECT denied.test:{} HTTP/1.1\r\n\r\n", b_server.port()).as_bytes(),
  )
  .await;
  assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
  assert_eq!(h.record().await.job, "a");
  assert!(a_server.saw_nothing() && b_server.saw_nothing());
  let served = b_server.serve_one();
  let hello = client_hello_bytes(Some("denied.test"));
  assert_eq!(
    through_tunnel(job_b, &format!("denied.test:{}", b_server.port()), &hello).await,
    RESPONSE
  );
  served.join().unwrap();
  let r = h.record().await;
  assert_eq!((r.job.as_str(), r.decision), ("b", Decision::Allowed));
}

#[tokio::test(flavor = "current_thread")]
async fn local_and_metadata_answers_are_refused_unless_allow_local() {
  let mut resolver = TableResolver::default();
  resolver.table.insert(
    "metadata.test".into(),
    vec!["169.254.169.254".parse().unwrap()],
  );
  resolver.table.insert(
    "rebind.test".into(),
    vec![
      "127.0.0.1".parse().unwrap(),
      "::ffff:127.0.0.1".parse().unwrap(),
    ],
  );
  let mut h = Harness::with_resolver(resolver);
  let server = Server::on("127.0.0.1");
  let allow = [
    format!("allowed.test:{}", server.port()),
    format!("rebind.test:{}", server.port()),
    "metadata.test:80".to_string(),
  ];
  let proxy = h.job("j1", options(&allow, true, false)).await;
  for (request, class) in [
    (
      format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\n", server.port()),
      "loopback",
    ),
    (
      format!("CONNECT rebind.test:{} HTTP/1.1\r\n\r\n", server.port()),
      "loopback",
    ),
    (
      "GET http://metadata.test/latest/meta-data HTTP/1.1\r\n\r\n".to_string(),
      "cloud metadata",
    ),
  ] {
    let reply = exchange(proxy, request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{request}: {reply}");
    assert!(
      reply.contains(class) && reply.contains("network.allowLocal"),
      "{reply}"
    );
    h.record().await;
  }
  assert!(server.saw_nothing());
}

#[tokio::test(flavor = "current_thread")]
async fn a_malformed_request_is_closed_with_a_400() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let proxy = h
    .job(
      "j1",
      options(&[format!("allowed.test:{}", server.port())], true, true),
    )
    .await;
  for request in [
    format!(
      "GET http://allowed.test:{}/ HTTP/1.1\nHost: allowed.test\n\n",
      server.port()
    ),
    "CONNECT allowed.test HTTP/1.1\r\n\r\n".to_string(),
    format!(
      "GET / HTTP/1.1\r\nHost: allowed.test:{0}\r\nHost: allowed.test:{0}\r\n\r\n",
      server.port()
    ),
    format!(
      "GET http://user@allowed.test:{}/ HTTP/1.1\r\n\r\n",
      server.port()
    ),
    "GET / HTTP/1.1\r\n\r\n".to_string(),
  ] {
    let reply = exchange(proxy, request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 400 "), "{request:?}: {reply}");
    assert_eq!(h.record().await.decision, Decision::Refused);
  }
  assert!(server.saw_nothing());
}

/// A client that resets its tunnel in the middle of a download ends the relay with an error in
/// the record, and the proxy lets go of the destination: the server's writes fail.
#[tokio::test(flavor = "current_thread")]
async fn a_client_that_resets_mid_download_ends_the_relay_and_its_destination() {
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("tcp", options(std::slice::from_ref(&target), false, true))
    .await;
  let listener = server.listener.try_clone().unwrap();
  let served = std::thread::spawn(move || {
    use std::io::Write;
    let (mut s, _) = listener.accept().unwrap();
    let chunk = vec![7u8; 1024 * 1024];
    // Writes until the proxy lets go; a relay that held on would keep this loop going.
    while s.write_all(&chunk).is_ok() {}
  });
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
    .await
    .unwrap();
  let mut established = [0u8; 39];
  c.read_exact(&mut established).await.unwrap();
  c.write_all(b"\0first").await.unwrap();
  let mut chunk = vec![0u8; 64 * 1024];
  let mut got = 0;
  while got < 4 * 1024 * 1024 {
    got += c.read(&mut chunk).await.unwrap();
  }
  // A zero linger turns the close into a reset.
  c.set_zero_linger().unwrap();
  drop(c);
  let r = h.record().await;
  assert_eq!(r.decision, Decision::Allowed);
  let reason = r.reason.unwrap_or_default();
  assert!(reason.starts_with("ended by an error"), "{reason}");
  assert!(r.bytes_down >= got as u64, "{} < {got}", r.bytes_down);
  tokio::task::spawn_blocking(move || served.join().unwrap())
    .await
    .unwrap();
}
