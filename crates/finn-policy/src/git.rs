//! What git could be made to do by a repository the agent wrote into the jail.
//!
//! Three layers. The repository is refused unless its layout stays inside the jail (gitdir,
//! commondir, no alternates, no symlink or hard-linked file in the git directory, no submodule
//! or nested repository, no hard-linked file in the work tree) and every config key git reads
//! is on an allowlist (`git_config`). The job then runs with the git directory, common
//! directory, object directory and work tree pinned in its environment, so nothing git reads
//! later can move them. And the environment's `GIT_CONFIG_COUNT` overrides switch off what a
//! key could still start (`env.rs`).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::error::Denial;
use super::git_config;
use super::host_git::{self, Watch};

/// Where git will find the repository, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
  pub git_dir: PathBuf,
  pub common_dir: PathBuf,
  /// `None` for a bare repository at the jail root.
  pub work_tree: Option<PathBuf>,
}

impl Repository {
  /// The environment that pins git to this repository (beats `core.worktree`, `commondir`,
  /// alternates and discovery).
  pub fn env(&self) -> Vec<(String, String)> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut env = vec![
      ("GIT_DIR".to_owned(), s(&self.git_dir)),
      ("GIT_COMMON_DIR".to_owned(), s(&self.common_dir)),
      (
        "GIT_OBJECT_DIRECTORY".to_owned(),
        s(&self.common_dir.join("objects")),
      ),
    ];
    match &self.work_tree {
      Some(work_tree) => env.push(("GIT_WORK_TREE".to_owned(), s(work_tree))),
      // Bare, as checked: no work tree. With `core.bare = false` git would otherwise take its
      // cwd (the jail) for one, whose files and index were never checked.
      None => env.push(("GIT_IMPLICIT_WORK_TREE".to_owned(), "0".to_owned())),
    }
    env
  }
}

/// Entries walked before a tree counts as too large to check (and the command is refused):
/// it bounds what one command may cost. A work tree of this size takes ~0.1 s to walk.
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// A `.git` file or a `commondir`: one path, at most PATH_MAX, and its prefix and line end.
pub const MAX_POINTER_FILE_BYTES: u64 = 4096;

/// `config.worktree` files in the git directories: each is listed by a git of its own (~3 ms),
/// and a repository has one per worktree.
pub const MAX_WORKTREE_CONFIGS: usize = 64;

/// The index file, sized before git reads it. One within the entry bound, with paths of ordinary
/// length, takes a few tens of MiB.
pub const MAX_INDEX_BYTES: u64 = 64 * 1024 * 1024;

/// The index's paths as `git ls-files` lists them, in total. A version-4 index stores a path
/// that shares a prefix with the one before in a few bytes, so the file's size does not bound
/// this.
pub const MAX_INDEX_LISTING_BYTES: usize = 64 * 1024 * 1024;

/// One index entry: a longer path cannot name a file (PATH_MAX).
pub const MAX_INDEX_PATH_BYTES: usize = 4096;

/// Inserted right after the subcommand of `diff`, `log` and `show`; the allowlist has no option
/// that would switch them back on.
pub fn harden_args(args: &[String]) -> Vec<String> {
  match args.first().map(String::as_str) {
    Some("diff" | "log" | "show") => {
      let mut out = vec![
        args[0].clone(),
        "--no-ext-diff".into(),
        "--no-textconv".into(),
      ];
      out.extend_from_slice(&args[1..]);
      out
    }
    // What they read through a textconv driver stays raw (no driver passes the config check;
    // this keeps it so whatever the attributes name).
    Some("blame" | "grep") => {
      let mut out = vec![args[0].clone(), "--no-textconv".into()];
      out.extend_from_slice(&args[1..]);
      out
    }
    _ => args.to_vec(),
  }
}

/// Appends pathspecs that exclude `hidden` (directories inside the work tree, e.g. the host's
/// audit log) from `diff`, `status`, `add`, `grep` and `ls-files`, the subcommands that read or
/// list work tree files.
pub fn exclude_paths(args: Vec<String>, work_tree: &Path, hidden: &[PathBuf]) -> Vec<String> {
  let rels: Vec<String> = hidden
    .iter()
    .filter_map(|h| h.strip_prefix(work_tree).ok())
    .filter(|r| !r.as_os_str().is_empty())
    .map(|r| format!(":(top,exclude,literal){}", r.to_string_lossy()))
    .collect();
  if rels.is_empty()
    || !matches!(
      args.first().map(String::as_str),
      Some("diff" | "status" | "add" | "grep" | "ls-files")
    )
  {
    return args;
  }
  let mut out = args;
  if !out.iter().any(|a| a == "--") {
    out.push("--".into());
  }
  out.extend(rels);
  out
}

fn refuse(what: impl Into<String>) -> Denial {
  let what = what.into();
  Denial::audited(
    format!("Repository config rejected: {what}"),
    format!("repository_rejected: {what}"),
  )
}

/// A path below the jail as refusals name it (relative to the jail).
fn shown_path(jail_root: &Path, path: &Path) -> String {
  path
    .strip_prefix(jail_root)
    .unwrap_or(path)
    .display()
    .to_string()
}

/// A small file naming a path (`.git`, `commondir`), read bounded, as text.
fn read_pointer(path: &Path, shown: &str) -> Result<Option<String>, Denial> {
  match host_git::read_bounded(path, shown, MAX_POINTER_FILE_BYTES)? {
    None => Ok(None),
    Some(bytes) => String::from_utf8(bytes)
      .map(Some)
      .map_err(|_| refuse(format!("{shown} is unreadable (not UTF-8)"))),
  }
}

/// Finds the repository git would use from `jail_root`, refuses any layout that reaches out of
/// the jail or runs code, and reads its config with `git` (the policy's binary), all within
/// `watch`. `Ok(None)`: no repository at all.
///
/// Step by step: where the git directory is, where its common directory is, the git
/// directories' files, the work tree's, the config git reads, the index's entries.
pub fn check_repository(
  jail_root: &Path,
  git: &str,
  watch: &Watch,
) -> Result<Option<Repository>, Denial> {
  watch.check()?;
  let Some(found) = GitDir::find(jail_root)? else {
    return Ok(None);
  };
  let repo = Repository {
    common_dir: common_dir_of(jail_root, &found.path)?,
    git_dir: found.path,
    work_tree: found.work_tree,
  };
  let mut budget = MAX_WALK_ENTRIES;
  let config_files = check_git_dirs(jail_root, &repo, &mut budget, watch)?;
  if let Some(work_tree) = &repo.work_tree {
    check_work_tree(jail_root, work_tree, &mut budget, watch)?;
  }
  check_config(git, jail_root, &repo, &config_files.files, watch)?;
  check_index(git, &repo, jail_root, budget, watch)?;
  Ok(Some(repo))
}

/// The git directory git finds from the jail root, before its `commondir` is read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GitDir {
  /// Canonical, inside the jail.
  path: PathBuf,
  /// The jail root, or `None` for a bare repository at the jail root.
  work_tree: Option<PathBuf>,
}

