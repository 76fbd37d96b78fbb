//! The sandbox's policy pipeline: tokenize, command policy, jail, redaction, environment.

pub mod argv;
pub mod command;
pub mod coreutils;
pub mod env;
pub mod error;
pub mod getopt;
pub mod git;
pub mod git_config;
pub mod git_options;
pub mod jail;
pub mod jail_args;
pub mod redact;
pub mod sandbox;
pub mod tokenize;

pub use command::{CommandPolicy, default_policies};
pub use error::Denial;
pub use jail::FilesystemJail;
pub use redact::SecretRedactor;
pub use sandbox::{Prepared, SandboxConfig, SandboxResult, ToolSandbox};
pub use tokenize::{SandboxCommand, tokenize};
