#![deny(clippy::all)]

pub mod binding;
pub mod core;
