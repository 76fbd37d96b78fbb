//! The proxy: one connection from a job's command, checked against that job's allowlist.
//!
//! Which job a connection belongs to is decided by whoever accepts it (each job's route ends
//! on a listener or socket of its own), never by anything the command sends. The proxy reads
//! the request head, checks the destination's name and port against the list, resolves the
//! name itself (`hosts` first), keeps only the addresses the job may reach, and connects only
//! there. A CONNECT tunnel is answered `200` and its first bytes are read before anything is
//! connected: a TLS ClientHello must name the CONNECT target (or no name), an HTTP request
//! must name it in `Host` and must not be another CONNECT. Refusals before the tunnel are an
//! HTTP 403 whose body names the host and the rule; a malformed request is a 400 and a close.
//!
//! A connection whose first byte is `0x05` speaks SOCKS5 (`socks.rs`) instead: its request is
//! checked as above and refused with reply `0x02`, and once the client has its success reply
//! its first bytes decide what it is: an HTTP request is plain HTTP (`allowPlainHttp`, a name
//! without a port opens 80), anything else a tunnel checked as a CONNECT.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at};

use crate::addr::classify;
use crate::head::{self, RequestHead};
use crate::record::{ConnectionRecord, Decision};
use crate::rules::{Host, Kind, Policy, parse_authority};
use crate::sni::{self, Hello};
use crate::socks::{self, Reply};
use crate::splice::{self, Stream};

/// How long a command may take to send a whole request head (or SOCKS5 greeting and request),
/// and then a tunnel's first bytes: a connection that says nothing, or a byte at a time, holds
/// one task of the proxy, and the bound frees it.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the proxy waits for a destination to accept.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The copy buffers of a connection the relay cannot splice, each way. Downloads dominate:
/// tokio's default 8 KiB costs a wake-up per 8 KiB; 128 KiB down keeps a connection at 144 KiB
/// of buffers.
const UP_BUFFER: usize = 16 * 1024;
const DOWN_BUFFER: usize = 128 * 1024;

/// Names to addresses, for names without a `hosts` entry.
pub trait Resolve: Send + Sync + 'static {
  fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>>;
}

/// The host's resolver (getaddrinfo), run on tokio's blocking pool.
pub struct SystemResolver;

impl Resolve for SystemResolver {
  fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
    use std::net::ToSocketAddrs;
    Ok((name, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
  }
}

/// A job as the proxy knows it: its id (for the audit) and its allowlist.
#[derive(Debug)]
pub struct Job {
  pub id: String,
  pub policy: Policy,
}

pub type AuditSink = Arc<dyn Fn(ConnectionRecord) + Send + Sync>;

pub struct Proxy {
  resolver: Arc<dyn Resolve>,
  audit: AuditSink,
}

/// How a connection ends short of a tunnel.
enum Stop {
  /// 403, before the tunnel.
  Refuse(String),
  /// 403 written inside the tunnel: its client speaks HTTP there.
  RefuseInTunnel(String),
  /// Closed without a word: a tunnel that speaks TLS, or a client that is gone.
  RefuseSilently(String),
  /// 400 and a close.
  Malformed(String),
  /// 502: the destination is allowed but could not be reached.
  Unreachable(String),
  /// The client went away.
  Gone(String),
  /// A SOCKS5 answer (a refused method or a reply) and a close.
  Socks(Vec<u8>, String),
  /// SOCKS5 reply `0x04`: the destination is allowed but its name did not resolve.
  SocksUnreachable(String),
}

/// The record's kind of a SOCKS5 connection, and of one whose first bytes are an HTTP request.
const SOCKS: &str = "SOCKS5";
const SOCKS_PLAIN_HTTP: &str = "SOCKS5 plain HTTP";

/// Why an allowed name leads nowhere.
enum Denial {
  /// Only addresses the job may not reach.
  Refused(String),
  /// No answer from `hosts` or the resolver.
  Unresolved(String),
}

/// The text of a refusal by the list.
fn list_refusal(named: &str, kind: Kind, refusal: crate::rules::Refusal) -> String {
  match refusal {
    crate::rules::Refusal::PlainHttpOff => {
      format!("refused {named}: plain HTTP is off for this job (network.allowPlainHttp)")
    }
    crate::rules::Refusal::NotListed => format!(
      "refused {named}: no entry of network.allow opens it for {} (a name without a port opens 443 for CONNECT and 80 for plain HTTP)",
      kind.name()
    ),
  }
}

/// Sends `first` to the destination, then relays both ways until each side has ended: spliced
/// (`splice.rs`) when the client is a socket, copied through buffers otherwise.
async fn relay<S: Stream>(
  client: &mut Counted<S>,
  mut upstream: TcpStream,
  first: &[u8],
  rec: &mut ConnectionRecord,
) {
  rec.address = upstream.peer_addr().ok();
  rec.decision = Decision::Allowed;
  if let Err(e) = upstream.write_all(first).await {
    rec.reason = Some(format!("destination closed: {e}"));
    return;
  }
  // `first` is counted as read from the client already.
  if let Some(socket) = client.inner.socket()
    && let Ok(pipes) = splice::Pipes::new()
  {
    let (mut up, mut down) = (0, 0);
    let r = splice::relay(
      socket,
      splice::Socket::Tcp(&upstream),
      pipes,
      &mut up,
      &mut down,
    )
    .await;
    client.read += up;
    rec.bytes_down = down;
    if let Err(e) = r {
      rec.reason = Some(format!("ended by an error: {e}"));
    }
    return;
  }
  let mut upstream_counted = Counted::new(&mut upstream);
  if let Err(e) =
    tokio::io::copy_bidirectional_with_sizes(client, &mut upstream_counted, UP_BUFFER, DOWN_BUFFER)
      .await
  {
    rec.reason = Some(format!("ended by an error: {e}"));
  }
  rec.bytes_down = upstream_counted.read;
}

impl Proxy {
  pub fn new(resolver: Arc<dyn Resolve>, audit: AuditSink) -> Proxy {
    Proxy { resolver, audit }
  }

