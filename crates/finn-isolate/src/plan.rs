//! Options resolved against this host: which layers apply, with what paths and limits, and what
//! is degraded and why. Pure apart from path canonicalisation, so it is tested without processes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::IsolationError;
use super::prepare::IsolationReport;
use super::probe::Probe;
use finn_job::isolation::NetworkOptions;
use finn_job::isolation::{
  Access, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_PROCESSES, FsOptions, IsolationOptions, Mode,
  Readable, ResourceLimits, default_deny_read,
};

/// Limits with defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResolvedLimits {
  pub max_processes: u64,
  pub max_memory_bytes: u64,
  pub cpu_seconds: Option<u64>,
  pub max_file_bytes: Option<u64>,
  pub max_open_files: Option<u64>,
}

/// Which layers `prepare` builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layers {
  pub cgroup: bool,
  pub landlock: bool,
  pub seccomp: bool,
  pub netns: bool,
  pub mountns: bool,
  /// A fresh pid namespace with its own /proc (needs the mount namespace).
  pub pidns: bool,
  /// Without CAP_SYS_ADMIN: the namespaces above are made inside a fresh user namespace (our
  /// uid and gid mapped to themselves, setgroups denied).
  #[serde(default)]
  pub userns: bool,
}

/// The objects that passed the check, as `O_PATH` fds opened at that moment: rules are built
/// from the fd that passed the cwd check, never from a path resolved again later. They travel
/// to the job's reaper with the `Run` message (`SCM_RIGHTS`), and the reaper builds landlock's
/// write grants, the `.git`/`protect` mount checks and bwrap's binds from them, and enters the
/// cwd through its fd. Empty (a plan decoded without its fds, or built by hand): everything
/// falls back to the canonical paths, opened with no symlink on the way.
#[derive(Debug, Clone, Default)]
pub struct CheckedRoots {
  /// The command's working directory.
  pub cwd: Option<Arc<OwnedFd>>,
  /// One per `Plan::writable`, in order (or none at all).
  pub writable: Vec<Arc<OwnedFd>>,
}

impl CheckedRoots {
  /// The fds in the order they are sent: the cwd's first, then the writable roots'.
  pub fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
    self
      .cwd
      .iter()
      .chain(&self.writable)
      .map(|f| f.as_raw_fd())
      .collect()
  }
}

/// Equal when they hold the same fds (a plan's value is its paths; the fds ride beside it).
impl PartialEq for CheckedRoots {
  fn eq(&self, other: &Self) -> bool {
    self.raw_fds() == other.raw_fds()
  }
}
impl Eq for CheckedRoots {}

/// Opens `path` as it is now (`O_PATH`; a symlink given by the caller is followed, as
/// `canonicalize` did) and returns the fd with the path the kernel names it by: the check and
/// everything after it are about this object, whatever happens to the path later.
pub fn open_checked(path: &Path) -> Option<(Arc<OwnedFd>, PathBuf)> {
  use std::os::unix::fs::OpenOptionsExt;
  let fd: OwnedFd = std::fs::OpenOptions::new()
    .read(true)
    .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
    .open(path)
    .ok()?
    .into();
  let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
    .ok()
    // Without /proc: the path as it resolves now (the fd still decides the rules).
    .or_else(|| path.canonicalize().ok())?;
  // "(deleted)", or a path outside our root: not a name anything can be checked against.
  if !real.is_absolute() || !real.exists() {
    return None;
  }
  Some((Arc::new(fd), real))
}

/// Serializable: the addon resolves it (probes are cached there) and the job's reaper prepares it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
  /// Canonical writable roots that exist.
  pub writable: Vec<PathBuf>,
  pub read_roots: Vec<PathBuf>,
  pub deny_read: Vec<PathBuf>,
  /// Absolute protected paths inside the writable roots.
  pub protect: Vec<PathBuf>,
  pub deny_network: bool,
  /// The command's only route out is its own loopback listener, forwarded to the pool's
  /// egress proxy (`egress.rs`); `deny_network` is then off, as the job's network namespace
  /// holds nothing else to reach.
  /// The allowlist the proxy applies to this job's connections.
  #[serde(default)]
  pub egress: Option<NetworkOptions>,
  pub deny_unix: bool,
  pub limits: ResolvedLimits,
  pub layers: Layers,
  /// Layers asked for (explicitly or by `auto`) that this host cannot apply, each with why.
  pub degraded: Vec<String>,
  /// The bounding set can be emptied (we hold CAP_SETPCAP, i.e. run as root).
  pub drop_bounding: bool,
  pub cap_last_cap: u32,
  /// The bwrap backend runs the job, with this `bwrap` (`bwrap.rs`); `None`: the native backend.
  #[serde(default)]
  pub bwrap: Option<PathBuf>,
  /// The command's working directory as the check saw it (from `checked.cwd`).
  #[serde(default)]
  pub cwd: Option<PathBuf>,
  /// The landlock ABI the ruleset may use: the kernel's, or less where
  /// `FINN_SANDBOX_LANDLOCK_ABI_MAX` caps it (rights and scopes of later ABIs are left out).
  #[serde(default)]
  pub landlock_abi: i32,
  /// The job's network goes through its reaper to one address (`route.rs`). Set by the one who
  /// runs the job's proxy, never from the public options; needs the native backend with
  /// landlock (ABI 6) and seccomp.
  #[serde(default)]
  pub net_route: Option<super::route::NetRoute>,
  /// Not serialized: sent as fds beside the plan.
  #[serde(skip)]
  pub checked: CheckedRoots,
}

impl Plan {
  /// The job's own landlock ruleset scopes its signals (native backend, ABI 6 in use).
  pub fn scopes_signals(&self) -> bool {
    self.layers.landlock && self.landlock_abi >= 6 && self.bwrap.is_none()
  }

  /// What `prepare` applies for this plan, and what is degraded, for `ExecResult.isolation`.
  pub fn report(&self) -> IsolationReport {
    let l = self.layers;
    let mut applied = vec!["rlimits", "privileges"];
    for (on, name) in [
      (l.cgroup, "cgroup"),
      (l.userns, "userns"),
      (l.netns, "netns"),
      (l.pidns, "pidns"),
      (l.mountns, "mountns"),
      (l.mountns && !self.protect.is_empty(), "protect"),
      (l.landlock, "landlock"),
      (l.seccomp, "seccomp"),
      (self.egress.is_some(), "egress"),
    ] {
      if on {
        applied.push(name);
      }
    }
    IsolationReport {
      backend: if self.bwrap.is_some() {
        "bwrap"
      } else {
        "native"
      },
      applied,
      degraded: self.degraded.clone(),
    }
  }

