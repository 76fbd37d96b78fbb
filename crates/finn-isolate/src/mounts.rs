//! The mount namespace's plan, made before the fork: every mount read-only but the writable roots
//! (landlock does not cover metadata: without this, chmod, utimes and user xattrs of a file the
//! user owns outside the writable roots land), read-only binds over `protect`, `.git` made
//! a mount point (a rename of `.git` then fails with EBUSY, so read-only binds on `.git/hooks`
//! cannot be defeated by moving `.git` away and recreating it), and empty read-only mounts over
//! `denyRead`.
//!
//! Bound from the checked object, not by path: `plan` opens each path `O_PATH | O_NOFOLLOW` (the
//! check) and records its device and inode. In the child, inside the new namespace, each target
//! is opened again with `openat2(RESOLVE_NO_SYMLINKS)` (the paths are canonical, so a symlink
//! anywhere on the way means a swap) and must be the same object; the mount is then made with the
//! fd-based API (`open_tree` + `mount_setattr` + `move_mount`, `fsopen`/`fsmount` for tmpfs),
//! onto that fd. A directory swapped for a symlink after the check fails the start (ELOOP, or
//! ESTALE for another object at the path) instead of redirecting a bind.
//!
//! The fds are opened in the child because a mount of the old namespace (where `prepare` runs)
//! cannot be cloned or mounted onto from the new one (EINVAL).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

#[derive(Debug, thiserror::Error)]
pub enum MountPlanError {
  #[error("protect path {0} is a symlink; refusing to protect its target instead of it")]
  ProtectSymlink(PathBuf),
  #[error("denyRead path {0} became a symlink while it was checked")]
  DenySwapped(PathBuf),
  #[error("{0} writable roots; the mount namespace binds at most {MAX_WRITABLE}")]
  TooManyWritable(usize),
}

/// How many writable roots the child holds cloned at once (a fixed array: no allocation there).
pub const MAX_WRITABLE: usize = 32;

/// What one step mounts onto its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
  /// `mount --make-rprivate /`: nothing we mount propagates back to the host.
  Private,
  /// A writable root, cloned (recursively, with its own flags) before the rest goes read-only,
  /// and bound back over itself after.
  Writable,
  /// Every mount in the namespace read-only (recursively), then the `Writable` clones bound back.
  ReadOnlyRest,
  /// The target bound onto itself (a mount point, still writable: `.git`).
  SelfBind,
  /// The target bound onto itself, read-only, nosuid, nodev (`protect`, a `.git` file).
  SelfBindReadOnly,
  /// `/dev/null` bound read-only over the target (a denied file).
  NullOver,
  /// An empty read-only tmpfs over the target (a denied directory).
  EmptyOver,
}

/// One step, with the identity the target had when it was checked.
#[derive(Debug)]
pub struct MountOp {
  pub kind: MountKind,
  pub target: CString,
  pub dev: u64,
  pub ino: u64,
}

fn c(p: &Path) -> CString {
  CString::new(p.as_os_str().as_bytes()).expect("paths from the filesystem have no NUL")
}

/// What an opened target is, and the private-mount step that records its identity under the
/// name `path` (the child re-opens that name and compares).
fn identity(fd: &std::fs::File, path: &Path) -> Option<(std::fs::FileType, MountOp)> {
  let m = fd.metadata().ok()?;
  Some((
    m.file_type(),
    MountOp {
      kind: MountKind::Private,
      target: c(path),
      dev: m.dev(),
      ino: m.ino(),
    },
  ))
}

/// The check: opens `path` without following a final symlink; what it is (and so which step
/// applies) is decided from the fd, not from an earlier lookup by path. `None`: nothing there.
fn checked(path: &Path) -> Option<(std::fs::FileType, MountOp)> {
  use std::os::unix::fs::OpenOptionsExt;
  let fd = std::fs::OpenOptions::new()
    .read(true)
    .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
    .open(path)
    .ok()?;
  identity(&fd, path)
}

