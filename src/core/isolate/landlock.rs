//! The landlock ruleset, built before the fork from `O_PATH` fds of the checked paths (a path
//! re-resolved later is a symlink-swap window), and handed to the child as one fd for
//! `landlock_restrict_self`.
//!
//! Landlock only allows, it cannot carve a hole: "read everything but `~/.ssh`" becomes read rules
//! on every sibling along the way down to each denied path, plus `ReadDir` alone on the ancestors
//! (so `ls /etc` still works; the names in a denied directory stay listable, their contents do
//! not). Entries created in such an ancestor after `prepare` are unreadable: that fails closed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
  ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr,
  RulesetCreatedAttr, Scope,
};

/// The newest ABI this crate knows; best-effort compatibility drops what the kernel lacks.
const ABI_TARGET: ABI = ABI::V10;

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
  #[error("build the landlock ruleset: {0}")]
  Ruleset(#[from] landlock::RulesetError),
  #[error("list {path} to carve out denied reads: {source}")]
  List {
    path: PathBuf,
    source: std::io::Error,
  },
  #[error("landlock returned no ruleset fd (not supported by this kernel)")]
  NoFd,
}

/// What the ruleset says, in paths; see `Plan`.
pub struct FsRules<'a> {
  pub read_roots: &'a [PathBuf],
  pub deny_read: &'a [PathBuf],
  pub writable: &'a [PathBuf],
  pub deny_network: bool,
  pub deny_unix: bool,
}

fn read_access() -> BitFlags<AccessFs> {
  AccessFs::from_read(ABI_TARGET)
}

/// Everything a writable root allows, minus making device nodes.
fn write_access() -> BitFlags<AccessFs> {
  AccessFs::from_all(ABI_TARGET) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// Builds the ruleset and returns its fd. Paths that do not exist are skipped (a missing
/// writable root grants nothing; a missing denied path stays unreadable once created).
pub fn build(rules: &FsRules) -> Result<OwnedFd, LandlockError> {
  let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(ABI_TARGET))?;
  if rules.deny_network {
    ruleset = ruleset.handle_access(AccessNet::from_all(ABI_TARGET))?;
  }
  // Signals to processes outside the sandbox (Node, the supervisor) are always refused;
  // abstract Unix sockets only when Unix sockets are denied.
  let scopes = if rules.deny_unix {
    Scope::from_all(ABI_TARGET)
  } else {
    Scope::Signal.into()
  };
  let mut created = ruleset.scope(scopes)?.create()?;

  let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
  for root in rules.read_roots {
    carve(root, rules.deny_read, &mut grants)?;
  }
  let unix = if rules.deny_unix {
    BitFlags::empty()
  } else {
    AccessFs::ResolveUnix.into()
  };
  if !rules.deny_unix {
    for root in rules.read_roots {
      grants.push((root.clone(), unix));
    }
  }
  for w in rules.writable {
    grants.push((w.clone(), write_access() | AccessFs::ResolveUnix));
  }
  // Devices every shell uses; IoctlDev so terminals keep working.
  for dev in [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/pts",
    "/dev/ptmx",
  ] {
    grants.push((
      dev.into(),
      read_access() | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    ));
  }
  for (path, access) in grants {
    // Every path here is canonical (or a child of one, symlinks skipped): opened with no
    // symlink allowed on the way, so a path swapped for a symlink since it was checked grants
    // nothing rather than its target. A path that vanished grants nothing either: fail closed.
    let Ok(fd) = open_no_symlinks(&path) else {
      continue;
    };
    created = created.add_rule(PathBeneath::new(fd, access))?;
  }
  let fd: Option<OwnedFd> = created.into();
  fd.ok_or(LandlockError::NoFd)
}

fn open_no_symlinks(path: &Path) -> Result<OwnedFd, nix::errno::Errno> {
  use std::os::fd::FromRawFd;
  use std::os::unix::ffi::OsStrExt;
  let c =
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| nix::errno::Errno::EINVAL)?;
  let fd = super::mounts::open_no_symlinks(&c)?;
  // SAFETY: a fresh fd that nothing else owns.
  let fd = unsafe { OwnedFd::from_raw_fd(fd) };
  // O_NOFOLLOW opened a final symlink itself: it is not the object that was checked.
  match nix::sys::stat::fstat(&fd) {
    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => Err(nix::errno::Errno::ELOOP),
    Ok(_) => Ok(fd),
    Err(e) => Err(e),
  }
}

/// Denied paths as a tree of components below `root`.
#[derive(Default)]
struct DenyTree {
  leaf: bool,
  children: BTreeMap<OsString, DenyTree>,
}

