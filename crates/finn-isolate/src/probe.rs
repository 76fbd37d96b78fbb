//! Machine facts that decide which layers can apply, probed once per process and cached: a peer's
//! probe took 20-30 s on NFS, and `doctor()` must answer in milliseconds.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::Layer;

/// What this host allows, as seen by this process (uid and capabilities included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
  /// Landlock ABI version in use, `None` when the LSM is absent or disabled (or capped to 0).
  pub landlock: Option<i32>,
  /// The kernel's own ABI when [`LANDLOCK_ABI_MAX_VAR`] caps `landlock` below it.
  pub landlock_kernel: Option<i32>,
  /// seccomp filter mode available.
  pub seccomp: bool,
  /// User namespaces can be made here, with a mount namespace inside: without CAP_SYS_ADMIN,
  /// the mount, pid and net namespaces are made inside one.
  pub userns: bool,
  /// Why user namespaces cannot be used, for `degraded` and `doctor()`.
  pub userns_reason: Option<String>,
  /// CAP_SYS_ADMIN in the effective set: mount, net and pid namespaces can be made directly.
  pub sys_admin: bool,
  /// A cgroup hierarchy we can make child groups in: `"v1"` (pids + memory controllers).
  pub cgroup: Option<CgroupKind>,
  /// Why no usable cgroup was found, for `doctor()`.
  pub cgroup_reason: Option<String>,
  pub bwrap: Option<PathBuf>,
  pub uid: u32,
  /// Highest capability number, for dropping the bounding set.
  pub cap_last_cap: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupKind {
  V1,
}

impl CgroupKind {
  pub fn as_str(self) -> &'static str {
    match self {
      CgroupKind::V1 => "v1",
    }
  }
}

/// The parent of our per-job groups under each v1 controller.
pub const CGROUP_PARENT: &str = "finn-sandbox";

/// Caps the landlock ABI the addon uses (`1`, `3`, `4`, `5`, ...): the layers then run as on a
/// kernel of that ABI, so a test suite on a new kernel shows what holds on an older one (no
/// signal scope below 6). Read when a pool starts and by `probeIsolation()` and `doctor()`.
pub const LANDLOCK_ABI_MAX_VAR: &str = "FINN_SANDBOX_LANDLOCK_ABI_MAX";

/// With `FINN_SANDBOX_TEST_HOOKS=1`: the probe finds no user namespaces and no CAP_SYS_ADMIN.
pub const NO_NAMESPACES_VAR: &str = "FINN_SANDBOX_TEST_NO_NAMESPACES";

/// The cap set by [`LANDLOCK_ABI_MAX_VAR`] (`None`: unset or empty). A value that is not a whole
/// number fails: a cap that silently does nothing would hide the very layers a run means to
/// leave out.
pub fn landlock_abi_max() -> Result<Option<i32>, AbiMaxError> {
  let Some(raw) = std::env::var_os(LANDLOCK_ABI_MAX_VAR) else {
    return Ok(None);
  };
  parse_abi_max(&raw.to_string_lossy())
}

/// [`LANDLOCK_ABI_MAX_VAR`] set to something other than a whole number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
  "{LANDLOCK_ABI_MAX_VAR} must be a landlock ABI version, a whole number from 0 (no landlock) \
   up, not {raw:?}"
)]
pub struct AbiMaxError {
  /// The variable's value.
  pub raw: String,
}

fn parse_abi_max(raw: &str) -> Result<Option<i32>, AbiMaxError> {
  if raw.is_empty() {
    return Ok(None);
  }
  match raw.parse::<u16>() {
    Ok(n) => Ok(Some(i32::from(n))),
    Err(_) => Err(AbiMaxError { raw: raw.into() }),
  }
}

impl Probe {
  /// This probe with the landlock ABI capped at `max` (0: no landlock at all).
  pub fn capped(&self, max: Option<i32>) -> Probe {
    let mut p = self.clone();
    if let Some(max) = max
      && p.landlock.is_some_and(|abi| abi > max)
    {
      p.landlock_kernel = p.landlock;
      p.landlock = (max > 0).then_some(max);
    }
    p
  }

  /// Whether landlock can scope signals here (ABI 6).
  pub fn signal_scope(&self) -> bool {
    self.landlock.is_some_and(|abi| abi >= 6)
  }
}

/// The cached probe.
pub fn probe() -> &'static Probe {
  static PROBE: OnceLock<Probe> = OnceLock::new();
  PROBE.get_or_init(probe_now)
}

