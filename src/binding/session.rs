//! A persistent shell session for JS: `index.js`'s `Session` wraps this class.
//!
//! Each session has one thread of its own, which owns the `finn_session::Session` (bash under
//! a reaper of the pool's supervisor) and runs the requests it is sent, one at a time, in the
//! order they were sent: starting the shell, a command, the end. Node's thread only sends
//! requests and receives their settlement through a deferred promise; every wait (the reaper,
//! the shell's pipes, the command's timeouts) is on the session's thread. Output is handed to
//! JS as it is read through a threadsafe function with a bounded queue, called in blocking
//! mode: a callback that falls behind stops the session's thread, whose command then waits on
//! its full pipe (backpressure rather than buffering).
//!
//! `index.js` validates the options, keeps the call order (a call waits for the one before),
//! rejects with `SessionError`, and owns `destroy()`'s semantics; this side refuses what it
//! cannot run and reports what happened.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use napi::bindgen_prelude::{Buffer, Function, PromiseRaw};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, JsDeferred, JsValue, Status};
use napi_derive::napi;
use nix::fcntl::OFlag;

use finn_exec::capture::utf8_floor;
use finn_isolate::{IsolationError, Mode, Plan, probe};
use finn_job::limits::MAX_TIMEOUT_MS;
use finn_pool::Pool;
use finn_session::{
  CommandStatus, Control, Cut, Detached, DetachedEnd, Host, RunOptions, Session, SessionConfig,
  SessionError, SessionErrorCode, Stream,
};

use super::pool::NativeWorkerPool;
use super::process::{EVENT_QUEUE, EventFn, ProcessEvent};

/// How a session's shell is started (validated by `index.js`; checked again here where a bad
/// value would reach the system).
#[napi(object)]
pub struct NativeSessionConfig {
  /// The shell: an absolute path, or a name looked up in `PATH`.
  pub shell: String,
  pub cwd: String,
  /// `KEY=value` entries: the first shell's whole environment.
  pub env: Vec<String>,
  /// `IsolationOptions` as JSON.
  pub isolation: Option<String>,
}

/// One command.
#[napi(object)]
pub struct NativeSessionExec {
  /// The command's text (UTF-8 from a string, or the caller's bytes).
  pub command: Buffer,
  pub stdin: Option<Buffer>,
  pub timeout_ms: Option<f64>,
  pub idle_timeout_ms: Option<f64>,
  /// Per stream.
  pub max_output_bytes: f64,
  /// The output is decoded as UTF-8 by `index.js`: a cut must not split a character.
  pub utf8: bool,
  /// Answer after this long with the output so far; a command still running goes on as a
  /// process whose events go to `exec`'s `onEvent`.
  pub yield_ms: Option<f64>,
  /// `onTimeout: "background"`: the hard deadline of a command its timeout moved on.
  pub background_timeout_ms: Option<f64>,
  /// `stdin: "pipe"`: the command's stdin stays open for `processWriteStdin`.
  pub stdin_pipe: bool,
}

/// A command's settlement: a result, or an error code and message (`errorCode` set).
#[napi(object)]
pub struct NativeSessionReply {
  /// `"exited"`, `"signaled"` (the shell was killed by `signal`), `"replaced"` (the shell was
  /// killed to end the command), `"running"` (it runs on: its events go to `onEvent`, and
  /// `processKill` and the others take the exec's id).
  pub status: String,
  pub code: Option<i32>,
  pub signal: Option<i32>,
  pub stdout: Buffer,
  pub stderr: Buffer,
  pub stdout_truncated: bool,
  pub stderr_truncated: bool,
  /// `"wall"`, `"idle"`, `"stopped"`: what ended the command early.
  pub cut: Option<String>,
  pub session_restarted: bool,
  pub duration_ms: f64,
  /// The shell's pid after the command (it changes when the shell is replaced).
  pub pid: i32,
  pub error_code: Option<String>,
  pub error_message: Option<String>,
}

/// Chunks in flight to a JS output callback before the session's thread waits for it.
const CHUNKS_IN_FLIGHT: usize = 16;

type ChunkFn = ThreadsafeFunction<Vec<u8>, (), Buffer, Status, false, false, CHUNKS_IN_FLIGHT>;
type Resolver = Box<dyn FnOnce(Env) -> napi::Result<NativeSessionReply> + Send>;
type Deferred = JsDeferred<NativeSessionReply, Resolver>;

