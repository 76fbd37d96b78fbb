//! Lanes, queue and fairness, dispatch, worker threads, stats, shutdown. The pool is a
//! `Runner` for the sandbox pipeline (see `core/sandbox/pool_runner.rs`).

pub mod config;
pub mod error;
pub mod inline;
mod job;
pub mod lane;
#[expect(
  clippy::module_inception,
  reason = "the pool type lives in pool/pool.rs beside its parts"
)]
pub mod pool;
mod state;
pub mod stats;
#[cfg(feature = "test-hooks")]
mod test_hooks;
pub mod worker;

pub use crate::core::exec::TRUNCATION_MARKER;
pub use config::{JobSpec, Lane, PoolConfig, RawJob};
pub use error::{BinaryProblem, Crashed, NoThread, PoolError, PoolErrorCode, Unavailable};
pub use inline::{INLINE_WINDOW, InlineHost, InlineJob};
pub use job::{ExecResult, JobOutcome};
pub use pool::{Completion, ExitHandle, Pool, Submitted};
pub use stats::PoolStats;
#[cfg(feature = "test-hooks")]
pub use test_hooks::TEST_PANIC_SESSION;
