//! The `.gitignore` files of the worktree, from its root down to every directory below a
//! searched one, applied to the names a search printed: the same filter whichever program searched (rg, fd, grep and
//! find all run with no ignore file of their own), so their outputs stay identical. Git's
//! rules: a deeper file's pattern overrides a shallower one's, a `!` pattern re-includes, and
//! nothing below an ignored directory comes back.
//!
//! Only names below the searched directory are judged (a directory named as the path is
//! searched even when ignored, as rg and fd search a path they are given); the rules that judge
//! them include those of the directories above it, up to the worktree's root. `.git/info/exclude`
//! and global excludes are not read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use finn_policy::FilesystemJail;

/// The largest `.gitignore` read: its patterns are compiled in the caller's process (Node's),
/// several KiB each, so a file the agent wrote must not grow the host without bound.
pub const MAX_GITIGNORE_BYTES: u64 = 256 * 1024;
/// The most patterns one call reads, over every `.gitignore` it reads.
pub const MAX_GITIGNORE_PATTERNS: usize = 8192;

/// The rules of one searched directory, read lazily, one `.gitignore` per directory at most.
pub struct Rules<'j> {
  jail: &'j FilesystemJail,
  /// The worktree's root, canonical: every path here is relative to it.
  base: PathBuf,
  /// The searched directory, relative to the root, `/`-terminated (empty for the root).
  searched: String,
  /// Per directory below `base` (relative), its file's rules, or none.
  by_dir: HashMap<PathBuf, Option<Gitignore>>,
  /// Patterns read so far.
  patterns: usize,
  /// Why a `.gitignore` could not be read whole (too large, too many patterns): the call then
  /// fails, since its rules are unknown.
  refused: Option<String>,
}

impl<'j> Rules<'j> {
  /// `searched`: the searched directory relative to the worktree's root (empty: the root).
  pub fn new(jail: &'j FilesystemJail, searched: &str) -> Self {
    let searched = searched.trim_matches('/');
    Rules {
      jail,
      base: jail.root().to_path_buf(),
      searched: if searched.is_empty() {
        String::new()
      } else {
        format!("{searched}/")
      },
      by_dir: HashMap::new(),
      patterns: 0,
      refused: None,
    }
  }

  /// Why the rules are incomplete: a `.gitignore` over [`MAX_GITIGNORE_BYTES`], or more than
  /// [`MAX_GITIGNORE_PATTERNS`] patterns in all.
  pub fn refused(&self) -> Option<&str> {
    self.refused.as_deref()
  }

