//! Each tool's name and parameters, once: the argument checks (`args.rs`) and the JSON schemas
//! handed to a model both read this table.

use serde_json::{Map, Value, json};

use finn_job::limits::MAX_TOOL_RESULTS;
use finn_policy::jail_args::runs_offline;
use finn_policy::topology::{GIT_LISTING, GIT_READ_ONLY};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolName {
  Read,
  Ls,
  Find,
  Grep,
  Git,
}

/// The tools, in the order `TOOL_NAMES` lists them.
pub const TOOLS: [ToolName; 5] = [
  ToolName::Read,
  ToolName::Ls,
  ToolName::Find,
  ToolName::Grep,
  ToolName::Git,
];

pub const TOOL_NAMES: [&str; 5] = ["read", "ls", "find", "grep", "git"];

impl ToolName {
  pub fn parse(name: &str) -> Option<Self> {
    TOOL_NAMES.iter().position(|n| *n == name).map(|i| TOOLS[i])
  }

  pub fn as_str(self) -> &'static str {
    TOOL_NAMES[TOOLS.iter().position(|t| *t == self).expect("listed")]
  }

  fn description(self) -> &'static str {
    match self {
      ToolName::Read => {
        "Read a text file of the worktree: numbered lines under a [File: <path>] header, a page at a time (offset is 1-based)."
      }
      ToolName::Ls => "List a directory of the worktree: entries sorted, directories end with /.",
      ToolName::Find => {
        "Find files and directories whose name matches a glob (*, ?, [..]); paths relative to the worktree, sorted. Hidden entries are skipped."
      }
      ToolName::Grep => {
        "Search file contents with a regular expression: path:line:text lines, sorted. Hidden entries are skipped."
      }
      ToolName::Git => "Run a read-only git command in the worktree's repository.",
    }
  }

  /// The tool's parameters, in schema order.
  pub fn params(self) -> &'static [Param] {
    match self {
      ToolName::Read => &READ,
      ToolName::Ls => &LS,
      ToolName::Find => &FIND,
      ToolName::Grep => &GREP,
      ToolName::Git => &GIT,
    }
  }
}

/// What a parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
  /// A path relative to the worktree (the jail checks it).
  Path,
  /// Non-empty text.
  Text,
  /// An integer in `min..=max`.
  Integer {
    min: u64,
    max: u64,
  },
  Bool,
  /// One of [`allowed_git_commands`].
  GitCommand,
  /// Strings (each one argument, never split).
  Strings,
}

#[derive(Debug, Clone, Copy)]
pub struct Param {
  pub name: &'static str,
  pub kind: Kind,
  pub required: bool,
  pub description: &'static str,
}

const fn param(name: &'static str, kind: Kind, required: bool, description: &'static str) -> Param {
  Param {
    name,
    kind,
    required,
    description,
  }
}

const COUNT: Kind = Kind::Integer {
  min: 1,
  max: MAX_TOOL_RESULTS,
};

const READ: [Param; 3] = [
  param(
    "path",
    Kind::Path,
    true,
    "File path, relative to the worktree.",
  ),
  param(
    "offset",
    Kind::Integer {
      min: 1,
      max: u32::MAX as u64,
    },
    false,
    "First line to show (1-based). Default 1.",
  ),
  param("limit", COUNT, false, "Lines to show. Default 2000."),
];

const LS: [Param; 1] = [param(
  "path",
  Kind::Path,
  false,
  "Directory, relative to the worktree. Default: the worktree.",
)];

const FIND: [Param; 3] = [
  param(
    "pattern",
    Kind::Text,
    true,
    "Glob on names: *, ? and [..]; no / and no {..}.",
  ),
  param(
    "path",
    Kind::Path,
    false,
    "Directory to search, relative to the worktree. Default: the worktree.",
  ),
  param(
    "maxResults",
    COUNT,
    false,
    "Paths shown at most. Default 1000.",
  ),
];

