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