  /// `None` for `mode: "off"`. `cwd` is the command's working directory (the default writable root).
  ///
  /// Each step decides one thing: the options are valid, the roots are opened, the path rules
  /// and limits follow from them, the backend is chosen, and for the native backend each layer
  /// is decided from the probe before the required ones that are missing fail the job.
  pub fn resolve(
    opts: &IsolationOptions,
    cwd: &Path,
    probe: &Probe,
  ) -> Result<Option<Plan>, IsolationError> {
    opts.validate()?;
    if opts.mode == Mode::Off {
      return Ok(None);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let roots = OpenedRoots::open(opts.fs.writable.as_deref(), cwd);
    let paths = PathRules::of(&opts.fs, &roots.writable, home.as_deref());
    let deny_network = opts.network == Access::Deny;
    let base = Plan {
      writable: roots.writable,
      read_roots: paths.read_roots,
      deny_read: paths.deny_read,
      protect: paths.protect,
      deny_network,
      egress: None,
      deny_unix: opts.unix_sockets == Access::Deny,
      limits: ResolvedLimits::of(&opts.limits),
      layers: Layers::default(),
      degraded: Vec::new(),
      drop_bounding: probe.uid == 0,
      cap_last_cap: probe.cap_last_cap,
      bwrap: None,
      cwd: roots.cwd,
      landlock_abi: probe.landlock.unwrap_or(0),
      net_route: None,
      checked: roots.checked,
    };
    if let Some(bwrap) = super::bwrap::choose(opts, probe)? {
      let mut plan = super::bwrap::plan(opts, probe, bwrap, base)?;
      if opts.egress.is_some() {
        if opts.required {
          return Err(IsolationError::Unavailable(vec!["egress".into()]));
        }
        plan.degraded.push(EGRESS_ON_BWRAP.into());
      }
      return Ok(Some(plan));
    }
    let mut native = NativeLayers::decide(opts, probe, deny_network, !base.protect.is_empty());
    let route = native.egress(opts, probe);
    let routed = route != EgressRoute::None;
    let (layers, degraded) = native.required()?;
    Ok(Some(Plan {
      deny_read: deny_host_ptys(base.deny_read),
      layers,
      degraded,
      // The job's own network namespace holds nothing but the route to the proxy: its
      // sockets may be made and connected (seccomp and landlock leave TCP alone). On rung 2
      // the route's own rules replace the network's.
      deny_network: deny_network && !routed,
      egress: opts.egress.clone().filter(|_| routed),
      net_route: match route {
        EgressRoute::Reaper(net) => Some(net),
        EgressRoute::None | EgressRoute::Namespace => None,
      },
      ..base
    }))
  }
}

/// The roots as the check opened them: the fd is what the rules are built from, its path what
/// they are reported and mounted by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OpenedRoots {
  /// Canonical writable roots that exist, in the order given.
  writable: Vec<PathBuf>,
  /// The working directory as the check saw it.
  cwd: Option<PathBuf>,
  checked: CheckedRoots,
}

impl OpenedRoots {
  /// Each root (and the cwd) opened now. `writable: None` means the cwd. A root that does not
  /// exist grants nothing rather than failing the job.
  fn open(writable: Option<&[PathBuf]>, cwd: &Path) -> Self {
    let cwd = open_checked(cwd);
    let roots: Vec<(Arc<OwnedFd>, PathBuf)> = match writable {
      Some(w) => w.iter().filter_map(|p| open_checked(p)).collect(),
      None => cwd.iter().cloned().collect(),
    };
    let (fds, writable) = roots.into_iter().unzip();
    OpenedRoots {
      writable,
      checked: CheckedRoots {
        cwd: cwd.as_ref().map(|(fd, _)| fd.clone()),
        writable: fds,
      },
      cwd: cwd.map(|(_, p)| p),
    }
  }
}

/// What the command may read, may not read, and may not write inside its writable roots, by
/// path, as both backends apply them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PathRules {
  read_roots: Vec<PathBuf>,
  deny_read: Vec<PathBuf>,
  /// Absolute protected paths inside the writable roots.
  protect: Vec<PathBuf>,
}

impl PathRules {
  /// `home` is the user's home directory, whose secrets the default `denyRead` names. With
  /// `readable` paths the writable roots are readable too; a readable path that does not exist
  /// grants nothing.
  fn of(fs: &FsOptions, writable: &[PathBuf], home: Option<&Path>) -> Self {
    let read_roots = match &fs.readable {
      Readable::All => vec![PathBuf::from("/")],
      Readable::Paths(p) => p
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .chain(writable.iter().cloned())
        .collect(),
    };
    PathRules {
      read_roots,
      deny_read: fs
        .deny_read
        .clone()
        .unwrap_or_else(|| default_deny_read(home)),
      protect: fs.protect_in(writable),
    }
  }
}

/// `deny_read` with `/dev/pts` in it, whatever `denyRead` says: the host's ptys (the operator's
/// terminal among them) are readable by the same uid through `/`'s read grant, and a read steals
/// keystrokes. The native backend only: bwrap mounts a devpts of its own.
fn deny_host_ptys(mut deny_read: Vec<PathBuf>) -> Vec<PathBuf> {
  if !deny_read.iter().any(|d| d == Path::new("/dev/pts")) {
    deny_read.push(PathBuf::from("/dev/pts"));
  }
  deny_read
}

impl ResolvedLimits {
  /// `limits` with the defaults filled in.
  fn of(limits: &ResourceLimits) -> Self {
    ResolvedLimits {
      max_processes: limits.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES),
      max_memory_bytes: limits.max_memory_bytes.unwrap_or(DEFAULT_MAX_MEMORY_BYTES),
      cpu_seconds: limits.cpu_seconds,
      max_file_bytes: limits.max_file_bytes,
      max_open_files: limits.max_open_files,
    }
  }
}

/// One layer decided against the probe: whether it applies, why it is off or weaker than it
/// could be (for `Plan::degraded`), and its name when it is off although required.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Decided {
  on: bool,
  degraded: Vec<String>,
  missing: Option<&'static str>,
}

/// Landlock, and each right of a later ABI this host lacks. `strict`: a missing landlock fails
/// the job.
fn landlock_layer(probe: &Probe, deny_network: bool, strict: bool) -> Decided {
  let Some(abi) = probe.landlock else {
    return Decided {
      on: false,
      degraded: vec![match probe.landlock_kernel {
        Some(k) => format!("landlock: capped to 0 by the environment (the kernel has ABI {k})"),
        None => "landlock: not in the kernel's active LSMs".to_string(),
      }],
      missing: strict.then_some("landlock"),
    };
  };
  let degraded = super::probe::LANDLOCK_RIGHTS
    .iter()
    // TCP rules matter only where the network is denied.
    .filter(|right| (right.abi != 4 || deny_network) && abi < right.abi)
    .map(|right| format!("{}: {}", right.layer, right.missing(probe)))
    .collect();
  Decided {
    on: true,
    degraded,
    missing: None,
  }
}

