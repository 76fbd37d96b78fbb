pub mod exec;
pub mod pool;
