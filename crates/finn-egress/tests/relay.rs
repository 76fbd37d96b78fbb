//! The relay's bulk path: 64 MiB each way through an open tunnel, from a TCP client (CONNECT)
//! and from a Unix one (SOCKS5), each direction half-closed while the other still carries
//! bytes, in both orders. The server checks what it got against a known checksum, the client
//! likewise, and the audit record counts every byte. While bytes flow, the proxy holds the two
//! pipes a spliced relay moves them through.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;

use common::*;
use finn_egress::Decision;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

const MIB64: usize = 64 * 1024 * 1024;

/// `len` bytes from a seeded xorshift: no pattern a relay could get right by accident. The first
/// byte is 0, so the tunnel's first bytes are neither TLS nor HTTP and pass as they are.
fn data(seed: u64, len: usize) -> Vec<u8> {
  let mut x = seed;
  let mut out = Vec::with_capacity(len);
  while out.len() < len {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.extend_from_slice(&x.to_le_bytes());
  }
  out.truncate(len);
  out[0] = 0;
  out
}

/// FNV-1a over 8-byte words (and the length), cheap enough for 64 MiB in a debug build.
fn checksum(bytes: &[u8]) -> u64 {
  let mut h: u64 = 0xcbf2_9ce4_8422_2325;
  let words = bytes.chunks_exact(8);
  let tail = words.remainder();
  for w in words {
    h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
  }
  for b in tail {
    h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
  }
  h ^ bytes.len() as u64
}

/// Which side half-closes first: the client after its upload (the server answers after it
/// read everything), or the server after its download (the client uploads after it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Order {
  UpFirst,
  DownFirst,
}

/// Pipe fds this process holds.
fn pipes() -> usize {
  std::fs::read_dir("/proc/self/fd")
    .unwrap()
    .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
    .filter(|l| l.to_string_lossy().starts_with("pipe:"))
    .count()
}

/// Runs one exchange over an open tunnel; gives the checksums each side got and the pipes the
/// process held while bytes flowed. The bound only keeps a relay that loses a half-close (both
/// ends then wait for each other) from hanging the suite; no assertion is timed.
async fn exchange_64mib<C: AsyncRead + AsyncWrite + Unpin>(
  client: &mut C,
  server: &Server,
  order: Order,
  up: &[u8],
  down: &'static [u8],
) -> (u64, u64, usize) {
  let bound = std::time::Duration::from_secs(120);
  tokio::time::timeout(bound, exchange(client, server, order, up, down))
    .await
    .unwrap_or_else(|_| panic!("{order:?}: the exchange never ended: a half-close was lost"))
}

async fn exchange<C: AsyncRead + AsyncWrite + Unpin>(
  client: &mut C,
  server: &Server,
  order: Order,
  up: &[u8],
  down: &'static [u8],
) -> (u64, u64, usize) {
  let listener = server.listener.try_clone().unwrap();
  let served = std::thread::spawn(move || {
    let (mut s, _) = listener.accept().unwrap();
    let mut got = Vec::with_capacity(MIB64);
    if order == Order::UpFirst {
      s.read_to_end(&mut got).unwrap();
      s.write_all(down).unwrap();
      s.shutdown(Shutdown::Write).unwrap();
    } else {
      s.write_all(down).unwrap();
      s.shutdown(Shutdown::Write).unwrap();
      s.read_to_end(&mut got).unwrap();
    }
    checksum(&got)
  });
  let mut got = Vec::with_capacity(MIB64);
  let mut chunk = vec![0u8; 64 * 1024];
  let mut held = 0;
  // The tunnel's first bytes: the proxy connects to the server only once it has them.
  let first = 1024;
  client.write_all(&up[..first]).await.unwrap();
  if order == Order::UpFirst {
    client.write_all(&up[first..]).await.unwrap();
    client.shutdown().await.unwrap();
  }
  loop {
    let n = client.read(&mut chunk).await.unwrap();
    if n == 0 {
      break;
    }
    if got.is_empty() {
      // Most of the download is still to come, so the relay is running.
      held = pipes();
    }
    got.extend_from_slice(&chunk[..n]);
  }
  if order == Order::DownFirst {
    client.write_all(&up[first..]).await.unwrap();
    client.shutdown().await.unwrap();
  }
  // Joined off the runtime's thread: the proxy relays on it.
  let served = tokio::task::spawn_blocking(move || served.join().unwrap());
  (served.await.unwrap(), checksum(&got), held)
}

