//! Spawn, capture, a job's lifecycle: one child from start to a dead tree. Free of pool and napi
//! concerns so the supervisor, sessions and isolation can reuse it.

pub mod capture;
#[cfg(feature = "test-hooks")]
pub mod direct;
pub mod later;
pub mod lifecycle;
pub mod outcome;
pub mod pidfd;
pub mod pipes;
pub mod poll;
pub mod spawn;
pub mod stop;
pub mod tree;
pub mod utf8;

pub use capture::TRUNCATION_MARKER;
pub use lifecycle::{REAP_BOUND, RunLimits};
pub use outcome::{EndedBy, ExitStatus, Finished};
pub use spawn::{SpawnError, SpawnSpec, resolve_program};
pub use stop::{Stop, StopCell};
