//! One audit record, serialized as loa-finn's `JSON.stringify(entry)` would (same field order).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
  Allow,
  Deny,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
  pub timestamp: String,
  pub action: Action,
  pub command: String,
  pub args: Vec<String>,
  #[serde(skip_serializing_if = "Option::is_none")]
  pub reason: Option<String>,
  /// Milliseconds.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub duration: Option<serde_json::Number>,
  /// Bytes of redacted stdout+stderr.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub output_size: Option<serde_json::Number>,
  /// Outcome fields loa-finn's entries lacked.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub exit_code: Option<i32>,
  #[serde(skip_serializing_if = "Option::is_none")]
  pub timed_out: Option<bool>,
  #[serde(skip_serializing_if = "Option::is_none")]
  pub truncated: Option<bool>,
  /// The isolation the command ran under (on outcome entries of commands that ran).
  #[serde(skip_serializing_if = "Option::is_none")]
  pub isolation: Option<IsolationRecord>,
  /// On an egress proxy's connection entry (`command: "egress"`): where it went and its bytes.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub egress: Option<EgressRecord>,
  /// Set on an entry capped by the writer: its serialized size before the cap.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub original_size: Option<u64>,
  /// Set on a capped entry: SHA-256 (hex) of the JSON `[command, args]` before the cap.
  #[serde(skip_serializing_if = "Option::is_none")]
  pub sha256: Option<String>,
}

/// What isolation a command ran under: the backend (`native`, `off`, `none` for a runner that
/// applies none), the layers applied and those asked for but missing, each with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IsolationRecord {
  pub backend: String,
  pub applied: Vec<String>,
  pub degraded: Vec<String>,
}

/// One connection through the egress proxy: the job, the destination as the command named
/// it, the allowlist entry that opened it (none when refused), the address connected to, and
/// the bytes each way (`up`: from the command).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressRecord {
  pub job: String,
  pub host: String,
  pub port: u16,
  #[serde(skip_serializing_if = "Option::is_none")]
  pub rule: Option<String>,
  #[serde(skip_serializing_if = "Option::is_none")]
  pub address: Option<String>,
  pub bytes_up: u64,
  pub bytes_down: u64,
}

impl AuditEntry {
  pub fn new(action: Action, command: &str, args: &[String]) -> Self {
    AuditEntry {
      timestamp: iso_timestamp_now(),
      action,
      command: command.to_owned(),
      args: args.to_vec(),
      reason: None,
      duration: None,
      output_size: None,
      exit_code: None,
      timed_out: None,
      truncated: None,
      isolation: None,
      egress: None,
      original_size: None,
      sha256: None,
    }
  }

  pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
    self.reason = Some(reason.into());
    self
  }
}

/// `new Date().toISOString()`: `2026-11-22T03:17:00.123Z`.
pub fn iso_timestamp_now() -> String {
  let since_epoch = std::time::SystemTime::now()
    .duration_since(std::time::UNIX_EPOCH)
    .unwrap_or_default();
  iso_timestamp(since_epoch.as_millis() as i64)
}

pub fn iso_timestamp(millis: i64) -> String {
  let (days, ms_of_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
  // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
  let z = days + 719_468;
  let era = z.div_euclid(146_097);
  let doe = z.rem_euclid(146_097);
  let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
  let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  let mp = (5 * doy + 2) / 153;
  let day = doy - (153 * mp + 2) / 5 + 1;
  let month = if mp < 10 { mp + 3 } else { mp - 9 };
  let year = yoe + era * 400 + i64::from(month <= 2);
  let (h, m, s, ms) = (
    ms_of_day / 3_600_000,
    ms_of_day / 60_000 % 60,
    ms_of_day / 1000 % 60,
    ms_of_day % 1000,
  );
  format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn timestamps_match_to_iso_string() {
    assert_eq!(iso_timestamp(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(iso_timestamp(1_795_317_420_123), "2026-11-22T03:17:00.123Z");
  }

  #[test]
  fn serializes_in_loa_finn_field_order() {
    let mut e = AuditEntry::new(Action::Allow, "ls", &["-la".into()]);
    e.timestamp = "T".into();
    e.duration = Some(12.into());
    assert_eq!(
      serde_json::to_string(&e).unwrap(),
      r#"{"timestamp":"T","action":"allow","command":"ls","args":["-la"],"duration":12}"#
    );
  }
}