/// The check relative to a writable root's checked fd: `rel` opened beneath it with no symlink
/// on the way (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, a final symlink opened itself), so the
/// identity recorded is that of the object inside the root that passed the addon's check, not
/// of whatever the root's path names by now. The target stays `path`: re-opened in the child
/// and compared with this identity, a swapped root fails the start (ESTALE).
fn checked_beneath(
  root: &std::os::fd::OwnedFd,
  rel: &Path,
  path: &Path,
) -> Option<(std::fs::FileType, MountOp)> {
  let r = open_beneath(root, rel);
  let fd = match r {
    Ok(fd) => std::fs::File::from(fd),
    // A symlink on the way (`.git -> elsewhere`): checked by path, and the child's
    // re-open, which allows no symlink either, fails the start.
    Err(Errno::ELOOP) => return checked(path),
    Err(_) => return None,
  };
  identity(&fd, path)
}

/// `rel` opened beneath `root` (`O_PATH | O_NOFOLLOW`, `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`):
/// the object inside the checked root, reached with no symlink on the way (a final symlink is
/// opened itself). Async-signal-safe apart from building the path before.
pub(super) fn open_beneath_raw(
  root: libc::c_int,
  rel: &std::ffi::CStr,
) -> Result<libc::c_int, Errno> {
  openat2_path(
    root,
    rel,
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
  )
}

/// [`open_beneath_raw`] with owned fds.
pub(super) fn open_beneath(
  root: &std::os::fd::OwnedFd,
  rel: &Path,
) -> Result<std::os::fd::OwnedFd, Errno> {
  use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
  let rel = CString::new(rel.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
  let fd = open_beneath_raw(root.as_raw_fd(), &rel)?;
  // SAFETY: a fresh fd that nothing else owns.
  Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `protect` path missing inside an existing directory of a writable root (a repository made
/// with no hook templates has no `.git/hooks`) has nothing to bind over: the command could create
/// it, and a hook or a config there runs at the next git outside the sandbox. Create it empty
/// first: a file when it is named `config` or `config.worktree` (an empty git config is valid),
/// else a directory (no hooks). Owned like its parent. Through the parent opened with no symlink on the way; a name
/// that appeared meanwhile is left to the check that follows.
pub fn create_missing_protect(writable: &[PathBuf], protect: &[PathBuf]) {
  use std::os::unix::fs::OpenOptionsExt;
  for p in protect {
    if std::fs::symlink_metadata(p).is_ok() {
      continue;
    }
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
      continue;
    };
    if !writable.iter().any(|w| parent.starts_with(w)) {
      continue;
    }
    let Ok(dir) = open_no_symlinks(&c(parent)) else {
      continue;
    };
    // SAFETY: `open_no_symlinks` returned a fresh fd we own.
    let dir = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dir) };
    let Ok(meta) = std::fs::File::from(dir).metadata() else {
      continue;
    };
    if !meta.is_dir() {
      continue;
    }
    let dirfd = std::fs::OpenOptions::new()
      .read(true)
      .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
      .open(parent);
    let Ok(dirfd) = dirfd else { continue };
    // Same directory as the one checked with no symlink on the way.
    if dirfd.metadata().map(|m| (m.dev(), m.ino())).ok() != Some((meta.dev(), meta.ino())) {
      continue;
    }
    use std::os::fd::AsRawFd;
    let name = CString::new(name.as_bytes()).expect("paths from the filesystem have no NUL");
    // SAFETY: a directory fd we own and a NUL-terminated name; failures leave nothing behind.
    unsafe {
      let fd = dirfd.as_raw_fd();
      let made = if matches!(name.as_bytes(), b"config" | b"config.worktree") {
        let f = libc::openat(
          fd,
          name.as_ptr(),
          libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
          0o644,
        );
        f >= 0 && libc::close(f) == 0
      } else {
        libc::mkdirat(fd, name.as_ptr(), 0o755) == 0
      };
      if made && libc::geteuid() == 0 {
        libc::fchownat(
          fd,
          name.as_ptr(),
          meta.uid(),
          meta.gid(),
          libc::AT_SYMLINK_NOFOLLOW,
        );
      }
    }
  }
}

