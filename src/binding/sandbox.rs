//! ToolSandbox, FilesystemJail, SecretRedactor and AuditLog as JS sees them. `index.js` wraps
//! them so that refusals throw `SandboxError` instances.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Object, PromiseRaw, Unknown};
use napi::{Env, JsValue};
use napi_derive::napi;

use super::convert::{self, Decoded};
use super::error::{coded, sandbox_error};
use super::executor::{self, HandOff};
use super::pool::{JobSettled, NativeWorkerPool, Ticket, jobs_runtime};
use super::pool_runner::PoolRunner;
use finn_audit::{self as audit, Action, AuditEntry, AuditOptions};
use finn_job::isolation::NetworkOptions;
use finn_job::limits::{
  DEFAULT_SANDBOX_MAX_OUTPUT, DEFAULT_TIMEOUT_MS, MAX_AUDIT_FILES, MAX_BUFFER_LIMIT, MAX_TIMEOUT_MS,
};
use finn_policy::host_git::Cancel;
use finn_policy::{self as policy, CommandPolicy};
use finn_pool::PoolError;
use finn_sandbox_core::{self as sandbox, NoRunner, RunnerError, SandboxConfig};

/// A refusal of bad input, as a sandbox error naming the field.
pub(crate) fn checked_to_sandbox(env: &Env) -> impl Fn(PoolError) -> napi::Error + '_ {
  move |e| sandbox_error(env, e)
}

/// An I/O failure on `path` the way Node's fs reports it: `code` is the errno's name.
pub(crate) fn fs_error(env: &Env, e: &std::io::Error, path: &str) -> napi::Error {
  let code = errno_name(e);
  coded(env, code, format!("{code}: {e}, realpath '{path}'"))
}

/// A tokenized command.
#[napi(object)]
pub struct SandboxCommand {
  pub binary: String,
  pub args: Vec<String>,
}

/// What `ToolSandbox.execute` resolves with.
#[napi(object)]
pub struct SandboxResult {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  /// True only when the pool rejected with EXEC_TIMEOUT (the tree is dead), never guessed
  /// from an exit code.
  pub timed_out: bool,
  pub truncated: bool,
}

impl From<sandbox::SandboxResult> for SandboxResult {
  fn from(r: sandbox::SandboxResult) -> Self {
    SandboxResult {
      stdout: r.stdout,
      stderr: r.stderr,
      exit_code: r.exit_code,
      timed_out: r.timed_out,
      truncated: r.truncated,
    }
  }
}

/// The append-only audit log; instances on one directory share one writer.
#[napi]
pub struct NativeAuditLog {
  pub(crate) log: audit::AuditLog,
}

#[napi]
impl NativeAuditLog {
  #[napi(constructor, catch_unwind)]
  pub fn new(env: &Env, data_dir: String, options: Option<Unknown>) -> napi::Result<Self> {
    let options = audit_options(options).map_err(checked_to_sandbox(env))?;
    Ok(NativeAuditLog {
      log: audit::AuditLog::new(Path::new(&data_dir), options),
    })
  }

  /// Never throws: false on any error, a malformed entry included.
  #[napi(catch_unwind)]
  pub fn append(&self, entry: Unknown) -> bool {
    match audit_entry(&entry) {
      Ok(entry) => self.log.append(&entry),
      Err(_) => false,
    }
  }

  #[napi(catch_unwind)]
  pub fn get_log_dir(&self) -> String {
    self.log.log_dir().to_string_lossy().into_owned()
  }
}

