//! The bwrap backend: the same resolved [`Plan`] mapped to bubblewrap's flags, for
//! hosts where the native layers (landlock, seccomp) are missing, or when asked for by name.
//!
//! The job's reaper runs `bwrap <flags> -- <command>` instead of the command. Everything is built
//! before the fork here: bwrap's argv, the seccomp programs (the native layer's filters, the same
//! bytes) in memfds, and the cgroup and rlimits of the native backend (they survive
//! bwrap's exec). The child side only joins the cgroup, sets the rlimits, marks every fd but 0-2
//! and the seccomp fds close-on-exec, sets no_new_privs and execs bwrap.
//!
//! What bwrap applies, flag by flag:
//! - `--die-with-parent`, `--new-session` (no TIOCSTI into a terminal), `--cap-drop ALL` (run as
//!   root, bwrap keeps its capabilities otherwise: `mount -o remount,rw /` would work);
//! - `--unshare-net` when the network is denied (or `namespaces.net`), `--unshare-pid` with a
//!   fresh `/proc` unless `namespaces.pid` is `false`. Unlike the native backend, this costs no
//!   graceful stop: bwrap itself is pid 1 of the namespace, the command is not;
//! - the filesystem: `readable` read-only (`--ro-bind`), a fresh `/dev`, `writable` bound
//!   read-write, each writable root's `.git` bound onto itself (a mount point cannot be renamed
//!   away, so `.git/hooks` cannot be defeated by moving `.git` and recreating it), `protect`
//!   bound read-only over that, `denyRead` hidden (an empty, unreadable, read-only tmpfs over a
//!   directory, `/dev/null` over a file);
//! - `--add-seccomp-fd` for each program of `seccomp.rs`, installed by bwrap right before it
//!   execs the command;
//! - `--chdir` enters the working directory by path, which the host can swap for a symlink
//!   between the check and bwrap's chdir: the verifier (`verify_binds_main`) runs in it first
//!   and refuses to start the command unless it is the object that was checked.
//!
//! bwrap needs CAP_SYS_ADMIN (root) or an unprivileged user namespace; where it has neither, the
//! job fails with `ISOLATION_UNAVAILABLE` rather than run without it.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;

use super::child::{ChildFailed, cloexec_from_3, join_cgroup, set_rlimits};
use super::error::{IsolationError, Layer, LayerFailed, PrepareError};
use super::mounts::MountPlanError;
use super::plan::{Layers, Plan};
use super::prepare::{IsolationReport, Prepared, prepare};
use super::probe::{LayerReport, Probe};
use super::seccomp::{self, SeccompRules};
use finn_job::isolation::{IsolationOptions, Mode, OptionsError};

/// Why bwrap cannot run here, or `None` when it can.
fn unusable(probe: &Probe) -> Option<String> {
  if probe.bwrap.is_none() {
    return Some(format!(
      "bwrap: bubblewrap is not installed (no executable `bwrap`, root's, in {}); apt-get install bubblewrap",
      super::probe::SYSTEM_BIN_DIRS.join(", ")
    ));
  }
  if !probe.sys_admin && !probe.userns {
    return Some(format!(
      "bwrap: uid {} has no CAP_SYS_ADMIN and cannot create a user namespace (blocked by sysctl, \
       AppArmor or the container's seccomp profile), and bwrap needs one of them",
      probe.uid
    ));
  }
  None
}

/// The backend for `opts` on this host: `Some(bwrap's path)` for bwrap, `None` for native.
/// `mode: "bwrap"` fails when bwrap cannot run; `auto` takes bwrap only when a native layer
/// (landlock or seccomp) is missing and bwrap can run.
pub(super) fn choose(
  opts: &IsolationOptions,
  probe: &Probe,
) -> Result<Option<PathBuf>, IsolationError> {
  match opts.mode {
    Mode::Bwrap => {
      if opts.namespaces.mount == Some(false) {
        return Err(
          OptionsError {
            field: "namespaces.mount".into(),
            reason: "`false` with `mode: \"bwrap\"`: bwrap always makes a mount namespace".into(),
          }
          .into(),
        );
      }
      match unusable(probe) {
        Some(why) => Err(IsolationError::Unavailable(vec![why])),
        None => Ok(probe.bwrap.clone()),
      }
    }
    Mode::Auto => {
      let native_complete = probe.landlock.is_some() && probe.seccomp;
      let fallback =
        !native_complete && opts.namespaces.mount != Some(false) && unusable(probe).is_none();
      Ok(if fallback { probe.bwrap.clone() } else { None })
    }
    Mode::Off | Mode::Native => Ok(None),
  }
}

/// For `auto` on a host missing a native layer: why bwrap did not stand in (for `degraded`).
pub(super) fn no_fallback(opts: &IsolationOptions, probe: &Probe) -> Option<String> {
  if opts.mode != Mode::Auto || (probe.landlock.is_some() && probe.seccomp) {
    return None;
  }
  if opts.namespaces.mount == Some(false) {
    return Some(
      "bwrap: not used in place of the missing layers: namespaces.mount is false".into(),
    );
  }
  unusable(probe).map(|why| format!("{why} (so it cannot stand in for the missing layers)"))
}

