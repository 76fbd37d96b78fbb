//! The egress proxy of a pool: what a job may reach by name (`rules.rs`), which resolved
//! addresses are never reached unless the job allows local ones (`addr.rs`), the request head
//! (`head.rs`), the SOCKS5 negotiation (`socks.rs`) and the TLS ClientHello's server name
//! (`sni.rs`) it reads, the proxy itself (`proxy.rs`), its relay's bulk path (`splice.rs`) and
//! the audit record of each connection (`record.rs`).
//!
//! Plain Rust and tokio (a current-thread runtime: the proxy is one thread in a process of the
//! supervisor's, holding many idle connections, which a poll loop would hold as well but with
//! every copy, byte count and timeout written by hand). Of ours it uses only `finn-audit`'s
//! record type. Nothing here routes a command's traffic to the proxy: that is the isolation's.

pub mod addr;
pub mod head;
pub mod proxy;
pub mod record;
pub mod rules;
pub mod service;
pub mod sni;
pub mod socks;
pub mod splice;

pub use addr::AddrClass;
pub use proxy::{Resolve, SystemResolver};
pub use record::{ConnectionRecord, Decision};
pub use rules::{NetworkOptions, Policy, RulesError};
