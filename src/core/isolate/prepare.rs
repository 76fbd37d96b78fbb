//! Every allocation and every path lookup isolation needs, done before the fork, so the child
//! side (`child.rs`) only makes syscalls on what is built here.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use seccompiler::BpfProgram;

use super::cgroup::{CgroupEvents, JobCgroup};
use super::error::IsolationError;
use super::landlock::{self as ll, FsRules};
use super::mounts::{self, MountOp};
use super::plan::Plan;
use super::release::Held;
use super::seccomp::{self, SeccompRules};

/// What was applied, for `ExecResult.isolation` and the audit log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IsolationReport {
  pub backend: &'static str,
  pub applied: Vec<&'static str>,
  pub degraded: Vec<String>,
}

/// A job's isolation, ready to be applied between fork and exec.
pub struct Prepared {
  pub(super) rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
  pub(super) cgroup: Option<JobCgroup>,
  pub(super) unshare_flags: libc::c_int,
  /// `uid_map` and `gid_map` lines for a user namespace: our ids mapped to themselves.
  pub(super) id_maps: Option<(CString, CString)>,
  pub(super) mounts: Vec<MountOp>,
  /// Fork once more after `unshare(CLONE_NEWPID)`: the command runs as pid 1 of the namespace,
  /// its parent stays behind to pass on the exit status.
  pub(super) pidns: bool,
  pub(super) drop_bounding: bool,
  pub(super) cap_last_cap: u32,
  /// Shared with the reaper's cache of carved rulesets (`landlock::build`).
  pub(super) landlock_fd: Option<Arc<OwnedFd>>,
  pub(super) seccomp: Vec<BpfProgram>,
  /// The working directory that passed the check: the child enters it with `fchdir` before
  /// any namespace is made (so the new mount namespace carries it over), whatever its path
  /// names by then.
  pub(super) cwd_fd: Option<Arc<OwnedFd>>,
  report: IsolationReport,
  /// The job's mount namespace, held by its reaper once the command runs and released off the
  /// job's path when this is dropped (see `release.rs`).
  held: Option<Held>,
}

impl Prepared {
  pub fn report(&self) -> &IsolationReport {
    &self.report
  }

  /// The cgroup's counters (zero without a cgroup).
  pub fn cgroup_events(&self) -> CgroupEvents {
    self
      .cgroup
      .as_ref()
      .map(JobCgroup::events)
      .unwrap_or_default()
  }

  /// Pids left in the job's cgroup (empty without one).
  pub fn cgroup_pids(&self) -> Vec<i32> {
    self
      .cgroup
      .as_ref()
      .map(JobCgroup::pids)
      .unwrap_or_default()
  }

  /// In the reaper, once the command runs as `leader` (its child, not yet reaped): takes a
  /// reference to the job's mount namespace, so that the job's exit does not free it and wait
  /// for the kernel's grace period there; dropping this releases it on another thread (see
  /// `release.rs`). Nothing to hold without a mount namespace, or once `leader` has exited.
  pub fn hold_namespace(&mut self, leader: libc::pid_t) {
    if self.unshare_flags & libc::CLONE_NEWNS != 0 {
      self.held = Held::of(leader);
    }
  }

  /// Kills what is left in the job's cgroup and removes it (also done on drop).
  pub fn cleanup(&mut self) {
    if let Some(cg) = &mut self.cgroup {
      cg.kill_and_remove();
    }
    self.cgroup = None;
  }
}

