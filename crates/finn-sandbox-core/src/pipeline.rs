//! ToolSandbox: loa-finn's nine-stage pipeline. Stages 1-7 (gate, tokenize, policy,
//! subcommand, flags, jail, binary, audit allow) decide and yield the job; an injected
//! [`Runner`] runs it (stage 8); stage 9 redacts and audits the outcome. Every refusal, the
//! policy's or the runner's, is audited here before it is returned.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::check_slots::CheckSlots;
use super::config::{SandboxConfig, SandboxResult};
use super::runner::{Done, RunOutcome, Runner, RunnerError};
use finn_audit::{Action, AuditEntry, AuditLog, IsolationRecord, iso_timestamp_now};
use finn_job::{RawJob, TRUNCATION_MARKER};
use finn_policy::host_git::{Cancel, REPOSITORY_CHECK_MS, Watch};
use finn_policy::topology::{self, Writes};
use finn_policy::{
  self as policy, CommandPolicy, Denial, FilesystemJail, SandboxCommand, SecretRedactor,
};

/// Why [`ToolSandbox::execute`] did not start a command; audited either way.
#[derive(Debug)]
pub enum Refusal<E> {
  /// The policy refused it (the message is loa-finn's).
  Denied(Denial),
  /// The runner refused the job at once (a full queue, a closed pool, an invalid spec).
  NotRun(E),
}

/// A command stages 1-7 allowed (see [`ToolSandbox::check`]), waiting to be started.
pub struct CheckedCommand {
  job: RawJob,
  pending: Pending,
}

impl CheckedCommand {
  /// Runs the command from `cwd` (a directory the caller checked inside the jail) with `env`
  /// added: a structured tool's search runs from the directory it searches, so that its output
  /// names are relative, in the locale it needs.
  pub fn run_from(&mut self, cwd: &std::path::Path, env: Vec<(String, String)>) {
    self.job.cwd = cwd.to_string_lossy().into_owned();
    self.job.env.extend(env);
  }

  /// Caps the command's output below the sandbox's `maxOutput`: a tool that shows only a page
  /// of a file need not carry the rest of it through the runner.
  pub fn limit_output(&mut self, max_bytes: u64) {
    self.job.max_buffer = Some(self.job.max_buffer.map_or(max_bytes, |m| m.min(max_bytes)));
  }
}

/// An allowed command's audit entry, completed once the runner answers.
struct Pending {
  allow: AuditEntry,
  started: Instant,
  /// The command may write the jail (for the audit's note on the hidden directories).
  writes_jail: bool,
}

const READ_ONLY: [&str; 3] = ["ls", "cat", "wc"];

pub struct ToolSandbox {
  config: SandboxConfig,
  jail: FilesystemJail,
  /// The jail as host tools check agent paths with it (`getJail()`).
  host_jail: FilesystemJail,
  redactor: SecretRedactor,
  audit: AuditLog,
  env: Vec<(String, String)>,
  policies: BTreeMap<String, CommandPolicy>,
  /// Added to every command's `denyRead`: the audit directory, wherever it lies (the jail hides
  /// it only when it lies inside).
  deny_read: Vec<std::path::PathBuf>,
  /// How many of this sandbox's repository checks run at once.
  check_slots: CheckSlots,
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
    let discarding = audit.is_discarding();
    if !discarding {
      jail.hide(audit.log_dir());
    }
    // A host tool's check cannot tell a read from a write: it refuses what commands may not
    // write too. Commands' own operands (`cat .git/config`) are reads, checked by `jail`.
    let mut host_jail = jail.clone();
    for path in config.isolation.protected(jail.root()) {
      host_jail.protect(&path);
    }
    let mut deny_read = jail.hidden().to_vec();
    let audit_dir = policy::jail::host_path(audit.log_dir());
    if !discarding && !deny_read.contains(&audit_dir) {
      deny_read.push(audit_dir);
    }
    let env = policy::env::sandbox_env(jail.root());
    let policies = config
      .policies
      .clone()
      .unwrap_or_else(|| policy::default_policies(&std::env::var("PATH").unwrap_or_default()));
    Ok(ToolSandbox {
      redactor: SecretRedactor::new(secrets_env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
      config,
      jail,
      host_jail,
      audit,
      env,
      policies,
      deny_read,
      check_slots: CheckSlots::new()?,
    })
  }

