//! A tool call's arguments, checked against its parameters (`def.rs`); every error names the
//! field (`args.offset must be an integer from 1 to …`).

use serde_json::Value;

use super::def::{Kind, ToolName, allowed_git_commands};
use finn_job::limits::{DEFAULT_READ_LINES, DEFAULT_TOOL_RESULTS};

/// A call's arguments, checked and with their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArgs {
  Read {
    path: String,
    /// 1-based.
    offset: u64,
    limit: u64,
  },
  Ls {
    path: String,
  },
  Find {
    pattern: String,
    path: String,
    max_results: u64,
  },
  Grep {
    pattern: String,
    path: String,
    glob: Option<String>,
    ignore_case: bool,
    word: bool,
    max_count: Option<u64>,
    max_results: u64,
  },
  Git {
    command: String,
    args: Vec<String>,
  },
}

/// Bad input: which field, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
  pub field: String,
  pub reason: String,
}

impl std::fmt::Display for ArgError {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    write!(f, "{} {}", self.field, self.reason)
  }
}

fn error(field: &str, reason: impl Into<String>) -> ArgError {
  ArgError {
    field: format!("args.{field}"),
    reason: reason.into(),
  }
}

/// The checked value of one parameter, by kind.
enum Checked {
  Text(String),
  Integer(u64),
  Bool(bool),
  Strings(Vec<String>),
}

fn check(name: &str, kind: Kind, value: &Value) -> Result<Checked, ArgError> {
  match kind {
    Kind::Path | Kind::Text | Kind::GitCommand => {
      let Some(s) = value.as_str() else {
        return Err(error(name, "must be a string"));
      };
      if s.is_empty() {
        return Err(error(name, "must not be empty"));
      }
      if s.contains('\0') {
        return Err(error(name, "must not contain NUL bytes"));
      }
      if kind == Kind::GitCommand && !allowed_git_commands().contains(&s) {
        return Err(error(
          name,
          format!(
            "must be one of {} (got {s:?})",
            allowed_git_commands().join(", ")
          ),
        ));
      }
      Ok(Checked::Text(s.to_owned()))
    }
    Kind::Integer { min, max } => match value.as_u64() {
      Some(n) if (min..=max).contains(&n) => Ok(Checked::Integer(n)),
      _ => Err(error(
        name,
        format!("must be an integer from {min} to {max}"),
      )),
    },
    Kind::Bool => value
      .as_bool()
      .map(Checked::Bool)
      .ok_or_else(|| error(name, "must be a boolean")),
    Kind::Strings => {
      let Some(items) = value.as_array() else {
        return Err(error(name, "must be an array of strings"));
      };
      items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
          Some(s) if !s.contains('\0') => Ok(s.to_owned()),
          Some(_) => Err(error(&format!("{name}[{i}]"), "must not contain NUL bytes")),
          None => Err(error(&format!("{name}[{i}]"), "must be a string")),
        })
        .collect::<Result<_, _>>()
        .map(Checked::Strings)
    }
  }
}