/// Fills in the bwrap backend's layers on `base` (paths and limits already resolved).
pub(super) fn plan(
  opts: &IsolationOptions,
  probe: &Probe,
  bwrap: PathBuf,
  base: Plan,
) -> Result<Plan, IsolationError> {
  let strict = opts.required || opts.mode == Mode::Bwrap;
  let ns = opts.namespaces;
  let mut degraded = Vec::new();
  let mut missing = Vec::new();
  let layers = Layers {
    cgroup: probe.cgroup.is_some(),
    landlock: false,
    seccomp: probe.seccomp,
    netns: if base.deny_network {
      ns.net != Some(false)
    } else {
      ns.net == Some(true)
    },
    mountns: true,
    pidns: ns.pid != Some(false),
    // bwrap makes its own user namespace where it needs one; the child does not.
    userns: false,
  };
  if probe.landlock.is_none() {
    degraded.push(
      "landlock: not in the kernel's active LSMs (the bwrap backend confines writes by read-only mounts)"
        .to_string(),
    );
  }
  if !layers.seccomp {
    degraded.push("seccomp: no filter mode in this kernel".to_string());
    if strict {
      missing.push("seccomp".to_string());
    }
  }
  if !layers.cgroup {
    let why = probe.cgroup_reason.clone().unwrap_or_default();
    degraded.push(format!(
      "cgroup: {why}; maxProcesses is RLIMIT_NPROC (per uid, ignored for root), and \
       maxMemoryBytes bounds each process (RLIMIT_AS), not the tree, nor files written to a \
       tmpfs (bwrap's /dev/shm)"
    ));
  }
  if !layers.pidns {
    degraded.push(
      "pidns: off (namespaces.pid is false): the host's /proc is visible, so are the environments \
       of the same uid's processes, and those processes (Node and finn-supervisor among them) can \
       be signalled: bwrap has no landlock signal scope"
        .to_string(),
    );
  }
  if !missing.is_empty() {
    return Err(IsolationError::Unavailable(missing));
  }
  Ok(Plan {
    layers,
    degraded,
    bwrap: Some(bwrap),
    ..base
  })
}

/// The backend `mode: "auto"` picks on this host, for `doctor()`.
pub(super) fn auto_backend(probe: &Probe) -> &'static str {
  if probe.landlock.is_some() && probe.seccomp {
    "native"
  } else if unusable(probe).is_none() {
    "bwrap"
  } else if probe.landlock.is_some() || probe.seccomp {
    "native"
  } else {
    "off"
  }
}

/// `doctor()`'s row for the bwrap backend.
pub(super) fn doctor_layer(probe: &Probe) -> LayerReport {
  let why = unusable(probe);
  let remedy = why.as_ref().map(|_| {
    if probe.bwrap.is_none() {
      "apt-get install bubblewrap (Debian/Ubuntu; `bubblewrap` in other distributions)".to_string()
    } else {
      "run as root with CAP_SYS_ADMIN, or allow user namespaces (sysctl user.max_user_namespaces, \
       kernel.apparmor_restrict_unprivileged_userns=0, a seccomp profile permitting CLONE_NEWUSER)"
        .to_string()
    }
  });
  LayerReport {
    name: Layer::Bwrap.as_str(),
    available: why.is_none(),
    reason: why,
    remedy,
  }
}

/// A job's isolation by either backend, ready for the fork.
#[expect(
  clippy::large_enum_variant,
  reason = "one per job, built once before the fork and never moved in a hot loop"
)]
pub enum Isolated {
  Native(Prepared),
  Bwrap(Bwrapped),
}

/// The bwrap backend's job: bwrap's argv, the seccomp fds it reads, the cgroup and rlimits.
pub struct Bwrapped {
  /// Only the rlimits and the cgroup of the native preparation.
  base: Prepared,
  program: CString,
  /// bwrap's argv up to the command's working directory (`--chdir` is added per command).
  args: Vec<CString>,
  /// The seccomp programs, each in its own memfd (offset 0), to pass by number.
  seccomp_fds: Vec<OwnedFd>,
  /// The checked objects bwrap binds (`--bind-fd`/`--ro-bind-fd`), to pass by number.
  binds: Binds,
  /// `finn-supervisor`, run inside the sandbox before the command when there are nested binds
  /// or a checked working directory to verify (`verify_binds_main`).
  verifier: Option<CString>,
  /// For the verifier: `cwd=dev:ino` of the checked working directory.
  verify_cwd: Option<CString>,
  report: IsolationReport,
}

/// What `--bind-fd`/`--ro-bind-fd` take, and the check made right before bwrap's exec.
#[derive(Default)]
struct Binds {
  /// Every fd named by a bind flag (the roots' checked fds, and `.git`/`protect` opened
  /// beneath them), 3 or above.
  fds: Vec<Arc<OwnedFd>>,
  /// Per nested bind (`.git`, `protect`): the root's fd, the path below it, and the identity
  /// seen when it was opened. Inside the sandbox bwrap finds the destination below the root's
  /// bind (the checked root); the child re-opens it the same way, with no symlink on the way,
  /// and refuses to start (ESTALE, ELOOP) if it is another object by then.
  nested: Vec<(libc::c_int, CString, u64, u64)>,
  /// Per nested bind, for the verifier inside the sandbox: `dev:ino:ro:path`.
  verify: Vec<CString>,
}

