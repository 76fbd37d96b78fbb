//! Accepted commands have clean tokens: non-empty, no whitespace, no shell metacharacter.
#![no_main]

use finn_sandbox::core::policy::tokenize;
use libfuzzer_sys::fuzz_target;

const METACHARS: [char; 16] = [
  '|', '&', ';', '$', '`', '(', ')', '{', '}', '!', '<', '>', '\\', '#', '~', '\0',
];

fuzz_target!(|data: &[u8]| {
  let input = String::from_utf8_lossy(data);
  if let Ok(cmd) = tokenize(&input) {
    for token in std::iter::once(&cmd.binary).chain(&cmd.args) {
      assert!(!token.is_empty());
      assert!(!token.chars().any(char::is_whitespace), "{token:?}");
      assert!(!token.contains(METACHARS), "{token:?}");
    }
  }
});
