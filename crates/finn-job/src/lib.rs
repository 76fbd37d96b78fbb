//! What a job is, below every room that runs or checks one: the caller's description
//! ([`RawJob`]), its isolation options ([`isolation`]), and every default and limit
//! ([`limits`]). The pool validates and runs it; the sandbox pipeline builds it; neither needs
//! the other for that.

pub mod isolation;
mod job;
pub mod limits;

pub use job::{Lane, RawJob, RunnerError};

/// Appended to the stream that was cut.
pub const TRUNCATION_MARKER: &str = "\n[TRUNCATED at maxBuffer]";