/// The first argument that makes `finn-supervisor` the bind verifier.
pub const VERIFY_BINDS_ARG: &str = "--finn-verify-binds";

static VERIFIER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The `finn-supervisor` binary bwrap runs as the bind verifier (set by the supervisor itself;
/// tests that prepare bwrap jobs in their own process set it too).
pub fn set_bind_verifier(exe: PathBuf) {
  let _ = VERIFIER.set(exe);
}

/// Runs inside the sandbox, after bwrap's setup and seccomp, before the command:
/// `--finn-verify-binds [cwd=dev:ino] dev:ino:ro:path... -- program argv...`. bwrap enters the
/// working directory by path (`--chdir`), following symlinks: with `cwd=`, the directory this
/// runs in must be the checked object, or the job fails (exit 126) before the command runs. bwrap finds a bind's
/// destination by path, following symlinks, so a host that swaps `.git/hooks` for a relative
/// symlink between the check and bwrap's mount gets the checked object mounted elsewhere and the
/// real one left writable. Here each destination must be the checked object (device and inode,
/// reached with no symlink on the way), the root of a mount (so the bind landed on it), and
/// read-only where it was bound so; otherwise the job fails (exit 126) before the command runs.
/// Once this holds the mounts stay: a rename by the host moves the covered directory, it does not
/// uncover it. Then execs the command.
pub fn verify_binds_main(args: &[std::ffi::OsString]) -> ! {
  let fail = |why: String| -> ! {
    eprintln!("finn-sandbox: bind check failed inside the sandbox: {why}");
    std::process::exit(126)
  };
  let Some(sep) = args.iter().position(|a| a == "--") else {
    fail("no `--` before the command".into())
  };
  for spec in &args[..sep] {
    let spec = spec.as_bytes();
    if let Some(identity) = spec.strip_prefix(b"cwd=") {
      let mut parts = identity.splitn(2, |b| *b == b':');
      let num = |b: Option<&[u8]>| {
        std::str::from_utf8(b?)
          .ok()
          .and_then(|s| s.parse::<u64>().ok())
      };
      let (Some(dev), Some(ino)) = (num(parts.next()), num(parts.next())) else {
        fail("bad working directory identity".into())
      };
      // The directory bwrap's `--chdir` entered, whatever its path says now.
      match std::fs::metadata(".") {
        Ok(m)
          if std::os::unix::fs::MetadataExt::dev(&m) == dev
            && std::os::unix::fs::MetadataExt::ino(&m) == ino => {}
        Ok(_) => fail("the working directory is not the directory that was checked".into()),
        Err(e) => fail(format!("the working directory: {e}")),
      }
      continue;
    }
    let mut parts = spec.splitn(4, |b| *b == b':');
    let (Some(dev), Some(ino), Some(ro), Some(path)) =
      (parts.next(), parts.next(), parts.next(), parts.next())
    else {
      fail(format!("bad spec {:?}", String::from_utf8_lossy(spec)))
    };
    let num = |b: &[u8]| {
      std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    };
    let (Some(dev), Some(ino)) = (num(dev), num(ino)) else {
      fail("bad identity".into())
    };
    let path_c = CString::new(path).unwrap_or_default();
    let shown = String::from_utf8_lossy(path);
    let fd = match super::mounts::open_no_symlinks(&path_c) {
      // SAFETY: a fresh fd that nothing else owns.
      Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
      Err(e) => fail(format!("{shown}: {e}")),
    };
    const STATX_ATTR_MOUNT_ROOT: u64 = 0x2000;
    // SAFETY: statx of the fd itself (AT_EMPTY_PATH) into a buffer on our stack.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
      libc::statx(
        fd.as_raw_fd(),
        c"".as_ptr(),
        libc::AT_EMPTY_PATH,
        libc::STATX_INO,
        &mut stx,
      )
    };
    if r != 0 {
      fail(format!("{shown}: {}", std::io::Error::last_os_error()));
    }
    let st_dev = libc::makedev(stx.stx_dev_major, stx.stx_dev_minor);
    if st_dev != dev || stx.stx_ino != ino {
      fail(format!("{shown} is not the object that was checked"));
    }
    if stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT != 0
      && stx.stx_attributes & STATX_ATTR_MOUNT_ROOT == 0
    {
      fail(format!("{shown} was not bound (not a mount point)"));
    }
    if ro == b"1" {
      // SAFETY: fstatvfs into a buffer on our stack.
      let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
      if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut vfs) } != 0
        || vfs.f_flag & libc::ST_RDONLY == 0
      {
        fail(format!("{shown} is not read-only"));
      }
    }
  }
  let Some(program) = args.get(sep + 1) else {
    fail("no command".into())
  };
  let err = std::os::unix::process::CommandExt::exec(
    std::process::Command::new(program).args(&args[sep + 2..]),
  );
  eprintln!("finn-sandbox: exec {program:?}: {err}");
  std::process::exit(if err.kind() == std::io::ErrorKind::NotFound {
    127
  } else {
    126
  })
}