/// The steps, in order: the namespace private, the writable roots and everything else
/// read-only, each root's `.git`, the protect paths, the denied reads. `protect` entries are
/// absolute (already joined with each writable root). `writable_fds`: the roots' checked fds,
/// one per `writable` (or empty: checked by path).
pub fn plan(
  writable: &[PathBuf],
  writable_fds: &[std::sync::Arc<std::os::fd::OwnedFd>],
  protect: &[PathBuf],
  deny_read: &[PathBuf],
) -> Result<Vec<MountOp>, MountPlanError> {
  let roots = RootFds::of(writable, writable_fds);
  let mut out = vec![MountOp {
    kind: MountKind::Private,
    target: CString::from(c"/"),
    dev: 0,
    ino: 0,
  }];
  out.extend(writable_steps(writable, &roots)?);
  create_missing_protect(writable, protect);
  // `.git` first: a later non-recursive bind of it would hide the protect binds inside it.
  out.extend(writable.iter().filter_map(|w| {
    let (t, op) = roots.check(&w.join(".git"))?;
    Some(MountOp {
      kind: git_kind(t)?,
      ..op
    })
  }));
  for p in protect {
    let Some((t, op)) = roots.check(p) else {
      continue;
    };
    out.push(MountOp {
      kind: protect_kind(t).ok_or_else(|| MountPlanError::ProtectSymlink(p.clone()))?,
      ..op
    });
  }
  for d in deny_read {
    let Ok(real) = d.canonicalize() else { continue };
    let Some((t, op)) = checked(&real) else {
      continue;
    };
    out.push(MountOp {
      kind: deny_kind(t).ok_or(MountPlanError::DenySwapped(real))?,
      ..op
    });
  }
  Ok(out)
}

/// The writable roots the addon checked, each with its fd.
struct RootFds<'a>(Vec<(&'a PathBuf, &'a std::os::fd::OwnedFd)>);

impl<'a> RootFds<'a> {
  fn of(writable: &'a [PathBuf], fds: &'a [std::sync::Arc<std::os::fd::OwnedFd>]) -> Self {
    if fds.len() != writable.len() {
      return RootFds(Vec::new());
    }
    RootFds(
      writable
        .iter()
        .zip(fds.iter().map(|f| f.as_ref()))
        .collect(),
    )
  }

  /// `p`'s type and identity: beneath the fd of the checked root it lies in; elsewhere (an
  /// absolute `protect` outside every root, or no fds), by path.
  fn check(&self, p: &Path) -> Option<(std::fs::FileType, MountOp)> {
    match self.0.iter().find_map(|(w, fd)| {
      p.strip_prefix(w)
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(|rel| (fd, rel))
    }) {
      Some((fd, rel)) => checked_beneath(fd, rel, p),
      None => checked(p),
    }
  }

  /// The identity of the root the addon checked (its fd), when it sent one: the child's re-open
  /// of the path must find that very object, or the start fails.
  fn identity_of(&self, w: &Path) -> Option<(std::fs::FileType, MountOp)> {
    let (_, fd) = self.0.iter().find(|(p, _)| p.as_path() == w)?;
    let m = std::fs::File::from(fd.try_clone().ok()?).metadata().ok()?;
    Some((
      m.file_type(),
      MountOp {
        kind: MountKind::Private,
        target: c(w),
        dev: m.dev(),
        ino: m.ino(),
      },
    ))
  }
}