enum Request {
  Start(Deferred),
  Exec {
    exec: Exec,
    on_stdout: Option<ChunkFn>,
    on_stderr: Option<ChunkFn>,
    on_event: Option<EventFn>,
    deferred: Deferred,
  },
  End(Deferred),
}

struct Exec {
  id: u64,
  command: Vec<u8>,
  stdin: Option<Vec<u8>>,
  timeout: Option<Duration>,
  idle_timeout: Option<Duration>,
  max_output_bytes: usize,
  utf8: bool,
  yield_after: Option<Duration>,
  background: Option<Duration>,
  stdin_pipe: bool,
}

/// What Node's thread and the session's thread share.
struct Shared {
  /// The shell's pid (0: none yet).
  pid: AtomicI32,
  /// The reaper's pid (0: none): every process of the session is its descendant.
  reaper: AtomicI32,
  /// Stop requests by command id (see [`NativeSession::stop`]).
  stops: Mutex<Stops>,
  ended: AtomicBool,
  /// Commands that run on after their exec was answered, by exec id.
  detached: Mutex<HashMap<u64, DetachedCtl>>,
  /// The JS environment that owns the session is gone (a worker thread ended by
  /// `terminate()`): requests still queued are refused, and the session's thread ends.
  abandoned: AtomicBool,
}

/// Node's side of a command that runs on after its exec was answered.
struct DetachedCtl {
  /// The write end of its follower's control pipe ([`Control`] messages).
  control: OwnedFd,
  /// The write end of its stdin (`stdin: "pipe"`) until `processCloseStdin`.
  stdin: Option<Arc<OwnedFd>>,
  /// Its reaper: every process of it is that reaper's descendant.
  reaper: i32,
}

/// The running command's stop pipe, and stops asked for commands not started yet.
#[derive(Default)]
struct Stops {
  /// The running command's id and the write end of the pipe it watches.
  current: Option<(u64, OwnedFd)>,
  early: Vec<u64>,
}

impl Shared {
  fn stops(&self) -> std::sync::MutexGuard<'_, Stops> {
    self.stops.lock().unwrap_or_else(|e| e.into_inner())
  }

  fn detached(&self) -> std::sync::MutexGuard<'_, HashMap<u64, DetachedCtl>> {
    self.detached.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// Sends `control` to the follower of exec `id`'s command, if it still runs.
  fn control(&self, id: u64, control: Control) {
    if let Some(ctl) = self.detached().get(&id) {
      let _ = nix::unistd::write(ctl.control.as_fd(), &control.encode());
    }
  }
}

#[napi(custom_finalize)]
pub struct NativeSession {
  tx: Arc<Mutex<Option<mpsc::Sender<Request>>>>,
  shared: Arc<Shared>,
  /// Ends the session with its environment (see [`Teardown`]); `None` where the hook could not
  /// be added.
  teardown: Option<Arc<Teardown>>,
}

/// Ends a session when its JS environment goes. `index.js` kills sessions from
/// `process.on('exit')`, which a worker thread ended by `terminate()` never emits, and the
/// session's thread only ends between two commands: a command running then (`sleep 300`, no
/// timeout) lived on while Node did (an attack). At the environment's teardown this hook stops
/// the running command, SIGKILLs the session's tree and closes the session's queue, so its
/// thread refuses what is left and ends the shell.
struct Teardown {
  tx: Arc<Mutex<Option<mpsc::Sender<Request>>>>,
  shared: Arc<Shared>,
  ran: AtomicBool,
}

impl Teardown {
  fn run(&self) {
    if self.ran.swap(true, Ordering::SeqCst) {
      return;
    }
    self.shared.abandoned.store(true, Ordering::SeqCst);
    drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
    if let Some((_, w)) = &self.shared.stops().current {
      let _ = nix::unistd::write(w.as_fd(), &[1]);
    }
    // The commands that run on after a yield or a background timeout go too.
    let mut reapers: Vec<i32> = self.shared.detached().values().map(|d| d.reaper).collect();
    if !self.shared.ended.load(Ordering::SeqCst) {
      reapers.push(self.shared.reaper.load(Ordering::SeqCst));
    }
    reapers.retain(|&pid| pid > 0);
    if !reapers.is_empty() {
      finn_supervisor::kill_trees_now(&reapers);
    }
  }
}

