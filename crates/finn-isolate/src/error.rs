//! Why isolation could not be set up for a job, and which layer it was.

use std::path::PathBuf;

use nix::errno::Errno;

use super::cgroup::CgroupError;
use super::landlock::LandlockError;
use super::mounts::MountPlanError;
use super::seccomp::SeccompError;
use finn_job::isolation::OptionsError;

#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
  #[error(transparent)]
  Options(#[from] OptionsError),
  /// A layer the caller required (or that `mode: "native"` implies) cannot apply on this host:
  /// each entry names the layer as `doctor()` does (bwrap's, why it cannot run).
  #[error("isolation unavailable: {}", .0.join("; "))]
  Unavailable(Vec<String>),
  /// Building a layer's ruleset, filter, cgroup or mount plan failed.
  #[error("prepare isolation ({layer}): {source}")]
  Prepare { layer: Layer, source: PrepareError },
}

impl IsolationError {
  pub(crate) fn prepare(layer: Layer, source: impl Into<PrepareError>) -> Self {
    IsolationError::Prepare {
      layer,
      source: source.into(),
    }
  }

  /// A failed preparation as the job's reaper reports it (`None`: not a layer's failure).
  pub fn layer_failed(&self) -> Option<LayerFailed> {
    match self {
      IsolationError::Prepare { layer, source } => Some(LayerFailed::prepared(*layer, source)),
      _ => None,
    }
  }
}

/// An isolation layer, named as `doctor()` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Layer {
  Rlimits = 1,
  /// Fds above 2 closed on exec, capabilities dropped, no_new_privs.
  Privileges = 2,
  Cgroup = 3,
  Landlock = 4,
  Seccomp = 5,
  Userns = 6,
  Netns = 7,
  Mountns = 8,
  Pidns = 9,
  Bwrap = 10,
}

impl Layer {
  pub const ALL: [Layer; 10] = [
    Layer::Rlimits,
    Layer::Privileges,
    Layer::Cgroup,
    Layer::Landlock,
    Layer::Seccomp,
    Layer::Userns,
    Layer::Netns,
    Layer::Mountns,
    Layer::Pidns,
    Layer::Bwrap,
  ];

  /// The layer's name in `doctor()`, `applied` and `degraded`.
  pub fn as_str(self) -> &'static str {
    match self {
      Layer::Rlimits => "rlimits",
      Layer::Privileges => "privileges",
      Layer::Cgroup => "cgroup",
      Layer::Landlock => "landlock",
      Layer::Seccomp => "seccomp",
      Layer::Userns => "userns",
      Layer::Netns => "netns",
      Layer::Mountns => "mountns",
      Layer::Pidns => "pidns",
      Layer::Bwrap => "bwrap",
    }
  }

  /// The number the wire and the child's report carry (never 0: the child reports a failure of
  /// its own start, not of a layer, as 0).
  pub fn id(self) -> u8 {
    self as u8
  }

  pub fn from_id(id: u8) -> Option<Layer> {
    Layer::ALL.into_iter().find(|l| l.id() == id)
  }
}

impl std::fmt::Display for Layer {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.write_str(self.as_str())
  }
}

