//! SOCKS5 (RFC 1928) as the proxy reads it: the client's greeting and its request, parsed
//! strictly from the bytes received so far, and the replies. A connection whose first byte is
//! `0x05` speaks SOCKS5; it is how a command that can reach the proxy only through a pathname
//! Unix socket names its destination (curl's and libcurl's `socks5h://localhost/<path>`, git's
//! `http.proxy`), since an HTTP proxy URL cannot name a socket path.
//!
//! Only "no authentication" is offered and only CONNECT is carried; the destination is a name
//! (which the proxy resolves itself) or an IP literal, checked against the job's list like a
//! CONNECT's authority.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::rules::{Host, parse_host};

/// The version byte that opens every SOCKS5 message.
pub const VERSION: u8 = 0x05;
/// The longest request: version, command, reserved, type, a 255-byte name with its length,
/// the port.
pub const MAX_REQUEST_BYTES: usize = 4 + 1 + 255 + 2;

/// The method "no authentication required", the only one offered.
const NO_AUTH: u8 = 0x00;
/// "No acceptable methods".
const NO_METHOD: u8 = 0xff;

/// Reply codes the proxy sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reply {
  Succeeded = 0x00,
  /// The job's list does not open the destination.
  NotAllowed = 0x02,
  /// The name could not be resolved.
  HostUnreachable = 0x04,
  /// BIND, UDP ASSOCIATE or an unknown command.
  CommandNotSupported = 0x07,
  AddressTypeNotSupported = 0x08,
}

/// The client's commands.
pub const CMD_CONNECT: u8 = 0x01;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
  #[error("malformed SOCKS5 {0}")]
  Malformed(&'static str),
  /// A request whose address type is none of IPv4, name, IPv6 (its length is unknown).
  #[error("SOCKS5 address type {0:#04x} is not supported")]
  AddressType(u8),
}

/// The greeting: `Ok(None)` until it is complete, then whether "no authentication" is among
/// the methods offered and the greeting's length.
pub fn greeting(buf: &[u8]) -> Result<Option<(bool, usize)>, SocksError> {
  let Some(&ver) = buf.first() else {
    return Ok(None);
  };
  if ver != VERSION {
    return Err(SocksError::Malformed("greeting: not version 5"));
  }
  let Some(&n) = buf.get(1) else {
    return Ok(None);
  };
  if n == 0 {
    return Err(SocksError::Malformed("greeting: no method offered"));
  }
  let len = 2 + usize::from(n);
  let Some(methods) = buf.get(2..len) else {
    return Ok(None);
  };
  Ok(Some((methods.contains(&NO_AUTH), len)))
}

/// The answer to a greeting: "no authentication", or no acceptable method.
pub fn method_choice(no_auth_offered: bool) -> [u8; 2] {
  [VERSION, if no_auth_offered { NO_AUTH } else { NO_METHOD }]
}

/// A request as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
  pub command: u8,
  pub host: Host,
  pub port: u16,
  /// Bytes of the request.
  pub len: usize,
}

/// The request after the greeting: `Ok(None)` until it is complete. A name must be one the
/// allowlist could name (the rules' host syntax: an IP literal written as a name is read as
/// that address); anything else is malformed.
pub fn request(buf: &[u8]) -> Result<Option<Request>, SocksError> {
  let Some(head) = buf.get(..4) else {
    return Ok(None);
  };
  if head[0] != VERSION {
    return Err(SocksError::Malformed("request: not version 5"));
  }
  if head[2] != 0 {
    return Err(SocksError::Malformed("request: the reserved byte is not 0"));
  }
  let (host, at) = match head[3] {
    0x01 => {
      let Some(a) = buf.get(4..8) else {
        return Ok(None);
      };
      let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
      (Host::Ip(IpAddr::V4(ip)), 8)
    }
    0x04 => {
      let Some(a) = buf.get(4..20) else {
        return Ok(None);
      };
      let octets: [u8; 16] = a.try_into().expect("16 bytes");
      (Host::Ip(IpAddr::V6(Ipv6Addr::from(octets))), 20)
    }
    0x03 => {
      let Some(&n) = buf.get(4) else {
        return Ok(None);
      };
      if n == 0 {
        return Err(SocksError::Malformed("request: an empty name"));
      }
      let end = 5 + usize::from(n);
      let Some(name) = buf.get(5..end) else {
        return Ok(None);
      };
      if !name.iter().all(u8::is_ascii_graphic) {
        return Err(SocksError::Malformed(
          "request: a name that is not visible ASCII",
        ));
      }
      let name = std::str::from_utf8(name).expect("ASCII");
      let host = parse_host(name).map_err(|_| SocksError::Malformed("request: not a host name"))?;
      (host, end)
    }
    other => return Err(SocksError::AddressType(other)),
  };
  let Some(p) = buf.get(at..at + 2) else {
    return Ok(None);
  };
  let port = u16::from_be_bytes([p[0], p[1]]);
  if port == 0 {
    return Err(SocksError::Malformed("request: port 0"));
  }
  Ok(Some(Request {
    command: head[1],
    host,
    port,
    len: at + 2,
  }))
}