  /// Accepts connections for one job until the listener fails.
  pub async fn serve_tcp(self: Arc<Self>, listener: tokio::net::TcpListener, job: Arc<Job>) {
    while let Ok((stream, _)) = listener.accept().await {
      let (proxy, job) = (self.clone(), job.clone());
      tokio::spawn(async move { proxy.handle(stream, &job).await });
    }
  }

  /// One connection from `job`'s command, to its end; its record goes to the audit sink.
  pub async fn handle<S: Stream>(&self, client: S, job: &Job) {
    let started = Instant::now();
    let mut rec = ConnectionRecord {
      job: job.id.clone(),
      kind: "malformed",
      host: String::new(),
      port: 0,
      decision: Decision::Refused,
      rule: None,
      reason: None,
      address: None,
      bytes_up: 0,
      bytes_down: 0,
      duration: Duration::ZERO,
    };
    let mut client = Counted::new(client);
    if let Err(stop) = self.run(&mut client, job, &mut rec).await {
      rec.decision = Decision::Refused;
      let (status, reason) = match stop {
        Stop::Refuse(r) => (Some("403 Forbidden"), r),
        Stop::RefuseInTunnel(r) => (Some("403 Forbidden"), r),
        Stop::Malformed(r) => (Some("400 Bad Request"), r),
        Stop::Unreachable(r) => {
          rec.decision = Decision::Allowed;
          (Some("502 Bad Gateway"), r)
        }
        Stop::RefuseSilently(r) | Stop::Gone(r) => (None, r),
        Stop::Socks(answer, r) => {
          let _ = client.inner.write_all(&answer).await;
          let _ = client.inner.shutdown().await;
          (None, r)
        }
        Stop::SocksUnreachable(r) => {
          rec.decision = Decision::Allowed;
          let _ = client
            .inner
            .write_all(&socks::reply(Reply::HostUnreachable))
            .await;
          let _ = client.inner.shutdown().await;
          (None, r)
        }
      };
      if let Some(status) = status {
        let body = format!("finn-sandbox egress: {reason}\n");
        let response = format!(
          "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
          body.len()
        );
        let _ = client.inner.write_all(response.as_bytes()).await;
        let _ = client.inner.shutdown().await;
      }
      rec.reason = Some(reason);
    }
    rec.bytes_up = client.read;
    rec.duration = started.elapsed();
    (self.audit)(rec);
  }

