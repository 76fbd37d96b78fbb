//! ToolSandbox: loa-finn's nine-stage pipeline. `prepare` runs stages 1-7 (gate, tokenize,
//! policy, subcommand, flags, jail, binary, audit allow) and yields the job; whoever executes it
//! (the native pool, or any JS executor) hands the outcome to `complete` for stage 9 (redact,
//! audit the outcome).

use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

use super::command::{self, CommandPolicy};
use super::error::Denial;
use super::jail::FilesystemJail;
use super::redact::SecretRedactor;
use super::tokenize::{self, SandboxCommand};
use crate::core::audit::{Action, AuditEntry, AuditLog};
use crate::core::exec::TRUNCATION_MARKER;
use crate::core::pool::RawJob;

/// `FinnConfig["sandbox"]`, plus optional policies replacing the defaults.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
  pub allow_bash: bool,
  pub jail_root: String,
  pub exec_timeout_ms: u64,
  pub max_output: u64,
  pub policies: Option<BTreeMap<String, CommandPolicy>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SandboxResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  pub timed_out: bool,
  pub truncated: bool,
}

/// How the executor ended a prepared command.
#[derive(Debug, Clone)]
pub enum ExecOutcome {
  Finished {
    stdout: String,
    stderr: String,
    exit_code: i32,
    truncated: bool,
  },
  /// The executor rejected with EXEC_TIMEOUT (the tree is dead); its message.
  TimedOut(String),
  /// Any other rejection: its code (or message) for the audit trail.
  Failed(String),
  /// No executor was configured.
  NoExecutor,
}

/// A command that passed stages 1-7: the job to run and the allow entry to complete.
#[derive(Debug, Clone)]
pub struct Prepared {
  pub job: RawJob,
  allow: AuditEntry,
  started: Instant,
}

const READ_ONLY: [&str; 3] = ["ls", "cat", "wc"];

pub struct ToolSandbox {
  config: SandboxConfig,
  jail: FilesystemJail,
  redactor: SecretRedactor,
  audit: AuditLog,
  env: Vec<(String, String)>,
  policies: BTreeMap<String, CommandPolicy>,
}