  pub fn jail(&self) -> &FilesystemJail {
    &self.jail
  }

  /// The jail for a host tool's checks of the agent's paths: the commands' jail (its root,
  /// the hidden audit directory), refusing as well every path no command may write (the
  /// isolation's `fs.protect`, `.git/hooks` and `.git/config` by default).
  pub fn host_jail(&self) -> &FilesystemJail {
    &self.host_jail
  }

  pub fn tokenize(&self, command: &str) -> Result<SandboxCommand, Denial> {
    policy::tokenize(command)
  }

  /// The whole pipeline for one command on `runner`. Returns the runner's id for the job;
  /// `on_done` later receives that id and the redacted result, or the runner's error (after
  /// it was audited as `execution_failed: <code>`).
  pub fn execute<R: Runner>(
    self: &Arc<Self>,
    command: &str,
    session_id: Option<String>,
    runner: &R,
    on_done: impl FnOnce(u64, Result<SandboxResult, R::Error>) + Send + 'static,
  ) -> Result<u64, Refusal<R::Error>> {
    let checked = self
      .check(command, session_id, None)
      .map_err(Refusal::Denied)?;
    self
      .start(checked, runner, on_done)
      .map_err(Refusal::NotRun)
  }

  /// Stages 1-7 alone: the part that reads the file system, runs git to check a repository
  /// and writes the audit log, so a caller can run it off Node's thread. `cancel` (the job's
  /// abort) ends a repository check early. The allowed command then goes to [`Self::start`]; a
  /// refusal is already audited.
  pub fn check(
    &self,
    command: &str,
    session_id: Option<String>,
    cancel: Option<&Cancel>,
  ) -> Result<CheckedCommand, Denial> {
    let (job, pending) = self.prepare(command, session_id, cancel)?;
    Ok(CheckedCommand { job, pending })
  }

  /// Stage 8 onwards for a command [`Self::check`] allowed; a runner's refusal is audited and
  /// returned.
  pub fn start<R: Runner>(
    self: &Arc<Self>,
    checked: CheckedCommand,
    runner: &R,
    on_done: impl FnOnce(u64, Result<SandboxResult, R::Error>) + Send + 'static,
  ) -> Result<u64, R::Error> {
    let CheckedCommand { job, pending } = checked;
    // Shared with the completion: a runner that refuses the job drops the completion
    // uncalled, and the refusal is audited from here.
    let slot = Arc::new(Mutex::new(Some(pending)));
    let in_done = Arc::clone(&slot);
    let sandbox = Arc::clone(self);
    let done: Done<R::Error> = Box::new(move |id, outcome| {
      if let Some(pending) = take(&in_done) {
        on_done(id, sandbox.complete(pending, outcome));
      }
    });
    runner.run(job, done).inspect_err(|e| {
      if let Some(pending) = take(&slot) {
        self.audit_failure(pending, e);
      }
    })
  }