/// Builds everything the plan's backend needs before the fork.
pub fn prepare_job(plan: &Plan) -> Result<Isolated, IsolationError> {
  let Some(bwrap) = &plan.bwrap else {
    return prepare(plan).map(Isolated::Native);
  };
  if plan.net_route.is_some() {
    // The route is the native backend's (`route.rs`).
    return Err(IsolationError::prepare(
      Layer::Seccomp,
      std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    ));
  }
  // The native preparation with every layer but the cgroup off: rlimits and the cgroup.
  let base = prepare(&Plan {
    layers: Layers {
      cgroup: plan.layers.cgroup,
      ..Layers::default()
    },
    bwrap: None,
    net_route: None,
    ..plan.clone()
  })?;
  let seccomp_fds = if plan.layers.seccomp {
    let programs = seccomp::compile(SeccompRules {
      deny_network: plan.deny_network,
      deny_unix: plan.deny_unix,
      // As native: refused rather than an IPC namespace (`--unshare-ipc` costs ~2.6 ms).
      deny_ipc: true,
      route: false,
    })
    .map_err(|e| IsolationError::prepare(Layer::Seccomp, e))?;
    programs
      .iter()
      .map(|p| memfd_with(&bpf_bytes(p)))
      .collect::<Result<Vec<_>, _>>()
      .map_err(|e| IsolationError::prepare(Layer::Seccomp, e))?
  } else {
    Vec::new()
  };
  let mut binds = Binds::default();
  let mut args = args(plan, &seccomp_fds, &mut binds).map_err(|e| match e {
    ArgsError::ProtectSymlink(path) => {
      IsolationError::prepare(Layer::Mountns, MountPlanError::ProtectSymlink(path))
    }
    ArgsError::Open(e) => IsolationError::prepare(Layer::Mountns, e),
  })?;
  let verify_cwd = match &plan.checked.cwd {
    Some(fd) => {
      let st = nix::sys::stat::fstat(fd.as_ref())
        .map_err(|e| IsolationError::prepare(Layer::Mountns, std::io::Error::from(e)))?;
      Some(s(&format!("cwd={}:{}", st.st_dev, st.st_ino)))
    }
    None => None,
  };
  let verifier = if binds.verify.is_empty() && verify_cwd.is_none() {
    None
  } else {
    let exe = VERIFIER
      .get()
      .ok_or_else(|| IsolationError::prepare(Layer::Mountns, PrepareError::NoBindVerifier))?;
    // Visible inside the sandbox whatever `readable` says.
    push(&mut args, "--ro-bind", &[exe, exe]);
    Some(c(exe))
  };
  Ok(Isolated::Bwrap(Bwrapped {
    base,
    program: c(bwrap),
    args,
    seccomp_fds,
    binds,
    verifier,
    verify_cwd,
    report: plan.report(),
  }))
}

impl Isolated {
  /// See [`Prepared::take_route`]; the bwrap backend has no route.
  pub fn take_route(&mut self) -> Option<(super::route::NetRoute, OwnedFd)> {
    match self {
      Isolated::Native(p) => p.take_route(),
      Isolated::Bwrap(_) => None,
    }
  }

  pub fn report(&self) -> &IsolationReport {
    match self {
      Isolated::Native(p) => p.report(),
      Isolated::Bwrap(b) => &b.report,
    }
  }

  /// The program and argv to exec instead of `program` with `argv` in `cwd`: `None` for the
  /// native backend (the command itself). Called before the fork.
  pub fn wrap(
    &self,
    program: &CStr,
    argv: &[CString],
    cwd: &CStr,
  ) -> Option<(CString, Vec<CString>)> {
    let Isolated::Bwrap(b) = self else {
      return None;
    };
    let mut v = b.args.clone();
    v.push(CString::from(c"--chdir"));
    v.push(cwd.to_owned());
    v.push(CString::from(c"--"));
    if let Some(exe) = &b.verifier {
      v.push(exe.clone());
      v.push(s(VERIFY_BINDS_ARG));
      v.extend(b.verify_cwd.iter().cloned());
      v.extend(b.binds.verify.iter().cloned());
      v.push(CString::from(c"--"));
    }
    // bwrap 0.8 has no `--argv0`: the command sees its path as argv[0].
    v.push(program.to_owned());
    v.extend(argv.iter().skip(1).cloned());
    Some((b.program.clone(), v))
  }

  /// Once the command runs as `leader`: the native backend holds the job's mount namespace
  /// until this is dropped ([`Prepared::hold_namespace`]); bwrap's are its own.
  pub fn hold_namespace(&mut self, leader: libc::pid_t) {
    if let Isolated::Native(p) = self {
      p.hold_namespace(leader);
    }
  }

  /// Whether the job may enter its reaper's network namespace: the native backend's
  /// [`Prepared::may_share_net`]; bwrap makes its own.
  pub fn may_share_net(&self) -> bool {
    matches!(self, Isolated::Native(p) if p.may_share_net())
  }

  /// [`Prepared::pid_namespace_at_fork`] for the native backend; bwrap makes its own.
  pub fn pid_namespace_at_fork(&mut self) -> Option<crate::PidnsAtFork> {
    match self {
      Isolated::Native(p) => p.pid_namespace_at_fork(),
      Isolated::Bwrap(_) => None,
    }
  }

  /// [`Prepared::egress_listeners`] for the native backend; bwrap jobs have no egress route.
  pub fn egress_listeners(&mut self) -> Vec<std::os::fd::OwnedFd> {
    match self {
      Isolated::Native(p) => p.egress_listeners(),
      Isolated::Bwrap(_) => Vec::new(),
    }
  }

