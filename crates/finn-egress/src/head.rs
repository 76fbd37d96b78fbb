//! An HTTP/1.x request head, read strictly: CRLF line ends only, no folded header lines, one
//! `Host`, tokens and targets of visible ASCII. Anything else is malformed and the proxy
//! closes the connection: a lenient reading here would let the proxy and the server disagree
//! about where a request goes.

/// The longest head the proxy reads before calling it malformed.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
  pub method: String,
  pub target: String,
  /// `HTTP/1.0` or `HTTP/1.1`.
  pub version: String,
  /// Names as sent; values without surrounding whitespace.
  pub headers: Vec<(String, String)>,
  /// Bytes of the head, the blank line included.
  pub len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
  #[error("request head longer than {MAX_HEAD_BYTES} bytes")]
  TooLong,
  #[error("malformed request: {0}")]
  Malformed(&'static str),
}

impl RequestHead {
  /// The value of the only header of that name (case-insensitive); two of them are malformed.
  pub fn header(&self, name: &str) -> Result<Option<&str>, HeadError> {
    let mut found = self
      .headers
      .iter()
      .filter(|(n, _)| n.eq_ignore_ascii_case(name));
    let first = found.next().map(|(_, v)| v.as_str());
    if found.next().is_some() {
      return Err(HeadError::Malformed(
        "a header that must be single is repeated",
      ));
    }
    Ok(first)
  }
}

fn is_tchar(b: u8) -> bool {
  b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `Ok(None)`: the head is not complete yet.
pub fn parse(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
  let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
    if buf.len() >= MAX_HEAD_BYTES {
      return Err(HeadError::TooLong);
    }
    // A bare LF already seen can never become valid.
    if bare_lf(buf) {
      return Err(HeadError::Malformed("a line ends in LF without CR"));
    }
    return Ok(None);
  };
  let len = end + 4;
  if len > MAX_HEAD_BYTES {
    return Err(HeadError::TooLong);
  }
  let head = &buf[..end];
  if bare_lf(head) {
    return Err(HeadError::Malformed("a line ends in LF without CR"));
  }
  let mut lines = head
    .split(|&b| b == b'\n')
    .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
  let request_line = lines.next().unwrap_or_default();
  let mut parts = request_line.split(|&b| b == b' ');
  let (Some(method), Some(target), Some(version), None) =
    (parts.next(), parts.next(), parts.next(), parts.next())
  else {
    return Err(HeadError::Malformed(
      "the request line is not `METHOD target HTTP/1.x`",
    ));
  };
  if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
    return Err(HeadError::Malformed("the method is not a token"));
  }
  if target.is_empty() || !target.iter().all(|&b| b.is_ascii_graphic()) {
    return Err(HeadError::Malformed("the target is not visible ASCII"));
  }
  if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
    return Err(HeadError::Malformed(
      "the version is not HTTP/1.0 or HTTP/1.1",
    ));
  }
  let mut headers = Vec::new();
  for line in lines {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
      return Err(HeadError::Malformed("a folded header line"));
    }
    let Some(colon) = line.iter().position(|&b| b == b':') else {
      return Err(HeadError::Malformed("a header line without `:`"));
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
      return Err(HeadError::Malformed("a header name is not a token"));
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
      return Err(HeadError::Malformed("a control byte in a header value"));
    }
    let value = String::from_utf8_lossy(value.trim_ascii()).into_owned();
    headers.push((String::from_utf8_lossy(name).into_owned(), value));
  }
  // The three fields are ASCII by the checks above.
  Ok(Some(RequestHead {
    method: String::from_utf8_lossy(method).into_owned(),
    target: String::from_utf8_lossy(target).into_owned(),
    version: String::from_utf8_lossy(version).into_owned(),
    headers,
    len,
  }))
}

fn bare_lf(buf: &[u8]) -> bool {
  buf
    .iter()
    .enumerate()
    .any(|(i, &b)| b == b'\n' && (i == 0 || buf[i - 1] != b'\r'))
}

/// Whether the first bytes of a tunnel are the start of an HTTP request (`TOKEN SP`), and its
/// method: what a client sends to a proxy it reaches through the tunnel.
pub fn request_method(first: &[u8]) -> Option<&str> {
  let sp = first.iter().take(21).position(|&b| b == b' ')?;
  let method = &first[..sp];
  (!method.is_empty() && method.iter().all(|b| b.is_ascii_uppercase()))
    .then(|| std::str::from_utf8(method).ok())
    .flatten()
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_request_head_is_read_once_complete() {
    let raw = b"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nAccept:  */* \r\n\r\nbody";
    assert_eq!(parse(&raw[..20]), Ok(None));
    let h = parse(raw).unwrap().unwrap();
    assert_eq!(
      (h.method.as_str(), h.target.as_str()),
      ("GET", "http://a.test/x")
    );
    assert_eq!(h.header("host"), Ok(Some("a.test")));
    assert_eq!(h.header("accept"), Ok(Some("*/*")));
    assert_eq!(&raw[h.len..], b"body");
  }

  #[test]
  fn anything_loose_is_malformed() {
    for raw in [
      &b"GET / HTTP/1.1\nHost: a\r\n\r\n"[..],
      b"GET  / HTTP/1.1\r\n\r\n",
      b"GET / HTTP/2\r\n\r\n",
      b"GET / HTTP/1.1 x\r\n\r\n",
      b"G(T / HTTP/1.1\r\n\r\n",
      b"GET /\x01 HTTP/1.1\r\n\r\n",
      b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
      b"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
      b"GET / HTTP/1.1\r\nHo st: a\r\n\r\n",
      b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
      b"\r\n\r\n",
    ] {
      assert!(
        matches!(parse(raw), Err(HeadError::Malformed(_))),
        "{}",
        String::from_utf8_lossy(raw)
      );
    }
    let h = parse(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")
      .unwrap()
      .unwrap();
    assert!(h.header("Host").is_err());
    assert_eq!(parse(&vec![b'a'; MAX_HEAD_BYTES]), Err(HeadError::TooLong));
  }

  #[test]
  fn a_tunnel_that_starts_with_a_request_line_is_recognised() {
    assert_eq!(
      request_method(b"CONNECT evil.test:443 HTTP/1.1"),
      Some("CONNECT")
    );
    assert_eq!(request_method(b"GET / HTTP/1.1"), Some("GET"));
    assert_eq!(request_method(b"\x16\x03\x01\x02\x00"), None);
    assert_eq!(request_method(b"SSH-2.0-OpenSSH"), None);
  }
}
