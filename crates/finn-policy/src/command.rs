//! Command policies: which binaries, which subcommands, which flags.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::Denial;
use super::tokenize::SandboxCommand;

/// One allowed binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPolicy {
  /// Absolute, realpath-resolved binary, or `/__missing_binary__/<name>` (fails closed).
  pub binary: String,
  /// When non-empty, the first argument must be one of these.
  pub subcommands: Vec<String>,
  /// Refused in every spelling the program accepts: through its option table for `ls`, `cat`,
  /// `wc` (`-L` and `--dereference` are one option), otherwise as `-x` anywhere in a short
  /// cluster, `--flag`, `--flag=value` and every prefix of a long flag down to one letter. git's
  /// subcommands also take only the options on an allowlist (`git_options.rs`).
  pub denied_flags: Vec<String>,
  /// Non-flag arguments must be paths inside the jail.
  pub validate_paths: bool,
}

/// Where a binary that cannot be found resolves: dispatch then fails closed.
pub const MISSING_BINARY_DIR: &str = "/__missing_binary__";

/// Finds `name` in `path_var` and canonicalizes it, as loa-finn's `which` + `realpath` did, but
/// without running a process.
pub fn resolve_binary(name: &str, path_var: &str) -> String {
  for dir in path_var.split(':').filter(|d| d.starts_with('/')) {
    let candidate = Path::new(dir).join(name);
    if let Ok(meta) = std::fs::metadata(&candidate)
      && meta.is_file()
      && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0
      && let Ok(real) = std::fs::canonicalize(&candidate)
    {
      return real.to_string_lossy().into_owned();
    }
  }
  format!("{MISSING_BINARY_DIR}/{name}")
}

fn strings(items: &[&str]) -> Vec<String> {
  items.iter().map(|s| (*s).to_owned()).collect()
}

/// loa-finn's policies, with the flags that escaped its jail denied (`git diff --no-index`,
/// `git log --output=`, `wc --files0-from=`, and the options that run external programs).
pub fn default_policies(path_var: &str) -> BTreeMap<String, CommandPolicy> {
  let git_denied = [
    "-c",
    "--exec-path",
    "--git-dir",
    "--work-tree",
    "--no-index",
    "--output",
    "--ext-diff",
    "--textconv",
  ];
  let mut policies = BTreeMap::new();
  policies.insert(
    "git".to_owned(),
    CommandPolicy {
      binary: resolve_binary("git", path_var),
      subcommands: strings(&["log", "status", "diff", "show", "rev-parse"]),
      denied_flags: strings(&git_denied),
      validate_paths: false,
    },
  );
  policies.insert(
    "br".to_owned(),
    CommandPolicy {
      binary: resolve_binary("br", path_var),
      subcommands: strings(&["list", "get", "sync"]),
      denied_flags: Vec::new(),
      validate_paths: false,
    },
  );
  for name in ["ls", "cat", "wc"] {
    policies.insert(
      name.to_owned(),
      CommandPolicy {
        binary: resolve_binary(name, path_var),
        subcommands: Vec::new(),
        // Options that read a list of files (wc) or follow symlinks out of the jail (ls).
        denied_flags: match name {
          "wc" => strings(&["--files0-from"]),
          "ls" => strings(&[
            "--dereference",
            "--dereference-command-line",
            "--dereference-command-line-symlink-to-dir",
          ]),
          _ => Vec::new(),
        },
        validate_paths: true,
      },
    );
  }
  policies
}

/// Stages 3-5: the policy for the binary, its subcommand, its flags.
pub fn check<'p>(
  cmd: &SandboxCommand,
  policies: &'p BTreeMap<String, CommandPolicy>,
) -> Result<&'p CommandPolicy, Denial> {
  let Some(policy) = policies.get(&cmd.binary) else {
    return Err(Denial::audited(
      format!("Command not allowed: {}", cmd.binary),
      format!("binary_not_allowed: {}", cmd.binary),
    ));
  };
  if !policy.subcommands.is_empty() {
    let Some(sub) = cmd.args.first() else {
      return Err(Denial::audited(
        format!("Subcommand required for: {}", cmd.binary),
        "subcommand_required",
      ));
    };
    if !policy.subcommands.contains(sub) {
      return Err(Denial::audited(
        format!("Subcommand not allowed: {} {sub}", cmd.binary),
        format!("subcommand_denied: {sub}"),
      ));
    }
  }
  super::argv::roles(&cmd.binary, policy, &cmd.args)?;
  Ok(policy)
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::tokenize::tokenize;

  fn denied(command: &str) -> Option<String> {
    let policies = default_policies("/usr/bin:/bin");
    check(&tokenize(command).unwrap(), &policies)
      .err()
      .map(|d| d.message)
  }

  #[test]
  fn loa_finn_messages() {
    assert_eq!(
      denied("curl x").as_deref(),
      Some("Command not allowed: curl")
    );
    assert_eq!(
      denied("git").as_deref(),
      Some("Subcommand required for: git")
    );
    assert_eq!(
      denied("git push").as_deref(),
      Some("Subcommand not allowed: git push")
    );
    assert_eq!(
      denied("git log -c").as_deref(),
      Some("Flag not allowed: -c")
    );
    assert_eq!(
      denied("git log -ccore.pager=x").as_deref(),
      Some("Flag not allowed: -c")
    );
    assert_eq!(
      denied("git log --exec-path=/tmp").as_deref(),
      Some("Flag not allowed: --exec-path")
    );
    assert_eq!(denied("git log --oneline"), None);
    assert_eq!(denied("ls -la"), None);
  }

  #[test]
  fn jail_escaping_flags_and_their_abbreviations_are_denied() {
    assert_eq!(
      denied("git diff --no-index /etc/passwd x").as_deref(),
      Some("Flag not allowed: --no-index")
    );
    assert_eq!(
      denied("git log --output=/tmp/x").as_deref(),
      Some("Flag not allowed: --output")
    );
    assert_eq!(
      denied("git log --outp=/tmp/x").as_deref(),
      Some("Flag not allowed: --output")
    );
    assert_eq!(
      denied("git diff --ext-diff").as_deref(),
      Some("Flag not allowed: --ext-diff")
    );
    assert_eq!(
      denied("wc --files0-from=/etc/passwd").as_deref(),
      Some("Flag not allowed: --files0-from")
    );
    assert_eq!(
      denied("wc --files0=/etc/passwd").as_deref(),
      Some("Flag not allowed: --files0-from")
    );
    // Different options that merely share a short prefix stay allowed.
    assert_eq!(denied("git log --oneline --no-merges"), None);
    // Not on git diff's allowlist, though not a prefix of a denied flag.
    assert_eq!(
      denied("git diff --output-indicator-new=+").as_deref(),
      Some("Flag not allowed: --output-indicator-new=+ (not an option git diff is allowed)")
    );
  }
}
