//! `finn_job::limits` as the addon exports them, so the JS side and its tests read the same numbers
//! (every value fits a JS number exactly).

use napi_derive::napi;

use finn_job::limits as core;

/// Every default and limit of a job and a pool (see `crates/finn-job/src/limits.rs`).
#[napi(object)]
pub struct Limits {
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
}

/// The defaults and limits, read once by `index.js`.
#[napi]
pub fn limits() -> Limits {
  Limits {
    default_timeout_ms: core::DEFAULT_TIMEOUT_MS as u32,
    max_timeout_ms: core::MAX_TIMEOUT_MS as u32,
    default_max_buffer: core::DEFAULT_MAX_BUFFER as u32,
    max_buffer_limit: core::MAX_BUFFER_LIMIT as u32,
    default_kill_grace_ms: core::DEFAULT_KILL_GRACE_MS as u32,
    default_drain_ms: core::DEFAULT_DRAIN_MS as u32,
    default_shutdown_deadline_ms: core::DEFAULT_SHUTDOWN_DEADLINE_MS as u32,
    default_interactive_workers: core::DEFAULT_INTERACTIVE_WORKERS as u32,
    max_interactive_workers: core::MAX_INTERACTIVE_WORKERS as u32,
    default_max_queue_depth: core::DEFAULT_MAX_QUEUE_DEPTH as u32,
    default_sandbox_max_output: core::DEFAULT_SANDBOX_MAX_OUTPUT as u32,
  }
}
