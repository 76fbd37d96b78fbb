//! Stage 6 for one allowed command: its arguments checked against the jail by the role the
//! program gives each (`argv.rs`), and for git the repository checked and pinned.

use super::argv::{self, Role};
use super::command::CommandPolicy;
use super::error::Denial;
use super::git;
use super::git_remote;
use super::host_git::Watch;
use super::jail::FilesystemJail;
use super::tokenize::SandboxCommand;

/// The arguments to run, and environment to add to the sandbox's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailedArgs {
  pub args: Vec<String>,
  pub env: Vec<(String, String)>,
  /// git may use no network protocol (`GIT_ALLOW_PROTOCOL` has none): the command gets no
  /// network whatever its topology (a fetch or push to a remote inside the jail).
  pub offline: bool,
}

/// The protocols `git <sub>` may use (GIT_ALLOW_PROTOCOL): none, for every subcommand the sandbox
/// runs (the default policy's five, and `add` and `commit` when a policy lists them), since none
/// of them contacts a remote; anything else is refused here rather than given git's default
/// list. `fetch` and `push` get theirs from their remote (`git_remote.rs`); `clone` is refused.
fn git_protocols(sub: &str) -> Option<&'static str> {
  match sub {
    "log" | "status" | "diff" | "show" | "rev-parse" | "add" | "commit" => Some(""),
    _ => None,
  }
}

