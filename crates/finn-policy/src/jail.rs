//! The filesystem jail: paths must resolve inside the root, through no symlink.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::error::Denial;

#[derive(Debug, Clone)]
pub struct FilesystemJail {
  root: PathBuf,
  /// Directories inside the root that belong to the host (the audit log): refused whole.
  hidden: Vec<PathBuf>,
  /// Paths inside the root no command may write (`.git/hooks`, `.git/config`): refused whole,
  /// since a path checked here may be written by the host tool that asked.
  protected: Vec<PathBuf>,
}

/// `path.resolve(base, input)`: lexical, without touching the filesystem.
pub fn resolve_lexically(base: &Path, input: &str) -> PathBuf {
  let mut out = if input.starts_with('/') {
    PathBuf::from("/")
  } else {
    base.to_path_buf()
  };
  for component in Path::new(input).components() {
    match component {
      Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
      Component::ParentDir => {
        out.pop();
      }
      Component::Normal(part) => out.push(part),
    }
  }
  out
}

/// `dir` as an absolute canonical path (relative to the process's cwd, like the audit writer's
/// own path); resolved lexically when it does not exist yet.
pub fn host_path(dir: &Path) -> PathBuf {
  let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
  std::fs::canonicalize(&absolute)
    .unwrap_or_else(|_| resolve_lexically(Path::new("/"), &absolute.to_string_lossy()))
}

impl FilesystemJail {
  /// The root is the realpath of `dir` (relative to the process cwd); it must exist.
  pub fn new(dir: &str) -> io::Result<Self> {
    Ok(FilesystemJail {
      root: std::fs::canonicalize(dir)?,
      hidden: Vec::new(),
      protected: Vec::new(),
    })
  }

  pub fn root(&self) -> &Path {
    &self.root
  }

  /// Refuses every path under `dir` from now on, when it lies inside the root (loa-finn keeps
  /// its audit log in the jail by default: the agent must neither read nor write it).
  pub fn hide(&mut self, dir: &Path) {
    let dir = host_path(dir);
    if dir.starts_with(&self.root) && dir != self.root {
      self.hidden.push(dir);
    }
  }

  /// Refuses `path` and everything under it from now on, when it lies inside the root. Taken
  /// as written below the root (a protected path need not exist yet, and its parent may be
  /// created later).
  pub fn protect(&mut self, path: &Path) {
    let path = resolve_lexically(&self.root, &path.to_string_lossy());
    if path.starts_with(&self.root) && path != self.root {
      self.protected.push(path);
    }
  }

  /// The hidden directories (inside the root).
  pub fn hidden(&self) -> &[PathBuf] {
    &self.hidden
  }