  /// [`Prepared::has_egress`] for the native backend; bwrap jobs have no egress route.
  pub fn has_egress(&self) -> bool {
    matches!(self, Isolated::Native(p) if p.has_egress())
  }

  /// [`Prepared::enter_net`] for the native backend; nothing for bwrap.
  pub fn enter_net(&mut self, net: &crate::SharedNet) {
    if let Isolated::Native(p) = self {
      p.enter_net(net);
    }
  }

  /// Applies the backend's child side. Call it only in a freshly forked, single-threaded child,
  /// right before exec. Async-signal-safe.
  pub fn apply_in_child(&self) -> Result<(), ChildFailed> {
    match self {
      Isolated::Native(p) => p.apply_in_child(),
      Isolated::Bwrap(b) => b.apply_in_child().map_err(ChildFailed::Layer),
    }
  }
}

impl Bwrapped {
  fn apply_in_child(&self) -> Result<(), LayerFailed> {
    let failed = |layer| move |errno| LayerFailed::new(layer, errno);
    // The cgroup and the rlimits, as the native child applies them: they bound bwrap and
    // everything it starts. Not `Prepared::apply_in_child`: it also drops capabilities, which
    // bwrap run as root needs for its mounts (it drops them itself before the exec).
    if let Some(cg) = &self.base.cgroup {
      for procs in cg.procs_files() {
        join_cgroup(procs).map_err(failed(Layer::Cgroup))?;
      }
    }
    set_rlimits(&self.base.rlimits).map_err(failed(Layer::Rlimits))?;
    cloexec_from_3().map_err(failed(Layer::Privileges))?;
    for fd in self
      .seccomp_fds
      .iter()
      .chain(self.binds.fds.iter().map(|f| f.as_ref()))
    {
      // SAFETY: F_SETFD on an fd we own: bwrap must inherit it to read the filter, or to
      // bind the checked object.
      if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(LayerFailed::new(Layer::Bwrap, Errno::last()));
      }
    }
    for (root, rel, dev, ino) in &self.binds.nested {
      let fd = super::mounts::open_beneath_raw(*root, rel).map_err(failed(Layer::Mountns))?;
      // SAFETY: fstat into a stat buffer on our stack, then close the fd we opened.
      let same = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let r = libc::fstat(fd, &mut st);
        libc::close(fd);
        r == 0 && st.st_dev == *dev && st.st_ino == *ino
      };
      if !same {
        return Err(LayerFailed::new(Layer::Mountns, Errno::ESTALE));
      }
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only. bwrap sets it too; set here, exec'ing
    // bwrap itself cannot gain privileges (file capabilities) either.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
      return Err(LayerFailed::new(Layer::Privileges, Errno::last()));
    }
    Ok(())
  }
}

fn c(p: &Path) -> CString {
  CString::new(p.as_os_str().as_bytes()).expect("paths from the filesystem have no NUL")
}

fn s(v: &str) -> CString {
  CString::new(v).expect("flags have no NUL")
}

/// The program as the kernel reads it: `struct sock_filter` entries, native endian.
fn bpf_bytes(p: &seccompiler::BpfProgram) -> Vec<u8> {
  let mut out = Vec::with_capacity(p.len() * 8);
  for f in p {
    out.extend_from_slice(&f.code.to_ne_bytes());
    out.push(f.jt);
    out.push(f.jf);
    out.extend_from_slice(&f.k.to_ne_bytes());
  }
  out
}

/// A close-on-exec memfd holding `data`, its offset back at 0 (bwrap reads it to EOF).
fn memfd_with(data: &[u8]) -> std::io::Result<OwnedFd> {
  // SAFETY: memfd_create takes a NUL-terminated name and flags; the fd is ours on success.
  let fd = unsafe { libc::memfd_create(c"finn-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
  if fd < 0 {
    return Err(std::io::Error::last_os_error());
  }
  // SAFETY: a fresh fd we own.
  let mut fd = unsafe { OwnedFd::from_raw_fd(fd) };
  if fd.as_raw_fd() < 3 {
    // A process started with 0-2 closed: the child's stdio setup would overwrite this one.
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd we own, 3 or above.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if high < 0 {
      return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    fd = unsafe { OwnedFd::from_raw_fd(high) };
  }
  let mut f = std::fs::File::from(fd);
  std::io::Write::write_all(&mut f, data)?;
  std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0))?;
  Ok(f.into())
}

#[derive(Debug, thiserror::Error)]
enum ArgsError {
  #[error("protect path {0} is a symlink; refusing to protect its target instead of it")]
  ProtectSymlink(PathBuf),
  #[error("open a checked path for bwrap: {0}")]
  Open(std::io::Error),
}

fn push(v: &mut Vec<CString>, flag: &str, paths: &[&Path]) {
  v.push(s(flag));
  v.extend(paths.iter().map(|p| c(p)));
}

/// The fallback, for a plan without its checked fds (built by hand, or decoded without them):
/// `writable`, `.git` and `protect` bound by path.
fn path_binds(plan: &Plan, v: &mut Vec<CString>) -> Result<(), ArgsError> {
  for w in &plan.writable {
    push(v, "--bind", &[w, w]);
  }
  // `.git` before `protect`: a bind of it after them would hide them.
  for w in &plan.writable {
    let git = w.join(".git");
    match std::fs::symlink_metadata(&git) {
      Ok(m) if m.is_dir() => push(v, "--bind", &[&git, &git]),
      // A `.git` file (`gitdir: ...`) decides where git looks: keep it from being rewritten.
      Ok(m) if m.is_file() => push(v, "--ro-bind", &[&git, &git]),
      _ => {}
    }
  }
  for p in &plan.protect {
    match std::fs::symlink_metadata(p) {
      Ok(m) if m.file_type().is_symlink() => return Err(ArgsError::ProtectSymlink(p.clone())),
      Ok(_) => push(v, "--ro-bind", &[p, p]),
      Err(_) => {}
    }
  }
  Ok(())
}

/// An fd of 3 or above (the child's stdio setup overwrites 0-2).
fn high(fd: Arc<OwnedFd>) -> std::io::Result<Arc<OwnedFd>> {
  if fd.as_raw_fd() >= 3 {
    return Ok(fd);
  }
  // SAFETY: F_DUPFD_CLOEXEC returns a new fd we own, 3 or above.
  let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
  if high < 0 {
    return Err(std::io::Error::last_os_error());
  }
  // SAFETY: as above.
  Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(high) }))
}

