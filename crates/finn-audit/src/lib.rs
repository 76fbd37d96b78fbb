//! The audit log: JSONL with rotation, one writer per directory.

pub mod entry;
pub mod nofollow;
pub mod writer;

pub use entry::{Action, AuditEntry, EgressRecord, IsolationRecord, iso_timestamp_now};
pub use writer::{AuditLog, AuditOptions};