/// Everything read-only but the writable roots; nothing when `/` itself is writable (nothing
/// left to protect, and a bind over the root directory is not seen from it).
fn writable_steps(writable: &[PathBuf], roots: &RootFds) -> Result<Vec<MountOp>, MountPlanError> {
  if writable.iter().any(|w| w == Path::new("/")) {
    return Ok(Vec::new());
  }
  if writable.len() > MAX_WRITABLE {
    return Err(MountPlanError::TooManyWritable(writable.len()));
  }
  let mut out: Vec<MountOp> = writable
    .iter()
    .filter_map(|w| roots.identity_of(w).or_else(|| checked(w)))
    .filter(|(t, _)| writable_root(*t))
    .map(|(_, op)| MountOp {
      kind: MountKind::Writable,
      ..op
    })
    .collect();
  out.push(MountOp {
    kind: MountKind::ReadOnlyRest,
    target: CString::from(c"/"),
    dev: 0,
    ino: 0,
  });
  Ok(out)
}

/// A writable file is bound back like a directory; a symlink there was swapped in since the
/// path was made canonical, and grants nothing.
fn writable_root(t: std::fs::FileType) -> bool {
  t.is_dir() || t.is_file()
}

/// A root's `.git`: a directory stays writable but a mount point of its own (so protect binds
/// inside it hold); a `.git` file (`gitdir: ...`) decides where git looks, so it is kept from
/// being rewritten; a symlink gets no step (the protect steps cannot pass it,
/// RESOLVE_NO_SYMLINKS, and fail the start).
fn git_kind(t: std::fs::FileType) -> Option<MountKind> {
  if t.is_dir() {
    Some(MountKind::SelfBind)
  } else if t.is_file() {
    Some(MountKind::SelfBindReadOnly)
  } else {
    None
  }
}

/// A protect path is bound read-only over itself; a symlink is refused (`None`) rather than
/// protecting its target instead of it.
fn protect_kind(t: std::fs::FileType) -> Option<MountKind> {
  (!t.is_symlink()).then_some(MountKind::SelfBindReadOnly)
}

/// A denied directory gets an empty tmpfs, a denied file `/dev/null`; a symlink, canonical a
/// moment ago, was swapped since: refused (`None`) rather than left readable.
fn deny_kind(t: std::fs::FileType) -> Option<MountKind> {
  if t.is_symlink() {
    None
  } else if t.is_dir() {
    Some(MountKind::EmptyOver)
  } else {
    Some(MountKind::NullOver)
  }
}

// The fd-based mount API (Linux 5.2; mount_setattr 5.12, below landlock's 5.13). Values from
// include/uapi/linux/mount.h and openat2.h; libc has the syscall numbers only.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x01;
const MOUNT_ATTR_NOSUID: u64 = 0x02;
const MOUNT_ATTR_NODEV: u64 = 0x04;
const MOUNT_ATTR_NOEXEC: u64 = 0x08;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

#[repr(C)]
struct MountAttr {
  attr_set: u64,
  attr_clr: u64,
  propagation: u64,
  userns_fd: u64,
}

#[repr(C)]
struct OpenHow {
  flags: u64,
  mode: u64,
  resolve: u64,
}

/// An fd closed on drop (close is async-signal-safe; no allocation).
struct Fd(libc::c_int);

impl Drop for Fd {
  fn drop(&mut self) {
    // SAFETY: closes an fd this guard owns.
    unsafe { libc::close(self.0) };
  }
}

fn fd(r: libc::c_long) -> Result<Fd, Errno> {
  if r < 0 {
    Err(Errno::last())
  } else {
    Ok(Fd(r as libc::c_int))
  }
}

