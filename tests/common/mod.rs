//! Code shared by the integration tests that `mod common;` it.
// Each test crate uses its own subset of these helpers: what one backend's file does not call
// would otherwise fail `clippy -D warnings` as dead code in that crate.
#![allow(dead_code)]

pub mod isolate_attacks;

use std::ffi::CString;

/// `renameat2(a, b, RENAME_EXCHANGE)`: both names swap their objects atomically (the host side
/// of the swap races).
pub fn exchange(a: &CString, b: &CString) -> i32 {
  // SAFETY: two NUL-terminated paths.
  unsafe {
    libc::renameat2(
      libc::AT_FDCWD,
      a.as_ptr(),
      libc::AT_FDCWD,
      b.as_ptr(),
      libc::RENAME_EXCHANGE,
    )
  }
}

/// A FIFO in a fresh directory (kept while the returned directory lives).
pub fn fifo() -> (tempfile::TempDir, std::path::PathBuf) {
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("gate");
  nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
  (dir, path)
}

/// Opens `fifo` for reading and writing, which never blocks, and puts a line in it for its
/// reader, whether or not that reader has opened it yet (the line stays while the returned
/// file is open).
pub fn open_fifo(fifo: &std::path::Path) -> std::fs::File {
  let mut f = std::fs::OpenOptions::new()
    .read(true)
    .write(true)
    .open(fifo)
    .unwrap();
  std::io::Write::write_all(&mut f, b"go\n").unwrap();
  f
}

/// Pids of live processes that carry `token` in the command line of any of their threads.
///
/// Each thread is read on its own: a process whose leader thread has exited shows `Z` in
/// `/proc/<pid>/stat` and an empty `/proc/<pid>/cmdline` (the leader has no memory any
/// more), yet runs on in its other threads, whose `task/<tid>` entries show both.
pub fn holders(token: &str) -> Vec<i32> {
  let me = std::process::id() as i32;
  let mut out = Vec::new();
  for entry in std::fs::read_dir("/proc").unwrap().flatten() {
    let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
      continue;
    };
    if pid == me {
      continue;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
      continue;
    };
    let holds = tasks.flatten().any(|task| {
      let live = std::fs::read_to_string(task.path().join("stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_owned()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'));
      live
        && std::fs::read(task.path().join("cmdline"))
          .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
    });
    if holds {
      out.push(pid);
    }
  }
  out
}

/// Writes the zombie-leader program (`tests/fixtures/zombie-leader.s`) into `dir` as an
/// executable `z` and returns its path.
pub fn zombie_leader(dir: &std::path::Path) -> std::path::PathBuf {
  program(dir, "z", include_str!("../fixtures/zombie-leader.hex"))
}

/// Writes the states program (`tests/fixtures/states.s`) into `dir` as an executable `s` and
/// returns its path.
pub fn states(dir: &std::path::Path) -> std::path::PathBuf {
  program(dir, "s", include_str!("../fixtures/states.hex"))
}

/// Writes the program whose bytes `hex` spells into `dir` as the executable `name`: the fixtures
/// are committed as hex so no assembler is needed at test time.
fn program(dir: &std::path::Path, name: &str, hex: &str) -> std::path::PathBuf {
  use std::os::unix::fs::PermissionsExt;
  let hex = hex.trim();
  let bytes: Vec<u8> = (0..hex.len())
    .step_by(2)
    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
    .collect();
  let path = dir.join(name);
  std::fs::write(&path, bytes).unwrap();
  std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
  path
}