  /// The canonical path of `input` inside the jail, or a refusal. A missing path inside the jail
  /// is allowed (returned resolved). Any symlink component is refused, even one pointing inside.
  /// Unlike loa-finn's, an lstat error other than "missing" refuses (loa-finn lets the path
  /// through), and the post-realpath containment check is enforced.
  pub fn validate_path(&self, input: &str) -> Result<PathBuf, Denial> {
    let escapes = || Denial::plain(format!("Path escapes jail: {input}"));
    if input.contains('\0') {
      return Err(escapes());
    }
    let resolved = resolve_lexically(&self.root, input);
    let Ok(rel) = resolved.strip_prefix(&self.root) else {
      return Err(escapes());
    };
    let mut current = self.root.clone();
    for part in rel.components() {
      current.push(part);
      match std::fs::symlink_metadata(&current) {
        Ok(meta) if meta.file_type().is_symlink() => {
          return Err(Denial::plain(format!("Symlink rejected: {input}")));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => break,
        Err(_) => return Err(Denial::plain(format!("Path cannot be validated: {input}"))),
      }
    }
    let path = match std::fs::canonicalize(&resolved) {
      Ok(canonical) if canonical.starts_with(&self.root) => canonical,
      Ok(_) => return Err(escapes()),
      Err(e) if e.kind() == io::ErrorKind::NotFound => resolved,
      Err(_) => return Err(Denial::plain(format!("Path cannot be validated: {input}"))),
    };
    if self.hidden.iter().any(|h| path.starts_with(h)) {
      return Err(Denial::plain(format!(
        "Path is reserved for the host: {input}"
      )));
    }
    if self.protected.iter().any(|p| path.starts_with(p)) {
      return Err(Denial::plain(format!(
        "Path is protected (no command may write it): {input}"
      )));
    }
    // A second name for a file may be a link to one outside the jail (same filesystem): its
    // content is not the jail's to show.
    if let Ok(meta) = std::fs::symlink_metadata(&path)
      && meta.is_file()
      && std::os::unix::fs::MetadataExt::nlink(&meta) > 1
    {
      return Err(Denial::plain(format!("Hard-linked file rejected: {input}")));
    }
    Ok(path)
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::os::unix::fs::symlink;

  #[test]
  fn lexical_resolution_matches_node() {
    let base = Path::new("/jail");
    assert_eq!(resolve_lexically(base, "a/../b"), Path::new("/jail/b"));
    assert_eq!(resolve_lexically(base, "../../.."), Path::new("/"));
    assert_eq!(
      resolve_lexically(base, "/etc/./passwd"),
      Path::new("/etc/passwd")
    );
    assert_eq!(resolve_lexically(base, ""), Path::new("/jail"));
  }

  #[test]
  fn inside_outside_symlinks_and_missing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    let root = jail.root().to_path_buf();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/file"), "x").unwrap();
    symlink("/etc/passwd", root.join("out")).unwrap();
    symlink(root.join("sub"), root.join("in")).unwrap();

    assert_eq!(
      jail.validate_path("sub/file").unwrap(),
      root.join("sub/file")
    );
    assert_eq!(jail.validate_path(".").unwrap(), root);
    assert_eq!(
      jail.validate_path("sub/missing/deeper").unwrap(),
      root.join("sub/missing/deeper")
    );
    assert_eq!(
      jail
        .validate_path("../../../etc/passwd")
        .unwrap_err()
        .message,
      "Path escapes jail: ../../../etc/passwd"
    );
    assert_eq!(
      jail.validate_path("/etc").unwrap_err().message,
      "Path escapes jail: /etc"
    );
    // A sibling that shares the root's string prefix is outside.
    let sibling = format!("{}x/file", root.display());
    assert!(
      jail
        .validate_path(&sibling)
        .unwrap_err()
        .message
        .starts_with("Path escapes jail")
    );
    assert_eq!(
      jail.validate_path("out").unwrap_err().message,
      "Symlink rejected: out"
    );
    assert_eq!(
      jail.validate_path("in/file").unwrap_err().message,
      "Symlink rejected: in/file"
    );
  }

  #[test]
  fn hard_links_and_hidden_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mut jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    let root = jail.root().to_path_buf();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::fs::hard_link(outside.path().join("secret"), root.join("link")).unwrap();
    assert_eq!(
      jail.validate_path("link").unwrap_err().message,
      "Hard-linked file rejected: link"
    );
    std::fs::create_dir(root.join("audit")).unwrap();
    std::fs::write(root.join("audit/audit.log"), "x").unwrap();
    assert!(jail.validate_path("audit/audit.log").is_ok());
    jail.hide(&root.join("audit"));
    jail.hide(outside.path());
    assert_eq!(jail.hidden(), [root.join("audit")]);
    for input in [
      "audit",
      "audit/audit.log",
      "audit/new",
      "./x/../audit/audit.1.log",
    ] {
      assert_eq!(
        jail.validate_path(input).unwrap_err().message,
        format!("Path is reserved for the host: {input}")
      );
    }
    assert!(jail.validate_path("auditx").is_ok());
  }

  #[test]
  fn protected_paths_are_refused_whole_existing_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    let root = jail.root().to_path_buf();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    assert!(jail.validate_path(".git/config").is_ok());
    jail.protect(&root.join(".git/hooks"));
    jail.protect(&root.join(".git/config"));
    // Outside the root, or the root itself: nothing to protect.
    jail.protect(Path::new("/etc"));
    jail.protect(&root);
    assert_eq!(jail.protected.len(), 2);
    for input in [
      ".git/hooks",
      ".git/hooks/pre-commit",
      ".git/config",
      "x/../.git/config",
      &format!("{}/.git/config", root.display()),
    ] {
      assert_eq!(
        jail.validate_path(input).unwrap_err().message,
        format!("Path is protected (no command may write it): {input}")
      );
    }
    for input in [".git/HEAD", ".git/configx", ".git", "config"] {
      assert!(jail.validate_path(input).is_ok(), "{input}");
    }
  }

  #[test]
  fn an_unreadable_component_refuses_instead_of_passing() {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    std::fs::write(jail.root().join("file"), "x").unwrap();
    // ENOTDIR: a component below a regular file.
    assert!(
      jail
        .validate_path("file/below")
        .unwrap_err()
        .message
        .starts_with("Path cannot be validated")
    );
  }
}
