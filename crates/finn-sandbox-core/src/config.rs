//! What the sandbox is configured with, and what a command resolves with.

use std::collections::BTreeMap;

use super::isolation::SandboxIsolation;
use finn_job::isolation::NetworkOptions;
use finn_policy::CommandPolicy;

/// `FinnConfig["sandbox"]`, plus optional policies replacing the defaults.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
  pub allow_bash: bool,
  pub jail_root: String,
  pub exec_timeout_ms: u64,
  pub max_output: u64,
  pub policies: Option<BTreeMap<String, CommandPolicy>>,
  /// A policy's `network` by the policy's name: the allowlist its commands reach through the
  /// pool's egress proxy (none other gets the network but git's fetch, clone and push).
  pub networks: BTreeMap<String, NetworkOptions>,
  /// Validated at construction; `{ mode: "auto" }` by default.
  pub isolation: SandboxIsolation,
}

/// A command's redacted outcome, as loa-finn's `SandboxResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub timed_out: bool,
  pub truncated: bool,
}
