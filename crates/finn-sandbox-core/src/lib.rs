//! loa-finn's ToolSandbox pipeline: the policy decides, the audit records, an injected
//! [`Runner`] runs. It knows no process and no napi: the native pool, the binding's JS executor
//! adapter and the test double are all runners.

pub mod check_slots;
pub mod config;
pub mod isolation;
pub mod pipeline;
#[cfg(test)]
pub mod recording;
pub mod runner;

pub use config::{SandboxConfig, SandboxResult};
pub use isolation::{SandboxIsolation, options_json};
pub use pipeline::{CheckedCommand, Refusal, ToolSandbox};
pub use runner::{Done, NoRunner, Output, RunOutcome, Runner, RunnerError};