unsafe extern "C" fn on_teardown(arg: *mut std::ffi::c_void) {
  // SAFETY: the reference given to the hook in `add_teardown`, taken back once: the hook runs
  // once, and `finalize` removes it (taking the reference back itself) only if it has not run.
  let hook = unsafe { Arc::from_raw(arg as *const Teardown) };
  let _ = std::panic::catch_unwind(|| hook.run());
}

fn add_teardown(env: &Env, hook: Teardown) -> Option<Arc<Teardown>> {
  let hook = Arc::new(hook);
  let arg = Arc::into_raw(hook.clone()) as *mut std::ffi::c_void;
  // SAFETY: `env` is this call's environment; the hook's argument holds one reference.
  let status = unsafe { napi::sys::napi_add_env_cleanup_hook(env.raw(), Some(on_teardown), arg) };
  if status != napi::sys::Status::napi_ok {
    // SAFETY: the reference made above, which the hook never got.
    drop(unsafe { Arc::from_raw(arg as *const Teardown) });
    return None;
  }
  Some(hook)
}

impl napi::bindgen_prelude::ObjectFinalize for NativeSession {
  fn finalize(self, env: Env) -> napi::Result<()> {
    if let Some(hook) = &self.teardown
      && !hook.ran.load(Ordering::SeqCst)
    {
      let arg = Arc::as_ptr(hook) as *mut std::ffi::c_void;
      // SAFETY: the hook added in `new` with this argument, on this environment's thread, and
      // not run: removed, it never runs, so its reference is taken back here.
      unsafe {
        napi::sys::napi_remove_env_cleanup_hook(env.raw(), Some(on_teardown), arg);
        drop(Arc::from_raw(arg as *const Teardown));
      }
    }
    Ok(())
  }
}

#[napi]
impl NativeSession {
  /// Starts the session's thread; `start()` then starts the shell. Throws (EINVAL, ENOENT,
  /// the message naming the option) for what can be refused at once.
  #[napi(constructor, catch_unwind)]
  pub fn new(env: Env, pool: &NativeWorkerPool, config: NativeSessionConfig) -> napi::Result<Self> {
    let pool = pool.pool.clone();
    let fail =
      |code: SessionErrorCode, message: String| super::error::coded(&env, code.as_str(), message);
    // Held by the session's thread: the pool keeps its supervisor while the session lives.
    let Some((supervisor, lease)) = pool.lease_supervisor() else {
      return Err(fail(
        SessionErrorCode::Invalid,
        "options.pool runs without a supervisor (FINN_SANDBOX_SUPERVISOR=off): a session needs one"
          .into(),
      ));
    };
    if pool.is_closing() {
      return Err(fail(
        SessionErrorCode::Destroyed,
        "options.pool is shut down".into(),
      ));
    }
    let cwd = PathBuf::from(&config.cwd);
    if !cwd.is_dir() {
      return Err(fail(
        SessionErrorCode::NotFound,
        format!("options.cwd is not a directory: {}", config.cwd),
      ));
    }
    let env_vars: Vec<(String, String)> = config
      .env
      .iter()
      .map(|kv| match kv.split_once('=') {
        Some((k, v)) => (k.to_owned(), v.to_owned()),
        None => (kv.clone(), String::new()),
      })
      .collect();
    let path_var = env_vars
      .iter()
      .find(|(k, _)| k == "PATH")
      .map(|(_, v)| v.clone());
    let shell = finn_exec::resolve_program(&config.shell, path_var.as_deref())
      .map_err(|e| fail(SessionErrorCode::NotFound, format!("options.shell: {e}")))?;
    let shell = PathBuf::from(OsString::from_vec(shell.into_bytes()));
    let isolation = match &config.isolation {
      Some(json) => Some(
        super::isolate::options_from_json(json, "options.isolation")
          .map_err(|e| fail(SessionErrorCode::Invalid, e.to_string()))?,
      ),
      None => None,
    }
    .filter(|o| o.mode != Mode::Off);
    // The commands' fifos: made before the plan, which must let the shell write there.
    let dir = tempfile::Builder::new()
      .prefix("finn-session-")
      .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
      .tempdir()
      .map_err(|e| {
        fail(
          SessionErrorCode::Invalid,
          format!("make the session's directory: {e}"),
        )
      })?;
    let plan = match isolation {
      Some(mut opts) => {
        let writable = opts.fs.writable.get_or_insert_with(|| vec![cwd.clone()]);
        writable.push(dir.path().to_path_buf());
        let plan = Plan::resolve(&opts, &cwd, &probe().capped(pool.config().landlock_abi_max))
          .map_err(|e| match e {
            IsolationError::Options(e) => fail(SessionErrorCode::Invalid, format!("options.{e}")),
            other => fail(
              SessionErrorCode::Invalid,
              format!("options.isolation cannot be applied: {other}"),
            ),
          })?;
        plan.map(Box::new)
      }
      None => None,
    };
    let session_config = SessionConfig {
      shell,
      cwd,
      env: env_vars
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect(),
      host: Host::Reaper {
        supervisor,
        isolation: plan,
      },
    };
    let shared = Arc::new(Shared {
      pid: AtomicI32::new(0),
      reaper: AtomicI32::new(0),
      stops: Mutex::default(),
      ended: AtomicBool::new(false),
      detached: Mutex::default(),
      abandoned: AtomicBool::new(false),
    });
    let (tx, rx) = mpsc::channel();
    let thread_shared = Arc::clone(&shared);
    std::thread::Builder::new()
      .name("finn-session".into())
      .spawn(move || {
        serve(pool, session_config, dir, rx, &thread_shared);
        drop(lease);
      })
      .map_err(|e| {
        fail(
          SessionErrorCode::Invalid,
          format!("start the session's thread: {e}"),
        )
      })?;
    let tx = Arc::new(Mutex::new(Some(tx)));
    let teardown = add_teardown(
      &env,
      Teardown {
        tx: Arc::clone(&tx),
        shared: Arc::clone(&shared),
        ran: AtomicBool::new(false),
      },
    );
    Ok(NativeSession {
      tx,
      shared,
      teardown,
    })
  }

