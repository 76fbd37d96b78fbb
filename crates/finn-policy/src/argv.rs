//! How each argument of an allowed command is read, by the target program's own rules: GNU
//! getopt_long tables for `ls`/`cat`/`wc`, an exact-spelling allowlist for git's subcommands,
//! and for any other (caller-configured) program a conservative reading in which a denied long
//! option is denied for every prefix down to one letter.

use super::command::CommandPolicy;
use super::coreutils;
use super::error::Denial;
use super::getopt::{Grammar, Parsed, Resolution};
use super::git_options::{self, GitOption};

/// What one argument is to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
  /// The subcommand, an option, or the `--` that ends options.
  Option,
  /// An option's value in its own element (`ls -I pattern`).
  Value,
  /// A file name: the jail checks it.
  Path,
  /// A git revision or pathspec before `--`: checked as a path when it names an existing path
  /// or contains `/` or `..` (git would read it from the filesystem, even outside the repository
  /// with an implicit `--no-index`).
  GitOperand,
}

fn denied(flag: &str) -> Denial {
  Denial::audited(
    format!("Flag not allowed: {flag}"),
    format!("flag_denied: {flag}"),
  )
}

fn not_allowlisted(program: &str, arg: &str) -> Denial {
  Denial::audited(
    format!("Flag not allowed: {arg} (not an option {program} is allowed)"),
    format!("flag_not_allowed: {arg}"),
  )
}

/// Which denied flag `arg` (an option-looking argument, before any `--`) uses, if any, read
/// conservatively for a program whose option table is unknown: `-x` anywhere in a short
/// cluster, `--flag`, `--flag=value`, and every prefix of a long flag down to one letter
/// (GNU getopt and git's parse-options accept unambiguous prefixes).
pub fn denied_flag<'p>(arg: &str, denied: &'p [String]) -> Option<&'p String> {
  denied.iter().find(|flag| {
    if arg == flag.as_str() || arg.starts_with(&format!("{flag}=")) {
      return true;
    }
    if let Some(letter) = flag.strip_prefix('-').filter(|f| f.len() == 1) {
      return !arg.starts_with("--") && arg.starts_with('-') && arg[1..].contains(letter);
    }
    if let (Some(long), Some(given)) = (flag.strip_prefix("--"), arg.strip_prefix("--")) {
      let name = given.split_once('=').map_or(given, |(n, _)| n);
      return !name.is_empty() && long.starts_with(name);
    }
    false
  })
}

/// The id getopt reports for a flag as written in a policy (`--dereference`, `-L`).
fn flag_id(grammar: &Grammar, flag: &str) -> Option<&'static str> {
  if let Some(long) = flag.strip_prefix("--") {
    return match grammar.resolve(long) {
      Resolution::Found(opt) => Some(opt.id),
      _ => None,
    };
  }
  let letter = flag.strip_prefix('-').filter(|l| l.chars().count() == 1)?;
  let c = letter.chars().next()?;
  grammar
    .parse(&[format!("-{c}"), "x".to_owned()])
    .ok()?
    .into_iter()
    .find_map(|p| match p {
      Parsed::Opt { id, .. } => Some(id),
      _ => None,
    })
}

/// The role of every argument of `binary` (the name the command used) under `policy`, or the
/// refusal of the first option it may not use.
pub fn roles(binary: &str, policy: &CommandPolicy, args: &[String]) -> Result<Vec<Role>, Denial> {
  if binary == "git" {
    return git_roles(policy, args);
  }
  if let Some(grammar) = coreutils::grammar(binary) {
    return grammar_roles(grammar, policy, args);
  }
  let mut roles = Vec::with_capacity(args.len());
  let mut options_ended = false;
  for arg in args {
    if options_ended {
      roles.push(Role::Path);
    } else if arg == "--" {
      options_ended = true;
      roles.push(Role::Option);
    } else if arg.starts_with('-') && arg != "-" {
      if let Some(flag) = denied_flag(arg, &policy.denied_flags) {
        return Err(denied(flag));
      }
      roles.push(Role::Option);
    } else {
      roles.push(Role::Path);
    }
  }
  Ok(roles)
}

fn grammar_roles(
  grammar: &Grammar,
  policy: &CommandPolicy,
  args: &[String],
) -> Result<Vec<Role>, Denial> {
  let parsed = grammar.parse(args).map_err(|e| {
    let arg = match e {
      super::getopt::ParseError::Unknown(a)
      | super::getopt::ParseError::Ambiguous(a)
      | super::getopt::ParseError::MissingArgument(a)
      | super::getopt::ParseError::UnexpectedArgument(a) => a,
    };
    not_allowlisted(grammar.program, &arg)
  })?;
  // Elements no option or operand claims are option values.
  let mut roles = vec![Role::Value; args.len()];
  for item in parsed {
    match item {
      Parsed::Opt { id, index } => {
        if let Some(flag) = policy
          .denied_flags
          .iter()
          .find(|f| flag_id(grammar, f) == Some(id))
        {
          return Err(denied(flag));
        }
        roles[index] = Role::Option;
      }
      Parsed::Operand(index) => roles[index] = Role::Path,
      Parsed::EndOfOptions(index) => roles[index] = Role::Option,
    }
  }
  // A policy flag the table does not know is still refused in any spelling.
  let unknown: Vec<String> = policy
    .denied_flags
    .iter()
    .filter(|f| flag_id(grammar, f).is_none())
    .cloned()
    .collect();
  for (arg, role) in args.iter().zip(&roles) {
    if *role == Role::Option
      && let Some(flag) = denied_flag(arg, &unknown)
    {
      return Err(denied(flag));
    }
  }
  Ok(roles)
}

