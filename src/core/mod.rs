pub mod audit;
pub mod exec;
#[cfg(target_os = "linux")]
pub mod isolate;
pub mod limits;
pub mod policy;
pub mod pool;
pub mod sandbox;