  /// Starts the shell; resolves with a reply whose `pid` is the shell's (or an error code).
  #[napi(catch_unwind, ts_return_type = "Promise<NativeSessionReply>")]
  pub fn start<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, NativeSessionReply>> {
    let (deferred, promise) = env.create_deferred::<NativeSessionReply, Resolver>()?;
    self.send(Request::Start(deferred));
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }

  /// Runs one command after those sent before it; `id` names it for `stop`.
  #[napi(catch_unwind, ts_return_type = "Promise<NativeSessionReply>")]
  pub fn exec<'env>(
    &self,
    env: &'env Env,
    id: f64,
    exec: NativeSessionExec,
    on_stdout: Option<Function<'env, Buffer, ()>>,
    on_stderr: Option<Function<'env, Buffer, ()>>,
    on_event: Option<Function<'env, ProcessEvent, ()>>,
  ) -> napi::Result<PromiseRaw<'env, NativeSessionReply>> {
    let chunk_fn = |f: Option<Function<'env, Buffer, ()>>| -> napi::Result<Option<ChunkFn>> {
      f.map(|f| {
        f.build_threadsafe_function::<Vec<u8>>()
          .callee_handled::<false>()
          .max_queue_size::<CHUNKS_IN_FLIGHT>()
          .build_callback(|ctx| Ok(Buffer::from(ctx.value)))
      })
      .transpose()
    };
    let ms = |v: Option<f64>| v.map(|ms| Duration::from_millis(ms as u64));
    let on_stdout = chunk_fn(on_stdout)?;
    let on_stderr = chunk_fn(on_stderr)?;
    // Weak: a command that runs on holds Node's loop through `index.js`, as a process does.
    let on_event = on_event
      .map(|f| {
        f.build_threadsafe_function::<ProcessEvent>()
          .callee_handled::<false>()
          .weak::<true>()
          .max_queue_size::<EVENT_QUEUE>()
          .build_callback(|ctx| Ok(ctx.value))
      })
      .transpose()?;
    let (deferred, promise) = env.create_deferred::<NativeSessionReply, Resolver>()?;
    self.send(Request::Exec {
      exec: Exec {
        id: id as u64,
        command: exec.command.to_vec(),
        stdin: exec.stdin.map(|b| b.to_vec()),
        timeout: ms(exec.timeout_ms),
        idle_timeout: ms(exec.idle_timeout_ms),
        max_output_bytes: exec.max_output_bytes as usize,
        utf8: exec.utf8,
        yield_after: ms(exec.yield_ms),
        background: ms(exec.background_timeout_ms),
        stdin_pipe: exec.stdin_pipe,
      },
      on_stdout,
      on_stderr,
      on_event,
      deferred,
    });
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }

  /// Ends command `id` as a timeout would (its tree is killed; the shell lives on): now if it
  /// runs, as soon as it starts if it has not yet. Other commands are not affected.
  #[napi(catch_unwind)]
  pub fn stop(&self, id: f64) {
    let id = id as u64;
    let mut stops = self.shared.stops();
    match &stops.current {
      Some((running, w)) if *running == id => {
        let _ = nix::unistd::write(w.as_fd(), &[1]);
      }
      _ => stops.early.push(id),
    }
  }

  /// Ends the shell and everything the session started, after the command running now (which
  /// `stop()` ends); resolves once all of it is gone.
  #[napi(catch_unwind, ts_return_type = "Promise<NativeSessionReply>")]
  pub fn end<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, NativeSessionReply>> {
    let (deferred, promise) = env.create_deferred::<NativeSessionReply, Resolver>()?;
    self.send(Request::End(deferred));
    Ok(PromiseRaw::new(env.raw(), promise.raw()))
  }

  /// SIGKILLs every process of the session now, commands that run on after their exec
  /// included, and waits (briefly) until they are dead: for Node's exit, when nothing will be
  /// awaited any more.
  #[napi(catch_unwind)]
  pub fn kill_now(&self) {
    let mut reapers: Vec<i32> = self.shared.detached().values().map(|d| d.reaper).collect();
    reapers.push(self.shared.reaper.load(Ordering::SeqCst));
    reapers.retain(|&pid| pid > 0);
    if !reapers.is_empty() {
      finn_supervisor::kill_trees_now(&reapers);
    }
  }

  /// Ends the whole tree of exec `id`'s command that runs on: SIGTERM now, SIGKILL after
  /// `graceMs` (0: SIGKILL now); its `exit` event follows once no process of it is left.
  #[napi(catch_unwind)]
  pub fn process_kill(&self, id: f64, grace_ms: f64) {
    let grace = Duration::from_millis(grace_ms.clamp(0.0, MAX_TIMEOUT_MS as f64) as u64);
    self.shared.control(id as u64, Control::Kill { grace });
  }

  /// Sends signal `signo` to every process of exec `id`'s command that runs on.
  #[napi(catch_unwind)]
  pub fn process_signal(&self, id: f64, signo: i32) {
    self.shared.control(id as u64, Control::Signal(signo));
  }

  /// Writes `data` to the stdin of exec `id`'s command (`stdin: "pipe"`), off Node's thread;
  /// resolves as `NativeProcess.writeStdin` does (`""`, `EPIPE`, `ENOTCONN`, an errno's name).
  #[napi(catch_unwind)]
  pub fn process_write_stdin<'env>(
    &self,
    env: &'env Env,
    id: f64,
    data: Buffer,
  ) -> napi::Result<PromiseRaw<'env, String>> {
    let fd = self
      .shared
      .detached()
      .get(&(id as u64))
      .and_then(|d| d.stdin.clone());
    super::process::write_stdin(env, fd, &data, SessionErrorCode::Invalid.as_str())
  }

  /// Closes the stdin of exec `id`'s command (after writes in flight): it reads EOF.
  #[napi(catch_unwind)]
  pub fn process_close_stdin(&self, id: f64) {
    if let Some(d) = self.shared.detached().get_mut(&(id as u64)) {
      d.stdin = None;
    }
  }

  /// The shell's pid (0 before it started).
  #[napi(getter)]
  pub fn pid(&self) -> i32 {
    self.shared.pid.load(Ordering::SeqCst)
  }
}