  /// `file`'s patterns into `builder`, read as `GitignoreBuilder::add` reads them (a line that
  /// is not UTF-8 skipped, a leading BOM dropped), opened without following a symlink or
  /// waiting on a FIFO swapped in since the jail's check, and bounded.
  fn read(&mut self, file: &Path, shown: &str, builder: &mut GitignoreBuilder) -> Option<()> {
    use std::io::Read;
    // Bounded below, by what is read: the size is not the open file's to promise.
    let f = finn_policy::host_git::open_bounded(file, shown, u64::MAX)
      .ok()
      .flatten()?;
    let mut bytes = Vec::new();
    f.take(MAX_GITIGNORE_BYTES + 1)
      .read_to_end(&mut bytes)
      .ok()?;
    if bytes.len() as u64 > MAX_GITIGNORE_BYTES {
      self.refused = Some(format!(
        "{shown} is larger than {MAX_GITIGNORE_BYTES} bytes: its rules are not read"
      ));
      return None;
    }
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
      let line = line.strip_suffix(b"\r").unwrap_or(line);
      let Ok(line) = std::str::from_utf8(line) else {
        continue;
      };
      let line = if i == 0 {
        line.trim_start_matches('\u{feff}')
      } else {
        line
      };
      let t = line.trim();
      if t.is_empty() || t.starts_with('#') {
        continue;
      }
      self.patterns += 1;
      if self.patterns > MAX_GITIGNORE_PATTERNS {
        self.refused = Some(format!(
          "the .gitignore files read hold more than {MAX_GITIGNORE_PATTERNS} patterns (at {shown})"
        ));
        return None;
      }
      // A line git would refuse is skipped, as git skips it.
      let _ = builder.add_line(Some(file.to_path_buf()), line);
    }
    Some(())
  }

  /// The rules of `dir` (relative to the base): its `.gitignore` when the jail lets it be read
  /// (no symlink, no hard link).
  fn of(&mut self, dir: &Path) -> Option<&Gitignore> {
    if !self.by_dir.contains_key(dir) {
      let abs = self.base.join(dir);
      let file = abs.join(".gitignore");
      let rel = file
        .strip_prefix(self.jail.root())
        .map(Path::to_path_buf)
        .unwrap_or_default();
      // Most directories have none: one lstat says so before the jail's walk.
      let exists = std::fs::symlink_metadata(&file).is_ok();
      let rules = match exists.then(|| self.jail.validate_path(&rel.to_string_lossy())) {
        Some(Ok(checked)) if self.refused.is_none() => {
          let mut builder = GitignoreBuilder::new(&abs);
          let shown = rel.to_string_lossy().into_owned();
          self
            .read(&checked, &shown, &mut builder)
            .and_then(|()| builder.build().ok())
        }
        _ => None,
      };
      self.by_dir.insert(dir.to_path_buf(), rules);
    }
    self.by_dir.get(dir).and_then(Option::as_ref)
  }

  /// Whether `rel` (relative to the searched directory, `/`-separated) is ignored: it, or a
  /// directory above it and below the searched one, matches an ignore pattern that no deeper
  /// or later pattern re-includes.
  pub fn ignored(&mut self, rel: &str, is_dir: bool) -> bool {
    let full = format!("{}{rel}", self.searched);
    let parts: Vec<&str> = full.split('/').filter(|p| !p.is_empty()).collect();
    let from = self.searched.split('/').filter(|p| !p.is_empty()).count();
    for end in from + 1..=parts.len() {
      let path: PathBuf = parts[..end].iter().collect();
      let dir_here = end < parts.len() || is_dir;
      if self.decides(&path, dir_here) {
        return true;
      }
    }
    false
  }

  /// The deepest `.gitignore` (from `path`'s own directory up to the base) with a pattern
  /// matching `path` decides.
  fn decides(&mut self, path: &Path, is_dir: bool) -> bool {
    let abs = self.base.join(path);
    let mut dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    loop {
      if let Some(rules) = self.of(&dir) {
        match rules.matched(&abs, is_dir) {
          Match::Ignore(_) => return true,
          Match::Whitelist(_) => return false,
          Match::None => {}
        }
      }
      if !dir.pop() {
        return false;
      }
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn deeper_rules_override_and_an_ignored_directory_hides_everything_below() {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    let root = jail.root().to_path_buf();
    std::fs::create_dir_all(root.join("src/gen")).unwrap();
    std::fs::create_dir_all(root.join("build")).unwrap();
    std::fs::write(root.join(".gitignore"), "build/\n*.log\n/top.txt\n").unwrap();
    std::fs::write(root.join("src/.gitignore"), "!keep.log\ngen\n").unwrap();
    let mut rules = Rules::new(&jail, "");
    assert!(rules.ignored("build", true));
    assert!(rules.ignored("build/a.rs", false));
    assert!(
      !rules.ignored("build", false),
      "build/ matches directories only"
    );
    assert!(rules.ignored("x.log", false));
    assert!(rules.ignored("src/x.log", false));
    assert!(!rules.ignored("src/keep.log", false));
    assert!(rules.ignored("src/gen/a.rs", false));
    assert!(rules.ignored("top.txt", false));
    assert!(!rules.ignored("src/top.txt", false), "anchored to the root");
    assert!(!rules.ignored("src/main.rs", false));
    // Searching below the root: the root's rules apply there too, a deeper one overrides them.
    let mut below = Rules::new(&jail, "src");
    assert!(below.ignored("a.log", false), "the root's *.log");
    assert!(!below.ignored("keep.log", false), "src's !keep.log");
    assert!(below.ignored("gen/a.rs", false));
    assert!(!below.ignored("main.rs", false));
    // A directory named as the path is searched even when ignored, as rg and fd do.
    let mut inside = Rules::new(&jail, "build");
    assert!(!inside.ignored("a.rs", false));
  }

  #[test]
  fn a_symlinked_gitignore_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("rules"), "*\n").unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path().join("rules"), jail.root().join(".gitignore"))
      .unwrap();
    let mut rules = Rules::new(&jail, "");
    assert!(!rules.ignored("a.txt", false));
  }
}