/// `--bind-fd`/`--ro-bind-fd` of the checked objects: each writable root from the fd that
/// passed the addon's check (bound over whatever its path names by then, so the command sees
/// the checked root there), `.git` and `protect` opened beneath that fd with no symlink on the
/// way. bwrap checks that what it mounted is the fd's object ("Race condition binding
/// dirfd"); the destinations of the nested binds are checked again right before bwrap's exec
/// (`Binds::nested`).
fn fd_binds(plan: &Plan, v: &mut Vec<CString>, binds: &mut Binds) -> Result<(), ArgsError> {
  let mut fd_flag = |v: &mut Vec<CString>, flag: &str, fd: Arc<OwnedFd>, dest: &Path| {
    let fd = high(fd).map_err(ArgsError::Open)?;
    v.push(s(flag));
    v.push(s(&fd.as_raw_fd().to_string()));
    v.push(c(dest));
    binds.fds.push(fd.clone());
    Ok::<Arc<OwnedFd>, ArgsError>(fd)
  };
  let mut roots: Vec<(&PathBuf, Arc<OwnedFd>)> = Vec::new();
  for (w, fd) in plan.writable.iter().zip(&plan.checked.writable) {
    roots.push((w, fd_flag(v, "--bind-fd", fd.clone(), w)?));
  }
  let mut nested = Vec::new();
  let mut verify = Vec::new();
  // Opens `rel` beneath the root; `None`: nothing there.
  let beneath = |root: &Arc<OwnedFd>, rel: &Path, p: &Path| {
    match super::mounts::open_beneath(root, rel) {
      Ok(fd) => {
        let st = nix::sys::stat::fstat(&fd).map_err(|e| ArgsError::Open(e.into()))?;
        Ok(Some((Arc::new(fd), st)))
      }
      Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => Ok(None),
      // A symlink on the way (`.git -> elsewhere`): refused, as the native backend's start is.
      Err(Errno::ELOOP) => Err(ArgsError::ProtectSymlink(p.to_owned())),
      Err(e) => Err(ArgsError::Open(e.into())),
    }
  };
  // `.git` before `protect`: a bind of it after them would hide them.
  for (w, root) in &roots {
    let git = w.join(".git");
    let Some((fd, st)) = beneath(root, Path::new(".git"), &git).or_else(|e| match e {
      // A `.git` symlink is not bound (as by path); its protect entries below refuse.
      ArgsError::ProtectSymlink(_) => Ok(None),
      e => Err(e),
    })?
    else {
      continue;
    };
    let flag = match st.st_mode & libc::S_IFMT {
      libc::S_IFDIR => "--bind-fd",
      // A `.git` file (`gitdir: ...`) decides where git looks: keep it from being rewritten.
      libc::S_IFREG => "--ro-bind-fd",
      _ => continue,
    };
    fd_flag(v, flag, fd, &git)?;
    nested.push((root.as_raw_fd(), c(Path::new(".git")), st.st_dev, st.st_ino));
    verify.push(verify_spec(&st, flag == "--ro-bind-fd", &git));
  }
  for p in &plan.protect {
    let Some((root, rel)) = roots.iter().find_map(|(w, fd)| {
      p.strip_prefix(w)
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(|rel| (fd, rel))
    }) else {
      // An absolute `protect` outside every writable root is read-only already (`readable`).
      continue;
    };
    let Some((fd, st)) = beneath(root, rel, p)? else {
      continue;
    };
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
      return Err(ArgsError::ProtectSymlink(p.clone()));
    }
    fd_flag(v, "--ro-bind-fd", fd, p)?;
    nested.push((root.as_raw_fd(), c(rel), st.st_dev, st.st_ino));
    verify.push(verify_spec(&st, true, p));
  }
  binds.verify = verify;
  // The roots' fds stay open as long as `binds` (they are in `binds.fds`, or the plan's).
  binds.nested = nested;
  Ok(())
}

fn verify_spec(st: &libc::stat, ro: bool, path: &Path) -> CString {
  let mut b = format!("{}:{}:{}:", st.st_dev, st.st_ino, ro as u8).into_bytes();
  b.extend_from_slice(path.as_os_str().as_bytes());
  CString::new(b).expect("paths from the filesystem have no NUL")
}

