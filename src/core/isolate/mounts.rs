//! The mount namespace's plan, as C strings made before the fork: read-only binds over `protect`,
//! `.git` made a mount point (a rename of `.git` then fails with EBUSY, so read-only binds on
//! `.git/hooks` cannot be defeated by moving `.git` away and recreating it), and empty read-only
//! mounts over `denyRead`.
//!
//! Targets are canonical paths checked here; a concurrent swap between this check and the mount
//! is a remaining window (the fd-based `open_tree`/`move_mount` API would close it).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum MountPlanError {
  #[error("protect path {0} is a symlink; refusing to protect its target instead of it")]
  ProtectSymlink(PathBuf),
}

/// One `mount(2)` call.
#[derive(Debug)]
pub struct MountOp {
  pub source: Option<CString>,
  pub target: CString,
  pub fstype: Option<CString>,
  pub flags: libc::c_ulong,
  pub data: Option<CString>,
}

fn c(p: &Path) -> CString {
  CString::new(p.as_os_str().as_bytes()).expect("paths from the filesystem have no NUL")
}

fn bind_ro(out: &mut Vec<MountOp>, source: &Path, target: &Path) {
  out.push(MountOp {
    source: Some(c(source)),
    target: c(target),
    fstype: None,
    flags: libc::MS_BIND,
    data: None,
  });
  // A bind ignores MS_RDONLY; a second, remounting call applies it.
  out.push(MountOp {
    source: None,
    target: c(target),
    fstype: None,
    flags: libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
    data: None,
  });
}

/// The calls, in order. `protect` entries are absolute (already joined with each writable root).
pub fn plan(
  writable: &[PathBuf],
  protect: &[PathBuf],
  deny_read: &[PathBuf],
) -> Result<Vec<MountOp>, MountPlanError> {
  let mut out = vec![MountOp {
    source: None,
    target: c(Path::new("/")),
    fstype: None,
    flags: libc::MS_REC | libc::MS_PRIVATE,
    data: None,
  }];
  // `.git` first: a later non-recursive bind of it would hide the protect binds inside it.
  for w in writable {
    let git = w.join(".git");
    match std::fs::symlink_metadata(&git) {
      Ok(m) if m.is_dir() => out.push(MountOp {
        source: Some(c(&git)),
        target: c(&git),
        fstype: None,
        flags: libc::MS_BIND,
        data: None,
      }),
      // A `.git` file (`gitdir: ...`) decides where git looks: keep it from being rewritten.
      Ok(m) if m.is_file() => bind_ro(&mut out, &git, &git),
      _ => {}
    }
  }
  for p in protect {
    match std::fs::symlink_metadata(p) {
      Ok(m) if m.file_type().is_symlink() => return Err(MountPlanError::ProtectSymlink(p.clone())),
      Ok(_) => bind_ro(&mut out, p, p),
      Err(_) => {}
    }
  }
  for d in deny_read {
    let Ok(real) = d.canonicalize() else { continue };
    match std::fs::metadata(&real) {
      Ok(m) if m.is_dir() => out.push(MountOp {
        source: Some(CString::from(c"tmpfs")),
        target: c(&real),
        fstype: Some(CString::from(c"tmpfs")),
        flags: libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        data: Some(CString::from(c"size=0,mode=000")),
      }),
      Ok(_) => bind_ro(&mut out, Path::new("/dev/null"), &real),
      Err(_) => {}
    }
  }
  Ok(out)
}

/// Runs the calls. Async-signal-safe: only `mount(2)` on prepared strings.
pub fn apply(ops: &[MountOp]) -> Result<(), nix::errno::Errno> {
  let ptr = |o: &Option<CString>| o.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
  for op in ops {
    // SAFETY: every pointer is null or a NUL-terminated string owned by `ops`, alive for the call.
    let r = unsafe {
      libc::mount(
        ptr(&op.source),
        op.target.as_ptr(),
        ptr(&op.fstype),
        op.flags,
        ptr(&op.data).cast(),
      )
    };
    if r != 0 {
      return Err(nix::errno::Errno::last());
    }
  }
  Ok(())
}
