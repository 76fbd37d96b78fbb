pub mod audit;
pub mod exec;
pub mod policy;
pub mod pool;
pub mod supervisor;
