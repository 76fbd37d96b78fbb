//! Every allocation and every path lookup isolation needs, done before the fork, so the child
//! side (`child.rs`) only makes syscalls on what is built here.

use std::borrow::Cow;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use seccompiler::BpfProgram;

use super::cgroup::{CgroupEvents, JobCgroup};
use super::error::{IsolationError, Layer};
use super::landlock::{self as ll, FsRules};
use super::mounts::{self, MountOp};
use super::netns::SharedNet;
use super::plan::{Layers, Plan, ResolvedLimits};
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
  /// The reaper's network namespace, entered with `setns` instead of a new one
  /// ([`Prepared::enter_net`]).
  pub(super) net: Option<Arc<OwnedFd>>,
  /// The job could not change a network namespace it shares (see `netns.rs`).
  net_shareable: bool,
  /// Fork once more after `unshare(CLONE_NEWPID)`: the command runs as pid 1 of the namespace,
  /// its parent stays behind to pass on the exit status.
  pub(super) pidns: bool,
  /// The fork itself made the child pid 1 of a new pid namespace
  /// ([`Prepared::pid_namespace_at_fork`]): the child mounts its `/proc` and forks no more.
  pub(super) pidns_at_fork: bool,
  pub(super) drop_bounding: bool,
  pub(super) cap_last_cap: u32,
  /// Shared with the reaper's cache of carved rulesets (`landlock::build`).
  pub(super) landlock_fd: Option<Arc<OwnedFd>>,
  pub(super) seccomp: Vec<BpfProgram>,
  /// The network through the reaper (`route.rs`): the filter is `seccomp`'s one program,
  /// installed with a listener that goes to the reaper.
  pub(super) route: Option<RouteEnds>,
  /// The working directory that passed the check: the child enters it with `fchdir` before
  /// any namespace is made (so the new mount namespace carries it over), whatever its path
  /// names by then.
  pub(super) cwd_fd: Option<Arc<OwnedFd>>,
  /// The job's route to the egress proxy: the socket pair its child sends its listeners over
  /// (`egress.rs`).
  pub(super) egress: Option<super::egress::Link>,
  /// The job reaches the network only through the egress proxy: the proxy variables go in its
  /// environment.
  pub(super) egress_env: bool,
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

  /// Whether the job may enter its reaper's network namespace ([`SharedNet`]) instead of making
  /// one: it asked for a network namespace, the reaper can enter one without a user namespace
  /// of the job's own, and nothing the job can write changes the namespace (`/proc/sys` is
  /// read-only for it; see `netns.rs`).
  pub fn may_share_net(&self) -> bool {
    self.unshare_flags & libc::CLONE_NEWNET != 0
      && self.id_maps.is_none()
      && self.net_shareable
      && self.egress.is_none()
  }

  /// For a job with a network allowlist, in the reaper once the child runs: the listeners its
  /// child made on the job's loopback (see `egress.rs`); empty when it made none (the child
  /// then failed, and the job with it). Call it once.
  pub fn egress_listeners(&mut self) -> Vec<OwnedFd> {
    self
      .egress
      .as_mut()
      .map(super::egress::Link::listeners)
      .unwrap_or_default()
  }

  /// Whether the job's only route out is the egress proxy (either rung).
  pub fn has_egress(&self) -> bool {
    self.egress_env
  }

  /// Enters `net` in the child instead of making a network namespace. Only for a job that
  /// [`may_share_net`](Self::may_share_net), in a reaper that runs one job at a time and starts
  /// the next only once this one's tree is gone.
  pub fn enter_net(&mut self, net: &SharedNet) {
    if self.may_share_net() {
      self.net = Some(net.0.clone());
      self.unshare_flags &= !libc::CLONE_NEWNET;
    }
  }

  /// For a job in a pid namespace, in the process that forks its child (the reaper), right
  /// before the fork: makes the namespace there (`unshare(CLONE_NEWPID)` in the calling thread,
  /// whose next child becomes its pid 1), so the child is the command's own process and pid 1
  /// of it, instead of forking once more and staying behind as a waiter (about 0.1 ms and a
  /// process more per job). Drop the returned guard right after the fork: it puts the calling
  /// thread's later children back in its own pid namespace. `None` (the child then makes the
  /// namespace itself) without a pid namespace, inside a user namespace of the job's own, or
  /// where the kernel refuses. The child checks that it is pid 1 before it goes on.
  pub fn pid_namespace_at_fork(&mut self) -> Option<PidnsAtFork> {
    if !self.pidns || self.id_maps.is_some() || self.unshare_flags & libc::CLONE_NEWPID == 0 {
      return None;
    }
    let guard = PidnsAtFork::enter()?;
    self.pidns_at_fork = true;
    self.unshare_flags &= !libc::CLONE_NEWPID;
    Some(guard)
  }

  /// Kills what is left in the job's cgroup and removes it (also done on drop).
  pub fn cleanup(&mut self) {
    if let Some(cg) = &mut self.cgroup {
      cg.kill_and_remove();
    }
    self.cgroup = None;
  }
}

