//! Containment by a supervisor process of our own: one per pool, started with `posix_spawn`,
//! with a long-lived job reaper (a child subreaper) per running job. No process of a job
//! outlives it, nor Node: see `server.rs` and `reaper.rs` for the processes, `client.rs` and
//! `run.rs` for the addon's side, `protocol.rs` for the messages.

pub mod child;
pub mod client;
pub mod descendants;
pub mod egress;
pub mod entry;
pub mod error;
pub mod protocol;
pub mod reaper;
pub mod route;
pub mod run;
pub mod server;
pub mod shell_job;
pub mod shield;
pub mod wire;

pub use client::Supervisor;
pub use error::{Crash, Fault, IoCause};
pub use run::{JobTerms, RunError, kill_trees_now, run_blocking};
