//! The supervisor process started by the finn-sandbox addon (one per pool). Not meant to be
//! run by hand: it expects its socket to the addon on fd 3.
//!
//! It compiles the three rooms it runs (`supervisor`, and below it `exec` and `isolate`) from
//! their sources instead of linking the crate's library: the library carries the napi binding,
//! whose registration constructors would run in every supervisor and reaper and keep the whole
//! crate's code mapped (2.2 MB of text, 19 constructors). Every idle pool holds this process
//! and its reapers, so their size is part of the pool's idle RSS.
#![deny(clippy::all)]

#[path = "../core/exec/mod.rs"]
pub mod exec;
#[cfg(target_os = "linux")]
#[path = "../core/isolate/mod.rs"]
pub mod isolate;
#[path = "../core/supervisor/mod.rs"]
pub mod supervisor;
/// The rooms answer to `crate::core::...`, as in the library.
mod core {
  #[cfg(target_os = "linux")]
  pub use super::isolate;
  pub use super::{exec, supervisor};
}

fn main() {
  std::process::exit(core::supervisor::server::main());
}
