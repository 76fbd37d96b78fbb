//! The server name of a TLS ClientHello: the first handshake message of the tunnel, read from
//! its records (a ClientHello may span more than one) up to a bound, never decrypted.

/// The most the proxy reads of a ClientHello.
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
  /// More bytes are needed.
  Incomplete,
  /// A ClientHello with this server name (lowercase, as sent).
  Sni(String),
  /// A ClientHello without a server name.
  NoSni,
  /// Not a ClientHello, or a broken one.
  Malformed(&'static str),
}

/// Reads `buf`, the first bytes of a tunnel that begins with a TLS handshake record (0x16).
pub fn client_hello(buf: &[u8]) -> Hello {
  // Reassemble the handshake bytes of the leading handshake records.
  let mut hs = Vec::new();
  let mut at = 0;
  loop {
    let Some(header) = buf.get(at..at + 5) else {
      return if buf.len() >= MAX_HELLO_BYTES {
        Hello::Malformed("ClientHello longer than the bound")
      } else {
        Hello::Incomplete
      };
    };
    if header[0] != 0x16 {
      return Hello::Malformed("not a TLS handshake record");
    }
    if header[1] != 3 {
      return Hello::Malformed("not a TLS record version");
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len == 0 || len > 16384 + 2048 {
      return Hello::Malformed("a TLS record of impossible length");
    }
    let Some(body) = buf.get(at + 5..at + 5 + len) else {
      return if buf.len() >= MAX_HELLO_BYTES {
        Hello::Malformed("ClientHello longer than the bound")
      } else {
        Hello::Incomplete
      };
    };
    hs.extend_from_slice(body);
    at += 5 + len;
    if hs.len() >= 4 {
      if hs[0] != 1 {
        return Hello::Malformed("the first handshake message is not a ClientHello");
      }
      let msg_len = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
      if msg_len + 4 > MAX_HELLO_BYTES {
        return Hello::Malformed("ClientHello longer than the bound");
      }
      if hs.len() >= msg_len + 4 {
        return parse_hello(&hs[4..4 + msg_len]);
      }
    }
  }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
  fn take(&mut self, n: usize) -> Option<&'a [u8]> {
    let (head, rest) = self.0.split_at_checked(n)?;
    self.0 = rest;
    Some(head)
  }
  fn u8(&mut self) -> Option<usize> {
    self.take(1).map(|b| usize::from(b[0]))
  }
  fn u16(&mut self) -> Option<usize> {
    self
      .take(2)
      .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
  }
  fn vec8(&mut self) -> Option<&'a [u8]> {
    let n = self.u8()?;
    self.take(n)
  }
  fn vec16(&mut self) -> Option<&'a [u8]> {
    let n = self.u16()?;
    self.take(n)
  }
}

fn parse_hello(body: &[u8]) -> Hello {
  let bad = Hello::Malformed("a truncated or inconsistent ClientHello");
  let mut r = Reader(body);
  // version, random, session id, cipher suites, compression methods.
  let fixed =
    r.take(2 + 32).is_some() && r.vec8().is_some() && r.vec16().is_some() && r.vec8().is_some();
  if !fixed {
    return bad;
  }
  if r.0.is_empty() {
    return Hello::NoSni;
  }
  let Some(exts) = r.vec16() else {
    return bad;
  };
  let mut exts = Reader(exts);
  let mut sni = None;
  while !exts.0.is_empty() {
    let (Some(kind), Some(data)) = (exts.u16(), exts.vec16()) else {
      return bad;
    };
    if kind != 0 {
      continue;
    }
    if sni.is_some() {
      return Hello::Malformed("two server_name extensions");
    }
    let mut d = Reader(data);
    let Some(list) = d.vec16() else {
      return bad;
    };
    let mut list = Reader(list);
    while !list.0.is_empty() {
      let (Some(name_type), Some(name)) = (list.u8(), list.vec16()) else {
        return bad;
      };
      if name_type == 0 {
        if sni.is_some() {
          return Hello::Malformed("two host names in server_name");
        }
        let Ok(name) = std::str::from_utf8(name) else {
          return Hello::Malformed("a server name that is not ASCII");
        };
        sni = Some(name.to_ascii_lowercase());
      }
    }
  }
  match sni {
    Some(n) => Hello::Sni(n),
    None => Hello::NoSni,
  }
}

/// A minimal ClientHello record naming `sni` (or none), for tests.
#[doc(hidden)]
pub fn client_hello_bytes(sni: Option<&str>) -> Vec<u8> {
  let mut exts = Vec::new();
  if let Some(name) = sni {
    let n = name.as_bytes();
    let mut list = vec![0u8];
    list.extend_from_slice(&(n.len() as u16).to_be_bytes());
    list.extend_from_slice(n);
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&list);
    exts.extend_from_slice(&0u16.to_be_bytes());
    exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
    exts.extend_from_slice(&data);
  }
  let mut body = vec![3, 3];
  body.extend_from_slice(&[7; 32]);
  body.push(0); // session id
  body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
  body.extend_from_slice(&[1, 0]); // null compression
  body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
  body.extend_from_slice(&exts);
  let mut hs = vec![1];
  hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
  hs.extend_from_slice(&body);
  let mut rec = vec![0x16, 3, 1];
  rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
  rec.extend_from_slice(&hs);
  rec
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn the_server_name_is_read_from_a_client_hello() {
    let rec = client_hello_bytes(Some("Allowed.Test"));
    assert_eq!(client_hello(&rec), Hello::Sni("allowed.test".into()));
    assert_eq!(client_hello(&client_hello_bytes(None)), Hello::NoSni);
    for cut in [1, 5, 20, rec.len() - 1] {
      assert_eq!(client_hello(&rec[..cut]), Hello::Incomplete, "{cut}");
    }
  }

  #[test]
  fn a_client_hello_split_over_two_records_is_reassembled() {
    let rec = client_hello_bytes(Some("split.test"));
    let hs = &rec[5..];
    let (a, b) = hs.split_at(30);
    let mut two = Vec::new();
    for part in [a, b] {
      two.extend_from_slice(&[0x16, 3, 1]);
      two.extend_from_slice(&(part.len() as u16).to_be_bytes());
      two.extend_from_slice(part);
    }
    assert_eq!(client_hello(&two), Hello::Sni("split.test".into()));
  }

  #[test]
  fn broken_hellos_are_malformed() {
    let mut rec = client_hello_bytes(Some("a.test"));
    rec[5] = 2; // ServerHello
    assert!(matches!(client_hello(&rec), Hello::Malformed(_)));
    let mut rec = client_hello_bytes(Some("a.test"));
    let n = rec.len();
    rec[n - 7] = 0xff; // a server name length past its end
    assert!(matches!(client_hello(&rec), Hello::Malformed(_)));
    assert!(matches!(
      client_hello(b"\x17\x03\x03\x00\x01x"),
      Hello::Malformed(_)
    ));
    assert!(matches!(
      client_hello(b"\x16\x03\x01\x00\x00"),
      Hello::Malformed(_)
    ));
  }
}
