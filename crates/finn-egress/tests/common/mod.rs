//! What the proxy's tests share: servers on loopback addresses that count what reaches them,
//! a resolver that never asks the network, a proxy serving jobs on listeners of their own.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use finn_egress::proxy::{Job, Proxy, Resolve};
use finn_egress::{ConnectionRecord, NetworkOptions, Policy};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

pub const RESPONSE: &[u8] =
  b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nserver-ok";

/// A listening server that answers each connection with [`RESPONSE`] once it has read the
/// request head (or a ClientHello's worth of bytes).
pub struct Server {
  pub listener: TcpListener,
  pub addr: SocketAddr,
}

impl Server {
  pub fn on(ip: &str) -> Server {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    Server { listener, addr }
  }

  pub fn port(&self) -> u16 {
    self.addr.port()
  }

  /// Accepts one connection on a thread; gives what the server received before answering.
  pub fn serve_one(&self) -> JoinHandle<Vec<u8>> {
    let listener = self.listener.try_clone().unwrap();
    std::thread::spawn(move || {
      let (mut s, _) = listener.accept().unwrap();
      let mut got = Vec::new();
      let mut chunk = [0u8; 4096];
      while !(got.windows(4).any(|w| w == b"\r\n\r\n") || tls_record_complete(&got)) {
        let n = s.read(&mut chunk).unwrap();
        if n == 0 {
          break;
        }
        got.extend_from_slice(&chunk[..n]);
      }
      s.write_all(RESPONSE).unwrap();
      got
    })
  }

  /// No connection reached this server: none accepted (a serve thread would have taken it)
  /// and none waiting in the accept queue.
  pub fn saw_nothing(&self) -> bool {
    self.listener.set_nonblocking(true).unwrap();
    let r = matches!(self.listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock);
    self.listener.set_nonblocking(false).unwrap();
    r
  }
}

pub fn tls_record_complete(got: &[u8]) -> bool {
  got.first() == Some(&0x16)
    && got.len() >= 5
    && got.len() >= 5 + usize::from(u16::from_be_bytes([got[3], got[4]]))
}

/// A resolver that answers from a table and counts its calls; it never asks the network.
#[derive(Default)]
pub struct TableResolver {
  pub table: BTreeMap<String, Vec<IpAddr>>,
  pub calls: AtomicUsize,
}

impl Resolve for TableResolver {
  fn resolve(&self, name: &str) -> std::io::Result<Vec<IpAddr>> {
    self.calls.fetch_add(1, Ordering::SeqCst);
    self
      .table
      .get(name)
      .cloned()
      .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no such name"))
  }
}

pub fn options(allow: &[String], plain: bool, local: bool) -> NetworkOptions {
  NetworkOptions {
    allow: allow.to_vec(),
    allow_plain_http: plain,
    allow_local: local,
    hosts: [
      ("allowed.test".to_string(), "127.0.0.1".to_string()),
      ("denied.test".to_string(), "127.0.0.2".to_string()),
    ]
    .into(),
  }
}

/// A proxy serving jobs, each on a listener of its own, and the records of their connections.
pub struct Harness {
  pub proxy: Arc<Proxy>,
  records: mpsc::UnboundedReceiver<ConnectionRecord>,
  pub resolver: Arc<TableResolver>,
}

impl Harness {
  pub fn new() -> Harness {
    Harness::with_resolver(TableResolver::default())
  }

  pub fn with_resolver(resolver: TableResolver) -> Harness {
    let (tx, records) = mpsc::unbounded_channel();
    let resolver = Arc::new(resolver);
    let proxy = Arc::new(Proxy::new(
      resolver.clone(),
      Arc::new(move |r| {
        let _ = tx.send(r);
      }),
    ));
    Harness {
      proxy,
      records,
      resolver,
    }
  }

  /// Starts serving a job; gives the address its command would reach the proxy at.
  pub async fn job(&self, id: &str, o: NetworkOptions) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let job = Arc::new(Job {
      id: id.into(),
      policy: Policy::new(&o).unwrap(),
    });
    tokio::spawn(self.proxy.clone().serve_tcp(listener, job));
    addr
  }

  /// Starts serving a job on a pathname Unix socket, as its channel would hand the proxy the
  /// connections of a job without a network namespace; gives the socket's path (in `dir`).
  pub fn job_unix(&self, id: &str, o: NetworkOptions, dir: &std::path::Path) -> PathBuf {
    let path = dir.join(format!("{id}.sock"));
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let job = Arc::new(Job {
      id: id.into(),
      policy: Policy::new(&o).unwrap(),
    });
    let proxy = self.proxy.clone();
    tokio::spawn(async move {
      while let Ok((stream, _)) = listener.accept().await {
        let (proxy, job) = (proxy.clone(), job.clone());
        tokio::spawn(async move { proxy.handle(stream, &job).await });
      }
    });
    path
  }

  /// The record of the next connection to end.
  /// The bound only keeps a broken proxy (one that connected where it must not, to a server that
  /// never closes) from hanging the suite; no assertion is timed.
  pub async fn record(&mut self) -> ConnectionRecord {
    let next = tokio::time::timeout(std::time::Duration::from_secs(30), self.records.recv()).await;
    next
      .expect("no record: the proxy still holds the connection open")
      .unwrap()
  }
}

/// Reads until the proxy closes. The bound only keeps a broken proxy (one that connects where it
/// must not, to a server that never answers) from hanging the suite; no assertion is timed.
pub async fn read_to_close<S: AsyncRead + Unpin>(c: &mut S, out: &mut Vec<u8>) {
  let read = tokio::time::timeout(std::time::Duration::from_secs(20), c.read_to_end(out)).await;
  assert!(read.is_ok(), "the proxy neither answered nor closed");
}

/// Sends `request`, reads until the proxy closes, gives what came back.
pub async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(request).await.unwrap();
  let mut out = Vec::new();
  read_to_close(&mut c, &mut out).await;
  String::from_utf8_lossy(&out).into_owned()
}

/// Opens a tunnel, checks the 200, sends `inner`, reads until the close.
pub async fn through_tunnel(proxy: SocketAddr, target: &str, inner: &[u8]) -> Vec<u8> {
  let mut c = TcpStream::connect(proxy).await.unwrap();
  c.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
    .await
    .unwrap();
  let mut established = [0u8; 39];
  c.read_exact(&mut established).await.unwrap();
  assert_eq!(&established, b"HTTP/1.1 200 Connection established\r\n\r\n");
  c.write_all(inner).await.unwrap();
  let mut out = Vec::new();
  read_to_close(&mut c, &mut out).await;
  out
}
