//! What the sandbox allows: tokenize, command policy, git hardening, jail, redaction, the
//! sandbox environment. Imports neither the pool nor exec: the pipeline (`core::sandbox`) wires
//! these to a runner.

pub mod command;
pub mod env;
pub mod error;
pub mod git;
pub mod jail;
pub mod redact;
pub mod tokenize;

pub use command::{CommandPolicy, default_policies};
pub use error::Denial;
pub use jail::FilesystemJail;
pub use redact::SecretRedactor;
pub use tokenize::{SandboxCommand, tokenize};