fn ok(r: libc::c_long) -> Result<(), Errno> {
  if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// `open(path, O_PATH | O_NOFOLLOW)` with no symlink anywhere on the way (`RESOLVE_NO_SYMLINKS`):
/// for canonical paths, a symlink met means the path was swapped since it was made canonical.
/// Async-signal-safe. The caller owns the returned fd.
pub(super) fn open_no_symlinks(path: &std::ffi::CStr) -> Result<libc::c_int, Errno> {
  openat2_path(
    libc::AT_FDCWD,
    path,
    RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
  )
}

/// `openat2(dirfd, path, O_PATH | O_NOFOLLOW | O_CLOEXEC, resolve)`: the object itself (a final
/// symlink is opened, not followed). Async-signal-safe: raw syscall, everything on our stack.
fn openat2_path(
  dirfd: libc::c_int,
  path: &std::ffi::CStr,
  resolve: u64,
) -> Result<libc::c_int, Errno> {
  let how = OpenHow {
    flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
    mode: 0,
    resolve,
  };
  // SAFETY: a dirfd, a NUL-terminated path and an open_how on our stack, with its size.
  let r = unsafe {
    libc::syscall(
      libc::SYS_openat2,
      dirfd,
      path.as_ptr(),
      &how,
      std::mem::size_of::<OpenHow>(),
    )
  };
  if r < 0 {
    Err(Errno::last())
  } else {
    Ok(r as libc::c_int)
  }
}

/// Opens the checked target again, with no symlink anywhere on the way, and makes sure it is the
/// same object the check saw.
fn open_target(op: &MountOp) -> Result<Fd, Errno> {
  let target = Fd(open_no_symlinks(&op.target)?);
  // SAFETY: fstat writes into a stat buffer on our stack.
  let mut st: libc::stat = unsafe { std::mem::zeroed() };
  ok(unsafe { libc::fstat(target.0, &mut st) }.into())?;
  if st.st_dev != op.dev || st.st_ino != op.ino {
    return Err(Errno::ESTALE);
  }
  Ok(target)
}

/// A detached, non-recursive copy of what `path` (relative to `dirfd`; empty: `dirfd` itself) names.
fn clone_tree(dirfd: libc::c_int, path: &std::ffi::CStr) -> Result<Fd, Errno> {
  clone_tree_flags(dirfd, path, 0)
}

fn clone_tree_flags(
  dirfd: libc::c_int,
  path: &std::ffi::CStr,
  extra: libc::c_uint,
) -> Result<Fd, Errno> {
  let flags =
    OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint | extra;
  // SAFETY: an fd and a NUL-terminated path (empty with AT_EMPTY_PATH).
  fd(unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) })
}

fn set_attr(tree: &Fd, attr_set: u64) -> Result<(), Errno> {
  let attr = MountAttr {
    attr_set,
    attr_clr: 0,
    propagation: 0,
    userns_fd: 0,
  };
  // SAFETY: a detached mount fd, an empty path with AT_EMPTY_PATH, a mount_attr on our stack.
  ok(unsafe {
    libc::syscall(
      libc::SYS_mount_setattr,
      tree.0,
      c"".as_ptr(),
      libc::AT_EMPTY_PATH as libc::c_uint,
      &attr,
      std::mem::size_of::<MountAttr>(),
    )
  })
}

fn move_onto(tree: &Fd, target: &Fd) -> Result<(), Errno> {
  // SAFETY: two fds and empty paths with the EMPTY_PATH flags.
  ok(unsafe {
    libc::syscall(
      libc::SYS_move_mount,
      tree.0,
      c"".as_ptr(),
      target.0,
      c"".as_ptr(),
      MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
    )
  })
}

fn empty_tmpfs() -> Result<Fd, Errno> {
  // SAFETY: static NUL-terminated strings and integers.
  unsafe {
    let ctx = fd(libc::syscall(
      libc::SYS_fsopen,
      c"tmpfs".as_ptr(),
      FSOPEN_CLOEXEC,
    ))?;
    ok(libc::syscall(
      libc::SYS_fsconfig,
      ctx.0,
      FSCONFIG_SET_STRING,
      c"mode".as_ptr(),
      c"000".as_ptr(),
      0,
    ))?;
    ok(libc::syscall(
      libc::SYS_fsconfig,
      ctx.0,
      FSCONFIG_CMD_CREATE,
      std::ptr::null::<libc::c_char>(),
      std::ptr::null::<libc::c_void>(),
      0,
    ))?;
    let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    fd(libc::syscall(
      libc::SYS_fsmount,
      ctx.0,
      FSMOUNT_CLOEXEC,
      attrs as libc::c_uint,
    ))
  }
}

