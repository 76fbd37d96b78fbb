//! The core's crates under the names the integration tests and benches use
//! (`finn_sandbox::core::pool`, ...). Each room is a crate of its own in `crates/`.

pub use finn_audit as audit;
pub use finn_exec as exec;
#[cfg(target_os = "linux")]
pub use finn_isolate as isolate;
pub use finn_job as job;
pub use finn_job::limits;
pub use finn_policy as policy;
pub use finn_pool as pool;
pub use finn_sandbox_core as sandbox;
pub use finn_supervisor as supervisor;
