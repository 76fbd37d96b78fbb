//! A job's allowlist: the caller's `NetworkOptions`, validated once with errors naming the
//! entry, and the check of each destination against it.
//!
//! An entry is a name (`github.com`), a wildcard over a name's subdomains (`*.githubusercontent.com`:
//! `a.githubusercontent.com` and deeper, not the name itself) or an IP literal, each with an
//! optional port. Without a port an entry opens 443 for CONNECT and 80 for plain HTTP, nothing
//! else; with one, that port for both. Plain HTTP is refused unless `allowPlainHttp`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

/// `isolation.network` as an object (defined with the other isolation options).
pub use finn_job::isolation::NetworkOptions;

/// Bad network options; the message names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network.{field}: {reason}")]
pub struct RulesError {
  pub field: String,
  pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> RulesError {
  RulesError {
    field: field.into(),
    reason: reason.into(),
  }
}

/// A destination's host as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
  /// Lowercase, without a trailing dot.
  Name(String),
  Ip(IpAddr),
}

impl std::fmt::Display for Host {
  fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
    match self {
      Host::Name(n) => f.write_str(n),
      Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
      Host::Ip(ip) => write!(f, "{ip}"),
    }
  }
}

/// How the command asks for the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
  Connect,
  PlainHttp,
}

impl Kind {
  /// The port an entry without one opens.
  pub fn default_port(self) -> u16 {
    match self {
      Kind::Connect => 443,
      Kind::PlainHttp => 80,
    }
  }

  pub fn name(self) -> &'static str {
    match self {
      Kind::Connect => "CONNECT",
      Kind::PlainHttp => "plain HTTP",
    }
  }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
  Exact(String),
  /// `*.suffix`: the suffix without the `*.`.
  Subdomains(String),
  Ip(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
  pattern: Pattern,
  port: Option<u16>,
  /// The entry as the caller wrote it, for the audit and the 403.
  pub text: String,
}

impl Rule {
  fn matches(&self, host: &Host, port: u16, kind: Kind) -> bool {
    let host_ok = match (&self.pattern, host) {
      (Pattern::Exact(p), Host::Name(n)) => p == n,
      (Pattern::Subdomains(s), Host::Name(n)) => n
        .strip_suffix(s.as_str())
        .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
      (Pattern::Ip(p), Host::Ip(ip)) => p == ip,
      _ => false,
    };
    host_ok && self.port.unwrap_or(kind.default_port()) == port
  }
}

/// Why a destination is refused by the list (the address checks come after it, in the proxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
  PlainHttpOff,
  NotListed,
}

/// A job's validated allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
  rules: Vec<Rule>,
  pub allow_plain_http: bool,
  pub allow_local: bool,
  hosts: BTreeMap<String, IpAddr>,
}

impl Policy {
  pub fn new(o: &NetworkOptions) -> Result<Policy, RulesError> {
    let mut rules = Vec::with_capacity(o.allow.len());
    for (i, entry) in o.allow.iter().enumerate() {
      rules.push(parse_rule(entry).map_err(|reason| err(format!("allow[{i}]"), reason))?);
    }
    let mut hosts = BTreeMap::new();
    for (name, addr) in &o.hosts {
      let field = || format!("hosts[{name:?}]");
      let n = parse_name(name).map_err(|r| err(field(), r))?;
      let ip = parse_ip_literal(addr)
        .ok_or_else(|| err(field(), format!("must be an IP address, got {addr:?}")))?;
      if hosts.insert(n, ip).is_some() {
        return Err(err(field(), "names a host another entry names"));
      }
    }
    Ok(Policy {
      rules,
      allow_plain_http: o.allow_plain_http,
      allow_local: o.allow_local,
      hosts,
    })
  }

  /// The rule that opens `host:port` for `kind`.
  pub fn check(&self, host: &Host, port: u16, kind: Kind) -> Result<&Rule, Refusal> {
    if kind == Kind::PlainHttp && !self.allow_plain_http {
      return Err(Refusal::PlainHttpOff);
    }
    self
      .rules
      .iter()
      .find(|r| r.matches(host, port, kind))
      .ok_or(Refusal::NotListed)
  }

  /// The `hosts` entry for a name.
  pub fn static_address(&self, name: &str) -> Option<IpAddr> {
    self.hosts.get(name).copied()
  }
}

fn parse_ip_literal(s: &str) -> Option<IpAddr> {
  if let Some(v6) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
    return v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
  }
  s.parse().ok()
}