/// Every mount under `/` read-only, recursively (only adds the flag: a mount locked read-only in a
/// user namespace stays so, nothing is made writable).
fn all_read_only() -> Result<(), Errno> {
  let attr = MountAttr {
    attr_set: MOUNT_ATTR_RDONLY,
    attr_clr: 0,
    propagation: 0,
    userns_fd: 0,
  };
  // SAFETY: a static path, a mount_attr on our stack with its size.
  ok(unsafe {
    libc::syscall(
      libc::SYS_mount_setattr,
      libc::AT_FDCWD,
      c"/".as_ptr(),
      AT_RECURSIVE,
      &attr,
      std::mem::size_of::<MountAttr>(),
    )
  })
}

/// The working directory was entered before the mounts: it is still the old (now read-only)
/// mount's directory. Enter the same directory again through the namespace as it is now, if it
/// is the same object (else stay).
fn reenter_cwd() -> Result<(), Errno> {
  let mut buf = [0u8; libc::PATH_MAX as usize + 1];
  // SAFETY: getcwd writes at most `buf.len()` bytes, NUL-terminated, into our stack buffer.
  if unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) } < 0 {
    return Err(Errno::last());
  }
  let Ok(path) = std::ffi::CStr::from_bytes_until_nul(&buf) else {
    return Err(Errno::ENAMETOOLONG);
  };
  if path.to_bytes().first() != Some(&b'/') {
    // "(unreachable)": nothing to re-enter.
    return Ok(());
  }
  let Ok(new) = open_no_symlinks(path).map(Fd) else {
    return Ok(());
  };
  // SAFETY: fstat/stat write into stat buffers on our stack; fchdir on an fd we own.
  unsafe {
    let mut a: libc::stat = std::mem::zeroed();
    let mut b: libc::stat = std::mem::zeroed();
    ok(libc::fstat(new.0, &mut a).into())?;
    ok(libc::stat(c".".as_ptr(), &mut b).into())?;
    if a.st_dev == b.st_dev && a.st_ino == b.st_ino {
      ok(libc::fchdir(new.0).into())?;
    }
  }
  Ok(())
}

