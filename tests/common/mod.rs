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