fn audit_options(options: Option<Unknown>) -> Decoded<AuditOptions> {
  let mut out = AuditOptions::default();
  if convert::is_nullish(options.as_ref())? {
    return Ok(out);
  }
  let obj = convert::object(options.as_ref().expect("not nullish"), "options")?;
  if let Some(size) = convert::optional_uint(&obj, "maxFileSize", "options.maxFileSize")? {
    // Zero would rotate before every line.
    if size == 0 {
      return Err(PoolError::InvalidSpec(
        "options.maxFileSize must be a positive integer".into(),
      ));
    }
    out.max_file_size = size;
  }
  if let Some(files) = convert::optional_uint(&obj, "maxFiles", "options.maxFiles")? {
    // Each rotation renames every kept file: a huge count would stall every append behind it.
    if files > MAX_AUDIT_FILES {
      return Err(PoolError::InvalidSpec(format!(
        "options.maxFiles must be at most {MAX_AUDIT_FILES}"
      )));
    }
    out.max_files = files as u32;
  }
  Ok(out)
}

fn audit_entry(value: &Unknown) -> Decoded<AuditEntry> {
  let obj = convert::object(value, "entry")?;
  let action = match convert::required_string(&obj, "action", "entry.action")?.as_str() {
    "allow" => Action::Allow,
    "deny" => Action::Deny,
    _ => {
      return Err(PoolError::InvalidSpec(
        "entry.action must be allow or deny".into(),
      ));
    }
  };
  let mut entry = AuditEntry::new(
    action,
    &convert::required_string(&obj, "command", "entry.command")?,
    &convert::required_string_array(&obj, "args", "entry.args")?,
  );
  entry.timestamp = convert::required_string(&obj, "timestamp", "entry.timestamp")?;
  entry.reason = convert::optional_string(&obj, "reason", "entry.reason")?;
  entry.duration = convert::optional_number(&obj, "duration", "entry.duration")?;
  entry.output_size = convert::optional_number(&obj, "outputSize", "entry.outputSize")?;
  Ok(entry)
}

/// Result of `validatePath`: the canonical path, or the refusal.
#[napi(object)]
pub struct JailCheck {
  pub path: Option<String>,
  pub error: Option<String>,
}

/// The filesystem jail.
#[napi]
pub struct NativeJail {
  jail: policy::FilesystemJail,
}

#[napi]
impl NativeJail {
  /// Throws when `dir` does not exist (its realpath is the jail root).
  #[napi(constructor, catch_unwind)]
  pub fn new(env: &Env, dir: String) -> napi::Result<Self> {
    let jail = policy::FilesystemJail::new(&dir).map_err(|e| fs_error(env, &e, &dir))?;
    Ok(NativeJail { jail })
  }

  #[napi(catch_unwind)]
  pub fn validate_path(&self, input: String) -> JailCheck {
    match self.jail.validate_path(&input) {
      Ok(path) => JailCheck {
        path: Some(path.to_string_lossy().into_owned()),
        error: None,
      },
      Err(d) => JailCheck {
        path: None,
        error: Some(d.message),
      },
    }
  }

  #[napi(catch_unwind)]
  pub fn get_jail_root(&self) -> String {
    self.jail.root().to_string_lossy().into_owned()
  }
}

fn errno_name(e: &std::io::Error) -> &'static str {
  match e.raw_os_error() {
    Some(libc::ENOENT) => "ENOENT",
    Some(libc::EACCES) => "EACCES",
    Some(libc::ENOTDIR) => "ENOTDIR",
    _ => "EIO",
  }
}

pub(crate) fn string_env(env: Option<Unknown>, field: &str) -> Decoded<Vec<(String, String)>> {
  if convert::is_nullish(env.as_ref())? {
    return Ok(Vec::new());
  }
  // Non-string values (loa-finn passes `process.env`-like records) are left out.
  let obj = convert::object(env.as_ref().expect("not nullish"), field)?;
  let mut out = Vec::new();
  for key in Object::keys(&obj).map_err(|e| PoolError::InvalidSpec(e.reason.clone()))? {
    if let Ok(Some(v)) = convert::optional_string(&obj, &key, field) {
      out.push((key, v));
    }
  }
  Ok(out)
}