/// Why a layer's preparation failed (before the fork, in the job's reaper).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
  #[error(transparent)]
  Cgroup(#[from] CgroupError),
  #[error(transparent)]
  Mounts(#[from] MountPlanError),
  #[error(transparent)]
  Landlock(#[from] LandlockError),
  #[error(transparent)]
  Seccomp(#[from] SeccompError),
  /// A file the layer needs (bwrap's filter memfd, a checked fd) could not be made or read.
  #[error("{0}")]
  Io(#[from] std::io::Error),
  /// bwrap's bind of a checked path cannot be verified inside the sandbox without the
  /// supervisor binary.
  #[error(
    "no bind verifier (finn-supervisor) to check the working directory and the protect binds inside the sandbox"
  )]
  NoBindVerifier,
}

impl PrepareError {
  /// The errno it carries, or the one that says it best.
  pub fn errno(&self) -> Errno {
    let io = |e: &std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    match self {
      PrepareError::Cgroup(CgroupError::Create { source, .. })
      | PrepareError::Cgroup(CgroupError::Write { source, .. }) => io(source),
      PrepareError::Mounts(MountPlanError::ProtectSymlink(_))
      | PrepareError::Mounts(MountPlanError::DenySwapped(_)) => Errno::ELOOP,
      PrepareError::Mounts(MountPlanError::TooManyWritable(_)) => Errno::E2BIG,
      PrepareError::Landlock(LandlockError::List { source, .. }) => io(source),
      PrepareError::Landlock(LandlockError::Ruleset(_)) => Errno::EINVAL,
      PrepareError::Landlock(LandlockError::NoFd) => Errno::EOPNOTSUPP,
      PrepareError::Seccomp(_) => Errno::EINVAL,
      PrepareError::Io(e) => io(e),
      PrepareError::NoBindVerifier => Errno::ENOENT,
    }
  }

  /// The path it names, if any.
  pub fn path(&self) -> Option<PathBuf> {
    match self {
      PrepareError::Cgroup(CgroupError::Create { path, .. })
      | PrepareError::Cgroup(CgroupError::Write { path, .. })
      | PrepareError::Mounts(MountPlanError::ProtectSymlink(path))
      | PrepareError::Mounts(MountPlanError::DenySwapped(path))
      | PrepareError::Landlock(LandlockError::List { path, .. }) => Some(path.clone()),
      _ => None,
    }
  }
}

/// A layer that could not be set up for a job: in the reaper before the fork (with the path
/// involved, when there is one), or in the command's process between fork and exec (a syscall's
/// errno). The job rejects `ISOLATION_UNAVAILABLE` with this as its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
  "isolation unavailable: the {layer} layer could not be set up for the command: {}{} ({errno:?})",
  path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default(),
  errno.desc()
)]
pub struct LayerFailed {
  pub layer: Layer,
  pub errno: Errno,
  pub path: Option<PathBuf>,
}

impl LayerFailed {
  /// A step of `layer` in the command's process failed with `errno`.
  pub fn new(layer: Layer, errno: Errno) -> Self {
    LayerFailed {
      layer,
      errno,
      path: None,
    }
  }

  /// The preparation of `layer` failed (in the reaper, before the fork).
  pub fn prepared(layer: Layer, source: &PrepareError) -> Self {
    LayerFailed {
      layer,
      errno: source.errno(),
      path: source.path(),
    }
  }
}

/// For `pre_exec` hooks that must return an `io::Error` (tests start commands with std's
/// `Command`).
impl From<LayerFailed> for std::io::Error {
  fn from(e: LayerFailed) -> Self {
    std::io::Error::from(e.errno)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn every_layer_has_a_distinct_nonzero_id_that_round_trips() {
    for layer in Layer::ALL {
      assert_ne!(layer.id(), 0);
      assert_eq!(Layer::from_id(layer.id()), Some(layer));
    }
    assert_eq!(Layer::from_id(0), None);
    assert_eq!(Layer::from_id(200), None);
  }

  #[test]
  fn a_failed_layer_names_the_layer_the_path_and_the_errno() {
    let child = LayerFailed::new(Layer::Rlimits, Errno::EPERM).to_string();
    assert!(
      child.starts_with("isolation unavailable: the rlimits layer could not be set up"),
      "{child}"
    );
    assert!(child.contains("Operation not permitted (EPERM)"), "{child}");
    let prepared = IsolationError::prepare(
      Layer::Mountns,
      MountPlanError::ProtectSymlink("/j/p".into()),
    );
    let failed = prepared.layer_failed().unwrap();
    assert_eq!(
      (failed.layer, failed.errno, failed.path.as_deref()),
      (
        Layer::Mountns,
        Errno::ELOOP,
        Some(std::path::Path::new("/j/p"))
      )
    );
    assert!(failed.to_string().contains("mountns layer"), "{failed}");
    assert!(failed.to_string().contains("/j/p: "), "{failed}");
    assert!(
      prepared
        .to_string()
        .contains("protect path /j/p is a symlink")
    );
  }
}