  /// Audits a call refused before the pipeline saw a command (a structured tool's own argument
  /// or path check): a `deny` entry with `reason`.
  pub fn audit_refusal(&self, command: &str, args: &[String], reason: String) {
    self
      .audit
      .append(&AuditEntry::new(Action::Deny, command, args).with_reason(reason));
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
  fn prepare(
    &self,
    command_string: &str,
    session_id: Option<String>,
    cancel: Option<&Cancel>,
  ) -> Result<(RawJob, Pending), Denial> {
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
    self.prepare_command(cmd, session_id, cancel)
  }

  /// Stages 3-7 for a command given as an argument vector (no shell syntax to tokenize: each
  /// element is one argument, spaces included), as the structured tools (`finn-tools`) build
  /// it. Stage 1's gate applies as for [`Self::check`].
  pub fn check_argv(
    &self,
    cmd: SandboxCommand,
    session_id: Option<String>,
    cancel: Option<&Cancel>,
  ) -> Result<CheckedCommand, Denial> {
    if !self.config.allow_bash {
      let denial = Denial::audited(
        "Bash execution is disabled (set FINN_ALLOW_BASH=true)",
        "bash_disabled",
      );
      return Err(self.deny(&cmd.binary, &cmd.args, denial, "bash_disabled"));
    }
    let (job, pending) = self.prepare_command(cmd, session_id, cancel)?;
    Ok(CheckedCommand { job, pending })
  }

  fn prepare_command(
    &self,
    cmd: SandboxCommand,
    session_id: Option<String>,
    cancel: Option<&Cancel>,
  ) -> Result<(RawJob, Pending), Denial> {
    // 3-5. Policy, subcommand, denied flags.
    let policy = policy::command::check(&cmd, &self.policies)
      .map_err(|d| self.deny(&cmd.binary, &cmd.args, d, "policy"))?;
    // 6. Jail: arguments checked by the role the program gives them; git's repository checked
    // and pinned, once one of the process's check slots is free, within the check's time bound.
    let slot = match cmd.binary.as_str() {
      "git" => Some(
        self
          .check_slots
          .acquire(cancel)
          .map_err(|d| self.deny(&cmd.binary, &cmd.args, d, "aborted"))?,
      ),
      _ => None,
    };
    let watch = Watch::new(REPOSITORY_CHECK_MS, cancel).reading_beneath(self.jail.root());
    let jailed = policy::jail_args::jail_args(&cmd, policy, &self.jail, &watch)
      .map_err(|d| self.deny(&cmd.binary, &cmd.args, d, "path_rejected"))?;
    drop(slot);
    let args = jailed.args;
    // 6a. The binary's realpath, now (a missing one fails closed).
    let binary_path = std::fs::canonicalize(&policy.binary).map_err(|_| {
      let denial = Denial::audited(
        format!("Binary not available: {}", cmd.binary),
        format!("binary_not_found_or_unresolvable: {}", policy.binary),
      );
      self.deny(&cmd.binary, &cmd.args, denial, "binary")
    })?;
    // 6b. The isolation this command gets, from what it runs (`policy/topology.rs`). git's
    // optional index refresh is already off in the sandbox env (`GIT_OPTIONAL_LOCKS=0`), so
    // read-only git needs no write access to the repository.
    let mut topology = topology::topology(&cmd.binary, &cmd.args).ok_or_else(|| {
      let sub = cmd.args.first().map_or("", String::as_str);
      let denial = Denial::audited(
        format!("Subcommand not allowed: {} {sub}", cmd.binary),
        format!("no_isolation_topology: {sub}"),
      );
      self.deny(&cmd.binary, &cmd.args, denial, "topology")
    })?;
    // A fetch or push whose remote is inside the jail needs no network: without it, what the
    // remote's `receive-pack` runs (a hook planted between the check and the run) reaches
    // nothing.
    if jailed.offline {
      topology.network = topology::Network::Deny;
      topology.reads_jail = true;
    }
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
    let root = self.jail.root().to_string_lossy().into_owned();
    let job = RawJob {
      binary_path: binary_path.to_string_lossy().into_owned(),
      args,
      cwd: root.clone(),
      env: self.env.iter().cloned().chain(jailed.env).collect(),
      timeout_ms: Some(self.config.exec_timeout_ms),
      max_buffer: Some(self.config.max_output),
      session_id,
      jail_root: Some(root),
      lane: None,
      isolation: self.config.isolation.for_command(
        topology,
        self.jail.root(),
        &binary_path,
        &self.deny_read,
        &jailed.hosts,
        self.config.networks.get(&cmd.binary),
      ),
    };
    let pending = Pending {
      allow,
      started: Instant::now(),
      writes_jail: topology.writes == Writes::Jail,
    };
    Ok((job, pending))
  }

  /// Stage 9: redact and audit the outcome. `Err` carries the runner's failure back after it
  /// was audited as `execution_failed: <code>`.
  fn complete<E: RunnerError>(
    &self,
    pending: Pending,
    outcome: RunOutcome<E>,
  ) -> Result<SandboxResult, E> {
    let mut isolation = None;
    let (result, reason) = match outcome {
      RunOutcome::Failed(e) => {
        self.audit_failure(pending, &e);
        return Err(e);
      }
      RunOutcome::NoRunner => {
        let result = SandboxResult {
          stdout: String::new(),
          stderr: "Sandbox is disabled (no executor available)".into(),
          exit_code: 1,
          timed_out: false,
          truncated: false,
        };
        (result, Some("no_executor"))
      }
      RunOutcome::TimedOut(message) => {
        let result = SandboxResult {
          stdout: String::new(),
          stderr: message,
          exit_code: 137,
          timed_out: true,
          truncated: false,
        };
        (result, None)
      }
      RunOutcome::Finished(out) => {
        isolation = Some(self.isolation_record(out.isolation, pending.writes_jail));
        let result = SandboxResult {
          stdout: self
            .redactor
            .redact_truncated(&out.stdout, TRUNCATION_MARKER),
          stderr: self
            .redactor
            .redact_truncated(&out.stderr, TRUNCATION_MARKER),
          exit_code: out.exit_code,
          timed_out: false,
          truncated: out.truncated,
        };
        (result, None)
      }
    };
    let mut entry = pending.into_entry();
    entry.reason = reason.map(Into::into);
    entry.output_size = Some(((result.stdout.len() + result.stderr.len()) as u64).into());
    entry.exit_code = Some(result.exit_code);
    entry.timed_out = Some(result.timed_out);
    entry.truncated = Some(result.truncated);
    entry.isolation = isolation;
    self.audit.append(&entry);
    Ok(result)
  }

  /// The runner's report (or what its silence means), plus what the jail's hidden directories
  /// lose without a mount namespace.
  fn isolation_record(
    &self,
    reported: Option<IsolationRecord>,
    writes_jail: bool,
  ) -> IsolationRecord {
    let mut record = reported.unwrap_or_else(|| self.config.isolation.unreported());
    let mounted = record.applied.iter().any(|l| l == "mountns");
    if record.backend != "off" && writes_jail && !mounted && !self.jail.hidden().is_empty() {
      record.degraded.push(
        "hidden: without a mount namespace the audit directory inside the jail stays readable and \
         writable by a command that may write the jail (landlock cannot carve it out of a \
         writable root)"
          .into(),
      );
    }
    record
  }

  fn audit_failure<E: RunnerError>(&self, pending: Pending, e: &E) {
    let mut entry = pending.into_entry();
    entry.reason = Some(format!("execution_failed: {}", e.audit_code()));
    self.audit.append(&entry);
  }
}

impl Pending {
  /// The allow entry, stamped now and with the command's duration.
  fn into_entry(self) -> AuditEntry {
    let mut entry = self.allow;
    entry.timestamp = iso_timestamp_now();
    entry.duration = Some((self.started.elapsed().as_millis() as u64).into());
    entry
  }
}

fn take(slot: &Mutex<Option<Pending>>) -> Option<Pending> {
  slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::NoRunner;
  use crate::recording::{Code, Recording, Script};
  use crate::runner::Output;
  use finn_audit::AuditOptions;

  struct Fixture {
    _dir: tempfile::TempDir,
    jail: std::path::PathBuf,
    audit_file: std::path::PathBuf,
    sandbox: Arc<ToolSandbox>,
  }

  fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let jail = std::fs::canonicalize(dir.path()).unwrap().join("jail");
    std::fs::create_dir(&jail).unwrap();
    std::fs::write(jail.join("notes.txt"), "x").unwrap();
    let audit = AuditLog::new(&dir.path().join("data"), AuditOptions::default());
    let audit_file = audit.log_dir().join("audit.log");
    let ls = CommandPolicy {
      binary: "/bin/ls".into(),
      subcommands: Vec::new(),
      denied_flags: vec!["-R".into()],
      validate_paths: true,
    };
    let config = SandboxConfig {
      allow_bash: true,
      jail_root: jail.to_string_lossy().into_owned(),
      exec_timeout_ms: 1234,
      max_output: 4096,
      policies: Some(BTreeMap::from([("ls".to_owned(), ls)])),
      networks: BTreeMap::new(),
      isolation: Default::default(),
    };
    let secrets = [("GITHUB_TOKEN".to_owned(), "s3cr3t-value-123".to_owned())];
    let sandbox = Arc::new(ToolSandbox::new(config, audit, &secrets).unwrap());
    Fixture {
      _dir: dir,
      jail,
      audit_file,
      sandbox,
    }
  }

