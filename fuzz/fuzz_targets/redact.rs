//! Redaction never panics, and a known secret never survives it.
#![no_main]

use finn_sandbox::core::policy::SecretRedactor;
use libfuzzer_sys::fuzz_target;

const KNOWN_SECRET: &str = "sk-ant-api-0123456789abcdef";

fuzz_target!(|data: &[u8]| {
  let input = String::from_utf8_lossy(data);
  let redactor = SecretRedactor::new([("ANTHROPIC_API_KEY", KNOWN_SECRET)]);
  let out = redactor.redact(&input);
  assert!(!out.contains(KNOWN_SECRET), "{input:?} -> {out:?}");
  // Embedded anywhere, it is still removed.
  let mid = input.len() / 2;
  let cut = (0..=mid)
    .rev()
    .find(|&i| input.is_char_boundary(i))
    .unwrap_or(0);
  let embedded = format!("{}{KNOWN_SECRET}{}", &input[..cut], &input[cut..]);
  assert!(!redactor.redact(&embedded).contains(KNOWN_SECRET));
});
