//! The only code that touches napi: classes, option conversion, error mapping.

pub mod convert;
pub mod error;
pub mod event_loop;
pub mod executor;
pub mod isolate;
pub mod limits;
pub mod logging;
pub mod pool;
pub mod pool_runner;
pub mod process;
pub mod sandbox;
pub mod session;
pub mod spec;
pub mod tools;