/// Seccomp. `strict`: a missing filter mode fails the job.
fn seccomp_layer(probe: &Probe, strict: bool) -> Decided {
  if probe.seccomp {
    return Decided {
      on: true,
      ..Decided::default()
    };
  }
  Decided {
    on: false,
    degraded: vec!["seccomp: no filter mode in this kernel".to_string()],
    missing: strict.then_some("seccomp"),
  }
}

/// The job's cgroup. Never required: without one, rlimits bound the job, and the reason says how
/// much less that holds.
fn cgroup_layer(probe: &Probe) -> Decided {
  if probe.cgroup.is_some() {
    return Decided {
      on: true,
      ..Decided::default()
    };
  }
  let why = probe.cgroup_reason.clone().unwrap_or_default();
  let degraded = if probe.uid == 0 {
    format!("cgroup: {why}; maxProcesses is not enforced for root (RLIMIT_NPROC ignores uid 0)")
  } else {
    format!(
      "cgroup: {why}; maxProcesses counts all of uid {}'s processes, and maxMemoryBytes \
       bounds each process (RLIMIT_AS), not the tree (up to maxProcesses times as much), \
       nor files written to a tmpfs",
      probe.uid
    )
  };
  Decided {
    on: false,
    degraded: vec![degraded],
    missing: None,
  }
}

/// A network allowlist's route, as [`NativeLayers::egress`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EgressRoute {
  /// No allowlist, or no route for it here: the command gets no network.
  None,
  /// Rung 1: a network namespace of the job's own.
  Namespace,
  /// Rung 2: the job's TCP through its reaper.
  Reaper(super::route::NetRoute),
}

/// Rung 2's route: the job is told the proxy is at 127.0.0.1:[`PORT`](super::egress::PORT), as
/// on rung 1; its reaper connects each connect to that address to a listener of its own, whose
/// address it puts in `target` when the job starts.
fn egress_route() -> super::route::NetRoute {
  super::route::NetRoute {
    proxy: std::net::SocketAddr::from(([127, 0, 0, 1], super::egress::PORT)),
    target: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
  }
}

/// Why a job on the bwrap backend gets no egress route.
const EGRESS_ON_BWRAP: &str = "egress: the bwrap backend has no route to the egress proxy; the \
                               command's network is as `network` says";

/// A namespace the native backend can make: whether it is made when the options leave it
/// open, and what still holds when the host cannot make it.
struct NamespaceRule {
  name: &'static str,
  /// Made where the host permits when the options say neither yes nor no.
  by_default: bool,
  /// What still holds without it.
  without: &'static str,
}

/// Not by default: seccomp (every non-Unix socket) and landlock (TCP) already deny the network.
/// As root a job enters its reaper's namespace (`netns.rs`); inside a user namespace it makes
/// one of its own, about 0.3 ms more per exec.
const NETNS: NamespaceRule = NamespaceRule {
  name: "netns",
  by_default: false,
  without: "seccomp and landlock still refuse sockets",
};

/// By default: it makes every mount but the writable roots read-only, and landlock does not cover
/// metadata (chmod, utimes, xattrs of the user's own files outside).
const MOUNTNS: NamespaceRule = NamespaceRule {
  name: "mountns",
  by_default: true,
  without: "protect paths stay writable, and metadata (chmod, utimes, xattrs) of the user's own \
            files outside; denyRead still holds by landlock",
};

/// Opt-in: the command becomes pid 1 of its namespace, which ignores SIGTERM unless it installs
/// a handler, so a graceful stop waits out the grace period before SIGKILL. In exchange, when the
/// command exits the kernel kills everything left in the namespace (setsid children too), and
/// /proc shows no process outside it.
const PIDNS: NamespaceRule = NamespaceRule {
  name: "pidns",
  by_default: false,
  without: "/proc/<pid>/environ of outside processes stays hidden by landlock",
};

/// One namespace: made when asked (`Some(true)`) or by default, where the host can make
/// namespaces (CAP_SYS_ADMIN, or else inside a user namespace). One asked for by name that
/// cannot be made is missing.
fn namespace_layer(rule: &NamespaceRule, asked: Option<bool>, probe: &Probe) -> Decided {
  let want = asked.unwrap_or(rule.by_default);
  if want && !probe.sys_admin && !probe.userns {
    let why = probe.userns_reason.as_deref().unwrap_or("unknown");
    return Decided {
      on: false,
      degraded: vec![format!(
        "{}: no CAP_SYS_ADMIN and no user namespace ({why}; {})",
        rule.name, rule.without
      )],
      missing: (asked == Some(true)).then_some(rule.name),
    };
  }
  Decided {
    on: want,
    ..Decided::default()
  }
}

/// The layers the native backend applies on this host, why the others are off or weaker, and
/// which of those the options require.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NativeLayers {
  layers: Layers,
  degraded: Vec<String>,
  missing: Vec<String>,
}

impl NativeLayers {
  /// Each layer from the probe, in the order `degraded` reports them. `protects`: there are
  /// protected paths, which only the mount namespace makes read-only.
  fn decide(opts: &IsolationOptions, probe: &Probe, deny_network: bool, protects: bool) -> Self {
    let strict = opts.required || opts.mode == Mode::Native;
    let ns = opts.namespaces;
    let mut n = NativeLayers::default();
    n.layers.landlock = n.take(landlock_layer(probe, deny_network, strict));
    n.layers.seccomp = n.take(seccomp_layer(probe, strict));
    n.layers.cgroup = n.take(cgroup_layer(probe));
    n.layers.netns = n.take(namespace_layer(&NETNS, ns.net, probe));
    n.layers.mountns = n.take(namespace_layer(&MOUNTNS, ns.mount, probe));
    n.layers.pidns = n.take(namespace_layer(&PIDNS, ns.pid, probe));
    n.layers.pidns = n.take(mount_dependents(n.layers, protects, ns.pid));
    if let Some(why) = super::bwrap::no_fallback(opts, probe) {
      n.degraded.push(why);
    }
    n.layers.userns = user_namespace(n.layers, probe);
    n
  }

