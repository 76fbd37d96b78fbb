//! The bwrap backend (issue 17): the same resolved [`Plan`] mapped to bubblewrap's flags, for
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
//!   execs the command.
//!
//! bwrap needs CAP_SYS_ADMIN (root) or an unprivileged user namespace; where it has neither, the
//! job fails with `ISOLATION_UNAVAILABLE` rather than run without it.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::error::IsolationError;
use super::options::{IsolationOptions, Mode, OptionsError};
use super::plan::{Layers, Plan};
use super::prepare::{IsolationReport, Prepared, prepare};
use super::probe::{LayerReport, Probe};
use super::seccomp::{self, SeccompRules};

/// Why bwrap cannot run here, or `None` when it can.
fn unusable(probe: &Probe) -> Option<String> {
  if probe.bwrap.is_none() {
    return Some(
      "bwrap: bubblewrap is not installed (no executable `bwrap` in PATH); apt-get install bubblewrap"
        .into(),
    );
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
      "cgroup: {why}; maxProcesses is RLIMIT_NPROC (per uid, ignored for root)"
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
    name: "bwrap",
    available: why.is_none(),
    reason: why,
    remedy,
  }
}

/// A job's isolation by either backend, ready for the fork.
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
  report: IsolationReport,
}

/// Builds everything the plan's backend needs before the fork.
pub fn prepare_job(plan: &Plan) -> Result<Isolated, IsolationError> {
  let Some(bwrap) = &plan.bwrap else {
    return prepare(plan).map(Isolated::Native);
  };
  // The native preparation with every layer but the cgroup off: rlimits and the cgroup.
  let base = prepare(&Plan {
    layers: Layers {
      cgroup: plan.layers.cgroup,
      ..Layers::default()
    },
    bwrap: None,
    ..plan.clone()
  })?;
  let seccomp_fds = if plan.layers.seccomp {
    let programs = seccomp::compile(SeccompRules {
      deny_network: plan.deny_network,
      deny_unix: plan.deny_unix,
      // As native: refused rather than an IPC namespace (`--unshare-ipc` costs ~2.6 ms).
      deny_ipc: true,
    })
    .map_err(|e| IsolationError::prepare("seccomp", e))?;
    programs
      .iter()
      .map(|p| memfd_with(&bpf_bytes(p)))
      .collect::<Result<Vec<_>, _>>()
      .map_err(|e| IsolationError::prepare("seccomp", e))?
  } else {
    Vec::new()
  };
  let args = args(plan, &seccomp_fds).map_err(|e| IsolationError::prepare("mountns", e))?;
  Ok(Isolated::Bwrap(Bwrapped {
    base,
    program: c(bwrap),
    args,
    seccomp_fds,
    report: plan.report(),
  }))
}

impl Isolated {
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
    // bwrap 0.8 has no `--argv0`: the command sees its path as argv[0].
    v.push(program.to_owned());
    v.extend(argv.iter().skip(1).cloned());
    Some((b.program.clone(), v))
  }

  /// Applies the backend's child side. Call it only in a freshly forked, single-threaded child,
  /// right before exec. Async-signal-safe.
  pub fn apply_in_child(&self) -> Result<(), Errno> {
    match self {
      Isolated::Native(p) => p.apply_in_child(),
      Isolated::Bwrap(b) => b.apply_in_child(),
    }
  }
}

impl Bwrapped {
  fn apply_in_child(&self) -> Result<(), Errno> {
    // The cgroup and the rlimits, as the native child applies them: they bound bwrap and
    // everything it starts. Not `Prepared::apply_in_child`: it also drops capabilities, which
    // bwrap run as root needs for its mounts (it drops them itself before the exec).
    if let Some(cg) = &self.base.cgroup {
      for procs in cg.procs_files() {
        join_cgroup(procs)?;
      }
    }
    for &(res, value) in &self.base.rlimits {
      let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
      };
      // SAFETY: `lim` is a valid rlimit on our stack.
      if unsafe { libc::setrlimit(res, &lim) } != 0 {
        return Err(Errno::last());
      }
    }
    cloexec_from_3()?;
    for fd in &self.seccomp_fds {
      // SAFETY: F_SETFD on an fd we own: bwrap must inherit it to read the filter.
      if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(Errno::last());
      }
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only. bwrap sets it too; set here, exec'ing
    // bwrap itself cannot gain privileges (file capabilities) either.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
      return Err(Errno::last());
    }
    Ok(())
  }
}