impl ToolSandbox {
  /// Resolves the jail (it must exist) and the policies' binaries once, and builds the redactor
  /// from `secrets_env` (the process environment at construction, as loa-finn did).
  pub fn new(
    config: SandboxConfig,
    audit: AuditLog,
    secrets_env: &[(String, String)],
  ) -> io::Result<Self> {
    let mut jail = FilesystemJail::new(&config.jail_root)?;
    jail.hide(audit.log_dir());
    let env = super::env::sandbox_env(jail.root());
    let policies = config
      .policies
      .clone()
      .unwrap_or_else(|| command::default_policies(&std::env::var("PATH").unwrap_or_default()));
    Ok(ToolSandbox {
      redactor: SecretRedactor::new(secrets_env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
      config,
      jail,
      audit,
      env,
      policies,
    })
  }

  pub fn jail(&self) -> &FilesystemJail {
    &self.jail
  }

  pub fn tokenize(&self, command: &str) -> Result<SandboxCommand, Denial> {
    tokenize::tokenize(command)
  }

  fn deny(&self, command: &str, args: &[String], denial: Denial, fallback_reason: &str) -> Denial {
    let reason = denial
      .reason
      .clone()
      .unwrap_or_else(|| format!("{fallback_reason}: {}", denial.message));
    self
      .audit
      .append(&AuditEntry::new(Action::Deny, command, args).with_reason(reason));
    denial
  }

  /// Stages 1-7. Every refusal is audited with its reason before it is returned.
  pub fn prepare(
    &self,
    command_string: &str,
    session_id: Option<String>,
  ) -> Result<Prepared, Denial> {
    // 1. Gate.
    if !self.config.allow_bash {
      let denial = Denial::audited(
        "Bash execution is disabled (set FINN_ALLOW_BASH=true)",
        "bash_disabled",
      );
      return Err(self.deny(command_string, &[], denial, "bash_disabled"));
    }
    // 2. Tokenize (loa-finn did not audit these; every deny is audited here).
    let cmd = self
      .tokenize(command_string)
      .map_err(|d| self.deny(command_string, &[], d, "tokenize_rejected"))?;
    // 3-5. Policy, subcommand, denied flags.
    let policy = command::check(&cmd, &self.policies)
      .map_err(|d| self.deny(&cmd.binary, &cmd.args, d, "policy"))?;
    // 6. Jail: arguments checked by the role the program gives them; git's repository checked
    // and pinned.
    let jailed = super::jail_args::jail_args(&cmd, policy, &self.jail)
      .map_err(|d| self.deny(&cmd.binary, &cmd.args, d, "path_rejected"))?;
    let args = jailed.args;
    // 6a. The binary's realpath, now (a missing one fails closed).
    let binary_path = std::fs::canonicalize(&policy.binary).map_err(|_| {
      let denial = Denial::audited(
        format!("Binary not available: {}", cmd.binary),
        format!("binary_not_found_or_unresolvable: {}", policy.binary),
      );
      self.deny(&cmd.binary, &cmd.args, denial, "binary")
    })?;
    // 7. Audit before execution; only the read-only commands run when that fails.
    let allow = AuditEntry::new(Action::Allow, &cmd.binary, &cmd.args);
    if !self.audit.append(&allow) {
      if READ_ONLY.contains(&cmd.binary.as_str()) {
        tracing::warn!(binary = %cmd.binary, "audit log failed; allowing a read-only command in degraded mode");
      } else {
        return Err(Denial::plain(
          "Audit log write failed — command denied (fail-closed)",
        ));
      }
    }
    let job = RawJob {
      binary_path: binary_path.to_string_lossy().into_owned(),
      args,
      cwd: self.jail.root().to_string_lossy().into_owned(),
      env: self.env.iter().cloned().chain(jailed.env).collect(),
      timeout_ms: Some(self.config.exec_timeout_ms),
      max_buffer: Some(self.config.max_output),
      session_id,
      jail_root: Some(self.jail.root().to_string_lossy().into_owned()),
      lane: None,
    };
    Ok(Prepared {
      job,
      allow,
      started: Instant::now(),
    })
  }

  /// Stage 9: redact and audit the outcome. `Err` carries the executor's failure back after it
  /// was audited as `execution_failed: <code>`.
  pub fn complete(
    &self,
    prepared: Prepared,
    outcome: ExecOutcome,
  ) -> Result<SandboxResult, String> {
    let mut entry = prepared.allow;
    entry.timestamp = crate::core::audit::iso_timestamp_now();
    entry.duration = Some((prepared.started.elapsed().as_millis() as u64).into());
    let result = match outcome {
      ExecOutcome::Failed(code) => {
        entry.reason = Some(format!("execution_failed: {code}"));
        self.audit.append(&entry);
        return Err(code);
      }
      ExecOutcome::NoExecutor => {
        entry.reason = Some("no_executor".into());
        SandboxResult {
          stdout: String::new(),
          stderr: "Sandbox is disabled (no executor available)".into(),
          exit_code: 1,
          timed_out: false,
          truncated: false,
        }
      }
      ExecOutcome::TimedOut(message) => SandboxResult {
        stdout: String::new(),
        stderr: message,
        exit_code: 137,
        timed_out: true,
        truncated: false,
      },
      ExecOutcome::Finished {
        stdout,
        stderr,
        exit_code,
        truncated,
      } => SandboxResult {
        stdout: self.redactor.redact_truncated(&stdout, TRUNCATION_MARKER),
        stderr: self.redactor.redact_truncated(&stderr, TRUNCATION_MARKER),
        exit_code,
        timed_out: false,
        truncated,
      },
    };
    entry.output_size = Some(((result.stdout.len() + result.stderr.len()) as u64).into());
    entry.exit_code = Some(result.exit_code);
    entry.timed_out = Some(result.timed_out);
    entry.truncated = Some(result.truncated);
    self.audit.append(&entry);
    Ok(result)
  }
}