/// A host as a request names it: an IP literal (IPv6 in brackets) or a name.
pub fn parse_host(s: &str) -> Result<Host, String> {
  if s.starts_with('[') {
    return parse_ip_literal(s)
      .filter(IpAddr::is_ipv6)
      .map(Host::Ip)
      .ok_or_else(|| format!("{s:?} is not an IPv6 literal"));
  }
  if let Ok(v4) = s.parse::<std::net::Ipv4Addr>() {
    return Ok(Host::Ip(IpAddr::V4(v4)));
  }
  if s.contains(':') {
    return Err(format!(
      "{s:?}: an IPv6 address is written in brackets, [..]"
    ));
  }
  parse_name(s).map(Host::Name)
}

/// `host[:port]` with the host as [`parse_host`] reads it.
pub fn parse_authority(s: &str) -> Result<(Host, Option<u16>), String> {
  let (host, port) = match s.rfind(':') {
    // An unbracketed IPv6 literal has several colons and no port.
    Some(i) if !s.starts_with('[') && s[..i].contains(':') => (s, None),
    Some(i) if !s.starts_with('[') || s[..i].ends_with(']') => (&s[..i], Some(&s[i + 1..])),
    _ => (s, None),
  };
  let port = match port {
    None => None,
    // Digits only: `u16::from_str` also takes a leading `+`.
    Some(p) => Some(
      Some(p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("port {p:?} is not a number from 1 to 65535"))?,
    ),
  };
  Ok((parse_host(host)?, port))
}

/// A DNS name: lowercased, without a trailing dot; letters, digits, `-` and `_` in labels of
/// 1 to 63 bytes, at most 253 in all, the last label not all digits (the resolver would read
/// `2130706433` or `127.1` as an IPv4 address).
pub fn parse_name(s: &str) -> Result<String, String> {
  let n = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
  if n.is_empty() || n.len() > 253 {
    return Err(format!("{s:?} is not a host name (1 to 253 bytes)"));
  }
  for label in n.split('.') {
    let ok = !label.is_empty()
      && label.len() <= 63
      && label
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
      && !label.starts_with('-')
      && !label.ends_with('-');
    if !ok {
      return Err(format!(
        "{s:?} is not a host name (labels of letters, digits, `-`; an IDN as its xn-- form)"
      ));
    }
  }
  if n
    .rsplit('.')
    .next()
    .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
  {
    return Err(format!(
      "{s:?} ends in a numeric label, which resolvers read as an IPv4 address"
    ));
  }
  Ok(n)
}

fn parse_rule(entry: &str) -> Result<Rule, String> {
  let (host, port) = match entry.strip_prefix("*.") {
    Some(rest) => {
      let (h, port) = parse_authority(rest)?;
      let Host::Name(suffix) = h else {
        return Err(format!("{entry:?}: a wildcard covers names, not addresses"));
      };
      if !suffix.contains('.') {
        return Err(format!(
          "{entry:?}: a wildcard over a top-level domain opens too much"
        ));
      }
      (Pattern::Subdomains(suffix), port)
    }
    None => {
      if entry.contains('*') {
        return Err(format!(
          "{entry:?}: `*` is allowed only as a leading `*.` label"
        ));
      }
      let (h, port) = parse_authority(entry)?;
      match h {
        Host::Name(n) => (Pattern::Exact(n), port),
        Host::Ip(ip) => (Pattern::Ip(ip), port),
      }
    }
  };
  Ok(Rule {
    pattern: host,
    port,
    text: entry.to_owned(),
  })
}

#[cfg(test)]
mod tests {
  use super::*;

  fn policy(allow: &[&str], plain: bool) -> Policy {
    Policy::new(&NetworkOptions {
      allow: allow.iter().map(|s| s.to_string()).collect(),
      allow_plain_http: plain,
      ..Default::default()
    })
    .unwrap()
  }

  fn name(s: &str) -> Host {
    Host::Name(s.into())
  }

  #[test]
  fn a_name_without_a_port_opens_443_for_connect_and_80_for_plain_http_only() {
    let p = policy(&["github.com"], true);
    assert!(p.check(&name("github.com"), 443, Kind::Connect).is_ok());
    assert!(p.check(&name("github.com"), 80, Kind::PlainHttp).is_ok());
    assert!(p.check(&name("github.com"), 80, Kind::Connect).is_err());
    assert!(p.check(&name("github.com"), 22, Kind::Connect).is_err());
    assert!(p.check(&name("github.com"), 443, Kind::PlainHttp).is_err());
    assert!(
      p.check(&name("api.github.com"), 443, Kind::Connect)
        .is_err()
    );
    assert!(
      p.check(&name("github.com.evil.net"), 443, Kind::Connect)
        .is_err()
    );
  }

