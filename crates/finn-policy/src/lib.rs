//! What the sandbox allows: tokenize, command policy, git hardening, jail, redaction, the
//! sandbox environment. Imports neither the pool nor exec: the pipeline (`finn-sandbox-core`) wires
//! these to a runner.

pub mod argv;
pub mod command;
pub mod coreutils;
pub mod env;
pub mod error;
pub mod getopt;
pub mod git;
pub mod git_config;
pub mod git_options;
pub mod git_remote;
pub mod host_git;
pub mod jail;
pub mod jail_args;
pub mod redact;
pub mod tokenize;
pub mod topology;

pub use command::{CommandPolicy, default_policies};
pub use error::Denial;
pub use jail::FilesystemJail;
pub use redact::SecretRedactor;
pub use tokenize::{SandboxCommand, tokenize};
