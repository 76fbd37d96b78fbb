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
use std::sync::{Arc, Mutex};

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
  /// The writable roots as the fds that passed the addon's check, one per `writable` (or
  /// empty: the paths are opened here, with no symlink on the way, as the fallback).
  pub writable_fds: &'a [Arc<OwnedFd>],
  pub deny_network: bool,
  pub deny_unix: bool,
  /// The ABI the ruleset may use (the plan's `landlock_abi`): rights and scopes of later ABIs
  /// are left out, as on a kernel of that ABI.
  pub abi: i32,
}

/// The only device files a job may open (`/dev` is cut out of every read root above it):
/// what shells and common tools use. `/dev/stdin`, `/dev/fd/N` and the like are symlinks into
/// `/proc/self/fd` and reach the job's own files.
const DEVICES: [&str; 6] = [
  "/dev/null",
  "/dev/zero",
  "/dev/full",
  "/dev/random",
  "/dev/urandom",
  "/dev/tty",
];

fn read_access() -> BitFlags<AccessFs> {
  AccessFs::from_read(ABI_TARGET)
}

/// Everything a writable root allows, minus making device nodes.
fn write_access() -> BitFlags<AccessFs> {
  AccessFs::from_all(ABI_TARGET) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// Builds the ruleset and returns its fd. Paths that do not exist are skipped (a missing
/// writable root grants nothing; a missing denied path stays unreadable once created).
///
/// A ruleset that carves `denyRead` out of big directories costs one rule per sibling (hundreds,
/// milliseconds). The job's reaper runs job after job with the same options, so such a ruleset is
/// kept and handed out again while nothing it was built from has changed: the same denied paths
/// resolving the same way, every listed directory with the same inode, mtime and ctime (an entry
/// added, removed or renamed changes both), and every other granted path the same inode. What
/// could still differ fails closed: a rule follows its inode, so a moved entry keeps its grant
/// exactly as it would have between a fresh build and the exec.
pub fn build(rules: &FsRules) -> Result<Arc<OwnedFd>, LandlockError> {
  let trees: Vec<DenyTree> = rules
    .read_roots
    .iter()
    .map(|root| {
      // `/dev` is cut out of any read root above it: only the devices of `DEVICES` are granted.
      // Read through `/`'s grant, root opened the host's terminals (`/dev/tty1` gave the job an
      // operator's typed line, `/dev/vcs1` the console's screen) and raw disks (`/dev/loop0`
      // gave a file of a `denyRead` directory). A read root at or below `/dev` is the caller's
      // explicit wish and stays.
      let dev = Path::new("/dev");
      if dev.starts_with(root) && root.as_path() != dev {
        let mut deny = rules.deny_read.to_vec();
        deny.push(dev.to_path_buf());
        deny_tree(root, &deny)
      } else {
        deny_tree(root, rules.deny_read)
      }
    })
    .collect();
  let key = CacheKey {
    read_roots: rules.read_roots.to_vec(),
    writable: rules.writable.to_vec(),
    writable_objects: rules
      .writable_fds
      .iter()
      .map(|f| {
        nix::sys::stat::fstat(f.as_ref())
          .ok()
          .map(|st| (st.st_dev, st.st_ino))
      })
      .collect(),
    deny_network: rules.deny_network,
    deny_unix: rules.deny_unix,
    abi: rules.abi,
    trees: trees.clone(),
  };
  let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
  if let Some(i) = cache.iter().position(|e| e.key == key) {
    if cache[i].stamps.iter().all(Stamp::still_holds) {
      return Ok(cache[i].fd.clone());
    }
    cache.remove(i);
  }
  let mut stamps = Vec::new();
  let fd = Arc::new(build_now(rules, &trees, &mut stamps)?);
  // Only a carve is worth keeping: without one, checking costs what building does.
  if stamps.iter().any(|s| matches!(s, Stamp::Listed { .. })) {
    if cache.len() >= CACHE_ENTRIES {
      cache.remove(0);
    }
    cache.push(CacheEntry {
      key,
      stamps,
      fd: fd.clone(),
    });
  }
  Ok(fd)
}

const CACHE_ENTRIES: usize = 4;
static CACHE: Mutex<Vec<CacheEntry>> = Mutex::new(Vec::new());

#[derive(PartialEq)]
struct CacheKey {
  read_roots: Vec<PathBuf>,
  writable: Vec<PathBuf>,
  /// The objects the writable grants are on, when they come from checked fds (a rule follows
  /// its inode: the same objects, the same rules).
  writable_objects: Vec<Option<(u64, u64)>>,
  deny_network: bool,
  deny_unix: bool,
  abi: i32,
  /// The denied paths as they resolve now (existence, symlinks, our own permissions).
  trees: Vec<DenyTree>,
}

struct CacheEntry {
  key: CacheKey,
  stamps: Vec<Stamp>,
  fd: Arc<OwnedFd>,
}

/// What a kept ruleset was built from.
enum Stamp {
  /// A directory whose entries were listed to carve it.
  Listed {
    path: PathBuf,
    ino: (u64, u64),
    mtime: (i64, i64),
    ctime: (i64, i64),
  },
  /// Any other granted path: the inode its rule is on (`None`: it did not exist).
  Granted {
    path: PathBuf,
    ino: Option<(u64, u64)>,
  },
}

fn identity(m: &std::fs::Metadata) -> (u64, u64) {
  use std::os::unix::fs::MetadataExt;
  (m.dev(), m.ino())
}

impl Stamp {
  fn listed(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some(Stamp::Listed {
      path: path.to_owned(),
      ino: identity(&m),
      mtime: (m.mtime(), m.mtime_nsec()),
      ctime: (m.ctime(), m.ctime_nsec()),
    })
  }

  fn still_holds(&self) -> bool {
    use std::os::unix::fs::MetadataExt;
    match self {
      Stamp::Listed {
        path,
        ino,
        mtime,
        ctime,
      } => std::fs::symlink_metadata(path).is_ok_and(|m| {
        identity(&m) == *ino
          && (m.mtime(), m.mtime_nsec()) == *mtime
          && (m.ctime(), m.ctime_nsec()) == *ctime
      }),
      Stamp::Granted { path, ino } => {
        std::fs::symlink_metadata(path).ok().map(|m| identity(&m)) == *ino
      }
    }
  }
}

/// Puts the calling process, and every process it starts, in a landlock domain of its own
/// that only scopes signals (no access right handled): its processes may signal and trace
/// one another and their descendants, nothing outside. `Ok(false)` where the kernel has no
/// signal scope (ABI < 6). Does not set `no_new_privs`: without CAP_SYS_ADMIN the caller must
/// have set it.
pub fn scope_signals() -> Result<bool, LandlockError> {
  let status = Ruleset::default()
    .scope(Scope::Signal)?
    .create()?
    .no_new_privs(false)
    .restrict_self()?;
  Ok(status.ruleset != landlock::RulesetStatus::NotEnforced)
}

/// Puts the calling process, and every process it starts, in a landlock domain of its own
/// that handles only making block devices and REFER, REFER granted beneath `/`: nothing a job
/// without isolation does changes (renames and links across directories included), but the
/// domain keeps ptrace access in, which every kernel with landlock checks: its processes can
/// neither trace, nor read the memory, `/proc/<pid>/fd`, `environ` or `mem` of, nor take fds
/// from (`pidfd_getfd`) a process outside it. For kernels without the signal scope. `Ok(false)`
/// where the kernel lacks REFER (ABI 1: any domain there refuses renames across directories).
pub fn fence_tracing() -> Result<bool, LandlockError> {
  use landlock::{CompatLevel, Compatible, PathFd, RulesetStatus};
  let created = Ruleset::default()
    .set_compatibility(CompatLevel::HardRequirement)
    .handle_access(AccessFs::MakeBlock | AccessFs::Refer);
  let Ok(created) = created.and_then(|r| r.create()) else {
    return Ok(false);
  };
  let root = PathFd::new("/").map_err(|e| LandlockError::List {
    path: "/".into(),
    source: std::io::Error::other(e.to_string()),
  })?;
  let status = created
    .add_rule(PathBeneath::new(root, AccessFs::Refer))?
    .no_new_privs(false)
    .restrict_self()?;
  Ok(status.ruleset == RulesetStatus::FullyEnforced)
}

fn build_now(
  rules: &FsRules,
  trees: &[DenyTree],
  stamps: &mut Vec<Stamp>,
) -> Result<OwnedFd, LandlockError> {
  let abi = ABI::from(rules.abi);
  let handled = AccessFs::from_all(abi);
  let mut ruleset = Ruleset::default().handle_access(handled)?;
  if rules.deny_network && rules.abi >= 4 {
    ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
  }
  // Signals to processes outside the sandbox (Node, the supervisor) are always refused;
  // abstract Unix sockets only when Unix sockets are denied.
  if rules.abi >= 6 {
    let scopes = if rules.deny_unix {
      Scope::from_all(abi)
    } else {
      Scope::Signal.into()
    };
    ruleset = ruleset.scope(scopes)?;
  }
  let mut created = ruleset.create()?;

  let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
  // Grants inside a listed directory are covered by its stamp.
  let mut listed: Vec<PathBuf> = Vec::new();
  for (root, tree) in rules.read_roots.iter().zip(trees) {
    if !tree.leaf {
      carve_dir(root, tree, &mut grants, &mut listed)?;
    }
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
  let from_fds = !rules.writable_fds.is_empty() && rules.writable_fds.len() == rules.writable.len();
  if from_fds {
    // On the objects that passed the check, whatever their paths name now.
    for fd in rules.writable_fds {
      created = created.add_rule(PathBeneath::new(
        fd.as_ref(),
        (write_access() | AccessFs::ResolveUnix) & handled,
      ))?;
    }
  } else {
    for w in rules.writable {
      grants.push((w.clone(), write_access() | AccessFs::ResolveUnix));
    }
  }
  // Devices every shell uses; IoctlDev so a controlling terminal keeps working. Not `/dev/pts`
  // (nor `/dev/ptmx`, useless without it): a pty there belongs to the host, such as the
  // operator's terminal, which the same uid could write to (inject output) and read from (steal
  // keystrokes). The command has no controlling terminal (a new session, stdin `/dev/null`).
  for dev in DEVICES {
    grants.push((
      dev.into(),
      read_access() | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    ));
  }
  stamps.extend(listed.iter().filter_map(|d| Stamp::listed(d)));
  for (path, access) in grants {
    let in_listed = path.parent().is_some_and(|p| listed.iter().any(|d| d == p));
    // Every path here is canonical (or a child of one, symlinks skipped): opened with no
    // symlink allowed on the way, so a path swapped for a symlink since it was checked grants
    // nothing rather than its target. A path that vanished grants nothing either: fail closed.
    let fd = open_no_symlinks(&path).ok();
    if !in_listed && !listed.contains(&path) {
      stamps.push(Stamp::Granted {
        path: path.clone(),
        ino: fd
          .as_ref()
          .and_then(|f| nix::sys::stat::fstat(f).ok())
          .map(|st| (st.st_dev, st.st_ino)),
      });
    }
    let Some(fd) = fd else { continue };
    // A right the ABI in use lacks is not handled, so not granted either.
    let access = access & handled;
    if access.is_empty() {
      continue;
    }
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
#[derive(Default, Clone, PartialEq)]
struct DenyTree {
  leaf: bool,
  children: BTreeMap<OsString, DenyTree>,
}

/// The paths of `deny` below `root`, as a tree (a leaf at the root: all of it is denied).
fn deny_tree(root: &Path, deny: &[PathBuf]) -> DenyTree {
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
  tree
}

/// Adds read grants for `root` with every path of `deny` below it cut out.
#[cfg(test)]
fn carve(
  root: &Path,
  deny: &[PathBuf],
  out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) -> Result<(), LandlockError> {
  let tree = deny_tree(root, deny);
  if tree.leaf {
    return Ok(()); // The whole root is denied.
  }
  carve_dir(root, &tree, out, &mut Vec::new())
}

/// Grants for `dir` with the denied paths of `tree` cut out; `listed` gets every directory whose
/// entries were listed for that.
fn carve_dir(
  dir: &Path,
  tree: &DenyTree,
  out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
  listed: &mut Vec<PathBuf>,
) -> Result<(), LandlockError> {
  if tree.children.is_empty() {
    out.push((dir.to_owned(), read_access()));
    return Ok(());
  }
  out.push((dir.to_owned(), AccessFs::ReadDir.into()));
  listed.push(dir.to_owned());
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
      Some(sub) if e.file_type().is_ok_and(|t| t.is_dir()) => {
        carve_dir(&e.path(), sub, out, listed)?
      }
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
  fn a_carved_ruleset_is_kept_until_what_it_was_built_from_changes() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().canonicalize().unwrap();
    for d in ["home/.ssh", "home/src", "w"] {
      std::fs::create_dir_all(r.join(d)).unwrap();
    }
    let (roots, deny, writable) = (
      vec![r.clone()],
      vec![r.join("home/.ssh")],
      vec![r.join("w")],
    );
    let rules = FsRules {
      read_roots: &roots,
      deny_read: &deny,
      writable: &writable,
      writable_fds: &[],
      deny_network: true,
      deny_unix: true,
      abi: 7,
    };
    let first = build(&rules).unwrap();
    assert!(Arc::ptr_eq(&first, &build(&rules).unwrap()), "kept");
    // An entry added to a listed directory: built again (the new entry gets its grant).
    std::fs::write(r.join("home/new"), "").unwrap();
    let second = build(&rules).unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
    assert!(Arc::ptr_eq(&second, &build(&rules).unwrap()));
    // The writable root replaced by another directory of the same name.
    std::fs::rename(r.join("w"), r.join("w-old")).unwrap();
    std::fs::create_dir(r.join("w")).unwrap();
    let third = build(&rules).unwrap();
    assert!(!Arc::ptr_eq(&second, &third));
    // A denied path that did not exist, created: it resolves differently (and HOME changed).
    let deny2 = vec![r.join("home/.ssh"), r.join("home/src/.aws")];
    let rules2 = FsRules {
      deny_read: &deny2,
      ..rules
    };
    let fourth = build(&rules2).unwrap();
    assert!(Arc::ptr_eq(&fourth, &build(&rules2).unwrap()));
    std::fs::create_dir(r.join("home/src/.aws")).unwrap();
    assert!(!Arc::ptr_eq(&fourth, &build(&rules2).unwrap()));
  }

  #[test]
  fn resolve_keeps_the_missing_tail() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(&r, r.join("link")).unwrap();
    assert_eq!(resolve_existing_prefix(&r.join("link/a/b")), r.join("a/b"));
  }
}