  impl Fixture {
    fn audit(&self) -> Vec<serde_json::Value> {
      std::fs::read_to_string(&self.audit_file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    }

    /// Runs `command` on `runner`; the completion's result, or the refusal.
    fn run<R: Runner>(
      &self,
      command: &str,
      runner: &R,
    ) -> Result<Result<SandboxResult, R::Error>, Refusal<R::Error>> {
      let (tx, rx) = std::sync::mpsc::channel();
      self
        .sandbox
        .execute(command, Some("s1".into()), runner, move |_, r| {
          tx.send(r).unwrap()
        })?;
      Ok(rx.recv().unwrap())
    }
  }

  fn output(stdout: &str) -> Output {
    Output {
      stdout: stdout.into(),
      stderr: String::new(),
      exit_code: 3,
      truncated: false,
      isolation: None,
    }
  }

  #[test]
  fn an_allowed_command_reaches_the_runner_as_a_jailed_job_and_its_output_is_redacted() {
    let f = fixture();
    let runner = Recording::new(vec![Script::Finish(output("token s3cr3t-value-123\n"))]);
    let result = f.run("ls -l notes.txt", &runner).unwrap().unwrap();
    let [job] = &runner.jobs()[..] else {
      panic!("one job")
    };
    let root = f.jail.to_string_lossy().into_owned();
    assert_eq!(
      job.binary_path,
      std::fs::canonicalize("/bin/ls").unwrap().to_string_lossy()
    );
    assert_eq!(job.args, vec!["-l".to_owned(), format!("{root}/notes.txt")]);
    assert_eq!(
      (job.cwd.as_str(), job.jail_root.as_deref()),
      (root.as_str(), Some(root.as_str()))
    );
    assert_eq!((job.timeout_ms, job.max_buffer), (Some(1234), Some(4096)));
    assert_eq!(job.session_id.as_deref(), Some("s1"));
    assert!(job.env.iter().any(|(k, v)| k == "HOME" && *v == root));
    assert_eq!(result.stdout, "token [REDACTED]\n");
    assert_eq!((result.exit_code, result.timed_out), (3, false));
    let audit = f.audit();
    assert_eq!(
      audit.len(),
      2,
      "allow before the run, the outcome after: {audit:?}"
    );
    assert_eq!(audit[1]["exitCode"], 3);
    assert_eq!(audit[1]["action"], "allow");
  }

