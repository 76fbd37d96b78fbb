//! Lanes, queue and fairness, dispatch, worker threads, stats, shutdown. The addon lends the
//! pool to the sandbox pipeline as its `Runner` (the binding's `pool_runner.rs`).

pub mod config;
pub mod error;
pub mod inline;
mod job;
pub mod lane;
pub mod pool;
pub mod process;
mod state;
pub mod stats;
#[cfg(feature = "test-hooks")]
mod test_hooks;
pub mod worker;

pub use config::{JobSpec, PoolConfig};
pub use error::{BinaryProblem, Crashed, NoThread, PoolError, PoolErrorCode, Unavailable};
pub use finn_job::{Lane, RawJob, TRUNCATION_MARKER};
pub use inline::{INLINE_WINDOW, InlineHost, InlineJob};
pub use job::{JobOutcome, JobResult};
pub use pool::{Completion, ExitHandle, Pool, Submitted, SupervisorLease};
pub use process::{ProcessEnd, ProcessHandle, ProcessSink, ProcessSpec};
pub use state::StopReason;
pub use stats::PoolStats;
#[cfg(feature = "test-hooks")]
pub use test_hooks::TEST_PANIC_SESSION;