  async fn run<S: Stream>(
    &self,
    client: &mut Counted<S>,
    job: &Job,
    rec: &mut ConnectionRecord,
  ) -> Result<(), Stop> {
    let deadline = tokio::time::Instant::now() + FIRST_BYTES_TIMEOUT;
    let mut buf = Vec::with_capacity(4096);
    read_more(client, &mut buf, deadline).await?;
    if buf[0] == socks::VERSION {
      return self.run_socks(client, job, rec, buf, deadline).await;
    }
    let head = read_head(client, &mut buf, deadline).await?;
    let (kind, host, port, path) = destination(&head)?;
    rec.kind = kind.name();
    rec.host = host.to_string();
    rec.port = port;
    let named = format!("{host}:{port}");
    let rule = match job.policy.check(&host, port, kind) {
      Ok(rule) => rule.text.clone(),
      Err(refusal) => return Err(Stop::Refuse(list_refusal(&named, kind, refusal))),
    };
    rec.rule = Some(rule.clone());
    let usable = self
      .usable_addresses(&host, &named, &rule, job)
      .await
      .map_err(|d| match d {
        Denial::Refused(r) => Stop::Refuse(r),
        Denial::Unresolved(r) => Stop::Unreachable(r),
      })?;
    let rest = buf[head.len..].to_vec();
    let first = match kind {
      Kind::Connect => {
        client
          .inner
          .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
          .await
          .map_err(|e| Stop::Gone(e.to_string()))?;
        tunnel_first_bytes(client, rest, &host, port).await?.0
      }
      Kind::PlainHttp => {
        let mut out = forwarded_head(&head, &path, &host, port).into_bytes();
        out.extend_from_slice(&rest);
        out
      }
    };
    let upstream = match connect_any(&usable, port).await {
      Ok(u) => u,
      // The tunnel's client already has its 200: a close is all it can be told.
      Err(e) if kind == Kind::Connect => return Err(Stop::Gone(format!("cannot connect: {e}"))),
      Err(e) => return Err(Stop::Unreachable(format!("cannot connect to {named}: {e}"))),
    };
    relay(client, upstream, &first, rec).await;
    Ok(())
  }

  /// A SOCKS5 connection, from its greeting (`buf` holds its first bytes) to its end.
  async fn run_socks<S: Stream>(
    &self,
    client: &mut Counted<S>,
    job: &Job,
    rec: &mut ConnectionRecord,
    mut buf: Vec<u8>,
    deadline: tokio::time::Instant,
  ) -> Result<(), Stop> {
    let malformed = |e: socks::SocksError| Stop::RefuseSilently(e.to_string());
    let (no_auth, used) = loop {
      match socks::greeting(&buf).map_err(malformed)? {
        Some(g) => break g,
        None => read_more(client, &mut buf, deadline).await?,
      }
    };
    let answer = socks::method_choice(no_auth);
    if !no_auth {
      return Err(Stop::Socks(
        answer.to_vec(),
        "refused a SOCKS5 greeting without the method \"no authentication\"".into(),
      ));
    }
    client
      .inner
      .write_all(&answer)
      .await
      .map_err(|e| Stop::Gone(e.to_string()))?;
    buf.drain(..used);
    let request = loop {
      match socks::request(&buf) {
        Ok(Some(r)) => break r,
        Ok(None) => read_more(client, &mut buf, deadline).await?,
        Err(e @ socks::SocksError::AddressType(_)) => {
          return Err(Stop::Socks(
            socks::reply(Reply::AddressTypeNotSupported).to_vec(),
            e.to_string(),
          ));
        }
        Err(e) => return Err(malformed(e)),
      }
    };
    let (host, port) = (request.host, request.port);
    rec.kind = SOCKS;
    rec.host = host.to_string();
    rec.port = port;
    let named = format!("{host}:{port}");
    let not_allowed =
      |reason: String| Stop::Socks(socks::reply(Reply::NotAllowed).to_vec(), reason);
    if request.command != socks::CMD_CONNECT {
      return Err(Stop::Socks(
        socks::reply(Reply::CommandNotSupported).to_vec(),
        format!(
          "refused SOCKS5 command {:#04x} to {named}: only CONNECT is carried",
          request.command
        ),
      ));
    }
    // What the tunnel will carry is not known until the client has its reply, so the list
    // must open the destination for a tunnel or for plain HTTP; the first bytes then decide.
    let as_tunnel = job.policy.check(&host, port, Kind::Connect);
    let as_plain = job.policy.check(&host, port, Kind::PlainHttp);
    let rule = match (&as_tunnel, &as_plain) {
      (Ok(rule), _) | (_, Ok(rule)) => rule.text.clone(),
      (Err(_), Err(_)) => {
        return Err(not_allowed(format!(
          "refused {named}: no entry of network.allow opens it (a name without a port opens 443, and 80 for plain HTTP when network.allowPlainHttp is on)"
        )));
      }
    };
    rec.rule = Some(rule.clone());
    let usable = self
      .usable_addresses(&host, &named, &rule, job)
      .await
      .map_err(|d| match d {
        Denial::Refused(r) => not_allowed(r),
        Denial::Unresolved(r) => Stop::SocksUnreachable(r),
      })?;
    client
      .inner
      .write_all(&socks::reply(Reply::Succeeded))
      .await
      .map_err(|e| Stop::Gone(e.to_string()))?;
    let rest = buf.split_off(request.len);
    let (first, carried) = tunnel_first_bytes(client, rest, &host, port).await?;
    let (kind, check) = match carried {
      Carried::Http => {
        rec.kind = SOCKS_PLAIN_HTTP;
        (Kind::PlainHttp, as_plain)
      }
      Carried::Tls | Carried::Other => (Kind::Connect, as_tunnel),
    };
    match check {
      Ok(rule) => rec.rule = Some(rule.text.clone()),
      Err(refusal) => {
        let reason = list_refusal(&named, kind, refusal);
        return Err(match kind {
          Kind::PlainHttp => Stop::RefuseInTunnel(reason),
          Kind::Connect => Stop::RefuseSilently(reason),
        });
      }
    }
    let upstream = connect_any(&usable, port)
      .await
      .map_err(|e| Stop::Gone(format!("cannot connect: {e}")))?;
    relay(client, upstream, &first, rec).await;
    Ok(())
  }