  #[test]
  fn the_job_carries_the_topologys_isolation_and_the_outcome_audits_the_runners_report() {
    let f = fixture();
    let mut isolated = output("");
    isolated.isolation = Some(IsolationRecord {
      backend: "native".into(),
      applied: vec!["landlock".into()],
      degraded: vec!["cgroup: none here".into()],
    });
    let runner = Recording::new(vec![Script::Finish(isolated), Script::Finish(output(""))]);
    f.run("ls", &runner).unwrap().unwrap();
    f.run("ls", &runner).unwrap().unwrap();
    let job = &runner.jobs()[0];
    let iso = job.isolation.as_ref().expect("auto by default");
    assert_eq!(iso.mode, finn_job::isolation::Mode::Auto);
    // ls is a read-only program: no writable root.
    assert_eq!(iso.fs.writable, Some(Vec::new()));
    assert_eq!(iso.network, finn_job::isolation::Access::Deny);
    // The audit directory lies outside the jail here: denied to the command all the same.
    let audit_dir = f.audit_file.parent().unwrap().to_path_buf();
    assert!(
      iso.fs.deny_read.as_ref().unwrap().contains(&audit_dir),
      "{:?}",
      iso.fs.deny_read
    );
    let audit = f.audit();
    assert!(audit[0].get("isolation").is_none(), "{:?}", audit[0]);
    assert_eq!(
      audit[1]["isolation"],
      serde_json::json!({"backend": "native", "applied": ["landlock"], "degraded": ["cgroup: none here"]})
    );
    // A runner that reports nothing applied nothing, and the entry says so.
    assert_eq!(audit[3]["isolation"]["backend"], "none");
    assert_eq!(audit[3]["isolation"]["applied"], serde_json::json!([]));
    assert!(
      audit[3]["isolation"]["degraded"][0]
        .as_str()
        .unwrap()
        .starts_with("isolation: ")
    );
  }