/// A reply; the bound address is left unspecified (0.0.0.0:0), which clients of CONNECT do
/// not use.
pub fn reply(code: Reply) -> [u8; 10] {
  [VERSION, code as u8, 0, 0x01, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_greeting_is_read_once_complete_and_only_no_authentication_is_accepted() {
    assert_eq!(greeting(b""), Ok(None));
    assert_eq!(greeting(b"\x05"), Ok(None));
    assert_eq!(greeting(b"\x05\x02\x00"), Ok(None));
    assert_eq!(greeting(b"\x05\x02\x02\x00"), Ok(Some((true, 4))));
    assert_eq!(greeting(b"\x05\x01\x02rest"), Ok(Some((false, 3))));
    assert_eq!(method_choice(true), [5, 0]);
    assert_eq!(method_choice(false), [5, 0xff]);
    assert!(greeting(b"\x04\x01\x00").is_err());
    assert!(greeting(b"\x05\x00").is_err());
  }

  #[test]
  fn a_request_names_a_host_and_port_in_each_address_type() {
    let name = b"\x05\x01\x00\x03\x0cAllowed.Test\x01\xbb";
    assert_eq!(request(&name[..10]), Ok(None));
    assert_eq!(
      request(name),
      Ok(Some(Request {
        command: CMD_CONNECT,
        host: Host::Name("allowed.test".into()),
        port: 443,
        len: name.len(),
      }))
    );
    let v4 = request(b"\x05\x01\x00\x01\x7f\x00\x00\x02\x00\x50")
      .unwrap()
      .unwrap();
    assert_eq!(
      (v4.host, v4.port),
      (Host::Ip("127.0.0.2".parse().unwrap()), 80)
    );
    let mut v6 = b"\x05\x02\x00\x04".to_vec();
    v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    v6.extend_from_slice(&[0, 22]);
    let v6 = request(&v6).unwrap().unwrap();
    assert_eq!(
      (v6.command, v6.host),
      (0x02, Host::Ip("::1".parse().unwrap()))
    );
    // An IP literal written as a name is that address, not a name.
    let lit = request(b"\x05\x01\x00\x03\x09127.0.0.2\x00\x50")
      .unwrap()
      .unwrap();
    assert_eq!(lit.host, Host::Ip("127.0.0.2".parse().unwrap()));
  }

  #[test]
  fn anything_loose_in_a_request_is_malformed() {
    for raw in [
      &b"\x04\x01\x00\x01\x7f\x00\x00\x01\x00\x50"[..],
      b"\x05\x01\x01\x01\x7f\x00\x00\x01\x00\x50",
      b"\x05\x01\x00\x03\x00\x00\x50",
      b"\x05\x01\x00\x03\x03a b\x00\x50",
      b"\x05\x01\x00\x03\x03a\x00b\x00\x50",
      b"\x05\x01\x00\x03\x0bevil..test.\x00\x50",
      b"\x05\x01\x00\x03\x0a2130706433\x00\x50",
      b"\x05\x01\x00\x03\x03::1\x00\x50",
      b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x00",
    ] {
      assert!(
        matches!(request(raw), Err(SocksError::Malformed(_))),
        "{raw:?}"
      );
    }
    assert_eq!(
      request(b"\x05\x01\x00\x05\x00"),
      Err(SocksError::AddressType(5))
    );
  }

  #[test]
  fn a_reply_has_the_rfc_layout() {
    assert_eq!(reply(Reply::NotAllowed), [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(reply(Reply::CommandNotSupported)[1], 7);
  }
}