/// Redacts secrets from text.
#[napi]
pub struct NativeRedactor {
  redactor: policy::SecretRedactor,
}

#[napi]
impl NativeRedactor {
  #[napi(constructor, catch_unwind)]
  pub fn new(js: &Env, env: Option<Unknown>) -> napi::Result<Self> {
    let env = string_env(env, "env").map_err(checked_to_sandbox(js))?;
    Ok(NativeRedactor {
      redactor: policy::SecretRedactor::new(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    })
  }

  #[napi(catch_unwind)]
  pub fn redact(&self, text: String) -> String {
    self.redactor.redact(&text)
  }
}

fn sandbox_config(value: &Unknown) -> Decoded<SandboxConfig> {
  let obj = convert::object(value, "config")?;
  let exec_timeout_ms = convert::optional_uint(&obj, "execTimeout", "config.execTimeout")?
    .unwrap_or(DEFAULT_TIMEOUT_MS);
  if exec_timeout_ms == 0 {
    return Err(PoolError::InvalidSpec(
      "config.execTimeout must be a positive integer".into(),
    ));
  }
  if exec_timeout_ms > MAX_TIMEOUT_MS {
    return Err(PoolError::InvalidSpec(format!(
      "config.execTimeout must be at most {MAX_TIMEOUT_MS}"
    )));
  }
  let max_output = convert::optional_uint(&obj, "maxOutput", "config.maxOutput")?
    .unwrap_or(DEFAULT_SANDBOX_MAX_OUTPUT);
  if max_output > MAX_BUFFER_LIMIT {
    return Err(PoolError::InvalidSpec(format!(
      "config.maxOutput must be at most {MAX_BUFFER_LIMIT}"
    )));
  }
  let (policies, networks) = match convert::get(&obj, "policies", "config.policies")? {
    None => (None, BTreeMap::new()),
    Some(v) => {
      let (p, n) = policies(&v)?;
      (Some(p), n)
    }
  };
  let jail_root = convert::required_string(&obj, "jailRoot", "config.jailRoot")?;
  no_nul(&jail_root, "config.jailRoot")?;
  // `index.js` stringifies the caller's object, so serde names the field of any error.
  let isolation = match convert::optional_string(&obj, "isolation", "config.isolation")? {
    None => None,
    Some(json) => Some(
      serde_json::from_str(&json)
        .map_err(|e| PoolError::InvalidSpec(format!("config.isolation must be an object: {e}")))?,
    ),
  };
  let isolation = sandbox::SandboxIsolation::from_json(isolation)
    .map_err(|e| PoolError::InvalidSpec(format!("config.{e}")))?;
  for name in networks.keys() {
    isolation
      .check_listed(&format!("config.policies.{name}.network"))
      .map_err(PoolError::InvalidSpec)?;
  }
  Ok(SandboxConfig {
    allow_bash: convert::optional_bool(&obj, "allowBash", "config.allowBash")?.unwrap_or(false),
    jail_root,
    exec_timeout_ms,
    max_output,
    policies,
    networks,
    isolation,
  })
}

/// A path no file can have: refused naming the field, rather than failing later as an errno.
fn no_nul(value: &str, field: &str) -> Decoded<()> {
  if value.contains('\0') {
    return Err(PoolError::InvalidSpec(format!(
      "{field} must not contain NUL bytes"
    )));
  }
  Ok(())
}

/// The policies, and the `network` of those that list one (`index.js` stringifies it, so serde
/// names the field of any error).
type Policies = (
  BTreeMap<String, CommandPolicy>,
  BTreeMap<String, NetworkOptions>,
);

fn policies(value: &Unknown) -> Decoded<Policies> {
  let obj = convert::object(value, "config.policies")?;
  let mut out = BTreeMap::new();
  let mut networks = BTreeMap::new();
  for name in Object::keys(&obj).map_err(|e| PoolError::InvalidSpec(e.reason.clone()))? {
    let field = format!("config.policies.{name}");
    let Some(entry) = convert::get(&obj, &name, &field)? else {
      continue;
    };
    let p = convert::object(&entry, &field)?;
    let binary = convert::required_string(&p, "binary", &format!("{field}.binary"))?;
    no_nul(&binary, &format!("{field}.binary"))?;
    if !binary.starts_with('/') {
      return Err(PoolError::InvalidSpec(format!(
        "{field}.binary must be an absolute path"
      )));
    }
    out.insert(
      name.clone(),
      CommandPolicy {
        binary,
        subcommands: convert::required_string_array(
          &p,
          "subcommands",
          &format!("{field}.subcommands"),
        )?,
        denied_flags: convert::required_string_array(
          &p,
          "deniedFlags",
          &format!("{field}.deniedFlags"),
        )?,
        validate_paths: convert::optional_bool(
          &p,
          "validatePaths",
          &format!("{field}.validatePaths"),
        )?
        .unwrap_or(true),
      },
    );
    if let Some(json) = convert::optional_string(&p, "network", &format!("{field}.network"))? {
      networks.insert(name.clone(), policy_network(&name, &json)?);
    }
  }
  Ok((out, networks))
}

/// A policy's `network`: a `NetworkOptions` object whose entries the proxy accepts. git's
/// fetch, clone and push get their remote's hosts, and its other commands need none: a list on
/// git's policy is refused rather than ignored.
fn policy_network(name: &str, json: &str) -> Decoded<NetworkOptions> {
  let field = format!("config.policies.{name}.network");
  if name == "git" {
    return Err(PoolError::InvalidSpec(format!(
      "{field}: git's fetch, clone and push reach their remote's hosts, and its other commands \
       need no network; a list is not taken here"
    )));
  }
  let value: serde_json::Value = serde_json::from_str(json)
    .map_err(|e| PoolError::InvalidSpec(format!("{field} must be an object: {e}")))?;
  if !value.is_object() {
    return Err(PoolError::InvalidSpec(format!(
      "{field} must be a NetworkOptions object ({{ allow: [...] }}), got {value}"
    )));
  }
  let network: NetworkOptions =
    serde_json::from_value(value).map_err(|e| PoolError::InvalidSpec(format!("{field}: {e}")))?;
  finn_egress::Policy::new(&network)
    .map_err(|e| PoolError::InvalidSpec(format!("config.policies.{name}.{e}")))?;
  Ok(network)
}

/// loa-finn's ToolSandbox pipeline.
#[napi]
pub struct NativeToolSandbox {
  sandbox: Arc<sandbox::ToolSandbox>,
}

#[napi]
impl NativeToolSandbox {
  /// `secretsEnv` is the environment the redactor takes its secret values from.
  #[napi(constructor, catch_unwind)]
  pub fn new(
    env: &Env,
    config: Unknown,
    audit_log: &NativeAuditLog,
    secrets_env: Option<Unknown>,
  ) -> napi::Result<Self> {
    let config = sandbox_config(&config).map_err(checked_to_sandbox(env))?;
    let secrets = string_env(secrets_env, "secretsEnv").map_err(checked_to_sandbox(env))?;
    let jail_root = config.jail_root.clone();
    let sandbox = sandbox::ToolSandbox::new(config, audit_log.log.clone(), &secrets)
      .map_err(|e| fs_error(env, &e, &jail_root))?;
    Ok(NativeToolSandbox {
      sandbox: Arc::new(sandbox),
    })
  }

