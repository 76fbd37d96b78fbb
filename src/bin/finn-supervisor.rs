//! The supervisor process started by the finn-sandbox addon (one per pool). Not meant to be
//! run by hand: it expects its socket to the addon on fd 3. See `finn_supervisor::entry`.
#![deny(clippy::all)]

fn main() {
  std::process::exit(finn_supervisor::entry::main());
}