  #[test]
  fn a_denied_command_never_reaches_the_runner_and_is_audited() {
    let f = fixture();
    let runner = Recording::new(Vec::new());
    for command in ["ls -R", "cat notes.txt", "ls ../..", "ls; id"] {
      let refused = f.run(command, &runner);
      assert!(matches!(refused, Err(Refusal::Denied(_))), "{command}");
    }
    assert!(runner.jobs().is_empty());
    let audit = f.audit();
    assert_eq!(audit.len(), 4);
    assert!(
      audit
        .iter()
        .all(|e| e["action"] == "deny" && e["reason"].is_string())
    );
  }

  #[test]
  fn a_runner_refusal_and_a_runner_failure_are_audited_and_handed_back() {
    let f = fixture();
    let runner = Recording::new(vec![
      Script::Refuse("WORKER_UNAVAILABLE"),
      Script::Fail("WORKER_CRASHED"),
    ]);
    let refused = f.run("ls", &runner);
    assert!(matches!(
      refused,
      Err(Refusal::NotRun(Code("WORKER_UNAVAILABLE")))
    ));
    let failed = f.run("ls", &runner).unwrap();
    assert_eq!(failed, Err(Code("WORKER_CRASHED")));
    let reasons: Vec<_> = f.audit().iter().map(|e| e["reason"].clone()).collect();
    assert_eq!(
      reasons,
      [
        serde_json::Value::Null,
        "execution_failed: WORKER_UNAVAILABLE".into(),
        serde_json::Value::Null,
        "execution_failed: WORKER_CRASHED".into(),
      ]
    );
  }

  #[test]
  fn a_timeout_reads_as_timed_out_and_no_runner_as_disabled() {
    let f = fixture();
    let runner = Recording::new(vec![Script::TimeOut(
      "Command timed out after 1234ms".into(),
    )]);
    let timed_out = f.run("ls", &runner).unwrap().unwrap();
    assert_eq!((timed_out.exit_code, timed_out.timed_out), (137, true));
    assert_eq!(timed_out.stderr, "Command timed out after 1234ms");
    let disabled = f.run("ls", &NoRunner).unwrap().unwrap();
    assert_eq!(disabled.exit_code, 1);
    assert_eq!(
      disabled.stderr,
      "Sandbox is disabled (no executor available)"
    );
    let audit = f.audit();
    assert_eq!(audit[1]["timedOut"], true);
    assert_eq!(audit[3]["reason"], "no_executor");
  }
}