  /// A network allowlist: its route is a network namespace of the job's own (root, or a user
  /// namespace: rung 1), else the job's TCP through its reaper (seccomp user notification and
  /// landlock ABI 6: rung 2, `route.rs`). Where neither can be made, a required one is missing
  /// and otherwise named in `degraded`: the command then gets no network at all, never all of
  /// it. Rung 1 turns the network namespace on.
  fn egress(&mut self, opts: &IsolationOptions, probe: &Probe) -> EgressRoute {
    if opts.egress.is_none() {
      return EgressRoute::None;
    }
    if !probe.sys_admin
      && !probe.userns
      && self.layers.seccomp
      && self.layers.landlock
      && probe.landlock.is_some_and(|abi| abi >= 6)
    {
      return EgressRoute::Reaper(egress_route());
    }
    if !probe.sys_admin && !probe.userns {
      let why = probe.userns_reason.as_deref().unwrap_or("unknown");
      // The caller's public option always denies the network beside a list; the sandbox's
      // fetch and push keep the whole network where the list cannot be enforced.
      let gets = match opts.network {
        Access::Deny => "the command gets no network",
        Access::Allow => "the command gets the whole network, as `network` says",
      };
      self.degraded.push(format!(
        "egress: no network namespace can be made (no CAP_SYS_ADMIN and no user namespace: \
         {why}); {gets}"
      ));
      if (opts.required || opts.mode == Mode::Native) && opts.network == Access::Deny {
        self.missing.push("egress".into());
      }
      return EgressRoute::None;
    }
    self.layers.netns = true;
    self.layers.userns = user_namespace(self.layers, probe);
    EgressRoute::Namespace
  }

  /// Records `d`'s reasons and whether it is missing; returns whether it applies.
  fn take(&mut self, d: Decided) -> bool {
    self.degraded.extend(d.degraded);
    self.missing.extend(d.missing.map(String::from));
    d.on
  }

  /// The layers and what is degraded, or the job fails naming each required layer that is
  /// missing.
  fn required(self) -> Result<(Layers, Vec<String>), IsolationError> {
    if !self.missing.is_empty() {
      return Err(IsolationError::Unavailable(self.missing));
    }
    Ok((self.layers, self.degraded))
  }
}

/// What needs the mount namespace once the namespaces are decided: protected paths are made
/// read-only by it, and a pid namespace needs it for a fresh /proc. Returns the pid namespace
/// (off without the mount namespace, and missing when asked for by name).
fn mount_dependents(layers: Layers, protects: bool, pid_asked: Option<bool>) -> Decided {
  let mut d = Decided {
    on: layers.pidns,
    ..Decided::default()
  };
  if !layers.mountns && protects {
    d.degraded
      .push("protect: needs the mount namespace".to_string());
  }
  if layers.pidns && !layers.mountns {
    d.on = false;
    d.degraded
      .push("pidns: needs the mount namespace for a fresh /proc".to_string());
    d.missing = (pid_asked == Some(true)).then_some("pidns");
  }
  d
}