/// The two ends of the socket pair the child sends its filter's listener over (`route.rs`).
pub(super) struct RouteEnds {
  pub(super) route: super::route::NetRoute,
  /// The program, as `seccomp`'s, in the kernel's layout.
  pub(super) prog: Vec<libc::sock_filter>,
  /// The child's end (close-on-exec).
  pub(super) to_reaper: OwnedFd,
  /// The reaper's end.
  from_child: OwnedFd,
}

impl Prepared {
  /// In the reaper, once the command runs: the route and the listener of the job's filter (see
  /// `route.rs`), for the reaper to answer the job's `connect`, `bind` and `listen`. `None`
  /// without a route, or once taken.
  pub fn take_route(&mut self) -> Option<(super::route::NetRoute, OwnedFd)> {
    let ends = self.route.take()?;
    let listener = super::route::receive_listener(&ends.from_child)?;
    Some((ends.route, listener))
  }
}

/// The calling thread's next child is pid 1 of a new pid namespace until this is dropped
/// ([`Prepared::pid_namespace_at_fork`]).
#[derive(Debug)]
pub struct PidnsAtFork(&'static OwnedFd);

impl PidnsAtFork {
  fn enter() -> Option<PidnsAtFork> {
    use std::sync::OnceLock;
    // The process's own pid namespace, where each thread's children go back.
    static OWN: OnceLock<Option<OwnedFd>> = OnceLock::new();
    let own = OWN
      .get_or_init(|| {
        std::fs::File::open("/proc/self/ns/pid")
          .ok()
          .map(OwnedFd::from)
      })
      .as_ref()?;
    // SAFETY: unshare takes flags only; CLONE_NEWPID changes where the calling thread's
    // children go, not the thread itself.
    (unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0).then_some(PidnsAtFork(own))
  }
}

impl Drop for PidnsAtFork {
  fn drop(&mut self) {
    use std::os::fd::AsRawFd;
    // SAFETY: setns on an fd held for the life of the process.
    if unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
      // The next fork would land in a namespace whose pid 1 is this job's command: it fails
      // (ENOMEM) once that one has exited, rather than start a job anywhere else.
      eprintln!(
        "finn-isolate: the pid namespace for children was not restored: {}",
        std::io::Error::last_os_error()
      );
    }
  }
}

