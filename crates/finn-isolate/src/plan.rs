//! Options resolved against this host: which layers apply, with what paths and limits, and what
//! is degraded and why. Pure apart from path canonicalisation, so it is tested without processes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::IsolationError;
use super::prepare::IsolationReport;
use super::probe::Probe;
use finn_job::isolation::{
  Access, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_PROCESSES, IsolationOptions, Mode, Readable,
  default_deny_read,
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
pub struct Checked {
  /// The command's working directory.
  pub cwd: Option<Arc<OwnedFd>>,
  /// One per `Plan::writable`, in order (or none at all).
  pub writable: Vec<Arc<OwnedFd>>,
}

impl Checked {
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
impl PartialEq for Checked {
  fn eq(&self, other: &Self) -> bool {
    self.raw_fds() == other.raw_fds()
  }
}
impl Eq for Checked {}

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
  /// Not serialized: sent as fds beside the plan.
  #[serde(skip)]
  pub checked: Checked,
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
    // The check: each root (and the cwd) opened now; the fd is what the rules are built from,
    // its path what they are reported and mounted by. A root that does not exist grants
    // nothing rather than failing the job.
    let cwd_checked = open_checked(cwd);
    let roots: Vec<(Arc<OwnedFd>, PathBuf)> = match &opts.fs.writable {
      Some(w) => w.iter().filter_map(|p| open_checked(p)).collect(),
      None => cwd_checked.iter().cloned().collect(),
    };
    let writable: Vec<PathBuf> = roots.iter().map(|(_, p)| p.clone()).collect();
    let checked = Checked {
      cwd: cwd_checked.as_ref().map(|(fd, _)| fd.clone()),
      writable: roots.into_iter().map(|(fd, _)| fd).collect(),
    };
    let cwd_real = cwd_checked.map(|(_, p)| p);
    let mut read_roots = match &opts.fs.readable {
      Readable::All => vec![PathBuf::from("/")],
      Readable::Paths(p) => p.iter().filter_map(|p| p.canonicalize().ok()).collect(),
    };
    if opts.fs.readable != Readable::All {
      read_roots.extend(writable.iter().cloned());
    }
    let deny_read = opts
      .fs
      .deny_read
      .clone()
      .unwrap_or_else(|| default_deny_read(home.as_deref()));
    let protect = opts.fs.protect_in(&writable);
    let l = opts.limits;
    let limits = ResolvedLimits {
      max_processes: l.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES),
      max_memory_bytes: l.max_memory_bytes.unwrap_or(DEFAULT_MAX_MEMORY_BYTES),
      cpu_seconds: l.cpu_seconds,
      max_file_bytes: l.max_file_bytes,
      max_open_files: l.max_open_files,
    };
    let deny_network = opts.network == Access::Deny;
    let deny_unix = opts.unix_sockets == Access::Deny;
    if let Some(bwrap) = super::bwrap::choose(opts, probe)? {
      let base = Plan {
        writable,
        read_roots,
        deny_read,
        protect,
        deny_network,
        deny_unix,
        limits,
        layers: Layers::default(),
        degraded: Vec::new(),
        drop_bounding: probe.uid == 0,
        cap_last_cap: probe.cap_last_cap,
        bwrap: None,
        cwd: cwd_real,
        landlock_abi: probe.landlock.unwrap_or(0),
        checked,
      };
      return super::bwrap::plan(opts, probe, bwrap, base).map(Some);
    }

    // Always, whatever `denyRead` says: the host's ptys (the operator's terminal among them)
    // are readable by the same uid through `/`'s read grant, and a read steals keystrokes.
    // bwrap mounts a devpts of its own.
    let mut deny_read = deny_read;
    if !deny_read.iter().any(|d| d == Path::new("/dev/pts")) {
      deny_read.push(PathBuf::from("/dev/pts"));
    }

    let mut degraded = Vec::new();
    // What makes the job fail: required layers that are missing.
    let mut missing_required = Vec::new();
    let strict = opts.required || opts.mode == Mode::Native;

    let mut layers = Layers {
      landlock: probe.landlock.is_some(),
      seccomp: probe.seccomp,
      ..Layers::default()
    };
    if !layers.landlock {
      degraded.push(match probe.landlock_kernel {
        Some(k) => format!("landlock: capped to 0 by the environment (the kernel has ABI {k})"),
        None => "landlock: not in the kernel's active LSMs".to_string(),
      });
      if strict {
        missing_required.push("landlock".to_string());
      }
    } else {
      for right in super::probe::LANDLOCK_RIGHTS {
        // TCP rules matter only where the network is denied.
        let relevant = right.abi != 4 || deny_network;
        if relevant && probe.landlock.is_some_and(|abi| abi < right.abi) {
          degraded.push(format!("{}: {}", right.layer, right.missing(probe)));
        }
      }
    }
    if !layers.seccomp {
      degraded.push("seccomp: no filter mode in this kernel".to_string());
      if strict {
        missing_required.push("seccomp".to_string());
      }
    }
    layers.cgroup = probe.cgroup.is_some();
    if !layers.cgroup {
      let why = probe.cgroup_reason.clone().unwrap_or_default();
      if probe.uid == 0 {
        degraded.push(format!(
          "cgroup: {why}; maxProcesses is not enforced for root (RLIMIT_NPROC ignores uid 0)"
        ));
      } else {
        degraded.push(format!(
          "cgroup: {why}; maxProcesses counts all of uid {}'s processes, and maxMemoryBytes \
           bounds each process (RLIMIT_AS), not the tree (up to maxProcesses times as much), \
           nor files written to a tmpfs",
          probe.uid
        ));
      }
    }
    let ns = opts.namespaces;
    // Without CAP_SYS_ADMIN, namespaces are made inside a user namespace where one can be.
    let can_ns = probe.sys_admin || probe.userns;
    // `None` means: where the host permits and where it adds something.
    let mut want_ns = |name: &str, asked: Option<bool>, useful: bool, why_useful: &str| -> bool {
      let want = asked.unwrap_or(useful);
      if want && !can_ns {
        let why = probe.userns_reason.as_deref().unwrap_or("unknown");
        degraded.push(format!(
          "{name}: no CAP_SYS_ADMIN and no user namespace ({why}; {why_useful})"
        ));
        if asked == Some(true) {
          missing_required.push(name.to_string());
        }
        return false;
      }
      want
    };
    // Not by default: seccomp (every non-Unix socket) and landlock (TCP) already deny the
    // network, and a fresh network namespace costs 0.3-0.6 ms more per exec (README).
    layers.netns = want_ns(
      "netns",
      ns.net,
      false,
      "seccomp and landlock still refuse sockets",
    );
    // Always useful: it makes every mount but the writable roots read-only, and landlock does
    // not cover metadata (chmod, utimes, xattrs of the user's own files outside).
    layers.mountns = want_ns(
      "mountns",
      ns.mount,
      true,
      "protect paths stay writable, and metadata (chmod, utimes, xattrs) of the user's own files \
       outside; denyRead still holds by landlock",
    );
    // Opt-in: the command becomes pid 1 of its namespace, which ignores SIGTERM unless it installs
    // a handler, so a graceful stop waits out the grace period before SIGKILL. In exchange, when
    // the command exits the kernel kills everything left in the namespace (setsid children too),
    // and /proc shows no process outside it.
    layers.pidns = want_ns(
      "pidns",
      ns.pid,
      false,
      "/proc/<pid>/environ of outside processes stays hidden by landlock",
    );
    if !layers.mountns && !protect.is_empty() {
      degraded.push("protect: needs the mount namespace".to_string());
    }
    if layers.pidns && !layers.mountns {
      layers.pidns = false;
      degraded.push("pidns: needs the mount namespace for a fresh /proc".to_string());
      if ns.pid == Some(true) {
        missing_required.push("pidns".to_string());
      }
    }
    if let Some(why) = super::bwrap::no_fallback(opts, probe) {
      degraded.push(why);
    }
    layers.userns = !probe.sys_admin && (layers.mountns || layers.netns || layers.pidns);
    if !missing_required.is_empty()
      && (strict || ns.pid == Some(true) || ns.net == Some(true) || ns.mount == Some(true))
    {
      return Err(IsolationError::Unavailable(missing_required));
    }
    Ok(Some(Plan {
      writable,
      read_roots,
      deny_read,
      protect,
      deny_network,
      deny_unix,
      limits,
      layers,
      degraded,
      drop_bounding: probe.uid == 0,
      cap_last_cap: probe.cap_last_cap,
      bwrap: None,
      cwd: cwd_real,
      landlock_abi: probe.landlock.unwrap_or(0),
      checked,
    }))
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::probe::CgroupKind;
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
}