  #[test]
  fn a_listed_port_is_the_only_port() {
    let p = policy(&["registry.npmjs.org:8443"], true);
    assert_eq!(
      p.check(&name("registry.npmjs.org"), 8443, Kind::Connect)
        .unwrap()
        .text,
      "registry.npmjs.org:8443"
    );
    assert!(
      p.check(&name("registry.npmjs.org"), 8443, Kind::PlainHttp)
        .is_ok()
    );
    assert!(
      p.check(&name("registry.npmjs.org"), 443, Kind::Connect)
        .is_err()
    );
  }

  #[test]
  fn plain_http_is_refused_unless_allowed() {
    let p = policy(&["example.org"], false);
    assert_eq!(
      p.check(&name("example.org"), 80, Kind::PlainHttp),
      Err(Refusal::PlainHttpOff)
    );
  }

  #[test]
  fn a_wildcard_matches_subdomains_only() {
    let p = policy(&["*.githubusercontent.com"], false);
    for ok in ["raw.githubusercontent.com", "a.b.githubusercontent.com"] {
      assert!(p.check(&name(ok), 443, Kind::Connect).is_ok(), "{ok}");
    }
    for bad in [
      "githubusercontent.com",
      "evilgithubusercontent.com",
      "raw.githubusercontent.com.evil.net",
    ] {
      assert!(p.check(&name(bad), 443, Kind::Connect).is_err(), "{bad}");
    }
  }

  #[test]
  fn ip_literals_match_only_listed_literals() {
    let p = policy(&["*.example.com", "10.0.0.1:8080", "[fd00::1]:443"], false);
    let ip = |s: &str| Host::Ip(s.parse().unwrap());
    assert!(p.check(&ip("10.0.0.1"), 8080, Kind::Connect).is_ok());
    assert!(p.check(&ip("fd00::1"), 443, Kind::Connect).is_ok());
    assert!(p.check(&ip("10.0.0.2"), 8080, Kind::Connect).is_err());
    assert!(p.check(&ip("127.0.0.1"), 443, Kind::Connect).is_err());
  }

  #[test]
  fn hosts_are_parsed_by_the_same_rules_as_requests() {
    assert_eq!(parse_host("GitHub.COM.").unwrap(), name("github.com"));
    assert_eq!(
      parse_authority("[::1]:443").unwrap(),
      (Host::Ip("::1".parse().unwrap()), Some(443))
    );
    assert_eq!(
      parse_authority("a.test:80").unwrap(),
      (name("a.test"), Some(80))
    );
    for bad in [
      "a.test:0",
      "a.test:65536",
      "a.test:+80",
      "a.test:",
      "::1",
      "fd00::1:443",
      "2130706433",
      "127.1",
      "0x7f.0.0.1",
      "a..b",
      "-a.b",
      "a b",
      "[127.0.0.1]",
      "é.test",
      "",
    ] {
      assert!(parse_authority(bad).is_err(), "{bad}");
    }
  }

  #[test]
  fn validation_names_the_entry() {
    for (allow, field) in [
      (vec!["github.com", "*"], "allow[1]"),
      (vec!["*.com"], "allow[0]"),
      (vec!["a.*.com"], "allow[0]"),
      (vec!["ok.test", "x.test:99999"], "allow[1]"),
      (vec!["*.10.0.0.1"], "allow[0]"),
      (vec!["bad name"], "allow[0]"),
    ] {
      let e = Policy::new(&NetworkOptions {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
      })
      .unwrap_err();
      assert_eq!(e.field, field, "{allow:?}: {e}");
      assert!(e.to_string().starts_with(&format!("network.{field}: ")));
    }
    let e = Policy::new(&NetworkOptions {
      hosts: [("a.test".to_string(), "not-an-ip".to_string())].into(),
      ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.field, "hosts[\"a.test\"]");
    let o: Result<NetworkOptions, _> =
      serde_json::from_value(serde_json::json!({"allow": [], "alowLocal": true}));
    assert!(o.unwrap_err().to_string().contains("alowLocal"));
  }

  #[test]
  fn static_addresses_replace_dns() {
    let p = Policy::new(&NetworkOptions {
      hosts: [("Allowed.Test".to_string(), "127.0.0.1".to_string())].into(),
      ..Default::default()
    })
    .unwrap();
    assert_eq!(
      p.static_address("allowed.test"),
      Some("127.0.0.1".parse().unwrap())
    );
  }
}