/// Builds everything `plan` asks for. Each layer's failure names the layer.
pub fn prepare(plan: &Plan) -> Result<Prepared, IsolationError> {
  if plan.net_route.is_some()
    && !(plan.layers.seccomp
      && plan.layers.landlock
      && plan.landlock_abi >= 6
      && plan.bwrap.is_none()
      && !plan.layers.netns)
  {
    // The reaper's answers lean on landlock denying the job's own TCP connects and binds, and
    // on the landlock signal scope (without it the helpers' watch puts a listener of its own on
    // the job, and the kernel allows one per chain). A job with a network namespace of its
    // own takes rung 1's route instead. Refused before anything is built.
    return Err(route_unavailable());
  }
  let l = plan.limits;
  let cgroup = if plan.layers.cgroup {
    let name = uuid::Uuid::new_v4().simple().to_string();
    let cg = JobCgroup::create(&name, l.max_processes, Some(l.max_memory_bytes))
      .map_err(|e| IsolationError::prepare(Layer::Cgroup, e))?;
    Some(cg)
  } else {
    None
  };
  let id_maps = plan.layers.userns.then(|| {
    // SAFETY: geteuid/getegid cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let line = |id: u32| CString::new(format!("{id} {id} 1\n")).expect("digits have no NUL");
    (line(uid), line(gid))
  });
  let mounts = if plan.layers.mountns {
    mounts::plan(
      &plan.writable,
      &plan.checked.writable,
      &plan.protect,
      &plan.deny_read,
    )
    .map_err(|e| IsolationError::prepare(Layer::Mountns, e))?
  } else {
    Vec::new()
  };
  let landlock_fd = if plan.layers.landlock {
    let fd = ll::build(&FsRules {
      read_roots: &plan.read_roots,
      deny_read: &landlock_deny(plan.layers, &plan.deny_read),
      writable: &plan.writable,
      writable_fds: &plan.checked.writable,
      // With the route, the job's own TCP connects and binds are denied: the reaper makes them.
      deny_network: plan.deny_network || plan.net_route.is_some(),
      deny_unix: plan.deny_unix,
      abi: plan.landlock_abi,
    })
    .map_err(|e| IsolationError::prepare(Layer::Landlock, e))?;
    Some(fd)
  } else {
    None
  };

  let seccomp = if plan.layers.seccomp {
    seccomp::compile(SeccompRules {
      deny_network: plan.deny_network,
      deny_unix: plan.deny_unix,
      route: plan.net_route.is_some(),
      // Not an IPC namespace: making one costs ~2.6 ms per exec as nobody (measured with
      // tests/isolate_cost.rs), more than all the other layers together.
      deny_ipc: true,
    })
    .map_err(|e| IsolationError::prepare(Layer::Seccomp, e))?
  } else {
    Vec::new()
  };
  let route = match (plan.net_route, seccomp.as_slice()) {
    (Some(route), [prog]) => {
      use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
      let (to_reaper, from_child) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
      )
      .map_err(|e| IsolationError::prepare(Layer::Seccomp, std::io::Error::from(e)))?;
      let prog = prog
        .iter()
        .map(|i| libc::sock_filter {
          code: i.code,
          jt: i.jt,
          jf: i.jf,
          k: i.k,
        })
        .collect();
      Some(RouteEnds {
        route,
        prog,
        to_reaper,
        from_child,
      })
    }
    (Some(_), _) => return Err(route_unavailable()),
    (None, _) => None,
  };

  Ok(Prepared {
    rlimits: rlimits(&l, plan.layers.cgroup),
    cgroup,
    unshare_flags: unshare_flags(plan.layers),
    id_maps,
    mounts,
    net: None,
    net_shareable: proc_sys_read_only(plan),
    pidns: plan.layers.pidns,
    pidns_at_fork: false,
    // Root holds CAP_SETPCAP; so does anyone inside their own user namespace.
    drop_bounding: plan.drop_bounding || plan.layers.userns,
    cap_last_cap: plan.cap_last_cap,
    landlock_fd,
    seccomp,
    route,
    cwd_fd: plan.checked.cwd.clone(),
    egress_env: plan.egress.is_some(),
    // Rung 1: the child's listeners on the job's own loopback. Rung 2 has none (the reaper
    // listens, `route.rs`).
    egress: if plan.egress.is_some() && plan.net_route.is_none() {
      Some(super::egress::Link::new().map_err(|e| IsolationError::prepare(Layer::Netns, e))?)
    } else {
      None
    },
    report: plan.report(),
    held: None,
  })
}

/// A route this host or plan cannot carry: the job fails naming `seccomp`, whose layer it is.
fn route_unavailable() -> IsolationError {
  IsolationError::prepare(
    Layer::Seccomp,
    std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
  )
}

/// `/proc/sys` is read-only for the job: its mount namespace makes every mount read-only but
/// the writable roots, and none of them is `/proc`, below it or above it (a pid namespace's
/// fresh `/proc` binds its `sys` read-only in the child).
fn proc_sys_read_only(plan: &Plan) -> bool {
  let proc = std::path::Path::new("/proc");
  plan.layers.mountns
    && !plan
      .writable
      .iter()
      .any(|w| proc.starts_with(w) || w.starts_with(proc))
}

/// The rlimits the child sets: no core dumps, the limits asked for, and without a memory cgroup
/// each process's address space bounded instead.
fn rlimits(l: &ResolvedLimits, cgroup: bool) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
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
  if !cgroup {
    rlimits.push((libc::RLIMIT_AS, l.max_memory_bytes));
  }
  rlimits
}

/// The namespaces the child unshares, the user namespace among them when it holds the others.
fn unshare_flags(layers: Layers) -> libc::c_int {
  [
    (layers.userns, libc::CLONE_NEWUSER),
    (layers.netns, libc::CLONE_NEWNET),
    (layers.pidns, libc::CLONE_NEWPID),
    (layers.mountns, libc::CLONE_NEWNS),
  ]
  .iter()
  .filter(|(on, _)| *on)
  .fold(0, |flags, (_, flag)| flags | flag)
}

