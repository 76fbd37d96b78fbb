//! `NativeProcess`: a background process as JS sees it, started by
//! `NativeWorkerPool.startProcess`. `index.js` wraps it into `Process` (the log ring, the
//! waits, the errors).
//!
//! Its life reaches JS as events through one weak threadsafe function per process, in order:
//! `spawned` (with the command's pid), `stdout`/`stderr` chunks as they are read, then one
//! `exit` or `error`. The queue between the process's thread and Node's holds at most
//! [`EVENT_QUEUE`] events: when JS falls behind, the thread waits, the pipe fills, and the
//! command's writes wait (backpressure, not a buffer without bound). Weak: a process never
//! holds the event loop open by itself (`index.js` holds it while the process runs).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Function, PromiseRaw, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, JsValue, Status};
use napi_derive::napi;

use super::error::{coded, pool_error};
use super::pool::{NativeWorkerPool, jobs_runtime};
use super::spec;
use finn_exec::capture::Stream;
use finn_exec::{EndedBy, ExitStatus};
use finn_job::limits::MAX_TIMEOUT_MS;
use finn_pool::{
  JobSpec, PoolError, PoolErrorCode, ProcessEnd, ProcessHandle, ProcessSink, ProcessSpec,
  StopReason,
};

/// Events queued between a process's thread and Node's before the thread waits.
pub(super) const EVENT_QUEUE: usize = 64;

/// One event of a background process's life.
#[napi(object)]
pub struct ProcessEvent {
  /// `spawned`, `stdout`, `stderr`, `exit` or `error`.
  pub kind: String,
  /// `spawned`: the command's pid.
  pub pid: Option<i32>,
  /// `stdout`/`stderr`: the bytes, as read.
  pub data: Option<Buffer>,
  /// `exit`: the exit code, when the command exited.
  pub exit_code: Option<i32>,
  /// `exit`: the signal number, when a signal ended the command.
  pub signal: Option<i32>,
  /// `exit`: what ended it: `exit` (its own end), `timeout`, `kill` or `shutdown`.
  pub ended_by: Option<String>,
  /// `error`: the PoolErrorCode and message.
  pub error_code: Option<String>,
  pub error_message: Option<String>,
}

impl ProcessEvent {
  pub(super) fn new(kind: &str) -> Self {
    ProcessEvent {
      kind: kind.into(),
      pid: None,
      data: None,
      exit_code: None,
      signal: None,
      ended_by: None,
      error_code: None,
      error_message: None,
    }
  }
}

pub(super) type EventFn =
  ThreadsafeFunction<ProcessEvent, (), ProcessEvent, Status, false, true, EVENT_QUEUE>;

/// The process's sink: every event to JS, waiting while the queue is full.
struct JsSink {
  tsfn: Arc<EventFn>,
}

impl JsSink {
  fn send(&self, event: ProcessEvent) {
    // Fails only once the environment is going: nothing is waiting for the event then.
    self.tsfn.call(event, ThreadsafeFunctionCallMode::Blocking);
  }
}

impl ProcessSink for JsSink {
  fn spawned(&mut self, pid: i32) {
    self.send(ProcessEvent {
      pid: Some(pid),
      ..ProcessEvent::new("spawned")
    });
  }

  fn output(&mut self, stream: Stream, bytes: &[u8]) {
    let kind = match stream {
      Stream::Stdout => "stdout",
      Stream::Stderr => "stderr",
    };
    self.send(ProcessEvent {
      data: Some(Buffer::from(bytes.to_vec())),
      ..ProcessEvent::new(kind)
    });
  }

  fn ended(&mut self, end: ProcessEnd) {
    let event = match end {
      ProcessEnd::Ended { status, ended_by } => {
        let (exit_code, signal) = match status {
          Some(ExitStatus::Exited(code)) => (Some(code), None),
          Some(ExitStatus::Signaled(sig)) => (None, Some(sig)),
          None => (None, Some(libc::SIGKILL)),
        };
        let ended_by = match ended_by {
          EndedBy::Exit | EndedBy::OutputLimit => "exit",
          EndedBy::Timeout => "timeout",
          EndedBy::Stopped(StopReason::Abort) => "kill",
          EndedBy::Stopped(StopReason::Shutdown) => "shutdown",
        };
        ProcessEvent {
          exit_code,
          signal,
          ended_by: Some(ended_by.into()),
          ..ProcessEvent::new("exit")
        }
      }
      ProcessEnd::Failed(e) => ProcessEvent {
        error_code: Some(e.code().into()),
        error_message: Some(e.to_string()),
        ..ProcessEvent::new("error")
      },
    };
    self.send(event);
  }
}

/// What `startProcess` takes beside the spec.
#[napi(object)]
pub struct ProcessOptions {
  /// Hard deadline from the start (absent: none); then SIGTERM, and SIGKILL after the pool's
  /// `killGraceMs`.
  pub timeout_ms: Option<f64>,
  /// A stdin pipe for `writeStdin` (else the command reads `/dev/null`).
  pub stdin: bool,
}

/// A running background process. Use `Process` from the package entry instead.
#[napi]
pub struct NativeProcess {
  handle: ProcessHandle,
  /// The write end of its stdin pipe until `closeStdin`; a write in flight holds its own
  /// reference, so the close takes effect after it.
  stdin: Mutex<Option<Arc<OwnedFd>>>,
}

