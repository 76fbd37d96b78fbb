//! The packed spec decoder never panics, and whatever it decodes validates to a job whose
//! timeout is the one given, or is refused naming a field.
#![no_main]

use finn_sandbox::binding::spec::packed_job;
use finn_sandbox::core::limits::MAX_TIMEOUT_MS;
use finn_sandbox::core::pool::JobSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
  let input = String::from_utf8_lossy(data);
  let Ok(raw) = packed_job(&input) else {
    return;
  };
  let timeout = raw.timeout_ms;
  match JobSpec::new(raw) {
    Ok(job) => {
      assert!((1..=MAX_TIMEOUT_MS).contains(&job.timeout_ms));
      if let Some(t) = timeout {
        assert_eq!(job.timeout_ms, t);
      }
    }
    Err(e) => {
      let message = e.to_string();
      assert!(
        message.starts_with("spec.") || message.starts_with("jailRoot"),
        "{message}"
      );
    }
  }
});