/// Without CAP_SYS_ADMIN, the namespaces are made inside a user namespace; with none to make,
/// no user namespace either.
fn user_namespace(layers: Layers, probe: &Probe) -> bool {
  !probe.sys_admin && (layers.mountns || layers.netns || layers.pidns)
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::probe::{self, CgroupKind};
  use serde_json::json;

  fn host(root: bool) -> Probe {
    Probe {
      landlock: Some(7),
      landlock_kernel: None,
      seccomp: true,
      userns: false,
      userns_reason: Some("user.max_user_namespaces is 0".into()),
      sys_admin: root,
      cgroup: root.then_some(CgroupKind::V1),
      cgroup_reason: (!root).then(|| "no writable cgroup".into()),
      bwrap: None,
      uid: if root { 0 } else { 65534 },
      cap_last_cap: 40,
    }
  }

  fn opts(v: serde_json::Value) -> IsolationOptions {
    IsolationOptions::from_json(v).unwrap()
  }

  #[test]
  fn off_is_no_plan() {
    assert!(
      Plan::resolve(&opts(json!({})), Path::new("/tmp"), &host(true))
        .unwrap()
        .is_none()
    );
  }

  #[test]
  fn a_capped_abi_is_the_plans_and_each_missing_right_is_degraded() {
    let resolve = |probe: &Probe, network: &str| {
      Plan::resolve(
        &opts(json!({"mode": "auto", "network": network})),
        Path::new("/tmp"),
        probe,
      )
      .unwrap()
      .unwrap()
    };
    let p = resolve(&host(true).capped(Some(3)), "deny");
    assert_eq!(p.landlock_abi, 3);
    let named = |p: &Plan, layer: &str| p.degraded.iter().any(|d| d.starts_with(layer));
    for layer in ["landlock-net:", "landlock-ioctl:", "landlock-scope:"] {
      assert!(named(&p, layer), "{layer} {:?}", p.degraded);
    }
    assert!(!named(&p, "landlock-truncate:"), "{:?}", p.degraded);
    // TCP rules only matter where the network is denied.
    assert!(!named(
      &resolve(&host(true).capped(Some(3)), "allow"),
      "landlock-net:"
    ));
    let full = resolve(&host(true), "deny");
    assert_eq!(full.landlock_abi, 7);
    assert!(!full.degraded.iter().any(|d| d.starts_with("landlock")));
  }

  #[test]
  fn root_gets_every_layer() {
    let p = Plan::resolve(
      &opts(json!({"mode": "auto"})),
      Path::new("/tmp"),
      &host(true),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
      p.layers,
      Layers {
        cgroup: true,
        landlock: true,
        seccomp: true,
        netns: false,
        mountns: true,
        pidns: false,
        userns: false,
      }
    );
    assert!(p.degraded.is_empty(), "{:?}", p.degraded);
    let o = opts(json!({"mode": "auto", "namespaces": {"net": true}}));
    let p = Plan::resolve(&o, Path::new("/tmp"), &host(true))
      .unwrap()
      .unwrap();
    assert!(p.layers.netns);
    assert_eq!(p.writable, vec![Path::new("/tmp").canonicalize().unwrap()]);
    assert!(p.protect.iter().any(|p| p.ends_with(".git/hooks")));
  }

  #[test]
  fn unprivileged_degrades_and_says_why() {
    let p = Plan::resolve(
      &opts(json!({"mode": "auto"})),
      Path::new("/tmp"),
      &host(false),
    )
    .unwrap()
    .unwrap();
    assert!(!p.layers.netns && !p.layers.mountns && !p.layers.cgroup);
    assert!(p.layers.landlock && p.layers.seccomp);
    for name in ["cgroup:", "mountns:", "protect:"] {
      assert!(
        p.degraded.iter().any(|d| d.starts_with(name)),
        "{name} missing from {:?}",
        p.degraded
      );
    }
    // Says why user namespaces could not stand in.
    let mountns = p
      .degraded
      .iter()
      .find(|d| d.starts_with("mountns:"))
      .unwrap();
    assert!(
      mountns.contains("user.max_user_namespaces is 0"),
      "{mountns}"
    );
    assert!(!p.layers.userns);
  }

  #[test]
  fn unprivileged_with_user_namespaces_gets_the_namespaces_inside_one() {
    let mut h = host(false);
    h.userns = true;
    h.userns_reason = None;
    let o =
      opts(json!({"mode": "auto", "required": true, "namespaces": {"pid": true, "net": true}}));
    let p = Plan::resolve(&o, Path::new("/tmp"), &h).unwrap().unwrap();
    assert_eq!(
      p.layers,
      Layers {
        cgroup: false,
        landlock: true,
        seccomp: true,
        netns: true,
        mountns: true,
        pidns: true,
        userns: true,
      }
    );
    assert!(p.report().applied.contains(&"userns"));
    assert!(p.report().applied.contains(&"protect"));
    assert!(
      !p.degraded
        .iter()
        .any(|d| d.starts_with("mountns") || d.starts_with("protect"))
    );
    // Nothing to protect or deny: the mount namespace still makes the rest read-only (landlock
    // does not cover chmod/utimes/xattrs outside), so still a user namespace.
    let o = opts(json!({"mode": "auto", "fs": {"protect": [], "denyRead": []}}));
    let p = Plan::resolve(&o, Path::new("/tmp"), &h).unwrap().unwrap();
    assert!(p.layers.userns && p.layers.mountns);
    // No namespace asked for: no user namespace either.
    let o = opts(json!({"mode": "auto", "namespaces": {"mount": false}}));
    let p = Plan::resolve(&o, Path::new("/tmp"), &h).unwrap().unwrap();
    assert!(!p.layers.userns && !p.layers.mountns);
    // Root never needs one.
    let mut r = host(true);
    r.userns = true;
    let p = Plan::resolve(&opts(json!({"mode": "auto"})), Path::new("/tmp"), &r)
      .unwrap()
      .unwrap();
    assert!(p.layers.mountns && !p.layers.userns);
  }

  #[test]
  fn required_fails_on_missing_landlock_or_an_explicit_namespace() {
    let mut h = host(false);
    let e = Plan::resolve(
      &opts(json!({"mode": "auto", "required": true, "namespaces": {"net": true}})),
      Path::new("/tmp"),
      &h,
    )
    .unwrap_err();
    assert!(matches!(e, IsolationError::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("netns"), "{e}");
    h.landlock = None;
    let e = Plan::resolve(&opts(json!({"mode": "native"})), Path::new("/tmp"), &h).unwrap_err();
    assert!(e.to_string().contains("landlock"), "{e}");
    // auto without required runs with what there is.
    assert!(
      Plan::resolve(&opts(json!({"mode": "auto"})), Path::new("/tmp"), &h)
        .unwrap()
        .is_some()
    );
  }

  #[test]
  fn pid_namespace_needs_the_mount_namespace_and_privilege() {
    let o = opts(json!({"mode": "auto", "namespaces": {"pid": true}}));
    assert!(
      Plan::resolve(&o, Path::new("/tmp"), &host(true))
        .unwrap()
        .unwrap()
        .layers
        .pidns
    );
    let e = Plan::resolve(&o, Path::new("/tmp"), &host(false)).unwrap_err();
    assert!(e.to_string().contains("pidns"), "{e}");
    let o = opts(json!({"mode": "auto", "namespaces": {"pid": true, "mount": false}}));
    let e = Plan::resolve(&o, Path::new("/tmp"), &host(true)).unwrap_err();
    assert!(e.to_string().contains("pidns"), "{e}");
  }

  fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
  }

  fn paths(v: &[&str]) -> Vec<PathBuf> {
    v.iter().map(PathBuf::from).collect()
  }

  fn on() -> Decided {
    Decided {
      on: true,
      ..Decided::default()
    }
  }

  fn off(degraded: &[&str], missing: Option<&'static str>) -> Decided {
    Decided {
      on: false,
      degraded: strs(degraded),
      missing,
    }
  }

  /// The layer name each reason starts with (`landlock-net: ...` -> `landlock-net`).
  fn named(degraded: &[String]) -> Vec<&str> {
    degraded
      .iter()
      .map(|d| d.split_once(':').map_or(d.as_str(), |(n, _)| n))
      .collect()
  }

  #[test]
  fn landlock_is_on_with_any_abi_and_names_each_later_right_it_lacks() {
    // (ABI in use, the kernel's when capped, network denied, strict) -> on, the layers named in
    // `degraded`, missing.
    #[rustfmt::skip]
    let cases = [
      (Some(7), None, true, true, true, "", None),
      (Some(6), None, true, false, true, "", None),
      (Some(5), None, true, false, true, "landlock-scope", None),
      (Some(4), None, true, false, true, "landlock-ioctl landlock-scope", None),
      (Some(3), None, true, false, true, "landlock-net landlock-ioctl landlock-scope", None),
      // TCP rules matter only where the network is denied.
      (Some(3), None, false, false, true, "landlock-ioctl landlock-scope", None),
      (Some(2), None, true, true, true, "landlock-truncate landlock-net landlock-ioctl landlock-scope", None),
      (None, None, true, false, false, "landlock", None),
      (None, None, true, true, false, "landlock", Some("landlock")),
      (None, Some(6), false, true, false, "landlock", Some("landlock")),
      (None, Some(6), false, false, false, "landlock", None),
    ];
    for (landlock, kernel, deny_network, strict, want_on, want_named, missing) in cases {
      let probe = Probe {
        landlock,
        landlock_kernel: kernel,
        ..host(true)
      };
      let d = landlock_layer(&probe, deny_network, strict);
      let case = format!("{landlock:?} deny_network={deny_network} strict={strict}: {d:?}");
      assert_eq!(d.on, want_on, "{case}");
      assert_eq!(
        named(&d.degraded),
        want_named.split_whitespace().collect::<Vec<_>>(),
        "{case}"
      );
      assert_eq!(d.missing, missing, "{case}");
    }
    // The reasons in full: the right's own, or why there is no landlock at all.
    let with = |landlock: Option<i32>, landlock_kernel: Option<i32>| Probe {
      landlock,
      landlock_kernel,
      ..host(true)
    };
    let capped = with(Some(3), Some(7));
    assert_eq!(
      landlock_layer(&capped, true, false).degraded[0],
      format!(
        "landlock-net: {}",
        probe::LANDLOCK_RIGHTS[1].missing(&capped)
      )
    );
    assert_eq!(
      landlock_layer(&with(None, Some(6)), true, false).degraded,
      ["landlock: capped to 0 by the environment (the kernel has ABI 6)"]
    );
    assert_eq!(
      landlock_layer(&with(None, None), true, false).degraded,
      ["landlock: not in the kernel's active LSMs"]
    );
  }

  #[test]
  fn seccomp_is_missing_only_when_strict() {
    let no_filter = ["seccomp: no filter mode in this kernel"];
    for (seccomp, strict, want) in [
      (true, true, on()),
      (true, false, on()),
      (false, false, off(&no_filter, None)),
      (false, true, off(&no_filter, Some("seccomp"))),
    ] {
      let probe = Probe {
        seccomp,
        ..host(true)
      };
      assert_eq!(
        seccomp_layer(&probe, strict),
        want,
        "seccomp={seccomp} strict={strict}"
      );
    }
  }

  #[test]
  fn a_missing_cgroup_is_never_required_and_says_what_rlimits_hold_for_the_uid() {
    let cases = [
      (Some(CgroupKind::V1), Some("ignored"), 0, on()),
      (Some(CgroupKind::V1), None, 1000, on()),
      (
        None,
        Some("no writable cgroup"),
        0,
        off(
          &[
            "cgroup: no writable cgroup; maxProcesses is not enforced for root (RLIMIT_NPROC \
             ignores uid 0)",
          ],
          None,
        ),
      ),
      (
        None,
        Some("no writable cgroup"),
        1000,
        off(
          &[
            "cgroup: no writable cgroup; maxProcesses counts all of uid 1000's processes, and \
             maxMemoryBytes bounds each process (RLIMIT_AS), not the tree (up to maxProcesses \
             times as much), nor files written to a tmpfs",
          ],
          None,
        ),
      ),
      (
        None,
        None,
        0,
        off(
          &["cgroup: ; maxProcesses is not enforced for root (RLIMIT_NPROC ignores uid 0)"],
          None,
        ),
      ),
    ];
    for (cgroup, reason, uid, want) in cases {
      let probe = Probe {
        cgroup,
        cgroup_reason: reason.map(String::from),
        uid,
        ..host(true)
      };
      assert_eq!(
        cgroup_layer(&probe),
        want,
        "{cgroup:?} {reason:?} uid {uid}"
      );
    }
  }

  #[test]
  fn a_namespace_is_made_when_asked_or_useful_and_missing_only_when_asked_by_name() {
    // (sys_admin, userns): privileged, unprivileged with user namespaces, neither.
    let can = |sys_admin: bool, userns: bool| Probe {
      sys_admin,
      userns,
      ..host(false)
    };
    let no = "no CAP_SYS_ADMIN and no user namespace (user.max_user_namespaces is 0; ";
    let net_off = format!("netns: {no}seccomp and landlock still refuse sockets)");
    let mount_off = format!(
      "mountns: {no}protect paths stay writable, and metadata (chmod, utimes, xattrs) of the \
       user's own files outside; denyRead still holds by landlock)"
    );
    let pid_off =
      format!("pidns: {no}/proc/<pid>/environ of outside processes stays hidden by landlock)");
    let cases = [
      (&NETNS, None, can(true, false), on_if(false)),
      (&NETNS, Some(true), can(true, false), on()),
      (&NETNS, Some(true), can(false, true), on()),
      (&NETNS, Some(false), can(true, true), on_if(false)),
      (&NETNS, None, can(false, false), on_if(false)),
      (
        &NETNS,
        Some(true),
        can(false, false),
        off(&[&net_off], Some("netns")),
      ),
      (&MOUNTNS, None, can(true, false), on()),
      (&MOUNTNS, None, can(false, true), on()),
      (&MOUNTNS, Some(false), can(true, false), on_if(false)),
      (&MOUNTNS, Some(false), can(false, false), on_if(false)),
      (&MOUNTNS, None, can(false, false), off(&[&mount_off], None)),
      (
        &MOUNTNS,
        Some(true),
        can(false, false),
        off(&[&mount_off], Some("mountns")),
      ),
      (&PIDNS, None, can(true, true), on_if(false)),
      (&PIDNS, Some(true), can(false, true), on()),
      (&PIDNS, None, can(false, false), on_if(false)),
      (
        &PIDNS,
        Some(true),
        can(false, false),
        off(&[&pid_off], Some("pidns")),
      ),
    ];
    for (rule, asked, probe, want) in cases {
      let case = format!(
        "{} asked {asked:?} sys_admin={} userns={}",
        rule.name, probe.sys_admin, probe.userns
      );
      assert_eq!(namespace_layer(rule, asked, &probe), want, "{case}");
    }
    // Without a reason from the probe, the reason says so.
    let unknown = Probe {
      userns_reason: None,
      ..can(false, false)
    };
    assert!(
      namespace_layer(&NETNS, Some(true), &unknown).degraded[0]
        .contains("no user namespace (unknown; ")
    );
  }

  fn on_if(on: bool) -> Decided {
    Decided {
      on,
      ..Decided::default()
    }
  }

  #[test]
  fn protect_and_the_pid_namespace_need_the_mount_namespace() {
    let protect = "protect: needs the mount namespace";
    let proc = "pidns: needs the mount namespace for a fresh /proc";
    let layers = |mountns: bool, pidns: bool| Layers {
      mountns,
      pidns,
      ..Layers::default()
    };
    // (mountns, pidns, protected paths, pid asked) -> the pid namespace.
    let cases = [
      (true, true, true, Some(true), on()),
      (true, false, true, None, on_if(false)),
      (false, false, false, None, on_if(false)),
      (false, false, true, None, off(&[protect], None)),
      (false, true, false, None, off(&[proc], None)),
      (false, true, false, Some(true), off(&[proc], Some("pidns"))),
      (
        false,
        true,
        true,
        Some(true),
        off(&[protect, proc], Some("pidns")),
      ),
    ];
    for (mountns, pidns, protects, asked, want) in cases {
      assert_eq!(
        mount_dependents(layers(mountns, pidns), protects, asked),
        want,
        "mountns={mountns} pidns={pidns} protects={protects} asked={asked:?}"
      );
    }
  }

  #[test]
  fn a_user_namespace_holds_the_others_only_without_cap_sys_admin() {
    let layers = |netns: bool, mountns: bool, pidns: bool| Layers {
      netns,
      mountns,
      pidns,
      ..Layers::default()
    };
    for (sys_admin, l, want) in [
      (false, layers(false, false, false), false),
      (false, layers(true, false, false), true),
      (false, layers(false, true, false), true),
      (false, layers(false, false, true), true),
      (true, layers(true, true, true), false),
    ] {
      let probe = Probe {
        sys_admin,
        ..host(false)
      };
      assert_eq!(
        user_namespace(l, &probe),
        want,
        "sys_admin={sys_admin} {l:?}"
      );
    }
  }

  #[test]
  fn missing_required_layers_fail_the_job_by_name() {
    let with = |missing: &[&str]| NativeLayers {
      layers: Layers {
        seccomp: true,
        ..Layers::default()
      },
      degraded: strs(&["landlock: x"]),
      missing: strs(missing),
    };
    let (layers, degraded) = with(&[]).required().unwrap();
    assert!(layers.seccomp);
    assert_eq!(degraded, ["landlock: x"]);
    let e = with(&["landlock", "netns"]).required().unwrap_err();
    assert!(matches!(&e, IsolationError::Unavailable(m) if m == &["landlock", "netns"]));
    assert_eq!(e.to_string(), "isolation unavailable: landlock; netns");
  }

  #[test]
  fn the_native_layers_are_decided_in_order_from_the_probe() {
    let mut userns = host(false);
    userns.userns = true;
    let mut bare = host(false);
    bare.landlock = None;
    bare.seccomp = false;
    let layers = |on: &str| {
      let has = |name: &str| on.split_whitespace().any(|n| n == name);
      Layers {
        cgroup: has("cgroup"),
        landlock: has("landlock"),
        seccomp: has("seccomp"),
        netns: has("netns"),
        mountns: has("mountns"),
        pidns: has("pidns"),
        userns: has("userns"),
      }
    };
    // (options, probe, protected paths) -> the layers on, those named in `degraded`, missing.
    #[rustfmt::skip]
    let cases = [
      (json!({"mode": "auto"}), host(true), true,
        "cgroup landlock seccomp mountns", "", ""),
      (json!({"mode": "auto"}), host(false), true,
        "landlock seccomp", "cgroup mountns protect", ""),
      (json!({"mode": "auto"}), host(false), false,
        "landlock seccomp", "cgroup mountns", ""),
      (json!({"mode": "auto", "namespaces": {"pid": true, "net": true}}), userns, true,
        "landlock seccomp netns mountns pidns userns", "cgroup", ""),
      (json!({"mode": "auto", "namespaces": {"pid": true, "net": true, "mount": true}}), bare.clone(), true,
        "", "landlock seccomp cgroup netns mountns pidns protect bwrap", "netns mountns pidns"),
      (json!({"mode": "native", "namespaces": {"pid": true, "mount": false}}), bare, false,
        "", "landlock seccomp cgroup pidns", "landlock seccomp pidns"),
      (json!({"mode": "auto", "required": true, "namespaces": {"pid": true, "mount": false}}), host(true), false,
        "cgroup landlock seccomp", "pidns", "pidns"),
    ];
    for (o, probe, protects, on, degraded, missing) in cases {
      let n = NativeLayers::decide(&opts(o.clone()), &probe, true, protects);
      let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
      assert_eq!(n.layers, layers(on), "{o}");
      assert_eq!(named(&n.degraded), words(degraded), "{o}: {:?}", n.degraded);
      assert_eq!(n.missing, words(missing), "{o}");
    }
  }

  #[test]
  fn the_host_ptys_are_denied_whatever_deny_read_says() {
    for (given, want) in [
      (&[][..], &["/dev/pts"][..]),
      (&["/dev/pts"], &["/dev/pts"]),
      (&["/a"], &["/a", "/dev/pts"]),
      (&["/dev/pts/0"], &["/dev/pts/0", "/dev/pts"]),
    ] {
      assert_eq!(deny_host_ptys(paths(given)), paths(want), "{given:?}");
    }
  }

  #[test]
  fn limits_take_their_defaults_where_unset() {
    let all = ResourceLimits {
      max_processes: Some(7),
      max_memory_bytes: Some(1 << 20),
      cpu_seconds: Some(3),
      max_file_bytes: Some(4),
      max_open_files: Some(5),
    };
    for (given, want) in [
      (
        ResourceLimits::default(),
        ResolvedLimits {
          max_processes: DEFAULT_MAX_PROCESSES,
          max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
          cpu_seconds: None,
          max_file_bytes: None,
          max_open_files: None,
        },
      ),
      (
        all,
        ResolvedLimits {
          max_processes: 7,
          max_memory_bytes: 1 << 20,
          cpu_seconds: Some(3),
          max_file_bytes: Some(4),
          max_open_files: Some(5),
        },
      ),
    ] {
      assert_eq!(ResolvedLimits::of(&given), want, "{given:?}");
    }
  }

  #[test]
  fn path_rules_follow_from_the_options_and_the_writable_roots() {
    let tmp = Path::new("/tmp").canonicalize().unwrap();
    let tmp = tmp.to_str().unwrap();
    let home = Some(Path::new("/home/u"));
    let defaults = |home: Option<&Path>| -> Vec<String> {
      default_deny_read(home)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
    };
    let (none, users) = (defaults(None).join(" "), defaults(home).join(" "));
    // (fs options, writable roots, home) -> read roots, denied, protected.
    #[rustfmt::skip]
    let cases = [
      (json!({}), "/w", None,
        "/", none.as_str(), "/w/.git/hooks /w/.git/config /w/.git/config.worktree"),
      (json!({}), "", home, "/", users.as_str(), ""),
      // Readable paths that do not exist grant nothing; the writable roots are readable too.
      (json!({"readable": ["/tmp", "/nonexistent-finn"], "denyRead": [], "protect": []}), "/w", home,
        &format!("{tmp} /w"), "", ""),
      (json!({"readable": [], "denyRead": ["/s"], "protect": ["/abs", "rel"]}), "/a /b", home,
        "/a /b", "/s", "/abs /a/rel /b/rel"),
      (json!({"readable": "all", "protect": ["/abs"]}), "", None, "/", none.as_str(), "/abs"),
    ];
    let paths = |s: &str| s.split_whitespace().map(PathBuf::from).collect::<Vec<_>>();
    for (fs, writable, home, read_roots, deny_read, protect) in cases {
      let fs_options = opts(json!({"mode": "auto", "fs": fs})).fs;
      assert_eq!(
        PathRules::of(&fs_options, &paths(writable), home),
        PathRules {
          read_roots: paths(read_roots),
          deny_read: paths(deny_read),
          protect: paths(protect),
        },
        "{fs} {writable:?}"
      );
    }
    assert!(users.contains("/home/u/.ssh"));
  }

  /// An allowlist's only route is a network namespace of the job's own, else its reaper (rung
  /// 2). Where neither can be made, `required` refuses the job naming `egress`, and `auto`
  /// runs it with no network at all (seccomp and landlock still refuse sockets), never with
  /// the whole network.
  #[test]
  fn an_allowlist_gets_its_own_network_namespace_or_no_network() {
    let network = json!({"allow": ["github.com"]});
    let resolve = |probe: &Probe, required: bool| {
      Plan::resolve(
        &opts(json!({"mode": "auto", "required": required, "network": network})),
        Path::new("/tmp"),
        probe,
      )
    };
    // Root: the namespace, the route, TCP sockets allowed inside it.
    let p = resolve(&host(true), false).unwrap().unwrap();
    assert!(p.layers.netns && !p.layers.userns && p.egress.is_some() && !p.deny_network);
    assert!(p.report().applied.contains(&"egress"), "{:?}", p.report());
    // Non-root with user namespaces: the namespace inside one.
    let userns = Probe {
      userns: true,
      userns_reason: None,
      ..host(false)
    };
    let p = resolve(&userns, false).unwrap().unwrap();
    assert!(p.layers.netns && p.layers.userns && p.egress.is_some() && !p.deny_network);
    // Neither, with seccomp and landlock ABI 6: the reaper makes the job's connects (rung 2),
    // with no namespace; the route's own rules replace the network's.
    let p = resolve(&host(false), false).unwrap().unwrap();
    assert!(
      !p.layers.netns && p.egress.is_some() && !p.deny_network,
      "{p:?}"
    );
    let route = p.net_route.expect("rung 2's route");
    assert_eq!(route.proxy.port(), super::super::egress::PORT);
    assert!(route.proxy.ip().is_loopback());
    assert!(p.report().applied.contains(&"egress"), "{:?}", p.report());
    // Neither, and landlock before ABI 6: no route, so no network; named in `degraded`, or
    // refused when required.
    let old = Probe {
      landlock: Some(5),
      ..host(false)
    };
    let p = resolve(&old, false).unwrap().unwrap();
    assert!(p.net_route.is_none());
    assert!(
      p.egress.is_none() && p.deny_network && p.layers.seccomp,
      "{p:?}"
    );
    assert!(!p.report().applied.contains(&"egress"));
    assert!(
      p.degraded
        .iter()
        .any(|d| d.starts_with("egress:") && d.contains("no network")),
      "{:?}",
      p.degraded
    );
    match resolve(&old, true) {
      Err(IsolationError::Unavailable(missing)) => assert!(missing.contains(&"egress".into())),
      other => panic!("{other:?}"),
    }
    // Without seccomp: no route either.
    let no_seccomp = Probe {
      seccomp: false,
      ..host(false)
    };
    assert!(
      resolve(&no_seccomp, false)
        .unwrap()
        .unwrap()
        .net_route
        .is_none()
    );
  }

  #[test]
  fn roots_are_opened_now_and_one_that_does_not_exist_grants_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    std::fs::create_dir(real.join("a")).unwrap();
    std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
    // Names below the temporary directory; "." is the directory itself.
    let under =
      |names: &str| -> Vec<PathBuf> { names.split_whitespace().map(|n| real.join(n)).collect() };
    // (writable, cwd) -> the writable roots' paths, the cwd's. A symlink given by the caller is
    // followed; a root that does not exist is left out.
    #[rustfmt::skip]
    let cases = [
      (None, ".", ".", Some(".")),
      (None, "missing", "", None),
      (Some(""), ".", "", Some(".")),
      (Some("link missing a"), "missing", "a a", None),
      (Some("a"), "link", "a", Some("a")),
    ];
    for (writable, cwd, want_writable, want_cwd) in cases {
      let writable = writable.map(under);
      let roots = OpenedRoots::open(writable.as_deref(), &real.join(cwd));
      let case = format!("{writable:?} {cwd:?}");
      assert_eq!(roots.writable, under(want_writable), "{case}");
      assert_eq!(roots.cwd, want_cwd.map(|c| real.join(c)), "{case}");
      // One fd per root, and the cwd's when it exists.
      assert_eq!(roots.checked.writable.len(), roots.writable.len(), "{case}");
      assert_eq!(roots.checked.cwd.is_some(), want_cwd.is_some(), "{case}");
    }
    // Without `writable` the cwd's fd is the root's: the same object, opened once.
    let roots = OpenedRoots::open(None, &real);
    assert_eq!(roots.checked.raw_fds()[0], roots.checked.raw_fds()[1]);
  }

  #[test]
  fn the_network_and_unix_sockets_are_denied_unless_allowed() {
    // (network, unixSockets) -> the plan denies the network, Unix sockets; on either backend.
    let mut with_bwrap = host(true);
    with_bwrap.bwrap = Some(PathBuf::from("/usr/bin/bwrap"));
    #[rustfmt::skip]
    let cases = [
      (None, None, true, true),
      (Some("deny"), Some("deny"), true, true),
      (Some("allow"), None, false, true),
      (None, Some("allow"), true, false),
      (Some("allow"), Some("allow"), false, false),
    ];
    for (network, unix, deny_network, deny_unix) in cases {
      for mode in ["native", "bwrap"] {
        let mut o = json!({"mode": mode});
        if let Some(n) = network {
          o["network"] = json!(n);
        }
        if let Some(u) = unix {
          o["unixSockets"] = json!(u);
        }
        let p = Plan::resolve(&opts(o.clone()), Path::new("/tmp"), &with_bwrap)
          .unwrap()
          .unwrap();
        assert_eq!(
          (p.deny_network, p.deny_unix),
          (deny_network, deny_unix),
          "{o}"
        );
      }
    }
  }

  #[test]
  fn the_bounding_set_is_emptied_only_by_root() {
    // (uid) -> the plan empties the bounding set (root holds CAP_SETPCAP); on either backend.
    for (uid, drop_bounding) in [(0, true), (1000, false), (65534, false)] {
      let probe = Probe {
        uid,
        bwrap: Some(PathBuf::from("/usr/bin/bwrap")),
        ..host(true)
      };
      for mode in ["native", "bwrap"] {
        let p = Plan::resolve(&opts(json!({"mode": mode})), Path::new("/tmp"), &probe)
          .unwrap()
          .unwrap();
        assert_eq!(p.drop_bounding, drop_bounding, "uid {uid} {mode}");
        assert_eq!(p.cap_last_cap, probe.cap_last_cap);
      }
    }
  }

  /// bwrap mounts a devpts of its own: only the native backend denies the host's.
  #[test]
  fn only_the_native_backend_adds_the_host_ptys_to_deny_read() {
    let mut with_bwrap = host(true);
    with_bwrap.bwrap = Some(PathBuf::from("/usr/bin/bwrap"));
    let o = |mode: &str| opts(json!({"mode": mode, "fs": {"denyRead": ["/s"]}}));
    let native = Plan::resolve(&o("native"), Path::new("/tmp"), &with_bwrap)
      .unwrap()
      .unwrap();
    assert_eq!(native.deny_read, paths(&["/s", "/dev/pts"]));
    let bwrap = Plan::resolve(&o("bwrap"), Path::new("/tmp"), &with_bwrap)
      .unwrap()
      .unwrap();
    assert!(bwrap.bwrap.is_some());
    assert_eq!(bwrap.deny_read, paths(&["/s"]));
  }
}