#[napi]
impl NativeWorkerPool {
  /// Starts a background process of `spec` (an ExecSpec: `binaryPath`, `args`, `cwd`, `env`,
  /// `isolation` as JSON; its `timeoutMs` and `maxBuffer` are not used). Its events go to
  /// `onEvent`. Throws a coded error for a bad spec or a closed pool.
  #[napi(catch_unwind)]
  pub fn start_process(
    &self,
    env: &Env,
    spec: Unknown,
    options: ProcessOptions,
    on_event: Function<ProcessEvent, ()>,
  ) -> napi::Result<NativeProcess> {
    let timeout = match options.timeout_ms {
      None => None,
      Some(ms) if ms.fract() == 0.0 && (1.0..=MAX_TIMEOUT_MS as f64).contains(&ms) => {
        Some(Duration::from_millis(ms as u64))
      }
      Some(_) => {
        let e = PoolError::InvalidSpec(format!(
          "timeoutMs must be an integer from 1 to {MAX_TIMEOUT_MS}"
        ));
        return Err(pool_error(env, &e));
      }
    };
    let job = spec::raw_job(&spec, None, None)
      .and_then(JobSpec::new)
      .map_err(|e| pool_error(env, &e))?;
    let tsfn = on_event
      .build_threadsafe_function::<ProcessEvent>()
      .callee_handled::<false>()
      .weak::<true>()
      .max_queue_size::<EVENT_QUEUE>()
      .build_callback(|ctx| Ok(ctx.value))?;
    let sink = Box::new(JsSink {
      tsfn: Arc::new(tsfn),
    });
    let spec = ProcessSpec {
      job,
      timeout,
      stdin: options.stdin,
    };
    let mut handle = self
      .pool
      .start_process(spec, sink)
      .map_err(|e| pool_error(env, &e))?;
    let stdin = handle.stdin.take().map(Arc::new);
    Ok(NativeProcess {
      handle,
      stdin: Mutex::new(stdin),
    })
  }
}

#[napi]
impl NativeProcess {
  /// The pool's id of this process.
  #[napi(getter)]
  pub fn id(&self) -> f64 {
    self.handle.id as f64
  }

  /// Terminates the process's whole tree: SIGTERM now, SIGKILL after `graceMs` (0: SIGKILL
  /// now). A second call can bring the SIGKILL forward. The `exit` event follows once no
  /// process of the tree is left.
  #[napi(catch_unwind)]
  pub fn kill(&self, grace_ms: f64) {
    let grace = Duration::from_millis(grace_ms.clamp(0.0, MAX_TIMEOUT_MS as f64) as u64);
    self.handle.kill(grace);
  }

  /// Sends signal number `signo` to every process of the tree without ending it (its reaper
  /// freezes the tree, signals it and resumes it).
  #[napi(catch_unwind)]
  pub fn signal(&self, signo: i32) {
    self.handle.signal(signo);
  }

  /// Writes `data` to the command's stdin, off Node's thread; resolves once all of it is in
  /// the pipe, with `""`, or with why not: `EPIPE` once the command's end is closed (it
  /// exited), `ENOTCONN` without a stdin pipe or after `closeStdin`, another errno's name.
  #[napi(catch_unwind)]
  pub fn write_stdin<'env>(
    &self,
    env: &'env Env,
    data: Buffer,
  ) -> napi::Result<PromiseRaw<'env, String>> {
    let fd = self.stdin.lock().unwrap_or_else(|e| e.into_inner()).clone();
    write_stdin(env, fd, &data, PoolErrorCode::WorkerCrashed.as_str())
  }

  /// Closes our end of the command's stdin (after writes in flight): the command reads EOF.
  #[napi(catch_unwind)]
  pub fn close_stdin(&self) {
    self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
  }
}

/// A `writeStdin` promise: writes `data` to `fd` off Node's thread and resolves once all of it
/// is in the pipe, with `""`, or with why not: `ENOTCONN` without a pipe (`None`), `EPIPE` once
/// the command's end is closed, another errno's name. `code`: the error's code when no thread
/// can be had.
pub(super) fn write_stdin<'env>(
  env: &'env Env,
  fd: Option<std::sync::Arc<OwnedFd>>,
  data: &[u8],
  code: &str,
) -> napi::Result<PromiseRaw<'env, String>> {
  let (deferred, promise) = env.create_deferred::<String, Settle>()?;
  let Some(fd) = fd else {
    deferred.resolve(Box::new(|_| Ok("ENOTCONN".to_owned())));
    return Ok(PromiseRaw::new(env.raw(), promise.raw()));
  };
  let bytes: Vec<u8> = data.to_vec();
  let runtime = jobs_runtime().map_err(|e| coded(env, code, format!("no job runtime: {e}")))?;
  runtime.spawn_blocking(move || {
    // The errno's name (nix's `Debug` of it: `EPIPE`), or nothing.
    let code = match write_all(&fd, &bytes) {
      Ok(()) => String::new(),
      Err(e) => format!(
        "{:?}",
        nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
      ),
    };
    deferred.resolve(Box::new(move |_| Ok(code)));
  });
  Ok(PromiseRaw::new(env.raw(), promise.raw()))
}

/// How a `writeStdin` promise is settled: with the errno's name, or `""`.
pub(super) type Settle = Box<dyn FnOnce(Env) -> napi::Result<String> + Send>;

/// Writes all of `bytes` to the non-blocking `fd`, waiting in `poll` while the pipe is full.
pub(super) fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
  while !bytes.is_empty() {
    // SAFETY: writes from a valid slice to an fd this call keeps open.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if n >= 0 {
      bytes = &bytes[n as usize..];
      continue;
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
      Some(libc::EINTR) => {}
      Some(libc::EAGAIN) => {
        let mut fds = [libc::pollfd {
          fd: fd.as_raw_fd(),
          events: libc::POLLOUT,
          revents: 0,
        }];
        // SAFETY: one valid pollfd; no timeout: the pipe's reader either reads or goes away
        // (POLLERR), and the process's end closes when its tree is gone.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
      }
      _ => return Err(err),
    }
  }
  Ok(())
}