impl GitDir {
  /// `.git` as a directory, or as a `gitdir:` file followed only inside the jail (a linked
  /// worktree or a submodule); without `.git`, the jail root itself when git would take it for a
  /// bare repository. A `.git` that is a symlink, a special file, or cannot be inspected is
  /// refused, never taken for absent.
  fn find(jail_root: &Path) -> Result<Option<GitDir>, Denial> {
    let dot_git = jail_root.join(".git");
    let in_root = |path| {
      Ok(Some(GitDir {
        path,
        work_tree: Some(jail_root.to_path_buf()),
      }))
    };
    match std::fs::symlink_metadata(&dot_git) {
      Ok(meta) if meta.is_dir() => in_root(canonical_inside(jail_root, &dot_git, ".git")?),
      Ok(meta) if meta.is_file() => {
        let text = read_pointer(&dot_git, ".git")?.ok_or_else(|| refuse(".git is unreadable"))?;
        in_root(canonical_inside(
          jail_root,
          &jail_root.join(gitdir_of(&text)?),
          "gitdir points outside the jail",
        )?)
      }
      Ok(meta) if meta.file_type().is_symlink() => Err(refuse(".git is a symlink")),
      Ok(_) => Err(refuse(
        ".git is neither a directory nor a regular file (a FIFO or device would block the check)",
      )),
      Err(e) if e.kind() == io::ErrorKind::NotFound => {
        // git's own test for a bare repository: HEAD, objects/ and refs/.
        let bare = ["HEAD", "objects", "refs"]
          .iter()
          .all(|p| std::fs::symlink_metadata(jail_root.join(p)).is_ok());
        Ok(bare.then(|| GitDir {
          path: jail_root.to_path_buf(),
          work_tree: None,
        }))
      }
      Err(_) => Err(refuse(".git cannot be inspected")),
    }
  }
}

/// The path a `.git` file names: `gitdir: ` exactly, then the path as git reads it.
fn gitdir_of(text: &str) -> Result<&str, Denial> {
  let target = text
    .strip_prefix("gitdir: ")
    .ok_or_else(|| refuse(".git file without gitdir"))?;
  as_git_reads(target, "the .git file's gitdir")
}

/// The common directory: the one `git_dir/commondir` names, inside the jail, or `git_dir`
/// itself without one.
fn common_dir_of(jail_root: &Path, git_dir: &Path) -> Result<PathBuf, Denial> {
  let commondir = git_dir.join("commondir");
  match read_pointer(&commondir, &shown_path(jail_root, &commondir))? {
    Some(text) => canonical_inside(
      jail_root,
      &git_dir.join(as_git_reads(&text, "commondir")?),
      "commondir points outside the jail",
    ),
    None => Ok(git_dir.to_path_buf()),
  }
}

/// The `config.worktree` files found in the git directories, each with the name a refusal shows.
/// Each is listed by a git of its own: their number bounds the check's time.
#[derive(Debug, Default)]
struct WorktreeConfigs {
  files: Vec<(PathBuf, String)>,
}

impl WorktreeConfigs {
  fn add(&mut self, path: &Path, shown: String) -> Result<(), Denial> {
    if self.files.len() == MAX_WORKTREE_CONFIGS {
      return Err(refuse(format!(
        "more than {MAX_WORKTREE_CONFIGS} config.worktree files in the git directory"
      )));
    }
    self.files.push((path.to_path_buf(), shown));
    Ok(())
  }
}

/// The git directory and the common directory (once, when they are one): no object alternates,
/// no `modules/`, and every file as [`git_dir_entry`] requires. Returns the `config.worktree`
/// files, whose keys git reads too.
fn check_git_dirs(
  jail_root: &Path,
  repo: &Repository,
  budget: &mut usize,
  watch: &Watch,
) -> Result<WorktreeConfigs, Denial> {
  let mut configs = WorktreeConfigs::default();
  // Once each: without a `commondir` both are the same directory, whose files would otherwise be
  // counted, and each config.worktree listed, twice.
  let dirs = if repo.common_dir == repo.git_dir {
    vec![&repo.git_dir]
  } else {
    vec![&repo.git_dir, &repo.common_dir]
  };
  for dir in dirs {
    for alternates in ["objects/info/alternates", "objects/info/http-alternates"] {
      if std::fs::symlink_metadata(dir.join(alternates)).is_ok() {
        return Err(refuse("object alternates"));
      }
    }
    if std::fs::symlink_metadata(dir.join("modules")).is_ok() {
      return Err(refuse("submodules (modules/ in the git directory)"));
    }
    walk(jail_root, dir, budget, watch, &mut |path, seen| {
      let shown = || host_git::excerpt(&shown_path(jail_root, path));
      if git_dir_entry(path, seen, &shown)? == GitDirEntry::WorktreeConfig {
        configs.add(path, shown())?;
      }
      Ok(true)
    })?;
  }
  Ok(configs)
}

/// What an entry of a git directory is to the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitDirEntry {
  Plain,
  /// A `config.worktree`: git reads it, under `extensions.worktreeConfig`.
  WorktreeConfig,
}

/// One entry of a git directory. A symlink could point git outside the jail; a FIFO, socket or
/// device would block the checks' own git (config, HEAD, index), which runs on the host's
/// thread; a hard-linked file (a config) could change after the check through its other name.
fn git_dir_entry(
  path: &Path,
  seen: &Seen,
  shown: &dyn Fn() -> String,
) -> Result<GitDirEntry, Denial> {
  if seen.is_symlink() {
    return Err(refuse(format!("symlink in the git directory: {}", shown())));
  }
  if !seen.is_file() && !seen.is_dir() {
    return Err(refuse(format!(
      "special file in the git directory: {}",
      shown()
    )));
  }
  if seen.is_file() && seen.nlink > 1 {
    return Err(refuse(format!(
      "hard-linked file in the git directory: {}",
      shown()
    )));
  }
  Ok(
    if path.file_name().is_some_and(|n| n == "config.worktree") {
      GitDirEntry::WorktreeConfig
    } else {
      GitDirEntry::Plain
    },
  )
}

/// The work tree: no `.gitmodules`, and every entry as [`work_tree_entry`] requires.
fn check_work_tree(
  jail_root: &Path,
  work_tree: &Path,
  budget: &mut usize,
  watch: &Watch,
) -> Result<(), Denial> {
  if std::fs::symlink_metadata(work_tree.join(".gitmodules")).is_ok() {
    return Err(refuse("submodules (.gitmodules)"));
  }
  let own = work_tree.join(".git");
  walk(jail_root, work_tree, budget, watch, &mut |path, seen| {
    work_tree_entry(path, seen, &own, &|| {
      host_git::excerpt(&shown_path(jail_root, path))
    })
  })
}

/// One entry of the work tree; `Ok(false)`: not descended into. The repository's own `.git`
/// (`own`) is checked as the git directory; any other `.git` is a submodule or a nested
/// repository, whose config git may read (status looks into submodules). A hard-linked file may
/// be a second name for one outside the jail.
fn work_tree_entry(
  path: &Path,
  seen: &Seen,
  own: &Path,
  shown: &dyn Fn() -> String,
) -> Result<bool, Denial> {
  if path.file_name().is_some_and(|n| n == ".git") {
    if path == own {
      return Ok(false);
    }
    return Err(refuse(format!(
      "nested repository or submodule: {}",
      shown()
    )));
  }
  if seen.is_file() && seen.nlink > 1 {
    return Err(refuse(format!(
      "hard-linked file in the work tree: {}",
      shown()
    )));
  }
  Ok(true)
}

/// The config git reads: sized before git reads it (by path; a FIFO swapped in since the walk is
/// left to the deadline), then listed with the job's own pinning, so the config checked is the
/// config the job reads, with the `config.worktree` files.
fn check_config(
  git: &str,
  jail_root: &Path,
  repo: &Repository,
  worktree_configs: &[(PathBuf, String)],
  watch: &Watch,
) -> Result<(), Denial> {
  let config = repo.common_dir.join("config");
  host_git::open_bounded(
    &config,
    &shown_path(jail_root, &config),
    git_config::MAX_CONFIG_FILE_BYTES,
  )?;
  git_config::check(git, &repo.git_dir, &repo.env(), worktree_configs, watch)
}

/// Whether git's own `verify_path` would accept `path` as an index entry: no empty, `.`, `..`
/// or (any case) `.git` component. Sparse directory entries end with one `/`.
fn index_path_ok(path: &[u8]) -> bool {
  let path = path.strip_suffix(b"/").unwrap_or(path);
  !path.is_empty()
    && path
      .split(|b| *b == b'/')
      .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git"))
}

