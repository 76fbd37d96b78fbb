//! Lanes, queue and fairness, dispatch, worker threads, stats, shutdown.

pub mod config;
pub mod error;
pub mod lane;
#[expect(
  clippy::module_inception,
  reason = "the pool type lives in pool/pool.rs beside its parts"
)]
pub mod pool;
pub mod stats;
pub mod worker;

pub use crate::core::exec::TRUNCATION_MARKER;
pub use config::{JobSpec, Lane, PoolConfig, RawJob};
pub use error::{PoolError, PoolErrorCode};
pub use pool::{Completion, ExecResult, JobOutcome, Pool, Submitted, TEST_PANIC_SESSION};
pub use stats::PoolStats;