impl NativeSession {
  /// Hands `request` to the session's thread, or settles it at once when that thread is gone.
  fn send(&self, request: Request) {
    let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
    let request = match tx.as_ref() {
      Some(tx) => match tx.send(request) {
        Ok(()) => return,
        Err(mpsc::SendError(request)) => request,
      },
      None => request,
    };
    let deferred = match request {
      Request::Start(d) | Request::End(d) => d,
      Request::Exec { deferred, .. } => deferred,
    };
    settle(
      deferred,
      error_reply(
        SessionErrorCode::Destroyed,
        "the session is destroyed".into(),
      ),
    );
  }
}

/// A reply built off Node's thread: plain bytes, turned into buffers on Node's.
struct Reply {
  status: &'static str,
  code: Option<i32>,
  signal: Option<i32>,
  stdout: Vec<u8>,
  stderr: Vec<u8>,
  stdout_truncated: bool,
  stderr_truncated: bool,
  cut: Option<&'static str>,
  session_restarted: bool,
  duration_ms: f64,
  pid: i32,
  error: Option<(SessionErrorCode, String)>,
}

fn error_reply(code: SessionErrorCode, message: String) -> Reply {
  Reply {
    status: "error",
    code: None,
    signal: None,
    stdout: Vec::new(),
    stderr: Vec::new(),
    stdout_truncated: false,
    stderr_truncated: false,
    cut: None,
    session_restarted: false,
    duration_ms: 0.0,
    pid: 0,
    error: Some((code, message)),
  }
}

