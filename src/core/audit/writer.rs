//! JSONL audit writer with size-based rotation, one per log directory for the whole process.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::entry::AuditEntry;

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
  dir: PathBuf,
  file: Option<File>,
  size: u64,
  options: AuditOptions,
}

impl Writer {
  fn current(&self) -> PathBuf {
    self.dir.join("audit.log")
  }

  fn rotated(&self, i: u32) -> PathBuf {
    self.dir.join(format!("audit.{i}.log"))
  }

  fn rotate(&mut self) {
    self.file = None;
    let n = self.options.max_files;
    if n == 0 {
      let _ = std::fs::remove_file(self.current());
    } else {
      let _ = std::fs::remove_file(self.rotated(n));
      for i in (1..n).rev() {
        let _ = std::fs::rename(self.rotated(i), self.rotated(i + 1));
      }
      let _ = std::fs::rename(self.current(), self.rotated(1));
    }
    self.size = 0;
  }

  fn append(&mut self, line: &[u8]) -> io::Result<()> {
    if self.size >= self.options.max_file_size {
      self.rotate();
    }
    if self.file.is_none() {
      std::fs::create_dir_all(&self.dir)?;
      let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(self.current())?;
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
  writer: Arc<Mutex<Writer>>,
}

impl AuditLog {
  pub fn new(data_dir: &Path, options: AuditOptions) -> Self {
    let dir = data_dir.join("audit");
    // A failure here makes every append return false, as in loa-finn.
    let _ = std::fs::create_dir_all(&dir);
    let key = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    writers.retain(|_, w| w.strong_count() > 0);
    let writer = match writers.get(&key).and_then(Weak::upgrade) {
      Some(writer) => writer,
      None => {
        let size = std::fs::metadata(key.join("audit.log")).map_or(0, |m| m.len());
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
    AuditLog { dir, writer }
  }

  /// `<dataDir>/audit`, as given (not canonicalized), like loa-finn's `getLogDir()`.
  pub fn log_dir(&self) -> &Path {
    &self.dir
  }

  /// Appends one JSON line. Never panics; false on any error.
  pub fn append(&self, entry: &AuditEntry) -> bool {
    let Ok(mut line) = serde_json::to_vec(entry) else {
      return false;
    };
    line.push(b'\n');
    let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
    writer.append(&line).is_ok()
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::audit::entry::Action;

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
  fn an_unwritable_directory_returns_false() {
    let log = AuditLog::new(
      Path::new("/proc/finn-sandbox-no-such-dir"),
      AuditOptions::default(),
    );
    assert!(!log.append(&entry(0)));
  }
}
