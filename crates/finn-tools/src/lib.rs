//! The structured agent tools (`read`, `ls`, `find`, `grep`, `git`) defined once: their names,
//! parameters and JSON schemas (`def.rs`), argument checks naming the field (`args.rs`), the
//! path check inside the worktree and the argv each tool runs, never through a shell (`plan.rs`),
//! and the runner's output turned into a `ToolResult` (`finish.rs`, byte cuts in `text.rs`,
//! `.gitignore` rules in `gitignore.rs`).
//!
//! May use `finn-policy` (the jail, the git policy and topology), `finn-job` (limits), the
//! `ignore` crate (git's ignore rules, as rg and fd read them), and `regex-syntax` (the
//! pattern's syntax tree) only:
//! what runs the argv (the ToolSandbox pipeline, then a pool or a JS runner) is the caller's.

pub mod args;
pub mod def;
pub mod finish;
pub mod gitignore;
pub mod plan;
pub mod text;

pub use args::{ArgError, ToolArgs};
pub use def::{TOOL_NAMES, ToolName, allowed_git_commands, schemas};
pub use finish::{RunnerOutput, ToolResult, finish};
pub use plan::{Finders, Plan, Planned, plan};