  /// Throws a `SANDBOX_ERROR` error for an empty command or shell metacharacters.
  #[napi(catch_unwind)]
  pub fn tokenize(&self, env: &Env, command: String) -> napi::Result<SandboxCommand> {
    let cmd = self
      .sandbox
      .tokenize(&command)
      .map_err(|d| sandbox_error(env, d.message))?;
    Ok(SandboxCommand {
      binary: cmd.binary,
      args: cmd.args,
    })
  }

  #[napi(catch_unwind)]
  pub fn get_jail_root(&self) -> String {
    self.sandbox.jail().root().to_string_lossy().into_owned()
  }

  /// The jail host tools check the agent's paths with: this sandbox's own (its hidden audit
  /// directory), refusing as well what no command may write (`.git/hooks`, `.git/config`).
  #[napi(catch_unwind)]
  pub fn get_jail(&self) -> NativeJail {
    NativeJail {
      jail: self.sandbox.host_jail().clone(),
    }
  }

  /// Stages 1-7 (gate, tokenize, policy, jail, binary, audit) on a thread of the addon's own
  /// (never libuv's pool, which Node's fs calls share): they read the file system, run git to
  /// check a repository and append to the audit log, none of which may hold up Node's thread.
  /// `cancel` (the job's AbortSignal) ends a repository check early. Resolves to the checked
  /// command (a refusal is already audited; it is thrown by the `start*` call), never rejects
  /// except on a panic.
  #[napi(catch_unwind, ts_return_type = "Promise<NativeCheckedCommand>")]
  pub fn check<'env>(
    &self,
    env: &'env Env,
    command: String,
    session_id: Option<String>,
    cancel: Option<&NativeCheckCancel>,
  ) -> napi::Result<PromiseRaw<'env, NativeCheckedCommand>> {
    let (deferred, promise) = env.create_deferred::<NativeCheckedCommand, Resolve>()?;
    let sandbox = Arc::clone(&self.sandbox);
    let cancel = cancel.map(|c| Arc::clone(&c.cancel));
    let runtime = jobs_runtime()
      .map_err(|e| sandbox_error(env, format!("could not start the check's thread: {e}")))?;
    runtime.spawn_blocking(move || {
      // A panic here would unwind into the runtime's thread: it becomes this promise's rejection.
      let output = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sandbox
          .check(&command, session_id, cancel.as_deref())
          .map_err(|d| d.message)
      }));
      if let Some(cancel) = &cancel {
        cancel.retire();
      }
      match output {
        Ok(checked) => deferred.resolve(Box::new(move |_| {
          Ok(NativeCheckedCommand {
            checked: Some(checked),
          })
        })),
        Err(_) => deferred.reject(napi::Error::from_reason("the sandbox's check panicked")),
      }
    });
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }

  /// Starts a checked command on the native pool's interactive lane, with the jail as
  /// jailRoot. Throws a `SANDBOX_ERROR` error for a refusal; otherwise returns the pool job's
  /// ticket (a refused job is audited `execution_failed`), and the `SandboxResult` arrives
  /// through the pool's `onSettled`.
  #[napi(catch_unwind)]
  pub fn start_with_pool(
    &self,
    env: &Env,
    checked: &mut NativeCheckedCommand,
    pool: &NativeWorkerPool,
  ) -> napi::Result<Ticket> {
    let checked = checked.take(env)?;
    let settler = Arc::clone(&pool.settler);
    let started = self
      .sandbox
      .start(checked, &PoolRunner(&pool.pool), move |id, outcome| {
        settler.push(match outcome {
          Ok(result) => JobSettled::sandbox(id, result.into()),
          Err(e) => JobSettled::error(id, &e),
        })
      });
    Ok(match started {
      Ok(id) => Ticket::accepted(id),
      Err(e) => Ticket::refused(&e),
    })
  }

  /// A checked command without an executor: resolves as "Sandbox is disabled (no executor
  /// available)", audited `no_executor`. Throws a `SANDBOX_ERROR` error for a refusal.
  #[napi(catch_unwind)]
  pub fn start_without_executor(
    &self,
    env: &Env,
    checked: &mut NativeCheckedCommand,
  ) -> napi::Result<SandboxResult> {
    let checked = checked.take(env)?;
    let (result, land) = landing();
    match self.sandbox.start(checked, &NoRunner, land) {
      Ok(_) => {}
      Err(never) => match never {},
    }
    let settled = result.lock().unwrap_or_else(|e| e.into_inner()).take();
    match settled {
      Some(Ok(result)) => Ok(result.into()),
      Some(Err(never)) => match never {},
      None => Err(sandbox_error(env, "no runner settles at once")),
    }
  }

  /// A checked command for a JS executor: `{ spec, prepared }`, the `ExecSpec` to hand to the
  /// executor and the handle to complete with its outcome. Throws a `SANDBOX_ERROR` error for
  /// a refusal.
  #[napi(
    catch_unwind,
    ts_return_type = "{ spec: import('./index').ExecSpec; prepared: NativePrepared; isolation?: string }"
  )]
  pub fn start_with_executor<'env>(
    &self,
    env: &'env Env,
    checked: &mut NativeCheckedCommand,
  ) -> napi::Result<Object<'env>> {
    let checked = checked.take(env)?;
    let hand_off = HandOff::default();
    let (result, land) = landing();
    if let Err(e) = self.sandbox.start(checked, &hand_off, land) {
      // HandOff never refuses; a refusal would still have been audited.
      return Err(sandbox_error(
        env,
        format!("the executor refused the command: {}", e.audit_code()),
      ));
    }
    let (job, prepared) = hand_off.prepared(result);
    executor::prepared_to_js(env, &job, prepared)
  }
}

