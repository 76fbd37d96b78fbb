//! `finn_job::limits` as the addon exports them, so the JS side and its tests read the same numbers
//! (every value fits a JS number exactly).

use napi_derive::napi;

use finn_job::limits as job;

/// Every default and limit of a job and a pool (see `crates/finn-job/src/limits.rs`).
// JS sees it as `Limits`, the name of `native.d.ts`.
#[napi(object, js_name = "Limits")]
pub struct Defaults {
  pub default_timeout_ms: u32,
  pub max_timeout_ms: u32,
  pub default_max_buffer: u32,
  pub max_buffer_limit: u32,
  pub default_kill_grace_ms: u32,
  pub default_drain_ms: u32,
  pub default_shutdown_deadline_ms: u32,
  pub default_interactive_workers: u32,
  pub max_interactive_workers: u32,
  pub default_max_queue_depth: u32,
  pub default_sandbox_max_output: u32,
  pub default_max_log_bytes: u32,
  pub max_log_bytes: u32,
  pub default_background_timeout_ms: u32,
}

/// The defaults and limits, read once by `index.js`.
#[napi]
pub fn limits() -> Defaults {
  Defaults {
    default_timeout_ms: job::DEFAULT_TIMEOUT_MS as u32,
    max_timeout_ms: job::MAX_TIMEOUT_MS as u32,
    default_max_buffer: job::DEFAULT_MAX_BUFFER as u32,
    max_buffer_limit: job::MAX_BUFFER_LIMIT as u32,
    default_kill_grace_ms: job::DEFAULT_KILL_GRACE_MS as u32,
    default_drain_ms: job::DEFAULT_DRAIN_MS as u32,
    default_shutdown_deadline_ms: job::DEFAULT_SHUTDOWN_DEADLINE_MS as u32,
    default_interactive_workers: job::DEFAULT_INTERACTIVE_WORKERS as u32,
    max_interactive_workers: job::MAX_INTERACTIVE_WORKERS as u32,
    default_max_queue_depth: job::DEFAULT_MAX_QUEUE_DEPTH as u32,
    default_sandbox_max_output: job::DEFAULT_SANDBOX_MAX_OUTPUT as u32,
    default_max_log_bytes: job::DEFAULT_MAX_LOG_BYTES as u32,
    max_log_bytes: job::MAX_LOG_BYTES as u32,
    default_background_timeout_ms: job::DEFAULT_BACKGROUND_TIMEOUT_MS as u32,
  }
}
