//! JSONL audit writer with size-based rotation, one per log directory for the whole process.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use sha2::{Digest, Sha256};

use super::entry::AuditEntry;
use super::nofollow;

/// The most one entry may take in the log (newline included). A flood of long commands then
/// needs `max_file_size * max_files / MAX_ENTRY_BYTES` entries to rotate history out (6400 with
/// the defaults), not a handful.
pub const MAX_ENTRY_BYTES: usize = 8192;

/// Bytes kept of the command, of each argument and of the reason in a capped entry.
const CAPPED_FIELD_BYTES: usize = 512;

fn cut(text: &str, max: usize) -> String {
  if text.len() <= max {
    return text.to_owned();
  }
  let mut end = max;
  while !text.is_char_boundary(end) {
    end -= 1;
  }
  format!("{}…", &text[..end])
}

/// The entry as one JSON line, capped to [`MAX_ENTRY_BYTES`].
fn capped_line(entry: &AuditEntry) -> serde_json::Result<Vec<u8>> {
  let mut line = serde_json::to_vec(entry)?;
  if line.len() < MAX_ENTRY_BYTES {
    return Ok(line);
  }
  let mut hasher = Sha256::new();
  hasher.update(serde_json::to_vec(&(&entry.command, &entry.args))?);
  let digest: String = hasher
    .finalize()
    .iter()
    .map(|b| format!("{b:02x}"))
    .collect();
  let mut capped = entry.clone();
  capped.original_size = Some(line.len() as u64);
  capped.sha256 = Some(digest);
  capped.command = cut(&entry.command, CAPPED_FIELD_BYTES);
  capped.reason = entry.reason.as_deref().map(|r| cut(r, CAPPED_FIELD_BYTES));
  capped.args.clear();
  // Arguments as long as they fit (JSON escaping may grow a byte to six).
  let mut budget = MAX_ENTRY_BYTES / 2;
  for arg in &entry.args {
    let kept = cut(arg, CAPPED_FIELD_BYTES);
    let cost = serde_json::to_string(&kept)?.len() + 1;
    if cost > budget {
      break;
    }
    budget -= cost;
    capped.args.push(kept);
  }
  line = serde_json::to_vec(&capped)?;
  if line.len() >= MAX_ENTRY_BYTES {
    // Escaping made even the cut fields too long: keep only the size and the hash.
    capped.command = cut(&entry.command, 64);
    capped.reason = entry.reason.as_deref().map(|r| cut(r, 64));
    capped.args.clear();
    line = serde_json::to_vec(&capped)?;
  }
  Ok(line)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditOptions {
  /// Rotate before a write once the current file has reached this size. Default 10 MiB.
  pub max_file_size: u64,
  /// Rotated files kept: `audit.1.log` (newest) .. `audit.N.log`. Default 5.
  pub max_files: u32,
}

impl Default for AuditOptions {
  fn default() -> Self {
    AuditOptions {
      max_file_size: 10 * 1024 * 1024,
      max_files: 5,
    }
  }
}

struct Writer {
  /// Absolute and normalized; opened component by component without following symlinks.
  dir: PathBuf,
  file: Option<File>,
  size: u64,
  options: AuditOptions,
}

const CURRENT: &str = "audit.log";

fn rotated(i: u32) -> String {
  format!("audit.{i}.log")
}

impl Writer {
  fn rotate(&mut self) -> io::Result<()> {
    self.file = None;
    let dir = nofollow::open_dir(&self.dir, true)?;
    let n = self.options.max_files;
    if n == 0 {
      nofollow::remove(&dir, CURRENT);
    } else {
      nofollow::remove(&dir, &rotated(n));
      for i in (1..n).rev() {
        nofollow::rename(&dir, &rotated(i), &rotated(i + 1));
      }
      nofollow::rename(&dir, CURRENT, &rotated(1));
    }
    self.size = 0;
    Ok(())
  }

  fn append(&mut self, line: &[u8]) -> io::Result<()> {
    if self.size >= self.options.max_file_size {
      self.rotate()?;
    }
    if self.file.is_none() {
      let dir = nofollow::open_dir(&self.dir, true)?;
      let mut file = nofollow::open_append(&dir, CURRENT)?;
      self.size = file.metadata()?.len();
      // A torn line left by a failed write that could not be cut off (see below) is ended
      // here, so it never swallows this entry: the trail stays one JSON value per line.
      if self.size > 0 && last_byte(&file, self.size)? != b'\n' {
        file.write_all(b"\n")?;
        self.size += 1;
      }
      self.file = Some(file);
    }
    // One write of the whole line with O_APPEND: lines never interleave.
    let file = self.file.as_mut().expect("opened above");
    if let Err(e) = file.write_all(line) {
      // A full disk takes part of the line: cut the file back to the last whole line (which
      // also frees the space), and reopen next time.
      let _ = file.set_len(self.size);
      self.file = None;
      return Err(e);
    }
    self.size += line.len() as u64;
    Ok(())
  }
}

fn last_byte(file: &File, size: u64) -> io::Result<u8> {
  use std::os::unix::fs::FileExt;
  let mut byte = [0u8];
  file.read_exact_at(&mut byte, size - 1)?;
  Ok(byte[0])
}

/// Writers by canonical log directory; entries die with their last `AuditLog`.
static WRITERS: LazyLock<Mutex<HashMap<PathBuf, Weak<Mutex<Writer>>>>> =
  LazyLock::new(Default::default);

/// `<dataDir>/audit/audit.log` and its rotations. Instances for the same directory share one
/// writer (the first instance's options apply), so they rotate as one file.
#[derive(Clone)]
pub struct AuditLog {
  dir: PathBuf,
  /// `None`: a log that records nothing ([`AuditLog::discard`]).
  writer: Option<Arc<Mutex<Writer>>>,
}

impl AuditLog {
  pub fn new(data_dir: &Path, options: AuditOptions) -> Self {
    let dir = data_dir.join("audit");
    // No symlink is followed on the way (the directory may lie in the agent's jail). A failure
    // here makes every append return false, as in loa-finn.
    let key = nofollow::absolute(&dir).unwrap_or_else(|_| dir.clone());
    let _ = nofollow::open_dir(&key, true);
    let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    writers.retain(|_, w| w.strong_count() > 0);
    let writer = match writers.get(&key).and_then(Weak::upgrade) {
      Some(writer) => writer,
      None => {
        let size = std::fs::symlink_metadata(key.join(CURRENT)).map_or(0, |m| m.len());
        let writer = Arc::new(Mutex::new(Writer {
          dir: key.clone(),
          file: None,
          size,
          options,
        }));
        writers.insert(key, Arc::downgrade(&writer));
        writer
      }
    };
    AuditLog {
      dir,
      writer: Some(writer),
    }
  }

  /// A log that records nothing and whose appends succeed: for a caller that asked for no audit
  /// (a tool call without an `AuditLog`). Its directory is empty: nothing to hide from commands.
  pub fn discard() -> Self {
    AuditLog {
      dir: PathBuf::new(),
      writer: None,
    }
  }

  /// Whether this log records nothing.
  pub fn is_discarding(&self) -> bool {
    self.writer.is_none()
  }

  /// `<dataDir>/audit`, as given (not canonicalized), like loa-finn's `getLogDir()`.
  pub fn log_dir(&self) -> &Path {
    &self.dir
  }

  /// Appends one JSON line of at most [`MAX_ENTRY_BYTES`] (a longer entry is capped, keeping
  /// its original size and the SHA-256 of its whole command). Never panics; false on any error.
  pub fn append(&self, entry: &AuditEntry) -> bool {
    let Some(writer) = &self.writer else {
      return true;
    };
    let Ok(mut line) = capped_line(entry) else {
      return false;
    };
    line.push(b'\n');
    let mut writer = writer.lock().unwrap_or_else(|e| e.into_inner());
    writer.append(&line).is_ok()
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::entry::Action;

  fn entry(i: usize) -> AuditEntry {
    AuditEntry::new(Action::Allow, "ls", &[format!("file-{i}")])
  }

  #[test]
  fn two_instances_on_one_directory_rotate_as_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let options = AuditOptions {
      max_file_size: 300,
      max_files: 3,
    };
    let a = AuditLog::new(dir.path(), options);
    let b = AuditLog::new(dir.path(), options);
    for i in 0..60 {
      assert!(if i % 2 == 0 {
        a.append(&entry(i))
      } else {
        b.append(&entry(i))
      });
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("audit"))
      .unwrap()
      .map(|e| e.unwrap().file_name().into_string().unwrap())
      .collect();
    names.sort();
    assert_eq!(
      names,
      ["audit.1.log", "audit.2.log", "audit.3.log", "audit.log"]
    );
    for name in &names {
      let text = std::fs::read_to_string(dir.path().join("audit").join(name)).unwrap();
      for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("every line is whole JSON");
      }
      // A file is rotated once it reaches the limit, so none grows past limit + one line.
      assert!(text.len() < 300 + 120, "{name}: {}", text.len());
    }
    // The newest entries are in the current file, in order.
    let current = std::fs::read_to_string(dir.path().join("audit/audit.log")).unwrap();
    assert!(current.trim_end().ends_with(r#"["file-59"]}"#));
  }

  #[test]
  fn a_torn_last_line_is_ended_before_the_next_entry() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("audit")).unwrap();
    // What a write cut short by a full disk leaves when it could not be truncated.
    std::fs::write(dir.path().join("audit/audit.log"), b"{\"action\":\"al").unwrap();
    let log = AuditLog::new(dir.path(), AuditOptions::default());
    assert!(log.append(&entry(1)));
    let text = std::fs::read_to_string(dir.path().join("audit/audit.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    serde_json::from_str::<serde_json::Value>(lines[1]).expect("the new entry is whole JSON");
  }

  #[test]
  fn a_huge_entry_is_capped_with_its_size_and_hash() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), AuditOptions::default());
    let huge = "A".repeat(5 * 1024 * 1024);
    let escaped = "\u{1}".repeat(100_000);
    for e in [
      AuditEntry::new(Action::Deny, "cat", std::slice::from_ref(&huge))
        .with_reason(format!("path_rejected: {huge}")),
      AuditEntry::new(Action::Deny, &escaped, &vec![escaped.clone(); 40])
        .with_reason(escaped.clone()),
    ] {
      assert!(log.append(&e));
    }
    let text = std::fs::read_to_string(dir.path().join("audit/audit.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    for line in &lines {
      assert!(line.len() < MAX_ENTRY_BYTES, "{}", line.len());
      let v: serde_json::Value = serde_json::from_str(line).unwrap();
      assert!(v["originalSize"].as_u64().unwrap() > 100_000);
      assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
    }
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(&("cat", [&huge])).unwrap());
    let expected: String = hasher
      .finalize()
      .iter()
      .map(|b| format!("{b:02x}"))
      .collect();
    assert_eq!(first["sha256"], expected.as_str());
    assert_eq!(first["command"], "cat");
    // A small entry is written as it is.
    assert!(log.append(&entry(1)));
    let last = std::fs::read_to_string(dir.path().join("audit/audit.log")).unwrap();
    assert!(!last.lines().last().unwrap().contains("sha256"));
  }

  #[test]
  fn a_symlinked_audit_directory_or_file_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim"), "host\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("audit")).unwrap();
    let log = AuditLog::new(dir.path(), AuditOptions::default());
    assert!(!log.append(&entry(0)));
    drop(log);
    std::fs::remove_file(dir.path().join("audit")).unwrap();
    std::fs::create_dir(dir.path().join("audit")).unwrap();
    std::os::unix::fs::symlink(
      outside.path().join("victim"),
      dir.path().join("audit/audit.log"),
    )
    .unwrap();
    let log = AuditLog::new(dir.path(), AuditOptions::default());
    assert!(!log.append(&entry(0)));
    assert_eq!(
      std::fs::read_to_string(outside.path().join("victim")).unwrap(),
      "host\n"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
  }

  #[test]
  fn an_unwritable_directory_returns_false() {
    let log = AuditLog::new(
      Path::new("/proc/finn-sandbox-no-such-dir"),
      AuditOptions::default(),
    );
    assert!(!log.append(&entry(0)));
  }
}
