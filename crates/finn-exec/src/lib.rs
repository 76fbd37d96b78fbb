//! Spawn, capture, terminate: one child from start to a dead tree. Free of pool and napi
//! concerns so sessions and isolation can reuse it.

pub mod capture;
pub mod later;
pub mod lifecycle;
pub mod outcome;
pub mod pidfd;
pub mod poll;
pub mod run;
pub mod spawn;
pub mod stop;
pub mod terminate;
pub mod tree;
pub mod utf8;

pub use capture::TRUNCATION_MARKER;
pub use outcome::{EndedBy, ExitStatus, Finished};
pub use run::{Limits, run, run_blocking};
pub use spawn::{SpawnError, SpawnSpec, resolve_program};
pub use stop::{Stop, StopCell};
pub use terminate::{REAP_BOUND, kill_tree_now};