/// Every entry of the index, as git reads it (`git ls-files`), must name a path inside the work
/// tree. git checks the names it adds, not those it reads from an index file: an entry
/// `../outside/file` made `git diff`, `status` and `add` lstat and read that file (its content in
/// the diff), `./audit/audit.log` slipped past the pathspec that excludes the audit directory.
/// The index is sized and opened here and git reads that open file; its entries count against
/// what is left of the walk's `budget`, and its listing is checked as it streams, never held.
fn check_index(
  git: &str,
  repo: &Repository,
  jail_root: &Path,
  budget: usize,
  watch: &Watch,
) -> Result<(), Denial> {
  let Some(work_tree) = &repo.work_tree else {
    return Ok(());
  };
  let path = repo.git_dir.join("index");
  let shown = shown_path(jail_root, &path);
  let Some(index) = host_git::open_bounded(&path, &shown, MAX_INDEX_BYTES)? else {
    return Ok(());
  };
  let mut command = host_git::sealed(git);
  command
    .env("GIT_OPTIONAL_LOCKS", "0")
    .envs(repo.env())
    // The file sized above, as git's stdin: what the path names now does not matter (a FIFO
    // swapped in would block git's open).
    .env("GIT_INDEX_FILE", "/proc/self/fd/0")
    .stdin(index)
    .current_dir(work_tree)
    .args(["ls-files", "-z", "--cached", "--sparse"]);
  let mut entries = IndexEntries {
    shown: &shown,
    carry: Vec::new(),
    left: budget,
    bytes: 0,
  };
  let what = format!("git ls-files ({shown})");
  let ran = host_git::run(command, &what, watch, &mut |piece| entries.take(piece))?;
  if !ran.success {
    return Err(refuse(format!(
      "git could not read the index ({})",
      ran.why()
    )));
  }
  entries.finish()
}

/// `git ls-files -z` output checked as it arrives: each entry counted and checked, only a
/// partial entry (bounded) kept between pieces.
struct IndexEntries<'a> {
  shown: &'a str,
  carry: Vec<u8>,
  left: usize,
  bytes: usize,
}

impl IndexEntries<'_> {
  fn take(&mut self, piece: &[u8]) -> Result<(), Denial> {
    self.bytes += piece.len();
    if self.bytes > MAX_INDEX_LISTING_BYTES {
      return Err(refuse(format!(
        "{} lists more than {MAX_INDEX_LISTING_BYTES} bytes of paths",
        self.shown
      )));
    }
    let mut rest = piece;
    while let Some(end) = rest.iter().position(|b| *b == 0) {
      self.carry.extend_from_slice(&rest[..end]);
      rest = &rest[end + 1..];
      self.entry()?;
    }
    self.carry.extend_from_slice(rest);
    self.bounded()
  }

  fn bounded(&self) -> Result<(), Denial> {
    if self.carry.len() > MAX_INDEX_PATH_BYTES {
      return Err(refuse(format!(
        "{} has an entry longer than {MAX_INDEX_PATH_BYTES} bytes",
        self.shown
      )));
    }
    Ok(())
  }

  fn entry(&mut self) -> Result<(), Denial> {
    self.bounded()?;
    let path = std::mem::take(&mut self.carry);
    if path.is_empty() {
      return Ok(());
    }
    self.left = self.left.checked_sub(1).ok_or_else(|| {
      refuse(format!(
        "{} lists more entries than the {MAX_WALK_ENTRIES} files the check allows (with those walked)",
        self.shown
      ))
    })?;
    if !index_path_ok(&path) {
      return Err(refuse(format!(
        "index entry outside the work tree: {}",
        host_git::excerpt(&String::from_utf8_lossy(&path))
      )));
    }
    Ok(())
  }

  /// The last entry, when the listing did not end with a NUL.
  fn finish(mut self) -> Result<(), Denial> {
    self.entry()
  }
}

/// A path from a `commondir` or `.git` file, which git takes byte for byte once trailing CR
/// and LF are dropped (dropped here). A value with whitespace at either end or a
/// control character is refused: read any other way (a `trim()` took ` common` for `common`),
/// the check would look at one directory while git, and the job, used another whose config
/// nobody checked. An empty one is refused too.
fn as_git_reads<'a>(text: &'a str, what: &str) -> Result<&'a str, Denial> {
  let value = text.trim_end_matches(['\n', '\r']);
  if value.is_empty()
    || value.starts_with(char::is_whitespace)
    || value.ends_with(char::is_whitespace)
    || value.chars().any(char::is_control)
  {
    return Err(refuse(format!(
      "{what} is empty, or has whitespace at an end or a control character: {}",
      host_git::quoted(value)
    )));
  }
  Ok(value)
}

/// `path` canonicalized (symlinks followed, as git's `real_path` does: `d/..` is the parent of
/// where `d` points) and required inside `jail`.
fn canonical_inside(jail: &Path, path: &Path, what: &str) -> Result<PathBuf, Denial> {
  match std::fs::canonicalize(path) {
    Ok(real) if real.starts_with(jail) => Ok(real),
    Ok(_) => Err(refuse(what.to_owned())),
    Err(_) => Err(refuse(format!("{what} (cannot be resolved)"))),
  }
}

/// One entry as the walk saw it: its `lstat`, taken relative to the open directory it is listed
/// in, so that what a path names now does not matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
  kind: SFlag,
  nlink: libc::nlink_t,
  id: (libc::dev_t, libc::ino_t),
}

impl Seen {
  fn of(st: &FileStat) -> Self {
    Seen {
      kind: SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()),
      nlink: st.st_nlink,
      id: (st.st_dev, st.st_ino),
    }
  }

  fn is_symlink(&self) -> bool {
    self.kind == SFlag::S_IFLNK
  }

  fn is_file(&self) -> bool {
    self.kind == SFlag::S_IFREG
  }

  fn is_dir(&self) -> bool {
    self.kind == SFlag::S_IFDIR
  }
}

/// How the walk opens a directory: never through a symlink in its last component, never
/// blocking.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
  .union(OFlag::O_DIRECTORY)
  .union(OFlag::O_NOFOLLOW)
  .union(OFlag::O_NONBLOCK)
  .union(OFlag::O_CLOEXEC);

/// `dir` (inside `jail`) opened one component at a time from the jail root, none followed as a
/// symlink: a component swapped for a symlink since `dir` was canonicalized fails the open.
fn open_below(jail: &Path, dir: &Path) -> nix::Result<OwnedFd> {
  let rel = dir
    .strip_prefix(jail)
    .map_err(|_| nix::errno::Errno::EXDEV)?;
  let mut fd = nix::fcntl::open(jail, DIR_FLAGS, Mode::empty())?;
  for component in rel.components() {
    fd = nix::fcntl::openat(&fd, component.as_os_str(), DIR_FLAGS, Mode::empty())?;
  }
  Ok(fd)
}

