//! Test-only ways to break a job on purpose, compiled only with the `test-hooks` cargo feature
//! (the development build of the addon enables it for vitest; a consumer's build never does).

/// Session id that makes a job panic when `FINN_SANDBOX_TEST_HOOKS=1` was set at pool creation,
/// so the tests can prove a panic becomes a rejection and the pool keeps working.
pub const TEST_PANIC_SESSION: &str = "__finn_sandbox_test_panic__";

/// Whether pools created now honour the hooks.
pub(super) fn enabled() -> bool {
  std::env::var_os("FINN_SANDBOX_TEST_HOOKS").is_some_and(|v| v == "1")
}

/// Panics inside job `id` when the hooks are on and its session asks for it.
pub(super) fn before_run(enabled: bool, session_id: Option<&str>, id: u64) {
  if enabled && session_id == Some(TEST_PANIC_SESSION) {
    panic!("test hook: job {id} panics on purpose");
  }
}