/// bwrap's flags for `plan`, in bwrap's order of application (later mounts cover earlier ones).
fn args(
  plan: &Plan,
  seccomp_fds: &[OwnedFd],
  binds: &mut Binds,
) -> Result<Vec<CString>, ArgsError> {
  let mut v: Vec<CString> = vec![s("bwrap")];
  for f in ["--die-with-parent", "--new-session", "--cap-drop", "ALL"] {
    v.push(s(f));
  }
  if plan.layers.netns {
    push(&mut v, "--unshare-net", &[]);
  }
  if plan.layers.pidns {
    push(&mut v, "--unshare-pid", &[]);
  }
  for r in &plan.read_roots {
    push(&mut v, "--ro-bind", &[r, r]);
  }
  push(&mut v, "--dev", &[Path::new("/dev")]);
  if plan.layers.pidns {
    push(&mut v, "--proc", &[Path::new("/proc")]);
    // bwrap covers these of a new /proc only when `access(W_OK)` succeeds, and inside it, uid 0
    // without capabilities gets EACCES on the 0555 `/proc/sys`: it stayed writable, and root
    // (no capability needed for most sysctls) set `kernel.core_pattern` to a pipe, whose
    // program the kernel then ran on a crash as host root, outside every namespace.
    // `sysrq-trigger` (mode 0200, no capability checked) would let it reboot the host.
    for p in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
      if Path::new(p).exists() {
        push(&mut v, "--ro-bind", &[Path::new(p), Path::new(p)]);
      }
    }
  }
  super::mounts::create_missing_protect(&plan.writable, &plan.protect);
  let checked = &plan.checked.writable;
  if !checked.is_empty() && checked.len() == plan.writable.len() {
    fd_binds(plan, &mut v, binds)?;
  } else {
    path_binds(plan, &mut v)?;
  }
  for d in &plan.deny_read {
    let Ok(real) = d.canonicalize() else { continue };
    match std::fs::metadata(&real) {
      // Empty, mode 000 and read-only: nothing to read, nothing to write.
      Ok(m) if m.is_dir() => {
        for f in ["--perms", "000", "--size", "4096"] {
          v.push(s(f));
        }
        push(&mut v, "--tmpfs", &[&real]);
        push(&mut v, "--remount-ro", &[&real]);
      }
      Ok(_) => push(&mut v, "--ro-bind", &[Path::new("/dev/null"), &real]),
      Err(_) => {}
    }
  }
  for fd in seccomp_fds {
    v.push(s("--add-seccomp-fd"));
    v.push(s(&fd.as_raw_fd().to_string()));
  }
  Ok(v)
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::probe::CgroupKind;
  use serde_json::json;

  fn host(landlock: bool, seccomp: bool, bwrap: bool, userns: bool, root: bool) -> Probe {
    Probe {
      landlock: landlock.then_some(7),
      landlock_kernel: None,
      seccomp,
      userns,
      userns_reason: (!userns).then(|| "user.max_user_namespaces is 0".into()),
      sys_admin: root,
      cgroup: root.then_some(CgroupKind::V1),
      cgroup_reason: (!root).then(|| "no writable cgroup".into()),
      bwrap: bwrap.then(|| PathBuf::from("/usr/bin/bwrap")),
      uid: if root { 0 } else { 65534 },
      cap_last_cap: 40,
    }
  }

  fn resolve(v: serde_json::Value, probe: &Probe) -> Result<Plan, IsolationError> {
    let o = IsolationOptions::from_json(v).unwrap();
    Plan::resolve(&o, Path::new("/tmp"), probe).map(|p| p.unwrap())
  }

  #[test]
  fn auto_keeps_native_when_its_layers_exist() {
    for root in [false, true] {
      let p = resolve(json!({"mode": "auto"}), &host(true, true, true, true, root)).unwrap();
      assert_eq!(p.bwrap, None);
      assert_eq!(p.report().backend, "native");
    }
  }

  #[test]
  fn auto_falls_back_to_bwrap_only_where_native_is_missing_and_bwrap_works() {
    // landlock or seccomp missing, bwrap usable (root, or a user namespace): bwrap.
    for (landlock, seccomp, userns, root) in [
      (false, true, true, false),
      (false, true, false, true),
      (true, false, true, false),
    ] {
      let p = resolve(
        json!({"mode": "auto"}),
        &host(landlock, seccomp, true, userns, root),
      )
      .unwrap();
      assert_eq!(p.bwrap.as_deref(), Some(Path::new("/usr/bin/bwrap")));
      let r = p.report();
      assert_eq!(r.backend, "bwrap");
      assert!(
        r.applied.contains(&"mountns") && r.applied.contains(&"pidns"),
        "{r:?}"
      );
      assert_eq!(r.applied.contains(&"seccomp"), seccomp, "{r:?}");
      assert!(!r.applied.contains(&"landlock"), "{r:?}");
    }
    // bwrap missing, or no way for it to run (nobody without user namespaces): native, degraded.
    for (bwrap, userns) in [(false, true), (true, false)] {
      let p = resolve(
        json!({"mode": "auto"}),
        &host(false, true, bwrap, userns, false),
      )
      .unwrap();
      assert_eq!(p.bwrap, None);
      assert!(p.degraded.iter().any(|d| d.starts_with("landlock:")));
      let why = if bwrap {
        "user namespace"
      } else {
        "not installed"
      };
      assert!(
        p.degraded
          .iter()
          .any(|d| d.starts_with("bwrap:") && d.contains(why)),
        "{:?}",
        p.degraded
      );
    }
    // `namespaces.mount: false` rules bwrap out.
    let p = resolve(
      json!({"mode": "auto", "namespaces": {"mount": false}}),
      &host(false, true, true, true, false),
    )
    .unwrap();
    assert_eq!(p.bwrap, None);
    assert!(
      p.degraded.iter().any(|d| d.starts_with("bwrap:")),
      "{:?}",
      p.degraded
    );
  }

  #[test]
  fn mode_bwrap_fails_naming_why_it_cannot_run() {
    let e = resolve(
      json!({"mode": "bwrap"}),
      &host(true, true, false, true, true),
    )
    .unwrap_err();
    assert!(matches!(e, IsolationError::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("bubblewrap is not installed"), "{e}");
    assert!(e.to_string().contains("apt-get install bubblewrap"), "{e}");
    let e = resolve(
      json!({"mode": "bwrap"}),
      &host(true, true, true, false, false),
    )
    .unwrap_err();
    assert!(matches!(e, IsolationError::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("user namespace"), "{e}");
    // Without seccomp, mode bwrap is strict like native.
    let e = resolve(
      json!({"mode": "bwrap"}),
      &host(true, false, true, true, true),
    )
    .unwrap_err();
    assert!(e.to_string().contains("seccomp"), "{e}");
    let e = resolve(
      json!({"mode": "bwrap", "namespaces": {"mount": false}}),
      &host(true, true, true, true, true),
    )
    .unwrap_err();
    assert!(matches!(e, IsolationError::Options(_)), "{e}");
    assert!(e.to_string().contains("namespaces.mount"), "{e}");
  }

  #[test]
  fn flags_follow_the_plan() {
    let h = host(true, true, true, true, false);
    let p = resolve(json!({"mode": "bwrap"}), &h).unwrap();
    assert!(p.layers.netns && p.layers.pidns && p.layers.seccomp);
    let a: Vec<String> = args(&p, &[], &mut Binds::default())
      .unwrap()
      .iter()
      .map(|c| c.to_string_lossy().into_owned())
      .collect();
    let has = |w: &[&str]| a.windows(w.len()).any(|x| x == w);
    for w in [
      &["--cap-drop", "ALL"][..],
      &["--die-with-parent"],
      &["--new-session"],
      &["--unshare-net"],
      &["--unshare-pid"],
      &["--ro-bind", "/", "/"],
      &["--proc", "/proc"],
      &["--ro-bind", "/proc/sys", "/proc/sys"],
    ] {
      assert!(has(w), "{w:?} missing from {a:?}");
    }
    // Where the kernel has one (CONFIG_MAGIC_SYSRQ).
    let sysrq = "/proc/sysrq-trigger";
    assert_eq!(has(&["--ro-bind", sysrq, sysrq]), Path::new(sysrq).exists());
    let tmp = Path::new("/tmp").canonicalize().unwrap();
    let t = tmp.to_str().unwrap();
    // The writable root bound from the fd that passed the check.
    let i = a.iter().position(|f| f == "--bind-fd").expect("--bind-fd");
    assert!(a[i + 1].parse::<i32>().unwrap() >= 3, "{a:?}");
    assert_eq!(a[i + 2], t, "{a:?}");
    // Without the fds (a plan decoded alone): by path.
    let bare = Plan {
      checked: Default::default(),
      ..p.clone()
    };
    let a2: Vec<String> = args(&bare, &[], &mut Binds::default())
      .unwrap()
      .iter()
      .map(|c| c.to_string_lossy().into_owned())
      .collect();
    assert!(a2.windows(3).any(|x| x == ["--bind", t, t]), "{a2:?}");
    // The network allowed and the pid namespace declined: neither flag.
    let p = resolve(
      json!({"mode": "bwrap", "network": "allow", "namespaces": {"pid": false}}),
      &h,
    )
    .unwrap();
    let a: Vec<String> = args(&p, &[], &mut Binds::default())
      .unwrap()
      .iter()
      .map(|c| c.to_string_lossy().into_owned())
      .collect();
    assert!(
      !a.iter()
        .any(|f| f == "--unshare-net" || f == "--unshare-pid"),
      "{a:?}"
    );
    assert!(p.degraded.iter().any(|d| d.starts_with("pidns:")));
  }

  #[test]
  fn the_seccomp_bytes_are_the_native_filter() {
    let progs = seccomp::compile(SeccompRules {
      deny_network: true,
      deny_unix: true,
      deny_ipc: false,
      route: false,
    })
    .unwrap();
    let b = bpf_bytes(&progs[0]);
    assert_eq!(b.len(), progs[0].len() * 8);
    // SAFETY: sock_filter is repr(C), 8 bytes, no padding: the same bytes as the Vec's buffer.
    let raw = unsafe { std::slice::from_raw_parts(progs[0].as_ptr().cast::<u8>(), b.len()) };
    assert_eq!(b, raw);
  }
}