  /// The addresses of an allowed destination the job may reach: public ones, or local ones
  /// with `allowLocal`.
  async fn usable_addresses(
    &self,
    host: &Host,
    named: &str,
    rule: &str,
    job: &Job,
  ) -> Result<Vec<IpAddr>, Denial> {
    let addresses = self.addresses(host, job).await.map_err(|e| {
      Denial::Unresolved(format!("cannot resolve {host} (allowed by {rule:?}): {e}"))
    })?;
    let (usable, refused): (Vec<IpAddr>, Vec<IpAddr>) = addresses
      .into_iter()
      .partition(|ip| classify(*ip).allowed(job.policy.allow_local));
    if usable.is_empty() {
      let classes: Vec<&str> = refused.iter().map(|ip| classify(*ip).name()).collect();
      return Err(Denial::Refused(format!(
        "refused {named} (allowed by {rule:?}): it resolves only to {} addresses, which network.allowLocal {}",
        if classes.is_empty() {
          "no".to_owned()
        } else {
          classes.join(", ")
        },
        if job.policy.allow_local {
          "does not open"
        } else {
          "is off for"
        }
      )));
    }
    Ok(usable)
  }

  async fn addresses(&self, host: &Host, job: &Job) -> io::Result<Vec<IpAddr>> {
    match host {
      Host::Ip(ip) => Ok(vec![*ip]),
      Host::Name(n) => {
        if let Some(ip) = job.policy.static_address(n) {
          return Ok(vec![ip]);
        }
        let (resolver, name) = (self.resolver.clone(), n.clone());
        tokio::task::spawn_blocking(move || resolver.resolve(&name))
          .await
          .map_err(io::Error::other)?
      }
    }
  }
}

/// Reads what the client sent next; `deadline` bounds the whole of what is being read (a head,
/// a SOCKS5 negotiation, a tunnel's first bytes), not each read.
async fn read_more<S: AsyncRead + Unpin>(
  client: &mut S,
  buf: &mut Vec<u8>,
  deadline: tokio::time::Instant,
) -> Result<(), Stop> {
  let mut chunk = [0u8; 4096];
  match timeout_at(deadline, client.read(&mut chunk)).await {
    Err(_) => Err(Stop::Gone(format!(
      "did not send its request or first bytes within {} s",
      FIRST_BYTES_TIMEOUT.as_secs()
    ))),
    Ok(Err(e)) => Err(Stop::Gone(e.to_string())),
    Ok(Ok(0)) => Err(Stop::Gone("closed before a complete request".into())),
    Ok(Ok(n)) => {
      buf.extend_from_slice(&chunk[..n]);
      Ok(())
    }
  }
}

async fn read_head<S: AsyncRead + Unpin>(
  client: &mut S,
  buf: &mut Vec<u8>,
  deadline: tokio::time::Instant,
) -> Result<RequestHead, Stop> {
  loop {
    match head::parse(buf) {
      Ok(Some(h)) => return Ok(h),
      Ok(None) => read_more(client, buf, deadline).await?,
      Err(e) => return Err(Stop::Malformed(e.to_string())),
    }
  }
}

fn malformed(e: head::HeadError) -> Stop {
  Stop::Malformed(e.to_string())
}

/// Where a request goes: its kind, host, port and, for plain HTTP, the origin-form target.
fn destination(head: &RequestHead) -> Result<(Kind, Host, u16, String), Stop> {
  let host_header = head.header("host").map_err(malformed)?;
  let bad = |why: String| Stop::Malformed(format!("malformed request: {why}"));
  if head.method == "CONNECT" {
    let (host, port) = parse_authority(&head.target).map_err(bad)?;
    let port = port.ok_or_else(|| bad("a CONNECT target without a port".into()))?;
    if let Some(h) = host_header {
      agree(h, &host, port, None)?;
    }
    return Ok((Kind::Connect, host, port, String::new()));
  }
  let target = &head.target;
  let scheme_end = target.find("://");
  if let Some(i) = scheme_end {
    let scheme = target[..i].to_ascii_lowercase();
    if scheme != "http" {
      return Err(Stop::Refuse(format!(
        "refused a {scheme}:// request: only http:// is proxied as plain HTTP (https goes through CONNECT)"
      )));
    }
    let rest = &target[i + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
      return Err(bad("a target with user information".into()));
    }
    let (host, port) = parse_authority(authority).map_err(bad)?;
    let port = port.unwrap_or(80);
    if let Some(h) = host_header {
      agree(h, &host, port, Some(80))?;
    }
    let path = match &rest[end..] {
      "" => "/".to_owned(),
      p if p.starts_with('/') => p.to_owned(),
      p => format!("/{p}"),
    };
    return Ok((Kind::PlainHttp, host, port, path));
  }
  if !target.starts_with('/') {
    return Err(bad(format!(
      "the target {target:?} is neither http://... nor /path"
    )));
  }
  let h = host_header.ok_or_else(|| bad("a request without a destination (no Host)".into()))?;
  let (host, port) = parse_authority(h).map_err(bad)?;
  Ok((Kind::PlainHttp, host, port.unwrap_or(80), target.clone()))
}

/// A `Host` header must name the destination the proxy checked; a port it omits is the
/// scheme's (`default`), or any for CONNECT.
fn agree(value: &str, host: &Host, port: u16, default: Option<u16>) -> Result<(), Stop> {
  let refuse = || {
    Stop::Refuse(format!(
      "refused {host}:{port}: the Host header names {value:?}, not the destination"
    ))
  };
  let (h, p) = parse_authority(value).map_err(|_| refuse())?;
  let port_ok = match (p, default) {
    (Some(p), _) => p == port,
    (None, Some(d)) => d == port,
    (None, None) => true,
  };
  if &h == host && port_ok {
    Ok(())
  } else {
    Err(refuse())
  }
}

/// What a tunnel's first bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
  Tls,
  Http,
  Other,
}