const GREP: [Param; 7] = [
  param(
    "pattern",
    Kind::Text,
    true,
    "Regular expression (Rust regex syntax).",
  ),
  param(
    "path",
    Kind::Path,
    false,
    "File or directory to search, relative to the worktree. Default: the worktree.",
  ),
  param(
    "glob",
    Kind::Text,
    false,
    "Only files whose name matches this glob (*, ?, [..]; no /).",
  ),
  param("ignoreCase", Kind::Bool, false, "Match case-insensitively."),
  param("word", Kind::Bool, false, "Match whole words only."),
  param("maxCount", COUNT, false, "Matching lines per file at most."),
  param(
    "maxResults",
    COUNT,
    false,
    "Matching lines shown at most. Default 1000.",
  ),
];

const GIT: [Param; 2] = [
  param("command", Kind::GitCommand, true, "The git subcommand."),
  param(
    "args",
    Kind::Strings,
    false,
    "Its arguments, each one element (no shell).",
  ),
];

/// The git subcommands the `git` tool runs: those the sandbox's topology lists as read-only
/// (`GIT_READ_ONLY`) or as listing with the right options (`GIT_LISTING`, such as
/// `branch --list`), and whose jail stage runs them with no protocol and an option allowlist
/// (`jail_args::runs_offline`). One source: adding a subcommand there adds it here. A listing
/// subcommand runs only when its arguments keep it listing (`plan.rs`).
pub fn allowed_git_commands() -> Vec<&'static str> {
  GIT_READ_ONLY
    .iter()
    .chain(GIT_LISTING)
    .copied()
    .filter(|sub| runs_offline(sub))
    .collect()
}

fn schema_of(kind: Kind, description: &str) -> Value {
  let mut s = match kind {
    Kind::Path | Kind::Text => json!({"type": "string", "minLength": 1}),
    Kind::Integer { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
    Kind::Bool => json!({"type": "boolean"}),
    Kind::GitCommand => json!({"type": "string", "enum": allowed_git_commands()}),
    Kind::Strings => json!({"type": "array", "items": {"type": "string"}}),
  };
  s["description"] = json!(description);
  s
}

/// One JSON Schema (draft 2020-12 subset, as LLM tool declarations take it) per tool.
pub fn schemas() -> Value {
  let mut out = Map::new();
  for tool in TOOLS {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in tool.params() {
      properties.insert(p.name.into(), schema_of(p.kind, p.description));
      if p.required {
        required.push(p.name);
      }
    }
    out.insert(
      tool.as_str().into(),
      json!({
        "type": "object",
        "description": tool.description(),
        "properties": properties,
        "required": required,
        "additionalProperties": false,
      }),
    );
  }
  Value::Object(out)
}

/// The defaults the descriptions name, checked against the limits by a test.
#[cfg(test)]
const _: () = assert!(
  finn_job::limits::DEFAULT_READ_LINES == 2000 && finn_job::limits::DEFAULT_TOOL_RESULTS == 1000
);

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn the_git_commands_are_the_read_only_ones_the_jail_runs_offline() {
    let git = allowed_git_commands();
    assert!(git.contains(&"status") && git.contains(&"log") && git.contains(&"diff"));
    for sub in &git {
      assert!(
        (GIT_READ_ONLY.contains(sub) || GIT_LISTING.contains(sub)) && runs_offline(sub),
        "{sub}"
      );
    }
    assert!(git.contains(&"branch"));
    for sub in ["add", "commit", "fetch", "push", "checkout", "config"] {
      assert!(!git.contains(&sub), "{sub}");
    }
  }

  #[test]
  fn every_tool_has_a_closed_schema_whose_git_enum_is_the_allowed_list() {
    let s = schemas();
    for name in TOOL_NAMES {
      assert_eq!(s[name]["type"], "object", "{name}");
      assert_eq!(s[name]["additionalProperties"], false, "{name}");
      assert_eq!(ToolName::parse(name).unwrap().as_str(), name);
    }
    assert_eq!(s["read"]["required"], json!(["path"]));
    assert_eq!(
      s["git"]["properties"]["command"]["enum"],
      json!(allowed_git_commands())
    );
    assert_eq!(ToolName::parse("bash"), None);
  }
}