/// The denied paths landlock carves out of its read rules. With the mount namespace, denied
/// paths that exist are covered by empty read-only mounts; carving them out of landlock's read
/// rules as well costs ~2 ms and hundreds of rules per exec (every sibling in /etc). A path that
/// does not exist yet has nothing to mount over, and the user's own tools may create it while
/// the job runs (`aws configure`): landlock carves those whose nearest existing directory this
/// uid can write (all of them for root; for another user, its HOME and the like, not /etc). One
/// a more privileged user creates later stays readable (README).
fn landlock_deny(layers: Layers, deny_read: &[PathBuf]) -> Cow<'_, [PathBuf]> {
  if !layers.mountns {
    return Cow::Borrowed(deny_read);
  }
  deny_read
    .iter()
    .filter(|d| d.canonicalize().is_err() && creatable_by_us(d))
    .cloned()
    .collect()
}

/// The nearest existing ancestor of `p` is a directory this uid can write into.
fn creatable_by_us(p: &std::path::Path) -> bool {
  let Some(dir) = p.ancestors().skip(1).find(|a| a.exists()) else {
    return false;
  };
  nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn rlimits_bound_what_was_asked_and_the_address_space_without_a_cgroup() {
    let asked = ResolvedLimits {
      max_processes: 10,
      max_memory_bytes: 1 << 20,
      cpu_seconds: Some(3),
      max_file_bytes: Some(4),
      max_open_files: Some(5),
    };
    let defaults = ResolvedLimits {
      cpu_seconds: None,
      max_file_bytes: None,
      max_open_files: None,
      ..asked
    };
    use libc::{RLIMIT_AS, RLIMIT_CORE, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC};
    // (limits, cgroup) -> the rlimits, in the order the child sets them.
    #[rustfmt::skip]
    let cases = [
      (defaults, true, vec![(RLIMIT_CORE, 0), (RLIMIT_NPROC, 10)]),
      (defaults, false, vec![(RLIMIT_CORE, 0), (RLIMIT_NPROC, 10), (RLIMIT_AS, 1 << 20)]),
      (asked, true, vec![(RLIMIT_CORE, 0), (RLIMIT_NPROC, 10), (RLIMIT_CPU, 3), (RLIMIT_FSIZE, 4), (RLIMIT_NOFILE, 5)]),
      (asked, false, vec![(RLIMIT_CORE, 0), (RLIMIT_NPROC, 10), (RLIMIT_CPU, 3), (RLIMIT_FSIZE, 4), (RLIMIT_NOFILE, 5), (RLIMIT_AS, 1 << 20)]),
    ];
    for (limits, cgroup, want) in cases {
      assert_eq!(rlimits(&limits, cgroup), want, "{limits:?} cgroup={cgroup}");
    }
  }

  #[test]
  fn each_namespace_layer_is_one_unshare_flag() {
    let none = Layers::default();
    // (layers) -> the flags.
    let cases = [
      (none, 0),
      (
        Layers {
          netns: true,
          ..none
        },
        libc::CLONE_NEWNET,
      ),
      (
        Layers {
          pidns: true,
          ..none
        },
        libc::CLONE_NEWPID,
      ),
      (
        Layers {
          mountns: true,
          ..none
        },
        libc::CLONE_NEWNS,
      ),
      (
        Layers {
          userns: true,
          mountns: true,
          ..none
        },
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
      ),
      (
        Layers {
          cgroup: true,
          landlock: true,
          seccomp: true,
          ..none
        },
        0,
      ),
      (
        Layers {
          netns: true,
          mountns: true,
          pidns: true,
          userns: true,
          ..none
        },
        libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWPID | libc::CLONE_NEWNS,
      ),
    ];
    for (layers, want) in cases {
      assert_eq!(unshare_flags(layers), want, "{layers:?}");
    }
  }

  #[test]
  fn landlock_carves_only_what_no_mount_covers() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    std::fs::write(real.join("exists"), "").unwrap();
    let deny = vec![
      real.join("exists"),
      real.join("missing"),
      real.join("missing-dir/below"),
      PathBuf::from("/nonexistent-finn-root/x"),
    ];
    let with_mounts = Layers {
      mountns: true,
      ..Layers::default()
    };
    // Without the mount namespace, landlock carves every denied path.
    assert_eq!(&*landlock_deny(Layers::default(), &deny), &deny[..]);
    // With it, existing paths are mounted over; missing ones this uid could create are carved
    // (their nearest existing directory is writable: the temporary directory, or `/` for root).
    let mut want = vec![real.join("missing"), real.join("missing-dir/below")];
    if nix::unistd::access("/", nix::unistd::AccessFlags::W_OK).is_ok() {
      want.push(PathBuf::from("/nonexistent-finn-root/x"));
    }
    assert_eq!(&*landlock_deny(with_mounts, &deny), &want[..]);
  }
}
