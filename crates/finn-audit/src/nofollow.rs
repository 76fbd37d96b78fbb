//! Opening the audit log without following a symlink in any path component. The log may lie
//! inside the jail (loa-finn's default), where the agent can replace any component with a
//! symlink, or the file with a hard link to a file of the host's, before the log is opened.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// `path` made absolute against the process's cwd and normalized lexically; `..` is applied
/// to the text, never through a symlink (none is followed anyway).
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
  let joined = if path.is_absolute() {
    path.to_path_buf()
  } else {
    std::env::current_dir()?.join(path)
  };
  let mut out = PathBuf::from("/");
  for component in joined.components() {
    match component {
      Component::ParentDir => {
        out.pop();
      }
      Component::Normal(part) => out.push(part),
      _ => {}
    }
  }
  Ok(out)
}

fn dir_flags() -> OFlag {
  OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC
}

/// Opens the directory `dir` (absolute, normalized) one component at a time with
/// `O_NOFOLLOW`, creating missing components when `create`: a symlink anywhere fails (ELOOP or
/// ENOTDIR) instead of being followed.
pub fn open_dir(dir: &Path, create: bool) -> io::Result<OwnedFd> {
  let mut fd: OwnedFd = File::open("/")?.into();
  for component in dir.components() {
    let Component::Normal(part) = component else {
      continue;
    };
    if create {
      match mkdirat(&fd, part, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
      }
    }
    fd = openat(&fd, part, dir_flags(), Mode::empty())?;
  }
  Ok(fd)
}

/// Opens `name` in `dir` for appending, never through a symlink, and refuses a file with a
/// second name (a hard link the agent made to a file outside).
pub fn open_append(dir: &OwnedFd, name: &str) -> io::Result<File> {
  let flags =
    OFlag::O_RDWR | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
  let file = File::from(openat(dir, name, flags, Mode::from_bits_truncate(0o644))?);
  let meta = file.metadata()?;
  if !meta.is_file() || std::os::unix::fs::MetadataExt::nlink(&meta) != 1 {
    return Err(io::Error::other(
      "audit log is not a regular file with one link",
    ));
  }
  Ok(file)
}

/// `rename(from, to)` inside `dir` (a symlink is renamed, not followed). Missing `from` is fine.
pub fn rename(dir: &OwnedFd, from: &str, to: &str) {
  let _ = renameat(dir, from, dir, to);
}

/// `unlink(name)` inside `dir`. Missing is fine.
pub fn remove(dir: &OwnedFd, name: &str) {
  let _ = unlinkat(dir, name, UnlinkatFlags::NoRemoveDir);
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::io::Write;
  use std::os::unix::fs::symlink;

  #[test]
  fn a_symlink_in_any_component_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    symlink(outside.path(), root.join("audit")).unwrap();
    assert!(open_dir(&root.join("audit"), true).is_err());
    assert!(open_dir(&root.join("audit/deeper"), true).is_err());
    std::fs::remove_file(root.join("audit")).unwrap();
    let fd = open_dir(&root.join("audit"), true).unwrap();
    symlink(outside.path().join("victim"), root.join("audit/audit.log")).unwrap();
    assert!(open_append(&fd, "audit.log").is_err());
    assert!(
      !outside.path().join("victim").exists(),
      "nothing created through the link"
    );
    std::fs::remove_file(root.join("audit/audit.log")).unwrap();
    std::fs::write(outside.path().join("host-file"), "host\n").unwrap();
    std::fs::hard_link(
      outside.path().join("host-file"),
      root.join("audit/audit.log"),
    )
    .unwrap();
    assert!(open_append(&fd, "audit.log").is_err());
    std::fs::remove_file(root.join("audit/audit.log")).unwrap();
    open_append(&fd, "audit.log")
      .unwrap()
      .write_all(b"x\n")
      .unwrap();
    assert_eq!(
      std::fs::read_to_string(outside.path().join("host-file")).unwrap(),
      "host\n"
    );
    assert_eq!(
      std::fs::read_to_string(root.join("audit/audit.log")).unwrap(),
      "x\n"
    );
  }

  #[test]
  fn relative_paths_are_made_absolute_lexically() {
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(absolute(Path::new("a/../b")).unwrap(), cwd.join("b"));
    assert_eq!(
      absolute(Path::new("/x/./y/../z")).unwrap(),
      Path::new("/x/z")
    );
  }
}
