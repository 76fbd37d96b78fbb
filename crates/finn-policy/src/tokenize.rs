//! Command string -> binary + args, refusing anything a shell would interpret.

use super::error::Denial;

/// A tokenized command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCommand {
  pub binary: String,
  pub args: Vec<String>,
}

/// loa-finn's set: `| & ; $ ` ( ) { } ! < > \ # ~`.
const SHELL_METACHARS: &[char] = &[
  '|', '&', ';', '$', '`', '(', ')', '{', '}', '!', '<', '>', '\\', '#', '~',
];

/// Trims, refuses empty commands, shell metacharacters and NUL, and splits on whitespace.
pub fn tokenize(command: &str) -> Result<SandboxCommand, Denial> {
  let trimmed = command.trim();
  if trimmed.is_empty() {
    return Err(Denial::plain("Empty command"));
  }
  // NUL cannot reach execve; a newline would be a command separator to a shell.
  if trimmed.contains(SHELL_METACHARS) || trimmed.contains('\0') {
    return Err(Denial::plain("Shell metacharacters rejected"));
  }
  let mut tokens = trimmed.split_whitespace().map(str::to_owned);
  let binary = tokens.next().expect("non-empty after trim");
  Ok(SandboxCommand {
    binary,
    args: tokens.collect(),
  })
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn splits_on_any_whitespace() {
    let cmd = tokenize("  git\tlog \n --oneline  ").unwrap();
    assert_eq!(cmd.binary, "git");
    assert_eq!(cmd.args, ["log", "--oneline"]);
  }

  #[test]
  fn refuses_metacharacters_and_empty_commands() {
    for bad in [
      "ls | cat",
      "ls && x",
      "ls; x",
      "echo $HOME",
      "a `b`",
      "ls > f",
      "cat ~/x",
      "ls #",
      "a\\b",
      "ls\0",
    ] {
      assert_eq!(
        tokenize(bad).unwrap_err().message,
        "Shell metacharacters rejected",
        "{bad:?}"
      );
    }
    assert_eq!(tokenize("   ").unwrap_err().message, "Empty command");
  }
}