fn settle(deferred: Deferred, reply: Reply) {
  deferred.resolve(Box::new(move |_| {
    let (error_code, error_message) = match reply.error {
      Some((code, message)) => (Some(code.as_str().to_owned()), Some(message)),
      None => (None, None),
    };
    Ok(NativeSessionReply {
      status: reply.status.into(),
      code: reply.code,
      signal: reply.signal,
      stdout: Buffer::from(reply.stdout),
      stderr: Buffer::from(reply.stderr),
      stdout_truncated: reply.stdout_truncated,
      stderr_truncated: reply.stderr_truncated,
      cut: reply.cut.map(Into::into),
      session_restarted: reply.session_restarted,
      duration_ms: reply.duration_ms,
      pid: reply.pid,
      error_code,
      error_message,
    })
  }));
}

/// The session's thread: runs the requests in order until `End`, or until the JS object is
/// collected (the channel closes); the session is ended either way, its tree with it.
fn serve(
  pool: Pool,
  config: SessionConfig,
  dir: tempfile::TempDir,
  rx: mpsc::Receiver<Request>,
  shared: &Arc<Shared>,
) {
  let mut session: Option<Session> = None;
  let mut config = Some((config, dir));
  let mut followers = Vec::new();
  while let Ok(request) = rx.recv() {
    followers.retain(|f: &std::thread::JoinHandle<()>| !f.is_finished());
    if shared.abandoned.load(Ordering::SeqCst) {
      // Nobody awaits these any more: refuse them, and end the shell below.
      let deferred = match request {
        Request::Start(d) | Request::End(d) => d,
        Request::Exec { deferred, .. } => deferred,
      };
      settle(
        deferred,
        error_reply(
          SessionErrorCode::Destroyed,
          "the session is destroyed".into(),
        ),
      );
      continue;
    }
    match request {
      Request::Start(deferred) => {
        let reply = match config.take() {
          Some((config, dir)) => match Session::start_in(config, dir) {
            Ok(s) => {
              let pid = s.pid().unwrap_or(0);
              shared.pid.store(pid, Ordering::SeqCst);
              shared
                .reaper
                .store(s.reaper_pid().unwrap_or(0), Ordering::SeqCst);
              session = Some(s);
              Reply {
                pid,
                ..error_reply(SessionErrorCode::Invalid, String::new())
              }
              .ok()
            }
            Err(e) => error_reply(start_code(&e), format!("failed to start the session: {e}")),
          },
          None => error_reply(SessionErrorCode::Invalid, "the session is started".into()),
        };
        settle(deferred, reply);
      }
      Request::Exec {
        exec,
        on_stdout,
        on_stderr,
        on_event,
        deferred,
      } => {
        let id = exec.id;
        let reply = match session.as_mut() {
          None => error_reply(
            SessionErrorCode::Destroyed,
            "the session is destroyed".into(),
          ),
          Some(_) if pool.is_closing() => {
            session = None;
            error_reply(
              SessionErrorCode::Destroyed,
              "the session's pool is shut down".into(),
            )
          }
          Some(s) => run(s, exec, on_stdout, on_stderr, shared),
        };
        let detached = session.as_mut().and_then(Session::take_detached);
        match detached {
          Some(detached) => match follow(detached, id, on_event, shared) {
            Ok(f) => {
              followers.push(f);
              settle(deferred, reply);
            }
            Err(e) => settle(
              deferred,
              error_reply(
                SessionErrorCode::Invalid,
                format!("failed to follow the command: {e}"),
              ),
            ),
          },
          None => settle(deferred, reply),
        }
        // The next command's shell, restored from the state before the one that runs on (if
        // it cannot start now, the next command tries again and reports why).
        if let Some(s) = session.as_mut()
          && s.ready().is_ok()
        {
          shared.pid.store(s.pid().unwrap_or(0), Ordering::SeqCst);
          shared
            .reaper
            .store(s.reaper_pid().unwrap_or(0), Ordering::SeqCst);
        }
      }
      Request::End(deferred) => {
        shared.ended.store(true, Ordering::SeqCst);
        if let Some(mut s) = session.take() {
          s.end();
        }
        end_detached(shared, followers);
        shared.ended.store(true, Ordering::SeqCst);
        // Its reaper goes back to the supervisor's stock and may hold another job next.
        shared.reaper.store(0, Ordering::SeqCst);
        settle(
          deferred,
          Reply {
            status: "ended",
            ..error_reply(SessionErrorCode::Invalid, String::new())
          }
          .ok(),
        );
        return;
      }
    }
  }
  // The JS object was collected: the commands that run on go with the session.
  end_detached(shared, followers);
}