/// Builds everything `plan` asks for. Each layer's failure names the layer.
pub fn prepare(plan: &Plan) -> Result<Prepared, IsolationError> {
  let l = plan.limits;
  let mut rlimits = vec![(libc::RLIMIT_CORE, 0)];
  rlimits.push((libc::RLIMIT_NPROC, l.max_processes));
  if let Some(cpu) = l.cpu_seconds {
    rlimits.push((libc::RLIMIT_CPU, cpu));
  }
  if let Some(f) = l.max_file_bytes {
    rlimits.push((libc::RLIMIT_FSIZE, f));
  }
  if let Some(n) = l.max_open_files {
    rlimits.push((libc::RLIMIT_NOFILE, n));
  }

  let cgroup = if plan.layers.cgroup {
    let name = uuid::Uuid::new_v4().simple().to_string();
    let cg = JobCgroup::create(&name, l.max_processes, Some(l.max_memory_bytes))
      .map_err(|e| IsolationError::prepare("cgroup", e))?;
    Some(cg)
  } else {
    // Without a memory cgroup, bound each process's address space instead.
    rlimits.push((libc::RLIMIT_AS, l.max_memory_bytes));
    None
  };

  let mut unshare_flags = 0;
  let id_maps = plan.layers.userns.then(|| {
    unshare_flags |= libc::CLONE_NEWUSER;
    // SAFETY: geteuid/getegid cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let line = |id: u32| CString::new(format!("{id} {id} 1\n")).expect("digits have no NUL");
    (line(uid), line(gid))
  });
  if plan.layers.netns {
    unshare_flags |= libc::CLONE_NEWNET;
  }
  if plan.layers.pidns {
    unshare_flags |= libc::CLONE_NEWPID;
  }
  let mounts = if plan.layers.mountns {
    unshare_flags |= libc::CLONE_NEWNS;
    mounts::plan(
      &plan.writable,
      &plan.checked.writable,
      &plan.protect,
      &plan.deny_read,
    )
    .map_err(|e| IsolationError::prepare("mountns", e))?
  } else {
    Vec::new()
  };

  // With the mount namespace, denied paths that exist are covered by empty read-only mounts;
  // carving them out of landlock's read rules as well costs ~2 ms and hundreds of rules per exec
  // (every sibling in /etc). A path that does not exist yet has nothing to mount over, and the
  // user's own tools may create it while the job runs (`aws configure`): landlock carves those
  // whose nearest existing directory this uid can write (all of them for root; for another
  // user, its HOME and the like, not /etc). One a more privileged user creates later stays
  // readable (README).
  let missing: Vec<PathBuf>;
  let landlock_deny: &[PathBuf] = if plan.layers.mountns {
    missing = plan
      .deny_read
      .iter()
      .filter(|d| d.canonicalize().is_err() && creatable_by_us(d))
      .cloned()
      .collect();
    &missing
  } else {
    &plan.deny_read
  };
  let landlock_fd = if plan.layers.landlock {
    let fd = ll::build(&FsRules {
      read_roots: &plan.read_roots,
      deny_read: landlock_deny,
      writable: &plan.writable,
      writable_fds: &plan.checked.writable,
      deny_network: plan.deny_network,
      deny_unix: plan.deny_unix,
      abi: plan.landlock_abi,
    })
    .map_err(|e| IsolationError::prepare("landlock", e))?;
    Some(fd)
  } else {
    None
  };

  let seccomp = if plan.layers.seccomp {
    seccomp::compile(SeccompRules {
      deny_network: plan.deny_network,
      deny_unix: plan.deny_unix,
      // Not an IPC namespace: making one costs ~2.6 ms per exec as nobody (measured with
      // tests/isolate_cost.rs), more than all the other layers together.
      deny_ipc: true,
    })
    .map_err(|e| IsolationError::prepare("seccomp", e))?
  } else {
    Vec::new()
  };

  Ok(Prepared {
    rlimits,
    cgroup,
    unshare_flags,
    id_maps,
    mounts,
    pidns: plan.layers.pidns,
    // Root holds CAP_SETPCAP; so does anyone inside their own user namespace.
    drop_bounding: plan.drop_bounding || plan.layers.userns,
    cap_last_cap: plan.cap_last_cap,
    landlock_fd,
    seccomp,
    cwd_fd: plan.checked.cwd.clone(),
    report: plan.report(),
    held: None,
  })
}

/// The nearest existing ancestor of `p` is a directory this uid can write into.
fn creatable_by_us(p: &std::path::Path) -> bool {
  let Some(dir) = p.ancestors().skip(1).find(|a| a.exists()) else {
    return false;
  };
  nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}