/// Reads a tunnel's first bytes (within [`FIRST_BYTES_TIMEOUT`]) and checks them against its
/// target.
async fn tunnel_first_bytes<S: AsyncRead + Unpin>(
  client: &mut S,
  mut first: Vec<u8>,
  host: &Host,
  port: u16,
) -> Result<(Vec<u8>, Carried), Stop> {
  let deadline = tokio::time::Instant::now() + FIRST_BYTES_TIMEOUT;
  let target = format!("{host}:{port}");
  loop {
    if first.is_empty() {
      read_more(client, &mut first, deadline).await?;
      continue;
    }
    if first[0] == 0x16 {
      match sni::client_hello(&first) {
        Hello::Incomplete => read_more(client, &mut first, deadline).await?,
        Hello::NoSni => return Ok((first, Carried::Tls)),
        Hello::Sni(name) => {
          return match host {
            Host::Name(n) if *n == name.strip_suffix('.').unwrap_or(&name) => {
              Ok((first, Carried::Tls))
            }
            _ => Err(Stop::RefuseSilently(format!(
              "refused the tunnel to {target}: its TLS ClientHello names {name:?}"
            ))),
          };
        }
        Hello::Malformed(why) => {
          return Err(Stop::RefuseSilently(format!(
            "closed the tunnel to {target}: {why}"
          )));
        }
      }
      continue;
    }
    let undecided =
      first.len() < 21 && !first.contains(&b' ') && first.iter().all(u8::is_ascii_uppercase);
    if undecided {
      read_more(client, &mut first, deadline).await?;
      continue;
    }
    if head::request_method(&first).is_none() {
      // Neither TLS nor HTTP: bytes for the allowed host and port, passed on as they are.
      return Ok((first, Carried::Other));
    }
    let inner = loop {
      match head::parse(&first) {
        Ok(Some(h)) => break h,
        Ok(None) => read_more(client, &mut first, deadline).await?,
        Err(e) => {
          return Err(Stop::RefuseInTunnel(format!(
            "closed the tunnel to {target}: {e}"
          )));
        }
      }
    };
    if inner.method == "CONNECT" {
      return Err(Stop::RefuseInTunnel(format!(
        "refused a CONNECT to {} inside the tunnel to {target}",
        inner.target
      )));
    }
    let host_header = inner
      .header("host")
      .map_err(|e| Stop::RefuseInTunnel(format!("closed the tunnel to {target}: {e}")))?;
    // Both name the destination to a server that relays: the Host header and an absolute-form
    // target (which a proxy on the other end reads first).
    let absolute = inner.target.split_once("://").map(|(_, r)| {
      let authority = r.split(['/', '?', '#']).next().unwrap_or(r);
      authority.rsplit_once('@').map_or(authority, |(_, a)| a)
    });
    for value in host_header.into_iter().chain(absolute) {
      agree(value, host, port, Some(port)).map_err(|_| {
        Stop::RefuseInTunnel(format!(
          "refused a request for {value:?} inside the tunnel to {target}"
        ))
      })?;
    }
    return Ok((first, Carried::Http));
  }
}