/// Kills every command of the session that runs on, and waits until each tree is gone.
fn end_detached(shared: &Shared, followers: Vec<std::thread::JoinHandle<()>>) {
  for ctl in shared.detached().values() {
    let _ = nix::unistd::write(
      ctl.control.as_fd(),
      &Control::Kill {
        grace: Duration::ZERO,
      }
      .encode(),
    );
  }
  for f in followers {
    let _ = f.join();
  }
}

/// Hands a command that runs on to a thread of its own, which follows it to its end and sends
/// its life to JS as a background process's events (`spawned`, output chunks, `exit`).
fn follow(
  mut detached: Detached,
  id: u64,
  events: Option<EventFn>,
  shared: &Arc<Shared>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
  // Non-blocking: Node's thread writes to it and must never wait (a message that finds the
  // pipe full is one of thousands the follower has not read yet).
  let (control_r, control_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
  let stdin = detached.take_stdin().map(Arc::new);
  let pid = detached.pid();
  shared.detached().insert(
    id,
    DetachedCtl {
      control: control_w,
      stdin,
      reaper: detached.reaper_pid().unwrap_or(0),
    },
  );
  let thread_shared = Arc::clone(shared);
  let spawned = std::thread::Builder::new()
    .name("finn-session-cmd".into())
    .spawn(move || {
      let send = |event: ProcessEvent| {
        if let Some(events) = &events {
          events.call(event, ThreadsafeFunctionCallMode::Blocking);
        }
      };
      send(ProcessEvent {
        pid: Some(pid),
        ..ProcessEvent::new("spawned")
      });
      let (status, by) = detached.follow(control_r, &mut |stream, bytes| {
        let kind = match stream {
          Stream::Stdout => "stdout",
          Stream::Stderr => "stderr",
        };
        send(ProcessEvent {
          data: Some(Buffer::from(bytes.to_vec())),
          ..ProcessEvent::new(kind)
        });
      });
      thread_shared.detached().remove(&id);
      let (exit_code, signal) = match status {
        Some(CommandStatus::Exited(code)) => (Some(code), None),
        Some(CommandStatus::Signaled(sig)) => (None, Some(sig)),
        _ => (None, Some(libc::SIGKILL)),
      };
      send(ProcessEvent {
        exit_code,
        signal,
        ended_by: Some(
          match by {
            DetachedEnd::Exit => "exit",
            DetachedEnd::Timeout => "timeout",
            DetachedEnd::Killed => "kill",
          }
          .into(),
        ),
        ..ProcessEvent::new("exit")
      });
    });
  match spawned {
    Ok(handle) => Ok(handle),
    Err(e) => {
      if let Some(ctl) = shared.detached().remove(&id) {
        let _ = nix::unistd::write(
          ctl.control.as_fd(),
          &Control::Kill {
            grace: Duration::ZERO,
          }
          .encode(),
        );
      }
      Err(e)
    }
  }
}

impl Reply {
  fn ok(self) -> Reply {
    Reply {
      error: None,
      ..self
    }
  }
}

fn start_code(e: &SessionError) -> SessionErrorCode {
  match e {
    SessionError::Cwd(_) => SessionErrorCode::NotFound,
    _ => SessionErrorCode::Invalid,
  }
}

/// One stream's capture: at most `max` bytes, cut (in UTF-8 mode) before a character that
/// would not fit whole.
struct Kept {
  bytes: Vec<u8>,
  max: usize,
  truncated: bool,
}

impl Kept {
  fn push(&mut self, chunk: &[u8], utf8: bool) {
    if self.truncated {
      return;
    }
    let room = self.max - self.bytes.len();
    if chunk.len() <= room {
      self.bytes.extend_from_slice(chunk);
      return;
    }
    self.bytes.extend_from_slice(&chunk[..room]);
    self.truncated = true;
    if utf8 {
      // The cut may have split a character: keep only whole ones. Earlier bytes were kept
      // whole, so only the last (at most 3) bytes can be an incomplete sequence.
      let whole = utf8_floor(&self.bytes);
      self.bytes.truncate(whole);
    }
  }
}

fn run(
  session: &mut Session,
  exec: Exec,
  on_stdout: Option<ChunkFn>,
  on_stderr: Option<ChunkFn>,
  shared: &Shared,
) -> Reply {
  // This command's own stop pipe: a stop meant for another command never reaches it.
  let (stop_r, stop_w) = match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
    Ok(pair) => pair,
    Err(e) => {
      return error_reply(
        SessionErrorCode::Invalid,
        format!("failed to make a pipe: {e}"),
      );
    }
  };
  {
    let mut stops = shared.stops();
    if stops.early.contains(&exec.id) {
      let _ = nix::unistd::write(stop_w.as_fd(), &[1]);
    }
    stops.early.retain(|&id| id > exec.id);
    stops.current = Some((exec.id, stop_w));
  }
  let options = RunOptions {
    stdin: exec.stdin,
    timeout: exec.timeout,
    idle_timeout: exec.idle_timeout,
    stop: Some(stop_r.as_raw_fd()),
    yield_after: exec.yield_after,
    background: exec.background,
    stdin_pipe: exec.stdin_pipe,
  };
  let max = exec.max_output_bytes;
  let mut out = Kept {
    bytes: Vec::new(),
    max,
    truncated: false,
  };
  let mut err = Kept {
    bytes: Vec::new(),
    max,
    truncated: false,
  };
  let utf8 = exec.utf8;
  let started = Instant::now();
  let result = session.run_streaming(&exec.command, &options, &mut |stream, bytes| {
    let (kept, callback) = match stream {
      Stream::Stdout => (&mut out, &on_stdout),
      Stream::Stderr => (&mut err, &on_stderr),
    };
    kept.push(bytes, utf8);
    if let Some(f) = callback {
      // Blocking: a full queue waits for JS to take chunks (the backpressure).
      f.call(bytes.to_vec(), ThreadsafeFunctionCallMode::Blocking);
    }
  });
  drop((on_stdout, on_stderr));
  shared.stops().current = None;
  drop(stop_r);
  // A command that runs on took the shell: the next one's are stored once it starts.
  if let (Some(pid), reaper) = (session.pid(), session.reaper_pid()) {
    shared.pid.store(pid, Ordering::SeqCst);
    shared.reaper.store(reaper.unwrap_or(0), Ordering::SeqCst);
  }
  let result = match result {
    Ok(r) => r,
    Err(SessionError::NulInCommand) => {
      return error_reply(
        SessionErrorCode::Invalid,
        "command must not contain NUL bytes".into(),
      );
    }
    Err(e) => {
      return error_reply(
        SessionErrorCode::Destroyed,
        format!("the session's shell could not be kept running: {e}"),
      );
    }
  };
  let (status, code, signal) = match result.status {
    CommandStatus::Exited(code) => ("exited", Some(code), None),
    CommandStatus::Signaled(sig) => ("signaled", None, Some(sig)),
    CommandStatus::TimedOut => ("replaced", None, None),
    CommandStatus::Running => ("running", None, None),
  };
  Reply {
    status,
    code,
    signal,
    stdout: out.bytes,
    stderr: err.bytes,
    stdout_truncated: out.truncated,
    stderr_truncated: err.truncated,
    cut: result.cut.map(|c| match c {
      Cut::Wall => "wall",
      Cut::Idle => "idle",
      Cut::Stopped => "stopped",
    }),
    session_restarted: result.session_restarted,
    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
    pid: session.pid().unwrap_or(0),
    error: None,
  }
}
