//! Code shared by the integration tests that `mod common;` it.
// Each test crate uses its own subset of these helpers: what one backend's file does not call
// would otherwise fail `clippy -D warnings` as dead code in that crate.
#![allow(dead_code)]

pub mod isolate_attacks;
