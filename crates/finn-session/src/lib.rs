//! A session's long-lived bash (module doc to be written).

pub mod protocol;
pub mod shell;

pub use shell::{CommandResult, CommandStatus, RunOptions, Session, SessionConfig, SessionError};