fn probe_now() -> Probe {
  let (cgroup, cgroup_reason) = match probe_cgroup_v1() {
    Ok(k) => (Some(k), None),
    Err(r) => (None, Some(r)),
  };
  // A test switch, honoured only with the test hooks on: the host as if it could make no
  // namespace (no user namespaces, no CAP_SYS_ADMIN), to run the network allowlist's rung 2
  // where rung 1 would be taken. It only ever takes layers away.
  let no_namespaces = std::env::var_os("FINN_SANDBOX_TEST_HOOKS").is_some_and(|v| v == "1")
    && std::env::var_os(NO_NAMESPACES_VAR).is_some_and(|v| v == "1");
  let userns_reason = if no_namespaces {
    Some(format!("turned off by {NO_NAMESPACES_VAR}"))
  } else {
    userns_available().err()
  };
  Probe {
    landlock: landlock_abi(),
    landlock_kernel: None,
    seccomp: seccomp_available(),
    userns: userns_reason.is_none(),
    userns_reason,
    sys_admin: !no_namespaces && has_effective_cap(21),
    cgroup,
    cgroup_reason,
    bwrap: system_binary("bwrap"),
    // SAFETY: getuid cannot fail and touches no memory of ours.
    uid: unsafe { libc::getuid() },
    cap_last_cap: std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
      .ok()
      .and_then(|s| s.trim().parse().ok())
      .unwrap_or(63),
  }
}

fn landlock_abi() -> Option<i32> {
  const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
  // SAFETY: the VERSION query takes no pointer and only returns a number or an error.
  let v = unsafe {
    libc::syscall(
      libc::SYS_landlock_create_ruleset,
      std::ptr::null::<u8>(),
      0usize,
      LANDLOCK_CREATE_RULESET_VERSION,
    )
  };
  (v > 0).then_some(v as i32)
}

fn seccomp_available() -> bool {
  // PR_GET_SECCOMP fails with EINVAL on kernels without seccomp; the status line names the mode.
  // SAFETY: PR_GET_SECCOMP takes no pointer.
  let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
  r >= 0
    && std::fs::read_to_string("/proc/self/status")
      .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp_filters:")))
}

fn read_num(path: &str) -> Option<i64> {
  std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `Err(why)` when user namespaces cannot be used. The sysctls name the usual blocks; the real
/// test (a user namespace with a mount namespace inside, as the child makes them) also catches a
/// container's seccomp profile and an LSM that only refuses what is done inside.
fn userns_available() -> Result<(), String> {
  if read_num("/proc/sys/user/max_user_namespaces") == Some(0) {
    return Err("user.max_user_namespaces is 0".into());
  }
  if read_num("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
    return Err("kernel.unprivileged_userns_clone is 0".into());
  }
  if read_num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
    return Err("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns is 1)".into());
  }
  // Tried natively: no program is run (see `userns.rs`).
  super::userns::try_user_and_mount_namespace()
}

fn has_effective_cap(cap: u32) -> bool {
  let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
    return false;
  };
  status
    .lines()
    .find_map(|l| l.strip_prefix("CapEff:"))
    .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    .is_some_and(|eff| eff & (1 << cap) != 0)
}

