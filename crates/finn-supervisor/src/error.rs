//! Why the supervisor or a job's reaper failed a job (the job rejects `WORKER_CRASHED`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::protocol::FromReaper;

/// An I/O error kept whole for an error that must be `Clone` and `Eq` (a job's outcome is
/// both): shared by the clones, compared by kind, errno and message.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<io::Error>);

impl IoCause {
  pub fn get(&self) -> &io::Error {
    &self.0
  }
}

impl From<io::Error> for IoCause {
  fn from(e: io::Error) -> Self {
    IoCause(Arc::new(e))
  }
}

impl PartialEq for IoCause {
  fn eq(&self, other: &Self) -> bool {
    let (a, b) = (self.get(), other.get());
    a.kind() == b.kind() && a.raw_os_error() == b.raw_os_error() && a.to_string() == b.to_string()
  }
}

impl Eq for IoCause {}

impl std::fmt::Display for IoCause {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    self.0.fmt(f)
  }
}

impl std::error::Error for IoCause {
  fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
    Some(self.get())
  }
}

/// What went wrong with the supervisor on a request for a reaper.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
  #[error("it exited")]
  Exited,
  #[error("it did not answer a request for a reaper")]
  NoAnswer,
  #[error("no socket came with the reaper")]
  NoSocket,
  /// Its socket failed, or a frame from it did not decode.
  #[error(transparent)]
  Io(IoCause),
}

impl From<io::Error> for Fault {
  fn from(e: io::Error) -> Self {
    Fault::Io(e.into())
  }
}

/// The supervisor or the job's reaper failed: the job's tree is killed by whichever of them is
/// left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Crash {
  #[error("cannot start the supervisor {}: {source}", program.display())]
  Start { program: PathBuf, source: IoCause },
  #[error("the supervisor (pid {pid}) failed: {fault}")]
  Supervisor { pid: i32, fault: Fault },
  /// Its socket failed, it exited, or a frame from it did not decode.
  #[error("the job's reaper (pid {pid}) failed: {source}")]
  Reaper { pid: i32, source: IoCause },
  #[error(
    "the job's reaper (pid {pid}) failed: unexpected {message:?} after {retired} retired reaper(s)"
  )]
  Unexpected {
    pid: i32,
    message: FromReaper,
    retired: usize,
  },
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn messages_name_the_process_and_the_cause() {
    let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "it exited");
    let reaper = Crash::Reaper {
      pid: 7,
      source: eof().into(),
    };
    assert_eq!(
      reaper.to_string(),
      "the job's reaper (pid 7) failed: it exited"
    );
    assert_eq!(
      reaper,
      Crash::Reaper {
        pid: 7,
        source: eof().into()
      }
    );
    let start = Crash::Start {
      program: "/x/finn-supervisor".into(),
      source: io::Error::from_raw_os_error(libc::ENOENT).into(),
    };
    assert_eq!(
      start.to_string(),
      "cannot start the supervisor /x/finn-supervisor: No such file or directory (os error 2)"
    );
    let unexpected = Crash::Unexpected {
      pid: 9,
      message: FromReaper::TreeGone,
      retired: 1,
    };
    assert_eq!(
      unexpected.to_string(),
      "the job's reaper (pid 9) failed: unexpected TreeGone after 1 retired reaper(s)"
    );
    let io_a = IoCause::from(io::Error::from_raw_os_error(libc::EPIPE));
    let io_b = IoCause::from(io::Error::from_raw_os_error(libc::ECONNRESET));
    assert_ne!(io_a, io_b);
  }
}