#[tokio::test(flavor = "current_thread")]
async fn sixty_four_mib_each_way_pass_the_spliced_relay_with_half_closes_and_exact_counts() {
  let up = data(0x9e37_79b9_7f4a_7c15, MIB64);
  let down: &'static [u8] = Box::leak(data(0xd1b5_4a32_d192_ed03, MIB64).into_boxed_slice());
  let (up_sum, down_sum) = (checksum(&up), checksum(down));
  let mut h = Harness::new();
  let server = Server::on("127.0.0.1");
  let target = format!("allowed.test:{}", server.port());
  let proxy = h
    .job("tcp", options(std::slice::from_ref(&target), false, true))
    .await;
  let dir = tempfile::tempdir().unwrap();
  let sock = h.job_unix(
    "unix",
    options(std::slice::from_ref(&target), false, true),
    dir.path(),
  );
  let before = pipes();

  for order in [Order::UpFirst, Order::DownFirst] {
    // A CONNECT tunnel from a TCP client.
    let mut c = TcpStream::connect(proxy).await.unwrap();
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    c.write_all(head.as_bytes()).await.unwrap();
    let mut established = [0u8; 39];
    c.read_exact(&mut established).await.unwrap();
    assert_eq!(
      &established[..],
      b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
    let (server_got, client_got, held) = exchange_64mib(&mut c, &server, order, &up, down).await;
    assert_eq!(server_got, up_sum, "{order:?}: the server got other bytes");
    assert_eq!(
      client_got, down_sum,
      "{order:?}: the client got other bytes"
    );
    assert!(
      held >= before + 4,
      "{order:?}: no pipes while relaying ({held} vs {before})"
    );
    let r = h.record().await;
    assert_eq!((r.job.as_str(), r.decision), ("tcp", Decision::Allowed));
    assert_eq!(r.reason, None, "{order:?}");
    assert_eq!(r.bytes_up, (head.len() + MIB64) as u64, "{order:?}");
    assert_eq!(r.bytes_down, MIB64 as u64, "{order:?}");

    // A SOCKS5 tunnel from a Unix client.
    let mut c = UnixStream::connect(&sock).await.unwrap();
    let name = b"allowed.test";
    let mut request = vec![0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x03, name.len() as u8];
    request.extend_from_slice(name);
    request.extend_from_slice(&server.port().to_be_bytes());
    c.write_all(&request).await.unwrap();
    let mut replies = [0u8; 12];
    c.read_exact(&mut replies).await.unwrap();
    assert_eq!(&replies[..3], &[0x05, 0x00, 0x05], "{replies:?}");
    assert_eq!(replies[3], 0x00, "SOCKS5 reply {replies:?}");
    let (server_got, client_got, held) = exchange_64mib(&mut c, &server, order, &up, down).await;
    assert_eq!(
      server_got, up_sum,
      "{order:?} SOCKS5: the server got other bytes"
    );
    assert_eq!(
      client_got, down_sum,
      "{order:?} SOCKS5: the client got other bytes"
    );
    assert!(
      held >= before + 4,
      "{order:?} SOCKS5: no pipes while relaying"
    );
    let r = h.record().await;
    assert_eq!((r.job.as_str(), r.decision), ("unix", Decision::Allowed));
    assert_eq!(r.reason, None, "{order:?} SOCKS5");
    assert_eq!(
      r.bytes_up,
      (request.len() + MIB64) as u64,
      "{order:?} SOCKS5"
    );
    assert_eq!(r.bytes_down, MIB64 as u64, "{order:?} SOCKS5");
  }
}