/// Runs the steps. Async-signal-safe: syscalls on prepared strings and stack structs only.
pub fn apply(ops: &[MountOp]) -> Result<(), Errno> {
  let read_only = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  // The writable roots' clones and targets, held until the rest is read-only.
  let mut held: [Option<(Fd, Fd)>; MAX_WRITABLE] = [const { None }; MAX_WRITABLE];
  let mut n_held = 0;
  for op in ops {
    match op.kind {
      MountKind::Writable => {
        if n_held == MAX_WRITABLE {
          return Err(Errno::E2BIG);
        }
        let target = open_target(op)?;
        let tree = clone_tree_flags(target.0, c"", AT_RECURSIVE)?;
        held[n_held] = Some((tree, target));
        n_held += 1;
      }
      MountKind::ReadOnlyRest => {
        all_read_only()?;
        for (tree, target) in held.iter_mut().take(n_held).filter_map(Option::take) {
          move_onto(&tree, &target)?;
        }
      }
      MountKind::Private => {
        // SAFETY: a NUL-terminated target; no source, type or data.
        ok(
          unsafe {
            libc::mount(
              std::ptr::null(),
              op.target.as_ptr(),
              std::ptr::null(),
              libc::MS_REC | libc::MS_PRIVATE,
              std::ptr::null(),
            )
          }
          .into(),
        )?;
      }
      MountKind::SelfBind | MountKind::SelfBindReadOnly => {
        let target = open_target(op)?;
        let tree = clone_tree(target.0, c"")?;
        if op.kind == MountKind::SelfBindReadOnly {
          // Only adds flags: whatever the mount had (noexec, atime, locked flags in a user
          // namespace) stays.
          set_attr(&tree, read_only)?;
        }
        move_onto(&tree, &target)?;
      }
      MountKind::NullOver => {
        let target = open_target(op)?;
        let tree = clone_tree(libc::AT_FDCWD, c"/dev/null")?;
        set_attr(&tree, read_only)?;
        move_onto(&tree, &target)?;
      }
      MountKind::EmptyOver => {
        let target = open_target(op)?;
        move_onto(&empty_tmpfs()?, &target)?;
      }
    }
  }
  // The working directory was entered before the mounts, on the old mounts: enter it again
  // through the namespace as it now is (under the writable root's bind, past `protect`).
  if ops.len() > 1 {
    reenter_cwd()?;
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;

  /// A directory, a file, a symlink and a FIFO in `dir`, with their types.
  fn kinds(dir: &Path) -> [(&'static str, std::fs::FileType); 4] {
    std::fs::create_dir(dir.join("d")).unwrap();
    std::fs::write(dir.join("f"), b"x").unwrap();
    std::os::unix::fs::symlink("f", dir.join("l")).unwrap();
    nix::unistd::mkfifo(&dir.join("p"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    ["d", "f", "l", "p"].map(|n| {
      (
        n,
        std::fs::symlink_metadata(dir.join(n)).unwrap().file_type(),
      )
    })
  }

  #[test]
  fn each_kind_of_path_gets_its_step() {
    use MountKind::*;
    let dir = tempfile::tempdir().unwrap();
    // (name, writable root?, .git step, protect step, deny-read step)
    let table = [
      (
        "d",
        true,
        Some(SelfBind),
        Some(SelfBindReadOnly),
        Some(EmptyOver),
      ),
      (
        "f",
        true,
        Some(SelfBindReadOnly),
        Some(SelfBindReadOnly),
        Some(NullOver),
      ),
      ("l", false, None, None, None),
      ("p", false, None, Some(SelfBindReadOnly), Some(NullOver)),
    ];
    for ((name, t), (row, root, git, protect, deny)) in kinds(dir.path()).into_iter().zip(table) {
      assert_eq!(name, row);
      assert_eq!(writable_root(t), root, "{name}: writable root");
      assert_eq!(git_kind(t), git, "{name}: .git");
      assert_eq!(protect_kind(t), protect, "{name}: protect");
      assert_eq!(deny_kind(t), deny, "{name}: denyRead");
    }
  }

  fn kinds_of(ops: &[MountOp]) -> Vec<MountKind> {
    ops.iter().map(|op| op.kind).collect()
  }

  #[test]
  fn the_plan_orders_its_steps_and_refuses_what_it_cannot_mount() {
    use MountKind::*;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::create_dir(root.join("secret")).unwrap();
    std::fs::write(root.join("key"), b"k").unwrap();
    let w = [root.clone()];
    let ops = plan(&w, &[], &[root.join(".git/hooks")], &[root.join("key")]).unwrap();
    assert_eq!(
      kinds_of(&ops),
      [
        Private,
        Writable,
        ReadOnlyRest,
        SelfBind,
        SelfBindReadOnly,
        NullOver
      ]
    );
    // `/` writable: nothing is made read-only.
    let ops = plan(&[PathBuf::from("/")], &[], &[], &[root.join("secret")]).unwrap();
    assert_eq!(kinds_of(&ops), [Private, EmptyOver]);
    // A protect path that is a symlink is refused, not followed.
    std::os::unix::fs::symlink("key", root.join("link")).unwrap();
    let e = plan(&w, &[], &[root.join("link")], &[]).unwrap_err();
    assert!(matches!(e, MountPlanError::ProtectSymlink(p) if p == root.join("link")));
    // More writable roots than the child can hold.
    let many = vec![root.clone(); MAX_WRITABLE + 1];
    let e = plan(&many, &[], &[], &[]).unwrap_err();
    assert!(matches!(e, MountPlanError::TooManyWritable(n) if n == MAX_WRITABLE + 1));
  }
}