fn probe_cgroup_v1() -> Result<CgroupKind, String> {
  for ctrl in ["pids", "memory"] {
    let base = Path::new("/sys/fs/cgroup").join(ctrl);
    if !base.join("cgroup.procs").exists() {
      return Err(format!(
        "no cgroup v1 `{ctrl}` hierarchy at {}",
        base.display()
      ));
    }
    let parent = base.join(CGROUP_PARENT);
    match std::fs::create_dir(&parent) {
      Ok(()) => {}
      Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
      Err(e) => return Err(format!("cannot create {}: {e}", parent.display())),
    }
    // Directory creation can succeed where writing limits does not (read-only bind, delegation).
    let probe_dir = parent.join(format!("probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe_dir);
    let ok = made.is_ok()
      && std::fs::OpenOptions::new()
        .write(true)
        .open(probe_dir.join("cgroup.procs"))
        .is_ok();
    let _ = std::fs::remove_dir(&probe_dir);
    if !ok {
      return Err(format!(
        "cannot make a writable group under {}",
        parent.display()
      ));
    }
  }
  Ok(CgroupKind::V1)
}

/// Where a system program the addon runs itself (bwrap) is looked for: never Node's PATH, a
/// directory a command may be able to write (`~/.local/bin`, `node_modules/.bin`), whose
/// program would then run as Node's user outside every sandbox.
pub const SYSTEM_BIN_DIRS: [&str; 5] = ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"];

/// `name` in [`SYSTEM_BIN_DIRS`]: an executable file that it and its directory are root's and
/// writable by nobody else (so no command of a non-root Node can replace it).
pub(crate) fn system_binary(name: &str) -> Option<PathBuf> {
  use std::os::unix::fs::MetadataExt;
  let root_only = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
  SYSTEM_BIN_DIRS
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| {
      let Ok(file) = std::fs::metadata(p) else {
        return false;
      };
      let dir_ok = p
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .is_some_and(|d| root_only(&d));
      file.is_file() && file.mode() & 0o111 != 0 && root_only(&file) && dir_ok
    })
}

/// A landlock right that later kernels add, and what its absence means for a job: `doctor()`
/// lists each, and an isolated job's `degraded` names the ones it lacks.
pub struct LandlockRight {
  pub layer: &'static str,
  /// The first ABI with it.
  pub abi: i32,
  /// What a job may do without it, and what still holds.
  pub meaning: &'static str,
  pub remedy: &'static str,
}

impl LandlockRight {
  /// The reason `doctor()` and `degraded` give, with the ABI in use (`None`: no landlock).
  pub fn missing(&self, p: &Probe) -> String {
    let abi = p
      .landlock
      .map_or_else(|| "none".to_string(), |a| a.to_string());
    let capped = p.landlock_kernel.map_or_else(String::new, |k| {
      format!(" (capped by {LANDLOCK_ABI_MAX_VAR}; the kernel has {k})")
    });
    format!(
      "landlock ABI {abi} < {}{capped}: {}",
      self.abi, self.meaning
    )
  }
}

/// The rights of ABI 3 to 6, oldest first.
pub const LANDLOCK_RIGHTS: [LandlockRight; 4] = [
  LandlockRight {
    layer: "landlock-truncate",
    abi: 3,
    meaning: "truncate(2) and O_TRUNC are not checked: a job can empty a file of its user's \
              outside the writable roots, unless the mount namespace made it read-only",
    remedy: "kernel 6.2 or later",
  },
  LandlockRight {
    layer: "landlock-net",
    abi: 4,
    meaning: "no TCP rules: with network denied, seccomp still refuses every non-Unix socket",
    remedy: "kernel 6.7 or later",
  },
  LandlockRight {
    layer: "landlock-ioctl",
    abi: 5,
    meaning: "ioctl on device files is not checked: a job reaches only /dev/null, zero, full, \
              random, urandom and tty, and has no controlling terminal",
    remedy: "kernel 6.10 or later",
  },
  LandlockRight {
    layer: "landlock-scope",
    abi: 6,
    meaning: "no signal or abstract-socket scope: the seccomp guard alone keeps signals, \
              pidfds, ptrace and process memory inside the job (each call is judged by the job's \
              reaper); with Unix sockets denied, seccomp refuses abstract ones too",
    remedy: "kernel 6.12 or later",
  },
];

/// One layer as `doctor()` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerReport {
  pub name: &'static str,
  pub available: bool,
  pub reason: Option<String>,
  pub remedy: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Doctor {
  pub backend: &'static str,
  pub layers: Vec<LayerReport>,
  pub ms: f64,
}

/// For people: each layer, whether it applies here, why not, and what fixes it. Cached probes.
pub fn doctor(p: &Probe) -> Doctor {
  let t0 = std::time::Instant::now();
  let mut layers = Vec::new();
  let mut add = |name, available: bool, reason: Option<String>, remedy: Option<&str>| {
    layers.push(LayerReport {
      name,
      available,
      reason: if available { None } else { reason },
      remedy: if available {
        None
      } else {
        remedy.map(str::to_owned)
      },
    })
  };
  add(Layer::Rlimits.as_str(), true, None, None);
  add(Layer::Privileges.as_str(), true, None, None);
  add(
    Layer::Cgroup.as_str(),
    p.cgroup.is_some(),
    p.cgroup_reason.clone(),
    Some(
      "run as root with cgroup v1 pids+memory mounted, or delegate a cgroup to this user; without it RLIMIT_NPROC \
       bounds processes per uid (ignored for root) and RLIMIT_AS bounds memory per process",
    ),
  );
  add(
    Layer::Landlock.as_str(),
    p.landlock.is_some(),
    Some(match p.landlock_kernel {
      Some(k) => format!("capped to 0 by {LANDLOCK_ABI_MAX_VAR} (the kernel has ABI {k})"),
      None => {
        "landlock is not in the kernel's active LSM list (or the kernel is older than 5.13)".into()
      }
    }),
    Some(
      "boot with `lsm=landlock,...` (CONFIG_SECURITY_LANDLOCK=y), kernel 6.7+ for network rules, 6.12+ for scopes",
    ),
  );
  for right in LANDLOCK_RIGHTS {
    add(
      right.layer,
      p.landlock.is_some_and(|a| a >= right.abi),
      Some(right.missing(p)),
      Some(right.remedy),
    );
  }
  add(
    Layer::Seccomp.as_str(),
    p.seccomp,
    Some("the kernel has no seccomp filter mode".into()),
    Some("CONFIG_SECCOMP_FILTER=y"),
  );
  let ns_reason = || {
    Some(format!(
      "no CAP_SYS_ADMIN, and user namespaces cannot be used: {}",
      p.userns_reason.as_deref().unwrap_or("unknown")
    ))
  };
  let ns_remedy = Some(
    "allow user namespaces: sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1 (Debian/Ubuntu \
     kernels), kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile granting `userns`, and a \
     container seccomp profile permitting unshare/clone with CLONE_NEWUSER (Docker's default refuses it: \
     --security-opt seccomp=<profile>); or run the supervisor as root",
  );
  let ns = p.sys_admin || p.userns;
  add(
    Layer::Userns.as_str(),
    p.userns,
    p.userns_reason.clone(),
    ns_remedy,
  );
  add(Layer::Netns.as_str(), ns, ns_reason(), ns_remedy);
  add(Layer::Mountns.as_str(), ns, ns_reason(), ns_remedy);
  add(Layer::Pidns.as_str(), ns, ns_reason(), ns_remedy);
  layers.push(super::bwrap::doctor_layer(p));
  Doctor {
    backend: super::bwrap::auto_backend(p),
    layers,
    ms: t0.elapsed().as_secs_f64() * 1e3,
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn the_abi_cap_is_a_whole_number_or_unset() {
    assert_eq!(parse_abi_max(""), Ok(None));
    assert_eq!(parse_abi_max("0"), Ok(Some(0)));
    assert_eq!(parse_abi_max("5"), Ok(Some(5)));
    for bad in ["x", "-1", "1.5", " 3", "99999999"] {
      let e = parse_abi_max(bad).unwrap_err();
      assert_eq!(e.raw, bad);
      assert!(e.to_string().contains(LANDLOCK_ABI_MAX_VAR), "{e}");
    }
  }

  fn host(abi: Option<i32>) -> Probe {
    Probe {
      landlock: abi,
      landlock_kernel: None,
      seccomp: true,
      userns: false,
      userns_reason: None,
      sys_admin: false,
      cgroup: None,
      cgroup_reason: None,
      bwrap: None,
      uid: 1000,
      cap_last_cap: 40,
    }
  }

  #[test]
  fn a_cap_lowers_the_abi_in_use_and_names_the_kernels() {
    let p = host(Some(7)).capped(Some(5));
    assert_eq!((p.landlock, p.landlock_kernel), (Some(5), Some(7)));
    assert!(!p.signal_scope());
    // A cap at or above the kernel's changes nothing.
    assert_eq!(host(Some(7)).capped(Some(7)), host(Some(7)));
    assert_eq!(host(Some(7)).capped(None), host(Some(7)));
    assert!(host(Some(6)).signal_scope());
    // 0 leaves landlock out; no landlock stays none.
    let off = host(Some(7)).capped(Some(0));
    assert_eq!((off.landlock, off.landlock_kernel), (None, Some(7)));
    assert_eq!(host(None).capped(Some(3)), host(None));
    let why = LANDLOCK_RIGHTS[3].missing(&p);
    assert!(why.starts_with("landlock ABI 5 < 6 (capped by"), "{why}");
    assert!(why.contains("the kernel has 7"), "{why}");
  }

  #[test]
  fn doctor_names_each_missing_right_with_what_it_means() {
    let d = doctor(&host(Some(7)).capped(Some(2)));
    for name in [
      "landlock-truncate",
      "landlock-net",
      "landlock-ioctl",
      "landlock-scope",
    ] {
      let l = d.layers.iter().find(|l| l.name == name).unwrap();
      assert!(!l.available, "{name}");
      assert!(l.reason.as_deref().unwrap().contains(": "), "{name}");
    }
    let d = doctor(&host(Some(6)));
    assert!(
      d.layers
        .iter()
        .filter(|l| l.name.starts_with("landlock"))
        .all(|l| l.available)
    );
  }
}
