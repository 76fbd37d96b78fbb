//! Why the pool rejected a job. Messages are loa-finn's, which its callers and tests match.

use nix::errno::Errno;

use super::config::Lane;
use finn_isolate::LayerFailed;
use finn_supervisor::{Crash, IoCause};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
  #[error("{} queue full", match .0 { Lane::Interactive => "Interactive", Lane::System => "System" })]
  QueueFull(Lane),
  /// `exec` called after `shutdown()` began.
  #[error("Pool is shutting down")]
  Closed,
  /// A queued or running job that shutdown ended.
  #[error("Pool shutting down")]
  ShutDown,
  #[error("Command timed out after {0}ms")]
  Timeout(u64),
  #[error("The operation was aborted")]
  Aborted,
  #[error("Worker crashed: {0}")]
  Crashed(Crashed),
  /// No thread could be started to run the job (retry with backoff, as for a full queue).
  #[error("No worker thread could be started: {0}")]
  NoWorker(NoThread),
  /// The message names the field (`spec.cwd`, `config.isolation.limits.cpuSeconds`).
  #[error("{0}")]
  InvalidSpec(String),
  #[error(transparent)]
  IsolationUnavailable(Unavailable),
}

/// An internal failure: the job rejects `WORKER_CRASHED`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Crashed {
  /// The job's task ended without a result (a panic in the addon).
  #[error("the job's task panicked")]
  Panicked,
  #[error(transparent)]
  Supervisor(#[from] Crash),
  #[error("no supervisor binary was given")]
  NoSupervisorBinary,
  #[error("supervisor binary {}: {problem}", path.display())]
  SupervisorBinary {
    path: std::path::PathBuf,
    problem: BinaryProblem,
  },
}

/// What is wrong with the supervisor binary the pool was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryProblem {
  #[error("{0}")]
  Unreadable(IoCause),
  #[error("NUL in the path")]
  Nul,
  #[error("not an executable file")]
  NotExecutable,
}

/// Why no thread could be started for a job: the errno tokio's panic names, if it names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoThread {
  pub errno: Option<Errno>,
}

impl NoThread {
  /// From the text of tokio's "OS can't spawn worker thread: ... (os error N)" panic.
  pub fn from_panic(text: &str) -> NoThread {
    let errno = text
      .rsplit_once("(os error ")
      .and_then(|(_, n)| n.strip_suffix(')'))
      .and_then(|n| n.parse().ok())
      .map(Errno::from_raw);
    NoThread { errno }
  }
}

impl std::fmt::Display for NoThread {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match self.errno {
      None => f.write_str("could not start a worker thread"),
      Some(errno) => {
        write!(f, "{}", std::io::Error::from(errno))?;
        // The errno does not say which limit.
        if errno == Errno::EAGAIN {
          f.write_str(" (process limit reached: RLIMIT_NPROC or the pids cgroup's pids.max)")?;
        }
        Ok(())
      }
    }
  }
}

/// Isolation that cannot be applied: the job did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
  #[error("isolation is applied by the supervisor's reaper, and this pool runs without one")]
  NoSupervisor,
  /// Layers required (or implied by `mode: "native"` or `"bwrap"`) that this host lacks, as
  /// `doctor()` names them.
  #[error("isolation unavailable: {}", .0.join("; "))]
  Missing(Vec<String>),
  /// A layer failed to set up for this job.
  #[error(transparent)]
  Layer(LayerFailed),
}

impl PoolError {
  /// The stable `PoolErrorCode` string seen by JS.
  pub fn code(&self) -> &'static str {
    self.error_code().as_str()
  }

  pub fn error_code(&self) -> PoolErrorCode {
    match self {
      PoolError::QueueFull(_) | PoolError::NoWorker(_) => PoolErrorCode::WorkerUnavailable,
      PoolError::Closed | PoolError::ShutDown => PoolErrorCode::PoolShuttingDown,
      PoolError::Timeout(_) => PoolErrorCode::ExecTimeout,
      PoolError::Aborted => PoolErrorCode::Aborted,
      PoolError::Crashed(_) => PoolErrorCode::WorkerCrashed,
      PoolError::InvalidSpec(_) => PoolErrorCode::InvalidSpec,
      PoolError::IsolationUnavailable(_) => PoolErrorCode::IsolationUnavailable,
    }
  }
}