/// Adds read grants for `root` with every path of `deny` below it cut out.
fn carve(
  root: &Path,
  deny: &[PathBuf],
  out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) -> Result<(), LandlockError> {
  let mut tree = DenyTree::default();
  for d in deny.iter().filter(|d| !dac_already_denies(d)) {
    let d = resolve_existing_prefix(d);
    let Ok(rel) = d.strip_prefix(root) else {
      continue;
    };
    let mut node = &mut tree;
    for c in rel.components() {
      node = node.children.entry(c.as_os_str().to_owned()).or_default();
    }
    node.leaf = true;
  }
  if tree.leaf {
    return Ok(()); // The whole root is denied.
  }
  carve_dir(root, &tree, out)
}

fn carve_dir(
  dir: &Path,
  tree: &DenyTree,
  out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) -> Result<(), LandlockError> {
  if tree.children.is_empty() {
    out.push((dir.to_owned(), read_access()));
    return Ok(());
  }
  out.push((dir.to_owned(), AccessFs::ReadDir.into()));
  let entries = std::fs::read_dir(dir).map_err(|source| LandlockError::List {
    path: dir.to_owned(),
    source,
  })?;
  for e in entries {
    let e = e.map_err(|source| LandlockError::List {
      path: dir.to_owned(),
      source,
    })?;
    let name = e.file_name();
    match tree.children.get(&name) {
      Some(sub) if sub.leaf => {}
      // Only a real directory is descended; a symlink named like an ancestor is just not granted.
      Some(sub) if e.file_type().is_ok_and(|t| t.is_dir()) => carve_dir(&e.path(), sub, out)?,
      Some(_) => {}
      // A symlink sibling is not granted: a grant would open it, follow it and allow its
      // target, which may be the denied path itself (`~/link -> ~/.ssh`). Its target stays
      // readable where a rule of its own allows it.
      None if e.file_type().is_ok_and(|t| t.is_symlink()) => {}
      None => out.push((e.path(), read_access())),
    }
  }
  Ok(())
}

/// True when the caller's own permissions already keep it out of `p` (e.g. `/etc/shadow` for a
/// non-root user): carving it would add a rule for every sibling (~170 in /etc) and, measured,
/// ~4 ms per exec for nothing. A file needs read permission, a directory search permission.
/// A missing path counts as denied when the caller cannot create it either (its nearest
/// existing ancestor is not writable to us): only a more privileged user could make it, later.
/// Without capabilities and with no_new_privs, the command cannot gain what we lack.
fn dac_already_denies(p: &Path) -> bool {
  use nix::unistd::{AccessFlags, access};
  let eacces = |p: &Path, f| access(p, f) == Err(nix::errno::Errno::EACCES);
  match std::fs::metadata(p) {
    Ok(meta) => eacces(
      p,
      if meta.is_dir() {
        AccessFlags::X_OK
      } else {
        AccessFlags::R_OK
      },
    ),
    Err(_) => p
      .ancestors()
      .skip(1)
      .find(|a| a.exists())
      .is_some_and(|a| eacces(a, AccessFlags::W_OK)),
  }
}

/// `canonicalize` of the longest existing prefix, with the missing rest appended, so that a
/// denied path reached through a symlinked directory is carved where it really is.
fn resolve_existing_prefix(p: &Path) -> PathBuf {
  let mut missing = Vec::new();
  let mut cur = p.to_path_buf();
  loop {
    if let Ok(c) = cur.canonicalize() {
      let mut c = c;
      for m in missing.iter().rev() {
        c.push(m);
      }
      return c;
    }
    match (cur.file_name().map(|n| n.to_owned()), cur.parent()) {
      (Some(n), Some(parent)) => {
        missing.push(n);
        cur = parent.to_path_buf();
      }
      _ => return p.to_path_buf(),
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn carve_cuts_out_denied_paths_and_keeps_siblings() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().canonicalize().unwrap();
    std::fs::create_dir_all(r.join("home/.ssh")).unwrap();
    std::fs::create_dir_all(r.join("home/src")).unwrap();
    std::fs::write(r.join("etc-shadow"), "").unwrap();
    std::fs::write(r.join("etc-passwd"), "").unwrap();
    let mut out = Vec::new();
    carve(
      &r,
      &[
        r.join("home/.ssh"),
        r.join("etc-shadow"),
        r.join("home/missing"),
      ],
      &mut out,
    )
    .unwrap();
    let got: BTreeMap<_, _> = out.into_iter().collect();
    assert_eq!(got[&r], BitFlags::from(AccessFs::ReadDir));
    assert_eq!(got[&r.join("home")], BitFlags::from(AccessFs::ReadDir));
    assert_eq!(got[&r.join("home/src")], read_access());
    assert_eq!(got[&r.join("etc-passwd")], read_access());
    assert!(!got.contains_key(&r.join("home/.ssh")));
    assert!(!got.contains_key(&r.join("etc-shadow")));
  }

  #[test]
  fn resolve_keeps_the_missing_tail() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(&r, r.join("link")).unwrap();
    assert_eq!(resolve_existing_prefix(&r.join("link/a/b")), r.join("a/b"));
  }
}