/// The plain HTTP request as the destination gets it: origin-form, the proxy's own headers
/// removed, one request per connection.
fn forwarded_head(head: &RequestHead, path: &str, host: &Host, port: u16) -> String {
  let mut out = format!("{} {} {}\r\n", head.method, path, head.version);
  let mut has_host = false;
  for (name, value) in &head.headers {
    let lower = name.to_ascii_lowercase();
    if matches!(
      lower.as_str(),
      "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
    ) {
      continue;
    }
    has_host |= lower == "host";
    out.push_str(&format!("{name}: {value}\r\n"));
  }
  if !has_host {
    if port == 80 {
      out.push_str(&format!("Host: {host}\r\n"));
    } else {
      out.push_str(&format!("Host: {host}:{port}\r\n"));
    }
  }
  out.push_str("Connection: close\r\n\r\n");
  out
}

async fn connect_any(addresses: &[IpAddr], port: u16) -> io::Result<TcpStream> {
  let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
  for ip in addresses {
    match timeout(
      CONNECT_TIMEOUT,
      TcpStream::connect(SocketAddr::new(*ip, port)),
    )
    .await
    {
      Ok(Ok(s)) => return Ok(s),
      Ok(Err(e)) => last = e,
      Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
    }
  }
  Err(last)
}

/// A stream that counts the bytes read from it.
struct Counted<S> {
  inner: S,
  read: u64,
}

impl<S> Counted<S> {
  fn new(inner: S) -> Self {
    Counted { inner, read: 0 }
  }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
  fn poll_read(
    mut self: Pin<&mut Self>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
  ) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    let r = Pin::new(&mut self.inner).poll_read(cx, buf);
    self.read += (buf.filled().len() - before) as u64;
    r
  }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
  fn poll_write(
    mut self: Pin<&mut Self>,
    cx: &mut Context<'_>,
    buf: &[u8],
  ) -> Poll<io::Result<usize>> {
    Pin::new(&mut self.inner).poll_write(cx, buf)
  }
  fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    Pin::new(&mut self.inner).poll_flush(cx)
  }
  fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    Pin::new(&mut self.inner).poll_shutdown(cx)
  }
}