fn git_roles(policy: &CommandPolicy, args: &[String]) -> Result<Vec<Role>, Denial> {
  let sub = args.first().map_or("", String::as_str);
  let mut roles = vec![Role::Option];
  let mut options_ended = false;
  let mut i = 1;
  while i < args.len() {
    let arg = &args[i];
    if options_ended {
      roles.push(Role::Path);
    } else if arg == "--" {
      options_ended = true;
      roles.push(Role::Option);
    } else if arg.starts_with('-') {
      if let Some(flag) = denied_flag(arg, &policy.denied_flags) {
        return Err(denied(flag));
      }
      match git_options::allowed(sub, arg) {
        Some(GitOption::Alone) => roles.push(Role::Option),
        Some(GitOption::TakesNext) => {
          let Some(value) = args.get(i + 1) else {
            return Err(not_allowlisted(&format!("git {sub}"), arg));
          };
          if !value.bytes().all(|b| b.is_ascii_digit()) || value.is_empty() {
            return Err(not_allowlisted(
              &format!("git {sub}"),
              &format!("{arg} {value}"),
            ));
          }
          roles.push(Role::Option);
          roles.push(Role::Value);
          i += 1;
        }
        Some(GitOption::TakesText) => {
          if args.get(i + 1).is_none() {
            return Err(not_allowlisted(&format!("git {sub}"), arg));
          }
          roles.push(Role::Option);
          roles.push(Role::Value);
          i += 1;
        }
        None => return Err(not_allowlisted(&format!("git {sub}"), arg)),
      }
    } else {
      roles.push(Role::GitOperand);
    }
    i += 1;
  }
  Ok(roles)
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::command::default_policies;

  fn roles_of(command: &str) -> Result<Vec<Role>, String> {
    let policies = default_policies("/usr/bin:/bin");
    let mut parts = command.split(' ').map(str::to_owned);
    let binary = parts.next().unwrap();
    let args: Vec<String> = parts.collect();
    roles(&binary, &policies[&binary], &args).map_err(|d| d.message)
  }

  use Role::{GitOperand as G, Option as O, Path as P, Value as V};

  #[test]
  fn every_accepted_spelling_of_a_denied_coreutils_option_is_denied() {
    for arg in [
      "--f=list",
      "--fi=list",
      "--files0=list",
      "--files0-from=list",
    ] {
      assert_eq!(
        roles_of(&format!("wc {arg}")),
        Err("Flag not allowed: --files0-from".into()),
        "{arg}"
      );
    }
    assert_eq!(
      roles_of("wc --f list"),
      Err("Flag not allowed: --files0-from".into())
    );
    for arg in [
      "-L",
      "-lL",
      "-RL",
      "--dereference",
      "-H",
      "--dereference-command-line",
      "--dereference-command-line-",
      "--dereference-command-line-s",
    ] {
      assert!(
        roles_of(&format!("ls {arg} d"))
          .unwrap_err()
          .starts_with("Flag not allowed: --dereference"),
        "{arg}"
      );
    }
    // `--d`, `--de`, ... are ambiguous to ls: it refuses them, and so does the policy.
    assert!(
      roles_of("ls --dere d")
        .unwrap_err()
        .contains("not an option ls is allowed")
    );
  }

  #[test]
  fn operands_after_the_end_of_options_and_values_are_told_apart() {
    assert_eq!(roles_of("cat -- -/../x -n"), Ok(vec![O, P, P]));
    assert_eq!(roles_of("ls -la -I pat -- -d"), Ok(vec![O, O, V, O, P]));
    assert_eq!(roles_of("ls --hide=x d -w 80"), Ok(vec![O, P, O, V]));
    assert_eq!(roles_of("wc -l - f"), Ok(vec![O, P, P]));
  }

  #[test]
  fn git_takes_only_listed_spellings() {
    assert_eq!(
      roles_of("git log --oneline -n 5 HEAD -- a"),
      Ok(vec![O, O, O, V, G, O, P])
    );
    assert_eq!(
      roles_of("git log --outp=/tmp/x"),
      Err("Flag not allowed: --output".into())
    );
    assert_eq!(
      roles_of("git log --o"),
      Err("Flag not allowed: --output".into())
    );
    assert!(
      roles_of("git log --onelin")
        .unwrap_err()
        .contains("not an option git log is allowed")
    );
    assert!(
      roles_of("git diff --word-diff-regex=.")
        .unwrap_err()
        .contains("not an option")
    );
    assert!(
      roles_of("git status -v")
        .unwrap_err()
        .contains("not an option")
    );
    assert!(roles_of("git log -n x").unwrap_err().contains("-n x"));
    assert_eq!(
      roles_of("git log -ccore.pager=x"),
      Err("Flag not allowed: -c".into())
    );
  }

  #[test]
  fn unknown_programs_deny_every_prefix_and_clustered_letters() {
    let list = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let flags = list(&["--output", "-x"]);
    for arg in ["--o", "--ou=1", "--output", "-x", "-ax", "-xa"] {
      assert!(denied_flag(arg, &flags).is_some(), "{arg}");
    }
    for arg in ["--output-file", "--oneline", "--", "-a", "x"] {
      assert!(denied_flag(arg, &flags).is_none(), "{arg}");
    }
  }
}