fn contacts_remote(sub: &str) -> bool {
  matches!(sub, "fetch" | "push")
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
/// `watch` bounds the repository check of a git command in time.
pub fn jail_args(
  cmd: &SandboxCommand,
  policy: &CommandPolicy,
  jail: &FilesystemJail,
  watch: &Watch,
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
    if sub == "commit"
      && let Some((arg, _)) = cmd
        .args
        .iter()
        .zip(&roles)
        .find(|(_, r)| matches!(r, Role::Path | Role::GitOperand))
    {
      return Err(Denial::audited(
        format!("Flag not allowed: {arg} (git commit takes no paths; stage them with git add)"),
        format!("commit_paths: {arg}"),
      ));
    }
    let remote = if contacts_remote(sub) {
      let operands: Vec<&str> = cmd
        .args
        .iter()
        .zip(&roles)
        .filter(|(_, r)| matches!(r, Role::Path | Role::GitOperand))
        .map(|(a, _)| a.as_str())
        .collect();
      Some(git_remote::remote_of(sub, &operands)?)
    } else {
      None
    };
    let protocols = match remote {
      Some(_) => None,
      None => Some(git_protocols(sub).ok_or_else(|| {
        Denial::audited(
          format!("Subcommand not allowed: git {sub}"),
          format!("subcommand_denied: {sub}"),
        )
      })?),
    };
    // The check runs this binary; a missing one is refused as stage 6a would.
    let binary = std::fs::canonicalize(&policy.binary).map_err(|_| {
      Denial::audited(
        format!("Binary not available: {}", cmd.binary),
        format!("binary_not_found_or_unresolvable: {}", policy.binary),
      )
    })?;
    let repo = git::check_repository(jail.root(), &binary.to_string_lossy(), watch)?;
    // Outside a repository, `git diff a b` is git's own file-to-file diff (an implicit
    // `--no-index`): it read a hard link inside a directory operand and `symlink/..` paths
    // (which git hands to the kernel as written), outside the jail.
    if repo.is_none() && sub == "diff" {
      return Err(Denial::audited(
        "Subcommand not allowed: git diff (no repository in the jail: git would compare the files themselves, as --no-index)",
        "subcommand_denied: diff without a repository",
      ));
    }
    // A bare repository has no work tree, so git takes an absolute path, or one that climbs
    // with `..`, for one outside it, and `git diff <a> <b>` again compares the files
    // themselves: `git diff <jail>/e <jail>` printed the audit log.
    if sub == "diff"
      && repo.as_ref().is_some_and(|r| r.work_tree.is_none())
      && let Some((arg, _)) = cmd.args.iter().zip(&roles).find(|(a, r)| {
        matches!(r, Role::Path | Role::GitOperand)
          && (a.starts_with('/')
            || std::path::Path::new(a.as_str())
              .components()
              .any(|c| c == std::path::Component::ParentDir))
      })
    {
      return Err(Denial::audited(
        format!(
          "Path not allowed: {arg} (git diff in a bare repository would compare it as a file, as --no-index)"
        ),
        format!("path_rejected: {arg} (bare repository diff)"),
      ));
    }
    let protocols = match (protocols, remote, &repo) {
      (Some(p), _, _) => p.to_owned(),
      (None, Some(name), Some(repo)) => {
        git_remote::protocols(&binary.to_string_lossy(), repo, jail.root(), name, watch)?
      }
      (None, _, _) => {
        return Err(Denial::audited(
          format!("Subcommand not allowed: git {sub} (no repository in the jail)"),
          format!("subcommand_denied: {sub}"),
        ));
      }
    };
    let mut env = vec![
      ("GIT_ALLOW_PROTOCOL".to_owned(), protocols.clone()),
      // No editor: `commit` without a message fails instead of starting one.
      ("GIT_EDITOR".to_owned(), "false".to_owned()),
    ];
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
    let offline = !protocols.split(':').any(|p| p == "https");
    return Ok(JailedArgs { args, env, offline });
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
    offline: false,
  })
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::command::default_policies;
  use crate::host_git::{self, Watch};
  use crate::tokenize::tokenize;

  fn watch() -> Watch<'static> {
    Watch::new(host_git::REPOSITORY_CHECK_MS, None)
  }

  fn run(jail: &FilesystemJail, command: &str) -> Result<JailedArgs, String> {
    let policies = default_policies("/usr/bin:/bin");
    let cmd = tokenize(command).unwrap();
    jail_args(&cmd, &policies[&cmd.binary], jail, &watch()).map_err(|d| d.message)
  }

  fn jail() -> (tempfile::TempDir, FilesystemJail) {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    (dir, jail)
  }

  #[test]
  fn a_git_subcommand_outside_the_read_only_set_is_refused_even_when_a_policy_allows_it() {
    // `config.policies` may list git subcommands that contact remotes; without a protocol
    // list of their own they must be refused, never run with git's default protocols.
    let (_d, jail) = jail();
    let mut policies = default_policies("/usr/bin:/bin");
    let git = policies.get_mut("git").unwrap();
    git.subcommands.push("fetch".into());
    git.subcommands.push("clone".into());
    let cmd = tokenize("git clone x").unwrap();
    let refused = jail_args(&cmd, &policies["git"], &jail, &watch()).unwrap_err();
    assert_eq!(refused.message, "Subcommand not allowed: git clone");
    // fetch gets its protocols from its remote, and there is no repository here.
    let cmd = tokenize("git fetch origin").unwrap();
    let refused = jail_args(&cmd, &policies["git"], &jail, &watch()).unwrap_err();
    assert_eq!(
      refused.message,
      "Subcommand not allowed: git fetch (no repository in the jail)"
    );
    assert_eq!(git_protocols("log"), Some(""));
    assert_eq!(git_protocols("fetch"), None);
  }

  #[test]
  fn commit_takes_a_message_but_no_paths_and_add_excludes_the_hidden_directories() {
    let (_d, jail) = jail();
    let mut policies = default_policies("/usr/bin:/bin");
    let git = policies.get_mut("git").unwrap();
    git.subcommands.extend(["add".into(), "commit".into()]);
    let git = &policies["git"];
    let run = |command: &str| jail_args(&tokenize(command).unwrap(), git, &jail, &watch());
    let ok = run("git commit -m a/../../message").unwrap();
    assert_eq!(ok.args, ["commit", "-m", "a/../../message"]);
    assert!(ok.env.contains(&("GIT_EDITOR".into(), "false".into())));
    assert!(
      ok.env
        .contains(&("GIT_ALLOW_PROTOCOL".into(), String::new()))
    );
    for bad in [
      "git commit -m x notes.txt",
      "git commit -m x -- .",
      "git commit .",
    ] {
      let refused = run(bad).unwrap_err();
      assert!(
        refused.message.contains("git commit takes no paths"),
        "{bad}: {}",
        refused.message
      );
    }
    assert!(run("git add ../outside").is_err());
  }

  #[test]
  fn an_existing_operand_without_a_slash_is_still_jailed() {
    let (_d, jail) = jail();
    std::os::unix::fs::symlink("/etc/passwd", jail.root().join("pw")).unwrap();
    assert_eq!(
      check_git_operand(&jail, "pw").unwrap_err().message,
      "Symlink rejected: pw"
    );
    // A revision name that is no path passes unchecked.
    assert!(check_git_operand(&jail, "HEAD").is_ok());
  }

  #[test]
  fn git_operands_that_could_be_paths_are_jailed() {
    let (_d, jail) = jail();
    std::os::unix::fs::symlink("/etc", jail.root().join("etc")).unwrap();
    assert_eq!(
      run(&jail, "git diff /dev/null x").unwrap_err(),
      "Path escapes jail: /dev/null"
    );
    assert_eq!(
      run(&jail, "git diff a ../x").unwrap_err(),
      "Path escapes jail: ../x"
    );
    assert_eq!(
      run(&jail, "git diff etc").unwrap_err(),
      "Symlink rejected: etc"
    );
    assert_eq!(
      run(&jail, "git log -- /etc").unwrap_err(),
      "Path escapes jail: /etc"
    );
    // Revisions that are no paths pass as written.
    let ok = run(&jail, "git log HEAD main..topic HEAD:a.txt -- sub/file").unwrap();
    assert_eq!(
      ok.args[3..],
      ["HEAD", "main..topic", "HEAD:a.txt", "--", "sub/file"]
    );
  }

  #[test]
  fn git_runs_pinned_with_no_protocol() {
    let (_d, jail) = jail();
    let root = jail.root().to_string_lossy().into_owned();
    let none = run(&jail, "git status").unwrap();
    assert_eq!(
      none.env,
      [
        ("GIT_ALLOW_PROTOCOL".to_owned(), String::new()),
        ("GIT_EDITOR".to_owned(), "false".to_owned()),
        ("GIT_DIR".to_owned(), format!("{root}/.git")),
      ]
    );
    assert!(
      std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(jail.root())
        .status()
        .unwrap()
        .success()
    );
    let repo = run(&jail, "git status").unwrap();
    assert!(
      repo
        .env
        .contains(&("GIT_WORK_TREE".to_owned(), root.clone()))
    );
    assert!(
      repo
        .env
        .contains(&("GIT_COMMON_DIR".to_owned(), format!("{root}/.git")))
    );
  }

  /// git compares files itself (an implicit `--no-index`) outside a repository, and in a bare
  /// one for an absolute or climbing operand: `git diff` is refused there, nothing else is.
  #[test]
  fn git_diff_never_becomes_a_file_diff() {
    let (_d, jail) = jail();
    let root = jail.root().to_string_lossy().into_owned();
    assert!(
      run(&jail, "git diff a b")
        .unwrap_err()
        .starts_with("Subcommand not allowed: git diff (no repository in the jail")
    );
    let status = run(&jail, "git status").unwrap();
    assert!(status.offline, "no protocol, no network");
    assert_eq!(
      run(&jail, "git diff a /nonexistent-finn/x").unwrap_err(),
      "Path escapes jail: /nonexistent-finn/x"
    );
    let init = |bare: bool| {
      let mut git = std::process::Command::new("git");
      git.args(["init", "-q"]).current_dir(jail.root());
      if bare {
        git.arg("--bare");
      }
      assert!(git.status().unwrap().success());
    };
    init(true);
    std::fs::create_dir(jail.root().join("e")).unwrap();
    for command in [
      format!("git diff {root}/e {root}"),
      "git diff e/.. e".into(),
    ] {
      let refused = run(&jail, &command).unwrap_err();
      assert!(
        refused.starts_with("Path not allowed: ") && refused.contains("bare repository"),
        "{command}: {refused}"
      );
    }
    // Revisions, and other subcommands with absolute paths, still run.
    assert!(run(&jail, "git diff HEAD main").is_ok());
    assert!(run(&jail, &format!("git log -- {root}/e")).is_ok());
    for entry in std::fs::read_dir(jail.root()).unwrap() {
      let path = entry.unwrap().path();
      if path.is_dir() {
        std::fs::remove_dir_all(path).unwrap();
      } else {
        std::fs::remove_file(path).unwrap();
      }
    }
    init(false);
    std::fs::create_dir(jail.root().join("e")).unwrap();
    assert!(run(&jail, &format!("git diff {root}/e {root}")).is_ok());
  }

  #[test]
  fn a_missing_git_is_refused_before_the_check_would_run_it() {
    let (_d, jail) = jail();
    let mut policies = default_policies("/usr/bin:/bin");
    policies.get_mut("git").unwrap().binary = "/__missing_binary__/git".into();
    let cmd = tokenize("git status").unwrap();
    let denial = jail_args(&cmd, &policies["git"], &jail, &watch()).unwrap_err();
    assert_eq!(denial.message, "Binary not available: git");
  }

  #[test]
  fn operands_become_canonical_paths_values_stay() {
    let (_d, mut jail) = jail();
    let root = jail.root().to_path_buf();
    std::fs::create_dir(root.join("-")).unwrap();
    std::fs::create_dir(root.join("audit")).unwrap();
    let out = run(&jail, "ls -I pat -- -").unwrap();
    assert_eq!(
      out.args,
      ["-I", "pat", "--", &root.join("-").to_string_lossy()]
    );
    assert!(out.env.is_empty());
    assert_eq!(
      run(&jail, "cat -- -/../../x").unwrap_err(),
      "Path escapes jail: -/../../x"
    );
    jail.hide(&root.join("audit"));
    assert_eq!(
      run(&jail, "ls audit").unwrap_err(),
      "Path is reserved for the host: audit"
    );
  }
}