/// Visits every entry below `dir` (inside `jail`) without following symlinks; `visit` returns
/// whether to descend into a directory. Each directory is read from an open descriptor and its
/// entries are `lstat`ed relative to it; a directory reopened by path to be read must be the one
/// seen (device and inode): a component swapped for a symlink in the meantime would otherwise
/// have the walk read, and a refusal name, a directory outside the jail. Fails closed on an
/// unreadable or changed directory, past `budget` entries, or once `watch` ends the check.
fn walk(
  jail: &Path,
  dir: &Path,
  budget: &mut usize,
  watch: &Watch,
  visit: &mut dyn FnMut(&Path, &Seen) -> Result<bool, Denial>,
) -> Result<(), Denial> {
  let cannot = |path: &Path, why: &str| {
    refuse(format!(
      "cannot {why} {}",
      host_git::excerpt(&shown_path(jail, path))
    ))
  };
  let mut stack: Vec<(PathBuf, Option<(libc::dev_t, libc::ino_t)>)> =
    vec![(dir.to_path_buf(), None)];
  while let Some((current, seen)) = stack.pop() {
    let fd = match seen {
      None => open_below(jail, dir),
      Some(id) => nix::fcntl::open(&current, DIR_FLAGS, Mode::empty()).and_then(|fd| {
        let now = nix::sys::stat::fstat(&fd)?;
        if (now.st_dev, now.st_ino) == id {
          Ok(fd)
        } else {
          Err(nix::errno::Errno::ESTALE)
        }
      }),
    }
    .map_err(|e| match e {
      nix::errno::Errno::ESTALE | nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
        cannot(&current, "read (changed during the check)")
      }
      _ => cannot(&current, "read"),
    })?;
    let listed = fd.try_clone().map_err(|_| cannot(&current, "read"))?;
    let mut entries = nix::dir::Dir::from_fd(listed).map_err(|_| cannot(&current, "read"))?;
    for entry in entries.iter() {
      let entry = entry.map_err(|_| cannot(&current, "read"))?;
      let name = entry.file_name();
      if name == c"." || name == c".." {
        continue;
      }
      *budget = budget
        .checked_sub(1)
        .ok_or_else(|| refuse(format!("more than {MAX_WALK_ENTRIES} files to check")))?;
      watch.check()?;
      let path = current.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
      let meta = nix::sys::stat::fstatat(&fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map(|st| Seen::of(&st))
        .map_err(|_| cannot(&path, "inspect"))?;
      if visit(&path, &meta)? && meta.is_dir() {
        stack.push((path, Some(meta.id)));
      }
    }
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::process::Command;

  fn watch() -> Watch<'static> {
    Watch::new(host_git::REPOSITORY_CHECK_MS, None)
  }

  fn git_bin() -> String {
    super::super::command::resolve_binary("git", "/usr/bin:/bin")
  }

  fn jail() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
  }

  fn init(root: &Path) {
    let ok = Command::new("git")
      .args(["init", "-q"])
      .current_dir(root)
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .status()
      .unwrap()
      .success();
    assert!(ok);
  }

  fn message(r: Result<Option<Repository>, Denial>) -> String {
    r.unwrap_err().message
  }

  #[test]
  fn a_fresh_repository_passes_and_is_pinned() {
    let (_d, root) = jail();
    assert_eq!(
      check_repository(&root, &git_bin(), &watch()).unwrap(),
      None,
      "no repository"
    );
    init(&root);
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    assert_eq!(repo.git_dir, root.join(".git"));
    assert_eq!(repo.common_dir, root.join(".git"));
    let env = repo.env();
    assert!(env.contains(&("GIT_WORK_TREE".into(), root.display().to_string())));
    assert!(env.contains(&(
      "GIT_OBJECT_DIRECTORY".into(),
      root.join(".git/objects").display().to_string()
    )));
  }

  #[test]
  fn keys_hidden_from_a_line_parser_are_refused_by_name() {
    for (config, key) in [
      (
        "\u{feff}[core]\n\trepositoryformatversion = 0\n[filter \"x\"]\n\tsmudge = evil\n",
        "filter.x.smudge",
      ),
      (
        "[core]\r\n\tbare = false\r\n[core][include] path=../evil.cfg\n",
        "include.path",
      ),
      ("[core] worktree = /etc\n", "core.worktree"),
      (
        "[remote \"o\"]\n\tuploadpack = evil\n",
        "remote.o.uploadpack",
      ),
      (
        "[protocol \"ext\"]\n\tallow = always\n",
        "protocol.ext.allow",
      ),
    ] {
      let (_d, root) = jail();
      init(&root);
      let path = root.join(".git/config");
      // The whole file is the attacker's (a BOM is only valid at its start).
      std::fs::write(&path, config).unwrap();
      let got = message(check_repository(&root, &git_bin(), &watch()));
      assert!(
        got.contains(&format!("{key} is not on the allowlist")),
        "{config:?}: {got}"
      );
    }
  }

  #[test]
  fn what_git_reads_is_what_is_checked() {
    // A lone `\r` is no line break to git: the `[filter]` text is part of a value, and git
    // never sees a filter. A line parser that split on `\r` would disagree either way.
    let (_d, root) = jail();
    init(&root);
    let path = root.join(".git/config");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("[user]\r\tname = x\r[filter \"x\"]\r\tclean = evil\r\n");
    std::fs::write(&path, &text).unwrap();
    assert!(check_repository(&root, &git_bin(), &watch()).is_ok());
    let out = Command::new("git")
      .args(["config", "--get-regexp", "^filter"])
      .current_dir(&root)
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .output()
      .unwrap();
    assert!(out.stdout.is_empty(), "git sees no filter");
    // Where git does read a value as a boolean, the same text makes it refuse to run.
    text.push_str("[core]\r\tbare = false\r[filter \"y\"]\r\tclean = evil\r\n");
    std::fs::write(&path, &text).unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch())).contains("git could not read it")
    );
  }

  #[test]
  fn worktree_config_is_read_even_without_the_extension() {
    let (_d, root) = jail();
    init(&root);
    std::fs::write(
      root.join(".git/config.worktree"),
      "[core]\n\tfsmonitor = evil\n",
    )
    .unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.contains("core.fsmonitor is not on the allowlist"),
      "{got}"
    );
  }

  #[test]
  fn a_config_git_cannot_parse_is_refused() {
    let (_d, root) = jail();
    init(&root);
    std::fs::write(root.join(".git/config"), "[core\nbare\n").unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch())).contains("git could not read it")
    );
  }

  /// A copy of the repository's common parts in `.git/<name>`, with `config` as its config.
  fn common_copy(root: &Path, name: &str, config: &str) {
    let git = root.join(".git");
    let ok = Command::new("cp")
      .arg("-r")
      .args(["objects", "refs", "HEAD"].map(|p| git.join(p)))
      .arg(git.join(name))
      .status()
      .unwrap()
      .success();
    assert!(ok);
    std::fs::write(git.join(name).join("config"), config).unwrap();
  }

  /// The attack: `.git/commondir` holding ` common`. git keeps the space and so read a clean
  /// `.git/ common/config` in the check, while the check's `trim()` took `common` and pinned
  /// the job to `.git/common`, whose filter then ran on `git diff` and `git status`.
  #[test]
  fn commondir_and_gitdir_are_read_as_git_reads_them() {
    let (_d, root) = jail();
    init(&root);
    let clean = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";
    let evil = format!("{clean}[filter \"x\"]\n\tclean = sh evil.sh\n");
    std::fs::create_dir(root.join(".git/ common")).unwrap();
    std::fs::create_dir(root.join(".git/common")).unwrap();
    std::fs::create_dir(root.join(".git/ok")).unwrap();
    common_copy(&root, " common", clean);
    common_copy(&root, "common", &evil);
    common_copy(&root, "ok", clean);
    let commondir = root.join(".git/commondir");
    for value in [
      " common\n",
      "common \n",
      "common\t",
      "com\u{1}mon",
      "",
      "\n",
    ] {
      std::fs::write(&commondir, value).unwrap();
      let got = message(check_repository(&root, &git_bin(), &watch()));
      assert!(
        got.contains("commondir is empty, or has whitespace"),
        "{value:?}: {got}"
      );
    }
    // Read as the job reads it: the config checked is the one the job's pinning makes git read.
    std::fs::write(&commondir, "common\r\n").unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.contains("filter.x.clean is not on the allowlist"),
      "{got}"
    );
    std::fs::write(&commondir, "ok\r\n").unwrap();
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    assert_eq!(repo.common_dir, root.join(".git/ok"));
    // A symlink followed before `..`, as git's real_path does: `d/..` is where `d` points's
    // parent, outside, although `x` exists inside too.
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("in")).unwrap();
    std::fs::create_dir(outside.path().join("x")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("in"), root.join("d")).unwrap();
    std::fs::create_dir(root.join("x")).unwrap();
    std::fs::write(&commondir, "../d/../x").unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(got.contains("commondir points outside the jail"), "{got}");
    std::fs::remove_file(&commondir).unwrap();
    // The .git file: `gitdir: ` exactly, then the path byte for byte.
    std::fs::rename(root.join(".git"), root.join("real")).unwrap();
    for (text, want) in [
      ("gitdir:  real\n", "gitdir is empty, or has whitespace"),
      ("gitdir: real \n", "gitdir is empty, or has whitespace"),
      ("gitdir:real\n", ".git file without gitdir"),
      ("gitdir: d/../real\n", "gitdir points outside the jail"),
    ] {
      std::fs::write(root.join(".git"), text).unwrap();
      let got = message(check_repository(&root, &git_bin(), &watch()));
      assert!(got.contains(want), "{text:?}: {got}");
    }
    std::fs::write(root.join(".git"), "gitdir: real\r\n").unwrap();
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    assert_eq!(repo.git_dir, root.join("real"));
  }

  #[test]
  fn layouts_that_reach_outside_are_refused() {
    let (_d, root) = jail();
    std::fs::write(root.join(".git"), "gitdir: /etc\n").unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch())).contains("gitdir points outside")
    );
    std::fs::write(
      root.join(".git"),
      format!("gitdir: {}/../x\n", root.display()),
    )
    .unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch())).contains("gitdir points outside")
    );
    std::fs::remove_file(root.join(".git")).unwrap();
    init(&root);
    assert!(check_repository(&root, &git_bin(), &watch()).is_ok());
    std::fs::write(root.join(".git/commondir"), "../../elsewhere").unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains("commondir"));
    std::fs::remove_file(root.join(".git/commondir")).unwrap();
    std::fs::write(
      root.join(".git/objects/info/alternates"),
      "/srv/other/objects",
    )
    .unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains("alternates"));
    std::fs::remove_file(root.join(".git/objects/info/alternates")).unwrap();
    std::os::unix::fs::symlink("/tmp", root.join(".git/refs/tags/x")).unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch()))
        .contains("symlink in the git directory: .git/refs/tags/x")
    );
  }

  #[test]
  fn objects_or_refs_as_symlinks_are_refused() {
    for name in ["objects", "refs"] {
      let (_d, root) = jail();
      init(&root);
      let (_o, other) = jail();
      init(&other);
      std::fs::remove_dir_all(root.join(".git").join(name)).unwrap();
      std::os::unix::fs::symlink(other.join(".git").join(name), root.join(".git").join(name))
        .unwrap();
      assert!(
        message(check_repository(&root, &git_bin(), &watch()))
          .contains("symlink in the git directory"),
        "{name}"
      );
    }
  }

  #[test]
  fn hard_links_submodules_and_nested_repositories_are_refused() {
    let (_d, root) = jail();
    init(&root);
    let (_o, outside) = jail();
    std::fs::write(outside.join("secret"), "s").unwrap();
    std::fs::hard_link(outside.join("secret"), root.join("inner")).unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch()))
        .contains("hard-linked file in the work tree: inner")
    );
    std::fs::remove_file(root.join("inner")).unwrap();
    std::fs::create_dir_all(root.join("sub/.git")).unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch()))
        .contains("nested repository or submodule: sub/.git")
    );
    std::fs::remove_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join(".gitmodules"), "").unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains(".gitmodules"));
    std::fs::remove_file(root.join(".gitmodules")).unwrap();
    std::fs::create_dir(root.join(".git/modules")).unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains("modules/"));
    std::fs::remove_dir(root.join(".git/modules")).unwrap();
    // In the git directory too: a config hard-linked elsewhere could change after the check.
    std::fs::hard_link(root.join(".git/description"), outside.join("linked")).unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch()))
        .contains("hard-linked file in the git directory: .git/description")
    );
  }

  /// What cannot be read is refused, never taken for absent: a `commondir` git would read as
  /// bytes but that is not UTF-8, a `.git` that cannot be inspected (the jail root a file), a
  /// `.git` symlink even to a valid `gitdir:` file.
  #[test]
  fn what_cannot_be_read_or_is_a_symlink_is_refused() {
    let (_d, root) = jail();
    init(&root);
    std::fs::write(root.join(".git/commondir"), b"\xffcommon").unwrap();
    assert!(
      message(check_repository(&root, &git_bin(), &watch())).contains("commondir is unreadable")
    );
    std::fs::remove_file(root.join(".git/commondir")).unwrap();
    std::fs::write(root.join("plain"), "").unwrap();
    assert!(
      message(check_repository(&root.join("plain"), &git_bin(), &watch()))
        .contains(".git cannot be inspected")
    );
    std::fs::rename(root.join(".git"), root.join("real")).unwrap();
    std::fs::write(root.join("gitfile"), "gitdir: real\n").unwrap();
    std::os::unix::fs::symlink("gitfile", root.join(".git")).unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains(".git is a symlink"));
  }

  #[test]
  fn index_entries_git_would_never_add_are_refused() {
    for ok in [&b"a.txt"[..], b"d/e/f", b".gitignore", b"..x", b"sparse/"] {
      assert!(index_path_ok(ok), "{}", String::from_utf8_lossy(ok));
    }
    for bad in [
      &b"../x"[..],
      b"a/../../x",
      b"./audit/audit.log",
      b"audit//audit.log",
      b"/etc/passwd",
      b".git/config",
      b"d/.GIT/config",
      b"",
      b"a//",
    ] {
      assert!(!index_path_ok(bad), "{}", String::from_utf8_lossy(bad));
    }
  }

  #[test]
  fn a_bare_repository_at_the_jail_root_is_checked_and_pinned() {
    let (_d, root) = jail();
    let ok = Command::new("git")
      .args(["init", "-q", "--bare", "."])
      .current_dir(&root)
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .status()
      .unwrap()
      .success();
    assert!(ok);
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    assert_eq!(repo.git_dir, root);
    assert_eq!(repo.work_tree, None);
    assert!(
      repo
        .env()
        .contains(&("GIT_IMPLICIT_WORK_TREE".into(), "0".into()))
    );
    std::fs::write(
      root.join("config"),
      "[core]\n\tbare = true\n[filter \"x\"]\n\tclean = evil\n",
    )
    .unwrap();
    assert!(message(check_repository(&root, &git_bin(), &watch())).contains("filter.x.clean"));
  }

  #[test]
  fn flags_are_inserted_after_the_subcommand() {
    let args: Vec<String> = ["diff", "HEAD"].iter().map(|s| s.to_string()).collect();
    assert_eq!(
      harden_args(&args),
      ["diff", "--no-ext-diff", "--no-textconv", "HEAD"]
    );
    let status: Vec<String> = vec!["status".into()];
    assert_eq!(harden_args(&status), ["status"]);
  }

  #[test]
  fn hidden_directories_are_excluded_from_diff_and_status() {
    let wt = Path::new("/j");
    let hidden = [PathBuf::from("/j/audit"), PathBuf::from("/elsewhere")];
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
      exclude_paths(args(&["status"]), wt, &hidden),
      ["status", "--", ":(top,exclude,literal)audit"]
    );
    assert_eq!(
      exclude_paths(args(&["diff", "--", "x"]), wt, &hidden),
      ["diff", "--", "x", ":(top,exclude,literal)audit"]
    );
    assert_eq!(exclude_paths(args(&["log"]), wt, &hidden), ["log"]);
  }

  fn entries(left: usize) -> IndexEntries<'static> {
    IndexEntries {
      shown: ".git/index",
      carry: Vec::new(),
      left,
      bytes: 0,
    }
  }

  /// The listing is checked as it streams: entries split across pieces are joined, each counts
  /// against what is left of the walk's bound, and neither a long entry nor a long listing is
  /// held.
  #[test]
  fn index_entries_are_counted_checked_and_bounded_as_they_stream() {
    let mut e = entries(3);
    e.take(b"a.t").unwrap();
    e.take(b"xt\0d/e").unwrap();
    e.take(b"\0\0").unwrap();
    assert_eq!(e.left, 1);
    e.take(b"last").unwrap();
    e.finish().unwrap();
    let got = entries(1).take(b"a\0b\0").unwrap_err().message;
    assert!(
      got.contains(".git/index lists more entries than the 200000 files the check allows"),
      "{got}"
    );
    let mut e = entries(10);
    e.take(b"ok\0").unwrap();
    let got = e.take(b"../x\0").unwrap_err().message;
    assert!(
      got.ends_with("index entry outside the work tree: ../x"),
      "{got}"
    );
    let mut e = entries(10);
    e.take(b"ok\0..").unwrap();
    assert!(
      e.finish().is_err(),
      "a last entry without its NUL is checked too"
    );
    // An entry at PATH_MAX is held; one byte more is refused before a NUL arrives.
    let mut e = entries(10);
    e.take(&vec![b'a'; MAX_INDEX_PATH_BYTES]).unwrap();
    let got = e.take(b"a").unwrap_err().message;
    assert!(got.contains("an entry longer than 4096 bytes"), "{got}");
    let got = entries(10)
      .take(&[&vec![b'a'; MAX_INDEX_PATH_BYTES + 1][..], b"\0"].concat())
      .unwrap_err()
      .message;
    assert!(got.contains("an entry longer than 4096 bytes"), "{got}");
    // The listing's total, counted without being held.
    let mut e = entries(usize::MAX);
    let piece = b"abcdefg\0".repeat(128 * 1024);
    for _ in 0..MAX_INDEX_LISTING_BYTES / piece.len() {
      e.take(&piece).unwrap();
    }
    let got = e.take(b"x").unwrap_err().message;
    assert!(
      got.contains(".git/index lists more than 67108864 bytes of paths"),
      "{got}"
    );
    // A refusal quotes a long or unprintable entry bounded.
    let mut e = entries(10);
    let got = e
      .take(&[&b"../"[..], &[b'\n'; 3000][..], b"\0"].concat())
      .unwrap_err()
      .message;
    assert!(got.len() < 400, "{got}");
  }

  /// The index's entries and the files walked share one bound.
  #[test]
  fn index_entries_count_against_the_walk_bound() {
    let (_d, root) = jail();
    init(&root);
    std::fs::write(root.join("a"), "").unwrap();
    std::fs::write(root.join("b"), "").unwrap();
    let ok = Command::new("git")
      .args(["add", "a", "b"])
      .current_dir(&root)
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .status()
      .unwrap()
      .success();
    assert!(ok);
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    check_index(&git_bin(), &repo, &root, 2, &watch()).unwrap();
    let got = check_index(&git_bin(), &repo, &root, 1, &watch())
      .unwrap_err()
      .message;
    assert!(got.contains(".git/index lists more entries"), "{got}");
  }

  #[test]
  fn config_worktree_files_are_bounded_in_number() {
    let (_d, root) = jail();
    init(&root);
    for i in 0..MAX_WORKTREE_CONFIGS {
      let dir = root.join(format!(".git/w/{i}"));
      std::fs::create_dir_all(&dir).unwrap();
      std::fs::write(dir.join("config.worktree"), "[user]\n\tname = x\n").unwrap();
    }
    check_repository(&root, &git_bin(), &watch()).unwrap();
    std::fs::create_dir_all(root.join(".git/w/last")).unwrap();
    std::fs::write(root.join(".git/w/last/config.worktree"), "").unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.contains("more than 64 config.worktree files in the git directory"),
      "{got}"
    );
  }

  /// Files that would cost the host memory or block it are sized or typed before a byte is read:
  /// a sparse commondir or .git file, a FIFO as .git, a sparse index or config.
  #[test]
  fn large_sparse_or_special_repository_files_are_refused_unread() {
    let (_d, root) = jail();
    init(&root);
    let sparse = |path: &Path, len: u64| {
      std::fs::File::create(path).unwrap().set_len(len).unwrap();
    };
    sparse(&root.join(".git/commondir"), 1 << 40);
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.ends_with(".git/commondir is larger than 4096 bytes"),
      "{got}"
    );
    std::fs::remove_file(root.join(".git/commondir")).unwrap();
    sparse(&root.join(".git/index"), MAX_INDEX_BYTES + 1);
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.ends_with(".git/index is larger than 67108864 bytes"),
      "{got}"
    );
    std::fs::remove_file(root.join(".git/index")).unwrap();
    let config = root.join(".git/config");
    let text = std::fs::read(&config).unwrap();
    sparse(&config, git_config::MAX_CONFIG_FILE_BYTES + 1);
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.ends_with(".git/config is larger than 1048576 bytes"),
      "{got}"
    );
    std::fs::write(&config, text).unwrap();
    std::fs::rename(root.join(".git"), root.join("real")).unwrap();
    sparse(&root.join(".git"), 1 << 40);
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(got.ends_with(".git is larger than 4096 bytes"), "{got}");
    std::fs::remove_file(root.join(".git")).unwrap();
    nix::unistd::mkfifo(
      &root.join(".git"),
      nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.contains(".git is neither a directory nor a regular file"),
      "{got}"
    );
    // Whatever is quoted from a pointer file is bounded.
    std::fs::remove_file(root.join(".git")).unwrap();
    std::fs::write(
      root.join(".git"),
      format!("gitdir: real{}", "\0".repeat(4000)),
    )
    .unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(got.contains("gitdir is empty, or has whitespace"), "{got}");
    assert!(got.len() < 400, "{got}");
  }

  /// A directory swapped for a symlink to a directory outside the jail between the walk's
  /// `lstat` of it and its read is not read: the walk refuses it as changed and never visits
  /// (or names in a refusal) an entry from outside. The same holds for a component of the walk's
  /// root swapped since it was canonicalized.
  #[test]
  fn a_directory_swapped_for_a_symlink_during_the_walk_is_not_read() {
    let (_d, root) = jail();
    init(&root);
    let (_o, outside) = jail();
    std::fs::write(outside.join("outside-name"), "").unwrap();
    std::fs::create_dir(root.join(".git/d")).unwrap();
    let mut visited = Vec::new();
    let mut budget = MAX_WALK_ENTRIES;
    let got = walk(
      &root,
      &root.join(".git"),
      &mut budget,
      &watch(),
      &mut |path, _| {
        visited.push(path.to_path_buf());
        if path == root.join(".git/d") {
          std::fs::rename(root.join(".git/d"), root.join("saved")).unwrap();
          std::os::unix::fs::symlink(&outside, root.join(".git/d")).unwrap();
        }
        Ok(true)
      },
    )
    .unwrap_err()
    .message;
    assert!(
      got.ends_with("cannot read (changed during the check) .git/d"),
      "{got}"
    );
    assert!(
      visited.iter().all(|p| !p.ends_with("outside-name")),
      "{visited:?}"
    );
    std::fs::remove_file(root.join(".git/d")).unwrap();
    std::fs::rename(root.join(".git"), root.join("real")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join(".git")).unwrap();
    let mut budget = MAX_WALK_ENTRIES;
    let got = walk(
      &root,
      &root.join(".git"),
      &mut budget,
      &watch(),
      &mut |path, _| panic!("visited {}", path.display()),
    )
    .unwrap_err()
    .message;
    assert!(got.contains("changed during the check"), "{got}");
  }

  /// A check past its deadline, or aborted, stops at its next step.
  #[test]
  fn a_check_ends_at_its_deadline_or_abort() {
    let (_d, root) = jail();
    init(&root);
    let got = message(check_repository(&root, &git_bin(), &Watch::new(0, None)));
    assert!(
      got.contains("the repository check took longer than 0 ms"),
      "{got}"
    );
    let cancel = host_git::Cancel::new().unwrap();
    cancel.cancel();
    let got = message(check_repository(
      &root,
      &git_bin(),
      &Watch::new(60_000, Some(&cancel)),
    ));
    assert!(got.contains("the repository check was aborted"), "{got}");
  }

  /// A common directory outside the git directory is walked too: a symlink there is refused
  /// although neither the git directory's walk nor the work tree's looks for one.
  #[test]
  fn a_separate_common_dir_is_walked() {
    let (_d, root) = jail();
    init(&root);
    let ok = Command::new("cp")
      .arg("-r")
      .arg(root.join(".git"))
      .arg(root.join("common"))
      .status()
      .unwrap()
      .success();
    assert!(ok);
    std::fs::write(root.join(".git/commondir"), "../common\n").unwrap();
    let repo = check_repository(&root, &git_bin(), &watch())
      .unwrap()
      .unwrap();
    assert_eq!(repo.common_dir, root.join("common"));
    std::os::unix::fs::symlink("/etc", root.join("common/refs/x")).unwrap();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(
      got.ends_with("symlink in the git directory: common/refs/x"),
      "{got}"
    );
  }

  /// A split index is read as git reads it (its shared part from the git directory); a shared
  /// part grown sparse to 10 GiB, which git maps whole, fails at the map, in git's bounded
  /// address space, and the refusal names that bound.
  #[test]
  fn a_split_index_is_checked_and_a_huge_shared_part_fails_fast() {
    let (_d, root) = jail();
    init(&root);
    std::fs::write(root.join("a"), "").unwrap();
    let git = |args: &[&str]| {
      let ok = Command::new("git")
        .args(args)
        .current_dir(&root)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap()
        .success();
      assert!(ok, "{args:?}");
    };
    git(&["add", "a"]);
    git(&["update-index", "--split-index"]);
    check_repository(&root, &git_bin(), &watch()).unwrap();
    let shared = std::fs::read_dir(root.join(".git"))
      .unwrap()
      .map(|e| e.unwrap().path())
      .find(|p| {
        p.file_name()
          .unwrap()
          .to_string_lossy()
          .starts_with("sharedindex.")
      })
      .unwrap();
    std::fs::OpenOptions::new()
      .write(true)
      .open(&shared)
      .unwrap()
      .set_len(10 << 30)
      .unwrap();
    let started = std::time::Instant::now();
    let got = message(check_repository(&root, &git_bin(), &watch()));
    assert!(got.contains("git could not read the index"), "{got}");
    assert!(got.contains("the check's git may use 256 MiB"), "{got}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
  }

  /// Files and directories below `root`: `d/` a directory, `f=text` a file, `l->target` a
  /// symlink; `\s`, `\t`, `\r` and `\n` in an entry are a space, a tab, CR and LF.
  fn lay_out(root: &Path, entries: &str) {
    for entry in entries.split_whitespace() {
      let entry = &entry
        .replace("\\s", " ")
        .replace("\\t", "\t")
        .replace("\\r", "\r")
        .replace("\\n", "\n");
      if let Some(dir) = entry.strip_suffix('/') {
        std::fs::create_dir_all(root.join(dir)).unwrap();
      } else if let Some((link, target)) = entry.split_once("->") {
        std::os::unix::fs::symlink(target, root.join(link)).unwrap();
      } else {
        let (file, text) = entry.split_once('=').unwrap_or((entry, ""));
        std::fs::write(root.join(file), text).unwrap_or_else(|e| panic!("{file}: {e}"));
      }
    }
  }

  #[test]
  fn a_git_file_names_its_gitdir_exactly() {
    let unusable = |value: &str| {
      format!(
        "Repository config rejected: the .git file's gitdir is empty, or has whitespace at an end \
         or a control character: {}",
        host_git::quoted(value)
      )
    };
    let without = "Repository config rejected: .git file without gitdir".to_owned();
    for (text, want) in [
      ("gitdir: real", Ok("real")),
      ("gitdir: real\n", Ok("real")),
      ("gitdir: real\r\n", Ok("real")),
      ("gitdir: ../a b", Ok("../a b")),
      ("gitdir:real", Err(without.clone())),
      ("GITDIR: real", Err(without.clone())),
      ("", Err(without)),
      ("gitdir: ", Err(unusable(""))),
      ("gitdir:  real", Err(unusable(" real"))),
      ("gitdir: real\t", Err(unusable("real\t"))),
      ("gitdir: re\u{1}al", Err(unusable("re\u{1}al"))),
    ] {
      assert_eq!(gitdir_of(text).map_err(|d| d.message), want, "{text:?}");
    }
  }

  #[test]
  fn the_git_directory_is_found_inside_the_jail_or_refused() {
    // (layout, what is found: a path below the jail root, `bare` for the root itself, `none`;
    // or the refusal's end).
    #[rustfmt::skip]
    let cases = [
      ("", Ok("none")),
      ("HEAD=x objects/", Ok("none")),
      ("HEAD=x objects/ refs/", Ok("bare")),
      (".git/", Ok(".git")),
      ("real/ .git=gitdir:\\sreal\\n", Ok("real")),
      ("a/real/ a/x/ .git=gitdir:\\sa/x/../real", Ok("a/real")),
      (".git=gitdir:\\s..", Err("gitdir points outside the jail")),
      (".git=gitdir:\\smissing", Err("gitdir points outside the jail (cannot be resolved)")),
      (".git=nothing", Err(".git file without gitdir")),
      ("real/ .git->real", Err(".git is a symlink")),
    ];
    for (layout, want) in cases {
      let (_d, root) = jail();
      lay_out(&root, layout);
      let got = GitDir::find(&root).map_err(|d| d.message);
      match want {
        Ok("none") => assert_eq!(got, Ok(None), "{layout}"),
        Ok("bare") => assert_eq!(
          got,
          Ok(Some(GitDir {
            path: root.clone(),
            work_tree: None
          })),
          "{layout}"
        ),
        Ok(below) => assert_eq!(
          got,
          Ok(Some(GitDir {
            path: root.join(below).canonicalize().unwrap(),
            work_tree: Some(root.clone())
          })),
          "{layout}"
        ),
        Err(end) => {
          let got = got.unwrap_err();
          assert_eq!(
            got,
            format!("Repository config rejected: {end}"),
            "{layout}"
          );
        }
      }
    }
    // A FIFO, and a jail root that is no directory.
    let (_d, root) = jail();
    nix::unistd::mkfifo(&root.join(".git"), Mode::from_bits_truncate(0o600)).unwrap();
    assert!(
      GitDir::find(&root)
        .unwrap_err()
        .message
        .contains(".git is neither a directory nor a regular file")
    );
    std::fs::write(root.join("plain"), "").unwrap();
    assert!(
      GitDir::find(&root.join("plain"))
        .unwrap_err()
        .message
        .ends_with(".git cannot be inspected")
    );
  }

  #[test]
  fn the_common_directory_is_the_git_directory_or_one_inside_the_jail() {
    // (layout below the jail, with the git directory at `g`) -> the common directory below the
    // jail, or the refusal's end.
    #[rustfmt::skip]
    let cases = [
      ("g/", Ok("g")),
      ("g/ g/c/ g/commondir=c\\n", Ok("g/c")),
      ("g/ c/ g/commondir=../c\\r\\n", Ok("c")),
      ("g/ g/commondir=../..", Err("commondir points outside the jail")),
      ("g/ g/commondir=missing", Err("commondir points outside the jail (cannot be resolved)")),
      ("g/ g/c/ g/commondir=\\sc", Err("commondir is empty, or has whitespace at an end or a control character: \" c\"")),
      ("g/ g/commondir=", Err("commondir is empty, or has whitespace at an end or a control character: \"\"")),
    ];
    for (layout, want) in cases {
      let (_d, root) = jail();
      lay_out(&root, layout);
      let got = common_dir_of(&root, &root.join("g")).map_err(|d| d.message);
      let want = want
        .map(|below| root.join(below))
        .map_err(|end| format!("Repository config rejected: {end}"));
      assert_eq!(got, want, "{layout}");
    }
  }

  fn seen(kind: SFlag, nlink: libc::nlink_t) -> Seen {
    Seen {
      kind,
      nlink,
      id: (0, 0),
    }
  }

  #[test]
  fn a_git_directory_holds_only_its_own_files_and_directories() {
    let shown = || "g/x".to_owned();
    // (name, type, links) -> what the entry is, or the refusal's end.
    #[rustfmt::skip]
    let cases = [
      ("HEAD", SFlag::S_IFREG, 1, Ok(GitDirEntry::Plain)),
      ("refs", SFlag::S_IFDIR, 2, Ok(GitDirEntry::Plain)),
      ("refs", SFlag::S_IFDIR, 5, Ok(GitDirEntry::Plain)),
      ("config.worktree", SFlag::S_IFREG, 1, Ok(GitDirEntry::WorktreeConfig)),
      ("config.worktree.lock", SFlag::S_IFREG, 1, Ok(GitDirEntry::Plain)),
      ("config", SFlag::S_IFREG, 2, Err("hard-linked file in the git directory: g/x")),
      ("config.worktree", SFlag::S_IFREG, 2, Err("hard-linked file in the git directory: g/x")),
      ("x", SFlag::S_IFLNK, 1, Err("symlink in the git directory: g/x")),
      ("config.worktree", SFlag::S_IFLNK, 1, Err("symlink in the git directory: g/x")),
      ("x", SFlag::S_IFIFO, 1, Err("special file in the git directory: g/x")),
      ("x", SFlag::S_IFSOCK, 1, Err("special file in the git directory: g/x")),
      ("x", SFlag::S_IFCHR, 1, Err("special file in the git directory: g/x")),
      ("x", SFlag::S_IFBLK, 1, Err("special file in the git directory: g/x")),
    ];
    for (name, kind, nlink, want) in cases {
      let path = Path::new("/j/g").join(name);
      let got = git_dir_entry(&path, &seen(kind, nlink), &shown).map_err(|d| d.message);
      let want = want.map_err(|end| format!("Repository config rejected: {end}"));
      assert_eq!(got, want, "{name} {kind:?} {nlink}");
    }
  }

  #[test]
  fn a_work_tree_holds_no_other_repository_and_no_hard_link() {
    let own = Path::new("/j/.git");
    let shown = || "x".to_owned();
    // (path, type, links) -> descended into (or not), or the refusal's end.
    #[rustfmt::skip]
    let cases = [
      ("/j/a", SFlag::S_IFREG, 1, Ok(true)),
      ("/j/d", SFlag::S_IFDIR, 3, Ok(true)),
      ("/j/l", SFlag::S_IFLNK, 1, Ok(true)),
      ("/j/.git", SFlag::S_IFDIR, 2, Ok(false)),
      ("/j/.git", SFlag::S_IFREG, 1, Ok(false)),
      ("/j/d/.git", SFlag::S_IFDIR, 2, Err("nested repository or submodule: x")),
      ("/j/d/.git", SFlag::S_IFREG, 1, Err("nested repository or submodule: x")),
      ("/j/d/.git", SFlag::S_IFLNK, 1, Err("nested repository or submodule: x")),
      ("/j/a", SFlag::S_IFREG, 2, Err("hard-linked file in the work tree: x")),
      ("/j/.gitx", SFlag::S_IFREG, 1, Ok(true)),
    ];
    for (path, kind, nlink, want) in cases {
      let got =
        work_tree_entry(Path::new(path), &seen(kind, nlink), own, &shown).map_err(|d| d.message);
      let want = want.map_err(|end| format!("Repository config rejected: {end}"));
      assert_eq!(got, want, "{path} {kind:?} {nlink}");
    }
  }

  #[test]
  fn config_worktree_files_are_counted_up_to_the_bound() {
    let mut configs = WorktreeConfigs::default();
    for i in 0..MAX_WORKTREE_CONFIGS {
      configs
        .add(Path::new(&format!("/j/.git/{i}")), format!("{i}"))
        .unwrap();
    }
    assert_eq!(configs.files.len(), MAX_WORKTREE_CONFIGS);
    assert_eq!(configs.files[3], (PathBuf::from("/j/.git/3"), "3".into()));
    let got = configs.add(Path::new("/j/.git/x"), "x".into()).unwrap_err();
    assert_eq!(
      got.message,
      "Repository config rejected: more than 64 config.worktree files in the git directory"
    );
  }

  #[test]
  fn the_git_directories_hold_no_alternates_or_modules_and_are_walked_once_each() {
    // (layout, the common directory below the jail) -> the config.worktree files found, or the
    // refusal's end. The git directory is `.git`.
    #[rustfmt::skip]
    let cases = [
      (".git/refs/ .git/HEAD=x", ".git", Ok("")),
      (".git/w/ .git/config.worktree= .git/w/config.worktree=", ".git", Ok(".git/config.worktree .git/w/config.worktree")),
      (".git/ c/ c/config.worktree=", "c", Ok("c/config.worktree")),
      (".git/objects/info/ .git/objects/info/alternates=/x", ".git", Err("object alternates")),
      (".git/objects/info/ .git/objects/info/http-alternates=/x", ".git", Err("object alternates")),
      (".git/ c/objects/info/ c/objects/info/alternates=/x", "c", Err("object alternates")),
      (".git/modules/", ".git", Err("submodules (modules/ in the git directory)")),
      (".git/ c/modules/", "c", Err("submodules (modules/ in the git directory)")),
      (".git/ c/ c/l->/etc", "c", Err("symlink in the git directory: c/l")),
    ];
    for (layout, common, want) in cases {
      let (_d, root) = jail();
      lay_out(&root, layout);
      let repo = Repository {
        git_dir: root.join(".git"),
        common_dir: root.join(common),
        work_tree: Some(root.clone()),
      };
      let mut budget = MAX_WALK_ENTRIES;
      let got = check_git_dirs(&root, &repo, &mut budget, &watch()).map(|c| {
        let mut shown: Vec<String> = c.files.into_iter().map(|(_, s)| s).collect();
        shown.sort();
        shown
      });
      match want {
        Ok(files) => assert_eq!(got.map_err(|d| d.message), Ok(words(files)), "{layout}"),
        Err(end) => assert_eq!(
          got.unwrap_err().message,
          format!("Repository config rejected: {end}"),
          "{layout}"
        ),
      }
    }
    // One directory is walked once: each of its entries counts against the bound once.
    let (_d, root) = jail();
    lay_out(&root, ".git/ .git/a= .git/b=");
    let repo = Repository {
      git_dir: root.join(".git"),
      common_dir: root.join(".git"),
      work_tree: None,
    };
    let mut budget = 10;
    check_git_dirs(&root, &repo, &mut budget, &watch()).unwrap();
    assert_eq!(budget, 8);
  }

  fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
  }

  #[test]
  fn the_work_tree_holds_no_submodule_nested_repository_or_hard_link() {
    // (layout) -> the refusal's end, if any. The repository's own `.git` is not walked here.
    #[rustfmt::skip]
    let cases = [
      ("a= d/ d/b= l->/etc", None),
      (".git/ .git/l->/etc .git/x/", None),
      (".gitmodules=", Some("submodules (.gitmodules)")),
      ("d/ d/.git/", Some("nested repository or submodule: d/.git")),
      ("d/ d/e/ d/e/.git=gitdir:x", Some("nested repository or submodule: d/e/.git")),
    ];
    for (layout, want) in cases {
      let (_d, root) = jail();
      lay_out(&root, layout);
      let mut budget = MAX_WALK_ENTRIES;
      let got = check_work_tree(&root, &root, &mut budget, &watch()).map_err(|d| d.message);
      let want = want.map_or(Ok(()), |end| {
        Err(format!("Repository config rejected: {end}"))
      });
      assert_eq!(got, want, "{layout}");
    }
    let (_d, root) = jail();
    let (_o, outside) = jail();
    std::fs::write(outside.join("secret"), "").unwrap();
    std::fs::hard_link(outside.join("secret"), root.join("a")).unwrap();
    let mut budget = MAX_WALK_ENTRIES;
    assert_eq!(
      check_work_tree(&root, &root, &mut budget, &watch())
        .unwrap_err()
        .message,
      "Repository config rejected: hard-linked file in the work tree: a"
    );
  }
}