/// JS's `PoolErrorCode`: the one list of codes. The addon exports it; `index.js` builds its
/// `PoolErrorCode` from that export, and a test holds `index.d.ts` to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolErrorCode {
  /// The lane's queue is full: retry with backoff.
  WorkerUnavailable,
  /// `shutdown()` has begun: do not retry.
  PoolShuttingDown,
  /// Execution is disabled by configuration (only `index.js`'s DisabledExecutor uses it).
  SandboxDisabled,
  /// The command ran past its timeout; its tree is dead.
  ExecTimeout,
  /// An internal failure (a panic in the addon).
  WorkerCrashed,
  /// The caller's AbortSignal fired.
  Aborted,
  /// The spec or an argument is invalid; the message names the field.
  InvalidSpec,
  /// Required isolation cannot be applied on this host, or a layer failed to set up for this job
  /// (the command did not run); the message names the layers and why.
  IsolationUnavailable,
}

impl PoolErrorCode {
  pub const ALL: [PoolErrorCode; 8] = [
    PoolErrorCode::WorkerUnavailable,
    PoolErrorCode::PoolShuttingDown,
    PoolErrorCode::SandboxDisabled,
    PoolErrorCode::ExecTimeout,
    PoolErrorCode::WorkerCrashed,
    PoolErrorCode::Aborted,
    PoolErrorCode::InvalidSpec,
    PoolErrorCode::IsolationUnavailable,
  ];

  pub fn as_str(self) -> &'static str {
    match self {
      PoolErrorCode::WorkerUnavailable => "WORKER_UNAVAILABLE",
      PoolErrorCode::PoolShuttingDown => "POOL_SHUTTING_DOWN",
      PoolErrorCode::SandboxDisabled => "SANDBOX_DISABLED",
      PoolErrorCode::ExecTimeout => "EXEC_TIMEOUT",
      PoolErrorCode::WorkerCrashed => "WORKER_CRASHED",
      PoolErrorCode::Aborted => "ABORTED",
      PoolErrorCode::InvalidSpec => "INVALID_SPEC",
      PoolErrorCode::IsolationUnavailable => "ISOLATION_UNAVAILABLE",
    }
  }
}

impl finn_job::RunnerError for PoolError {
  fn audit_code(&self) -> String {
    self.code().into()
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn no_thread_reads_the_errno_of_tokios_panic_and_names_the_limit() {
    let eagain = NoThread::from_panic(
      "OS can't spawn worker thread: Resource temporarily unavailable (os error 11)",
    );
    assert_eq!(eagain.errno, Some(Errno::EAGAIN));
    let text = PoolError::NoWorker(eagain).to_string();
    assert_eq!(
      text,
      "No worker thread could be started: Resource temporarily unavailable (os error 11) \
       (process limit reached: RLIMIT_NPROC or the pids cgroup's pids.max)"
    );
    let nomem = NoThread::from_panic("OS can't spawn worker thread: x (os error 12)");
    assert_eq!(nomem.to_string(), "Cannot allocate memory (os error 12)");
    let other = NoThread::from_panic("something else");
    assert_eq!(other.errno, None);
    assert_eq!(other.to_string(), "could not start a worker thread");
  }

  #[test]
  fn every_error_has_its_code() {
    let layer = LayerFailed::new(finn_isolate::Layer::Landlock, Errno::EPERM);
    for (e, code) in [
      (
        PoolError::Crashed(Crashed::Panicked),
        PoolErrorCode::WorkerCrashed,
      ),
      (
        PoolError::NoWorker(NoThread { errno: None }),
        PoolErrorCode::WorkerUnavailable,
      ),
      (
        PoolError::IsolationUnavailable(Unavailable::Layer(layer.clone())),
        PoolErrorCode::IsolationUnavailable,
      ),
      (
        PoolError::IsolationUnavailable(Unavailable::NoSupervisor),
        PoolErrorCode::IsolationUnavailable,
      ),
    ] {
      assert_eq!(e.error_code(), code, "{e}");
    }
    assert_eq!(
      PoolError::IsolationUnavailable(Unavailable::Layer(layer.clone())).to_string(),
      layer.to_string()
    );
  }
}
