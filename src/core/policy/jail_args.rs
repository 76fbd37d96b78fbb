//! Stage 6 for one allowed command: its arguments checked against the jail by the role the
//! program gives each (`argv.rs`), and for git the repository checked and pinned.

use super::argv::{self, Role};
use super::command::CommandPolicy;
use super::error::Denial;
use super::git;
use super::jail::FilesystemJail;
use super::tokenize::SandboxCommand;

/// The arguments to run, and environment to add to the sandbox's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailedArgs {
  pub args: Vec<String>,
  pub env: Vec<(String, String)>,
}

/// The protocols `git <sub>` may use (GIT_ALLOW_PROTOCOL): none, for every subcommand the
/// default policy allows, since none of them contacts a remote; anything else is refused here
/// rather than given git's default list.
fn git_protocols(sub: &str) -> Option<&'static str> {
  match sub {
    "log" | "status" | "diff" | "show" | "rev-parse" => Some(""),
    _ => None,
  }
}

/// A git argument git could read from the filesystem must resolve inside the jail: one that
/// names an existing path, or contains `/` or `..` (a path outside the repository switches
/// `git diff` to `--no-index`; `/dev/null` is such a path).
fn check_git_operand(jail: &FilesystemJail, arg: &str) -> Result<(), Denial> {
  let exists = std::fs::symlink_metadata(jail.root().join(arg)).is_ok();
  if exists || arg.contains('/') || arg.contains("..") {
    jail.validate_path(arg)?;
  }
  Ok(())
}

/// Checks `cmd` (already passed by `command::check`) against the jail, and returns what to run.
pub fn jail_args(
  cmd: &SandboxCommand,
  policy: &CommandPolicy,
  jail: &FilesystemJail,
) -> Result<JailedArgs, Denial> {
  let roles = argv::roles(&cmd.binary, policy, &cmd.args)?;
  let path_rejected = |d: Denial| {
    let reason = d
      .reason
      .clone()
      .unwrap_or_else(|| format!("path_rejected: {}", d.message));
    Denial::audited(d.message, reason)
  };
  if cmd.binary == "git" {
    for (arg, role) in cmd.args.iter().zip(&roles) {
      match role {
        Role::Path => {
          jail.validate_path(arg).map_err(path_rejected)?;
        }
        Role::GitOperand => check_git_operand(jail, arg).map_err(path_rejected)?,
        Role::Option | Role::Value => {}
      }
    }
    let sub = cmd.args.first().map_or("", String::as_str);
    let protocols = git_protocols(sub).ok_or_else(|| {
      Denial::audited(
        format!("Subcommand not allowed: git {sub}"),
        format!("subcommand_denied: {sub}"),
      )
    })?;
    let repo = git::check_repository(jail.root(), &policy.binary)?;
    let mut env = vec![("GIT_ALLOW_PROTOCOL".to_owned(), protocols.to_owned())];
    let mut args = git::harden_args(&cmd.args);
    match &repo {
      Some(repo) => {
        env.extend(repo.env());
        if let Some(work_tree) = &repo.work_tree {
          args = git::exclude_paths(args, work_tree, jail.hidden());
        }
      }
      // No repository now: pin the place git would look first, so it discovers nothing else
      // (a bare repository at the root). One made after this check is the check-to-exec race.
      None => env.push((
        "GIT_DIR".to_owned(),
        jail.root().join(".git").to_string_lossy().into_owned(),
      )),
    }
    return Ok(JailedArgs { args, env });
  }
  let mut args = cmd.args.clone();
  if policy.validate_paths {
    for (arg, role) in args.iter_mut().zip(&roles) {
      if *role == Role::Path {
        let path = jail.validate_path(arg).map_err(path_rejected)?;
        *arg = path.to_string_lossy().into_owned();
      }
    }
  }
  Ok(JailedArgs {
    args,
    env: Vec::new(),
  })
}
