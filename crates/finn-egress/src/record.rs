//! What the proxy reports of each connection, and its audit entry.

use finn_audit::{Action, AuditEntry, EgressRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
  Allowed,
  Refused,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRecord {
  pub job: String,
  /// `CONNECT`, `plain HTTP`, `SOCKS5` (a tunnel), `SOCKS5 plain HTTP` (one that carries an
  /// HTTP request), or `malformed` for a request that named no destination.
  pub kind: &'static str,
  /// As the command named it; empty when it named none.
  pub host: String,
  pub port: u16,
  pub decision: Decision,
  /// The allowlist entry that opened the destination.
  pub rule: Option<String>,
  /// Why it was refused or cut short.
  pub reason: Option<String>,
  pub address: Option<std::net::SocketAddr>,
  pub bytes_up: u64,
  pub bytes_down: u64,
  pub duration: std::time::Duration,
}

impl ConnectionRecord {
  /// The entry the supervisor writes to the pool's audit log: `command: "egress"`, `args`:
  /// the kind and `host:port`.
  pub fn to_audit_entry(&self) -> AuditEntry {
    let action = match self.decision {
      Decision::Allowed => Action::Allow,
      Decision::Refused => Action::Deny,
    };
    let mut e = AuditEntry::new(
      action,
      "egress",
      &[self.kind.to_owned(), format!("{}:{}", self.host, self.port)],
    );
    e.reason = self.reason.clone();
    e.duration = serde_json::Number::from_f64(self.duration.as_secs_f64() * 1000.0);
    e.egress = Some(EgressRecord {
      job: self.job.clone(),
      host: self.host.clone(),
      port: self.port,
      rule: self.rule.clone(),
      address: self.address.map(|a| a.to_string()),
      bytes_up: self.bytes_up,
      bytes_down: self.bytes_down,
    });
    e
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_record_becomes_an_audit_entry_with_its_bytes() {
    let r = ConnectionRecord {
      job: "j1".into(),
      kind: "CONNECT",
      host: "allowed.test".into(),
      port: 443,
      decision: Decision::Allowed,
      rule: Some("allowed.test".into()),
      reason: None,
      address: Some("127.0.0.1:443".parse().unwrap()),
      bytes_up: 10,
      bytes_down: 20,
      duration: std::time::Duration::from_millis(5),
    };
    let v = serde_json::to_value(r.to_audit_entry()).unwrap();
    assert_eq!(v["action"], "allow");
    assert_eq!(v["command"], "egress");
    assert_eq!(
      v["args"],
      serde_json::json!(["CONNECT", "allowed.test:443"])
    );
    assert_eq!(
      v["egress"],
      serde_json::json!({"job": "j1", "host": "allowed.test", "port": 443,
        "rule": "allowed.test", "address": "127.0.0.1:443", "bytesUp": 10, "bytesDown": 20})
    );
  }
}