/// What settles a check's promise on Node's thread.
type Resolve = Box<dyn FnOnce(Env) -> napi::Result<NativeCheckedCommand> + Send>;

/// A job's AbortSignal as the repository check sees it: `index.js` calls `cancel()` on abort.
#[napi]
pub struct NativeCheckCancel {
  pub(crate) cancel: Arc<Cancel>,
}

#[napi]
impl NativeCheckCancel {
  /// Throws when the process has no descriptor left for its wake-up pipe.
  #[napi(constructor, catch_unwind)]
  pub fn new(env: &Env) -> napi::Result<Self> {
    let cancel = Cancel::new()
      .map_err(|e| sandbox_error(env, format!("could not watch the AbortSignal: {e}")))?;
    Ok(NativeCheckCancel {
      cancel: Arc::new(cancel),
    })
  }

  /// Ends the check it was given to (a running git is killed); later calls do nothing.
  #[napi(catch_unwind)]
  pub fn cancel(&self) {
    self.cancel.cancel();
  }
}

/// A command after stages 1-7: allowed (to be started once by one `start*` call) or refused
/// (each `start*` call throws the refusal's `SANDBOX_ERROR`).
#[napi]
pub struct NativeCheckedCommand {
  checked: Option<Result<sandbox::CheckedCommand, String>>,
}

#[napi]
impl NativeCheckedCommand {
  /// Whether the checks refused the command (each `start*` call then throws the refusal).
  #[napi(getter)]
  pub fn refused(&self) -> bool {
    matches!(self.checked, Some(Err(_)))
  }
}

impl NativeCheckedCommand {
  fn take(&mut self, env: &Env) -> napi::Result<sandbox::CheckedCommand> {
    match self.checked.take() {
      Some(Ok(checked)) => Ok(checked),
      Some(Err(message)) => {
        let error = sandbox_error(env, &message);
        self.checked = Some(Err(message));
        Err(error)
      }
      None => Err(sandbox_error(env, "command already started")),
    }
  }
}

/// Where a completion called on this thread lands, and the completion.
fn landing<T: Send + 'static>() -> (Arc<Mutex<Option<T>>>, impl FnOnce(u64, T) + Send + 'static) {
  let slot: Arc<Mutex<Option<T>>> = Arc::default();
  let fill = Arc::clone(&slot);
  let land = move |_, outcome| *fill.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
  (slot, land)
}
