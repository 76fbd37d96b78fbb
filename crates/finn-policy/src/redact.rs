//! Secret redaction of command output.

use regex::Regex;
use std::sync::LazyLock;

pub const REDACTED: &str = "[REDACTED]";

/// loa-finn's list, plus the common credentials it missed.
pub const SECRET_ENV_KEYS: &[&str] = &[
  "ANTHROPIC_API_KEY",
  "R2_ACCESS_KEY_ID",
  "R2_SECRET_ACCESS_KEY",
  "FINN_AUTH_TOKEN",
  "GIT_TOKEN",
  "GITHUB_TOKEN",
  "GH_TOKEN",
  "OPENAI_API_KEY",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "CHEVAL_HMAC_SECRET",
];

/// Values shorter than this are too likely to occur by chance.
pub const MIN_SECRET_LEN: usize = 8;

static ANTHROPIC_KEY: LazyLock<Regex> =
  LazyLock::new(|| Regex::new(r"sk-ant-api[A-Za-z0-9_-]{20,}").expect("valid regex"));
static LABELLED: LazyLock<Regex> = LazyLock::new(|| {
  Regex::new(r#"(?i)((?:key|token|secret|password)["'\s:=]+["']?)([A-Za-z0-9_\-/.+]{20,})"#)
    .expect("valid regex")
});

#[derive(Debug, Clone, Default)]
pub struct SecretRedactor {
  /// Longest first, so a secret containing another is replaced whole.
  values: Vec<String>,
}

impl SecretRedactor {
  /// Collects the values of [`SECRET_ENV_KEYS`] that are at least [`MIN_SECRET_LEN`] long.
  pub fn new<'a>(env: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
    let mut values: Vec<String> = env
      .into_iter()
      .filter(|(k, v)| SECRET_ENV_KEYS.contains(k) && v.len() >= MIN_SECRET_LEN)
      .map(|(_, v)| v.to_owned())
      .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    SecretRedactor { values }
  }

  /// Known values anywhere, then `sk-ant-api…` keys anywhere (loa-finn only caught them at
  /// offset 0), then a 20+ character value after a key/token/secret/password label (the label
  /// is kept).
  pub fn redact(&self, text: &str) -> String {
    let mut out = text.to_owned();
    for value in &self.values {
      if out.contains(value.as_str()) {
        out = out.replace(value.as_str(), REDACTED);
      }
    }
    let out = ANTHROPIC_KEY.replace_all(&out, REDACTED);
    LABELLED
      .replace_all(&out, format!("${{1}}{REDACTED}"))
      .into_owned()
  }

  /// Like [`Self::redact`] for output that was cut at `marker`: a secret whose start survived
  /// the cut (4 or more characters of it right before the marker) is redacted too.
  pub fn redact_truncated(&self, text: &str, marker: &str) -> String {
    let Some(body) = text.strip_suffix(marker) else {
      return self.redact(text);
    };
    let mut body = body.to_owned();
    for value in &self.values {
      let cut = (4..value.len())
        .rev()
        .find(|&n| value.is_char_boundary(n) && body.ends_with(&value[..n]));
      if let Some(n) = cut {
        body.truncate(body.len() - n);
        body.push_str(REDACTED);
        break;
      }
    }
    format!("{}{marker}", self.redact(&body))
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn redactor() -> SecretRedactor {
    SecretRedactor::new([
      ("ANTHROPIC_API_KEY", "sk-ant-api-my-very-secret-key-12345"),
      ("FINN_AUTH_TOKEN", "short"),
    ])
  }

  #[test]
  fn values_patterns_and_labels() {
    let r = redactor();
    assert_eq!(
      r.redact("The key is sk-ant-api-my-very-secret-key-12345 and more"),
      "The key is [REDACTED] and more"
    );
    assert_eq!(r.redact("Token is short"), "Token is short");
    assert_eq!(
      r.redact(r#"token: "abc123def456ghi789jkl012mnop""#),
      r#"token: "[REDACTED]""#
    );
    assert_eq!(
      r.redact("Hello world, no secrets here."),
      "Hello world, no secrets here."
    );
  }

  #[test]
  fn anthropic_keys_in_the_middle_of_text() {
    let r = SecretRedactor::default();
    assert_eq!(
      r.redact("found sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWX in logs"),
      "found [REDACTED] in logs"
    );
  }

  #[test]
  fn a_secret_cut_by_truncation_is_still_redacted() {
    let r = redactor();
    let marker = "\n[TRUNCATED at maxBuffer]";
    let text = format!("leak: sk-ant-api-my-very{marker}");
    assert_eq!(
      r.redact_truncated(&text, marker),
      format!("leak: [REDACTED]{marker}")
    );
    let plain = format!("nothing{marker}");
    assert_eq!(r.redact_truncated(&plain, marker), plain);
  }
}
