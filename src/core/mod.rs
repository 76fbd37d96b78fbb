pub mod audit;
pub mod exec;
pub mod limits;
pub mod policy;
pub mod pool;
pub mod sandbox;