/// Moves the calling process into the group: writing "0" means "the writer".
fn join_cgroup(procs: &CStr) -> Result<(), Errno> {
  // SAFETY: `procs` is a NUL-terminated path; open/write/close touch only our stack.
  unsafe {
    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
      return Err(Errno::last());
    }
    let r = libc::write(fd, c"0".as_ptr().cast(), 1);
    let err = Errno::last();
    libc::close(fd);
    if r != 1 {
      return Err(err);
    }
  }
  Ok(())
}

/// Marks every fd above 2 close-on-exec (the exec-error pipe stays usable until exec).
fn cloexec_from_3() -> Result<(), Errno> {
  const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
  // SAFETY: close_range only changes flags of our own fds.
  let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
  if r == 0 {
    return Ok(());
  }
  // Before Linux 5.11: walk the table up to the soft limit.
  let mut lim = libc::rlimit {
    rlim_cur: 0,
    rlim_max: 0,
  };
  // SAFETY: getrlimit writes into `lim` on our stack; fcntl on any int is harmless (EBADF).
  unsafe {
    libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    for fd in 3..lim.rlim_cur.min(1 << 20) as libc::c_int {
      libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
  }
  Ok(())
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
}

fn push(v: &mut Vec<CString>, flag: &str, paths: &[&Path]) {
  v.push(s(flag));
  v.extend(paths.iter().map(|p| c(p)));
}

/// bwrap's flags for `plan`, in bwrap's order of application (later mounts cover earlier ones).
fn args(plan: &Plan, seccomp_fds: &[OwnedFd]) -> Result<Vec<CString>, ArgsError> {
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
  }
  for w in &plan.writable {
    push(&mut v, "--bind", &[w, w]);
  }
  // `.git` before `protect`: a bind of it after them would hide them.
  for w in &plan.writable {
    let git = w.join(".git");
    match std::fs::symlink_metadata(&git) {
      Ok(m) if m.is_dir() => push(&mut v, "--bind", &[&git, &git]),
      // A `.git` file (`gitdir: ...`) decides where git looks: keep it from being rewritten.
      Ok(m) if m.is_file() => push(&mut v, "--ro-bind", &[&git, &git]),
      _ => {}
    }
  }
  super::mounts::create_missing_protect(&plan.writable, &plan.protect);
  for p in &plan.protect {
    match std::fs::symlink_metadata(p) {
      Ok(m) if m.file_type().is_symlink() => return Err(ArgsError::ProtectSymlink(p.clone())),
      Ok(_) => push(&mut v, "--ro-bind", &[p, p]),
      Err(_) => {}
    }
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
  use crate::core::isolate::probe::CgroupKind;
  use serde_json::json;

  fn host(landlock: bool, seccomp: bool, bwrap: bool, userns: bool, root: bool) -> Probe {
    Probe {
      landlock: landlock.then_some(7),
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
    assert_eq!(e.code(), "ISOLATION_UNAVAILABLE");
    assert!(e.to_string().contains("bubblewrap is not installed"), "{e}");
    assert!(e.to_string().contains("apt-get install bubblewrap"), "{e}");
    let e = resolve(
      json!({"mode": "bwrap"}),
      &host(true, true, true, false, false),
    )
    .unwrap_err();
    assert_eq!(e.code(), "ISOLATION_UNAVAILABLE");
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
    assert_eq!(e.code(), "INVALID_SPEC");
    assert!(e.to_string().contains("namespaces.mount"), "{e}");
  }

  #[test]
  fn flags_follow_the_plan() {
    let h = host(true, true, true, true, false);
    let p = resolve(json!({"mode": "bwrap"}), &h).unwrap();
    assert!(p.layers.netns && p.layers.pidns && p.layers.seccomp);
    let a: Vec<String> = args(&p, &[])
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
    ] {
      assert!(has(w), "{w:?} missing from {a:?}");
    }
    let tmp = Path::new("/tmp").canonicalize().unwrap();
    let t = tmp.to_str().unwrap();
    assert!(has(&["--bind", t, t]), "{a:?}");
    // The network allowed and the pid namespace declined: neither flag.
    let p = resolve(
      json!({"mode": "bwrap", "network": "allow", "namespaces": {"pid": false}}),
      &h,
    )
    .unwrap();
    let a: Vec<String> = args(&p, &[])
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
    })
    .unwrap();
    let b = bpf_bytes(&progs[0]);
    assert_eq!(b.len(), progs[0].len() * 8);
    // SAFETY: sock_filter is repr(C), 8 bytes, no padding: the same bytes as the Vec's buffer.
    let raw = unsafe { std::slice::from_raw_parts(progs[0].as_ptr().cast::<u8>(), b.len()) };
    assert_eq!(b, raw);
  }
}