/// The checked parameters of one call, by name.
struct Fields(Vec<(&'static str, Checked)>);

impl Fields {
  fn take(&mut self, name: &str) -> Option<Checked> {
    let i = self.0.iter().position(|(n, _)| *n == name)?;
    Some(self.0.remove(i).1)
  }

  fn text(&mut self, name: &str) -> Option<String> {
    match self.take(name)? {
      Checked::Text(s) => Some(s),
      _ => None,
    }
  }

  fn integer(&mut self, name: &str) -> Option<u64> {
    match self.take(name)? {
      Checked::Integer(n) => Some(n),
      _ => None,
    }
  }

  fn flag(&mut self, name: &str) -> bool {
    matches!(self.take(name), Some(Checked::Bool(true)))
  }

  fn strings(&mut self, name: &str) -> Vec<String> {
    match self.take(name) {
      Some(Checked::Strings(v)) => v,
      _ => Vec::new(),
    }
  }
}

impl ToolArgs {
  /// Checks `args` (a JSON object; `null` is `{}`) against `tool`'s parameters: unknown fields,
  /// wrong types, values out of range and missing required fields are refused, naming the field.
  /// An explicit `null` is the same as leaving the field out.
  pub fn parse(tool: ToolName, args: &Value) -> Result<Self, ArgError> {
    let empty = serde_json::Map::new();
    let object = match args {
      Value::Null => &empty,
      Value::Object(o) => o,
      _ => {
        return Err(ArgError {
          field: "args".into(),
          reason: "must be an object".into(),
        });
      }
    };
    let params = tool.params();
    if let Some(unknown) = object.keys().find(|k| !params.iter().any(|p| p.name == *k)) {
      let names: Vec<&str> = params.iter().map(|p| p.name).collect();
      return Err(error(
        unknown,
        format!(
          "is not a parameter of {} (it takes {})",
          tool.as_str(),
          names.join(", ")
        ),
      ));
    }
    let mut fields = Fields(Vec::new());
    for p in params {
      match object.get(p.name) {
        None | Some(Value::Null) if p.required => return Err(error(p.name, "is required")),
        None | Some(Value::Null) => {}
        Some(v) => fields.0.push((p.name, check(p.name, p.kind, v)?)),
      }
    }
    let path = |f: &mut Fields| f.text("path").unwrap_or_else(|| ".".into());
    let results = |f: &mut Fields| f.integer("maxResults").unwrap_or(DEFAULT_TOOL_RESULTS);
    let mut f = fields;
    Ok(match tool {
      ToolName::Read => ToolArgs::Read {
        path: path(&mut f),
        offset: f.integer("offset").unwrap_or(1),
        limit: f.integer("limit").unwrap_or(DEFAULT_READ_LINES),
      },
      ToolName::Ls => ToolArgs::Ls { path: path(&mut f) },
      ToolName::Find => {
        let pattern = f.text("pattern").expect("required");
        name_glob(&pattern).map_err(|reason| error("pattern", reason))?;
        ToolArgs::Find {
          pattern,
          path: path(&mut f),
          max_results: results(&mut f),
        }
      }
      ToolName::Grep => {
        let glob = f.text("glob");
        if let Some(g) = &glob {
          name_glob(g).map_err(|reason| error("glob", reason))?;
        }
        ToolArgs::Grep {
          pattern: f.text("pattern").expect("required"),
          path: path(&mut f),
          glob,
          ignore_case: f.flag("ignoreCase"),
          word: f.flag("word"),
          max_count: f.integer("maxCount"),
          max_results: results(&mut f),
        }
      }
      ToolName::Git => ToolArgs::Git {
        command: f.text("command").expect("required"),
        args: f.strings("args"),
      },
    })
  }
}

/// A glob on names that `fd --glob`, `rg --glob`, `find -name` and `grep --include` read alike:
/// `*`, `?`, `[..]` and literal characters; no `/` (a name has none), no `{..}` or `**` (fd and rg
/// take them, find and grep do not), no `\` (escapes differ), and no leading `!` (rg's negation).
pub fn name_glob(glob: &str) -> Result<(), String> {
  if glob.contains('/') {
    return Err("must match names only (no /)".into());
  }
  if glob.contains(['{', '}', '\\']) || glob.contains("**") {
    return Err("may use only *, ? and [..] (no {..}, ** or \\)".into());
  }
  if glob.starts_with('!') {
    return Err("must not start with ! (no negation)".into());
  }
  // fd and rg match globs on bytes, grep's `--include` (in a UTF-8 locale) on characters: `?`
  // and `[..]` would count a non-ASCII character differently.
  if !glob.is_ascii() && glob.contains(['?', '[']) {
    return Err("may use ? and [..] only in an ASCII glob (a non-ASCII character is one or several bytes, depending on the program)".into());
  }
  // A class must close: fd and rg refuse `[a`, find and grep would take it literally. Its
  // first character (after `!` or `^`) may be `]` itself.
  let chars: Vec<char> = glob.chars().collect();
  let mut i = 0;
  while i < chars.len() {
    if chars[i] == '[' {
      let mut j = i + 1;
      if matches!(chars.get(j), Some('!' | '^')) {
        j += 1;
      }
      if chars.get(j) == Some(&']') {
        j += 1;
      }
      match chars[j.min(chars.len())..].iter().position(|c| *c == ']') {
        Some(end) => i = j + end,
        None => return Err("has a [ without its closing ]".into()),
      }
    }
    i += 1;
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;
  use serde_json::json;

  fn err(tool: ToolName, args: Value) -> String {
    ToolArgs::parse(tool, &args).unwrap_err().to_string()
  }

  #[test]
  fn defaults_fill_what_the_call_leaves_out() {
    assert_eq!(
      ToolArgs::parse(ToolName::Read, &json!({"path": "a"})).unwrap(),
      ToolArgs::Read {
        path: "a".into(),
        offset: 1,
        limit: 2000
      }
    );
    assert_eq!(
      ToolArgs::parse(ToolName::Ls, &Value::Null).unwrap(),
      ToolArgs::Ls { path: ".".into() }
    );
    assert_eq!(
      ToolArgs::parse(ToolName::Git, &json!({"command": "status", "args": null})).unwrap(),
      ToolArgs::Git {
        command: "status".into(),
        args: vec![]
      }
    );
  }

  #[test]
  fn every_error_names_the_field() {
    assert_eq!(err(ToolName::Read, json!({})), "args.path is required");
    assert_eq!(
      err(ToolName::Read, json!({"path": "a", "offset": 0})),
      "args.offset must be an integer from 1 to 4294967295"
    );
    assert_eq!(
      err(ToolName::Read, json!({"path": "a", "limit": "5"})),
      "args.limit must be an integer from 1 to 100000"
    );
    assert_eq!(
      err(ToolName::Read, json!({"path": "a", "lines": 5})),
      "args.lines is not a parameter of read (it takes path, offset, limit)"
    );
    assert_eq!(
      err(ToolName::Grep, json!({"pattern": "x", "word": "yes"})),
      "args.word must be a boolean"
    );
    assert_eq!(
      err(ToolName::Find, json!({"pattern": "src/*.rs"})),
      "args.pattern must match names only (no /)"
    );
    assert_eq!(
      err(ToolName::Grep, json!({"pattern": "x", "glob": "*.{rs,ts}"})),
      "args.glob may use only *, ? and [..] (no {..}, ** or \\)"
    );
    assert_eq!(
      err(ToolName::Git, json!({"command": "git", "args": []})),
      format!(
        "args.command must be one of {} (got \"git\")",
        allowed_git_commands().join(", ")
      )
    );
    assert_eq!(
      err(ToolName::Git, json!({"command": "log", "args": ["-1", 2]})),
      "args.args[1] must be a string"
    );
    for glob in ["[", "[a", "*[]*", "x[!]"] {
      assert_eq!(
        err(ToolName::Find, json!({"pattern": glob})),
        "args.pattern has a [ without its closing ]",
        "{glob}"
      );
    }
    assert!(ToolArgs::parse(ToolName::Grep, &json!({"pattern": "x", "glob": "?n?.md"})).is_ok());
    assert!(
      err(ToolName::Find, json!({"pattern": "ü?.md"}))
        .starts_with("args.pattern may use ? and [..] only in an ASCII glob")
    );
    for glob in ["[ab]*", "[!a]", "[]]x", "a]", "[^x]?", "ü*.md"] {
      assert_eq!(name_glob(glob), Ok(()), "{glob}");
    }
    assert_eq!(err(ToolName::Ls, json!([1])), "args must be an object");
    assert_eq!(
      err(ToolName::Ls, json!({"path": "a\u{0}b"})),
      "args.path must not contain NUL bytes"
    );
  }
}
