//! Stage 6 for one allowed command: its arguments checked against the jail by the role the
//! program gives each (`argv.rs`), and for git the repository checked and pinned.

use std::path::{Component, Path, PathBuf};

use super::argv::{self, Role};
use super::command::CommandPolicy;
use super::error::Denial;
use super::git::{self, Repository};
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
  /// The hosts of the remote's `https://` URLs (`fetch`, `push`): the network allowlist the
  /// command gets (`git_remote::https_host`); empty for every other command.
  pub hosts: Vec<String>,
}

/// The protocols `git <sub>` may use (GIT_ALLOW_PROTOCOL): none, for every subcommand the sandbox
/// runs (the default policy's five, and `add` and `commit` when a policy lists them), since none
/// of them contacts a remote; anything else is refused here rather than given git's default
/// list. `fetch` and `push` get theirs from their remote (`git_remote.rs`); `clone` is refused.
fn git_protocols(sub: &str) -> Option<&'static str> {
  runs_offline(sub).then_some("")
}

/// The git subcommands this stage runs with no protocol at all (`GIT_ALLOW_PROTOCOL` empty): every
/// one the sandbox runs except `fetch` and `push`. The tools' `ALLOWED_GIT_COMMANDS` are the
/// read-only ones among them (`finn-tools`).
pub fn runs_offline(sub: &str) -> bool {
  matches!(
    sub,
    "log"
      | "status"
      | "diff"
      | "show"
      | "rev-parse"
      | "blame"
      | "ls-files"
      | "grep"
      | "branch"
      | "add"
      | "commit"
  )
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

/// A refusal of the jail's as this stage audits it: with the jail's reason, or `path_rejected`.
fn path_rejected(d: Denial) -> Denial {
  let reason = d
    .reason
    .clone()
    .unwrap_or_else(|| format!("path_rejected: {}", d.message));
  Denial::audited(d.message, reason)
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
  if cmd.binary == "git" {
    return jail_git(cmd, &roles, policy, jail, watch);
  }
  Ok(JailedArgs {
    args: jailed_paths(&cmd.args, &roles, jail, policy.validate_paths)?,
    env: Vec::new(),
    offline: false,
    hosts: Vec::new(),
  })
}

/// A program other than git: with `validate_paths`, each path operand jailed and replaced by its
/// canonical path (what the check saw is what the program opens); without it, the arguments as
/// given.
fn jailed_paths(
  args: &[String],
  roles: &[Role],
  jail: &FilesystemJail,
  validate_paths: bool,
) -> Result<Vec<String>, Denial> {
  let mut args = args.to_vec();
  if validate_paths {
    for (arg, role) in args.iter_mut().zip(roles) {
      if *role == Role::Path {
        let path = jail.validate_path(arg).map_err(path_rejected)?;
        *arg = path.to_string_lossy().into_owned();
      }
    }
  }
  Ok(args)
}

/// git, step by step: its operands jailed, its protocols decided, the binary found, the
/// repository checked, the file-diff forms refused, then the job pinned to what was checked.
fn jail_git(
  cmd: &SandboxCommand,
  roles: &[Role],
  policy: &CommandPolicy,
  jail: &FilesystemJail,
  watch: &Watch,
) -> Result<JailedArgs, Denial> {
  let operands = git_operands(&cmd.args, roles, jail)?;
  let sub = cmd.args.first().map_or("", String::as_str);
  no_commit_paths(sub, &operands)?;
  let protocols = Protocols::of(sub, &operands)?;
  let binary = git_binary(policy, &cmd.binary)?;
  let binary = binary.to_string_lossy();
  let repo = git::check_repository(jail.root(), &binary, watch)?;
  diff_compares_revisions(sub, repo.as_ref(), &operands)?;
  let (protocols, hosts) = match protocols {
    Protocols::Listed(p) => (p.to_owned(), Vec::new()),
    Protocols::OfRemote(name) => {
      let repo = repo.as_ref().ok_or_else(|| {
        Denial::audited(
          format!("Subcommand not allowed: git {sub} (no repository in the jail)"),
          format!("subcommand_denied: {sub}"),
        )
      })?;
      git_remote::protocols_and_hosts(&binary, repo, jail.root(), name, watch)?
    }
  };
  Ok(JailedArgs {
    hosts,
    ..pinned(&cmd.args, protocols, repo.as_ref(), jail)
  })
}

/// Every argument git could read as a path, jailed (`Path` always, `GitOperand` when it could
/// name a file); returns the operands (both roles), in order.
fn git_operands<'a>(
  args: &'a [String],
  roles: &[Role],
  jail: &FilesystemJail,
) -> Result<Vec<&'a str>, Denial> {
  let mut operands = Vec::new();
  for (arg, role) in args.iter().zip(roles) {
    match role {
      Role::Path => {
        jail.validate_path(arg).map_err(path_rejected)?;
      }
      Role::GitOperand => check_git_operand(jail, arg).map_err(path_rejected)?,
      Role::Option | Role::Value => continue,
    }
    operands.push(arg.as_str());
  }
  Ok(operands)
}

/// `git commit` commits what `git add` staged: a path would commit files the index never held,
/// past `add`'s exclusions.
fn no_commit_paths(sub: &str, operands: &[&str]) -> Result<(), Denial> {
  match operands.first() {
    Some(arg) if sub == "commit" => Err(Denial::audited(
      format!("Flag not allowed: {arg} (git commit takes no paths; stage them with git add)"),
      format!("commit_paths: {arg}"),
    )),
    _ => Ok(()),
  }
}

/// Where `GIT_ALLOW_PROTOCOL` comes from for a subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocols<'a> {
  /// A fixed list (empty for every subcommand that contacts no remote).
  Listed(&'static str),
  /// The protocols of this configured remote (`fetch`, `push`), read from the repository.
  OfRemote(&'a str),
}

impl<'a> Protocols<'a> {
  /// Refuses a subcommand with neither a list of its own nor a remote to take one from.
  fn of(sub: &str, operands: &[&'a str]) -> Result<Self, Denial> {
    if contacts_remote(sub) {
      return git_remote::remote_of(sub, operands).map(Protocols::OfRemote);
    }
    git_protocols(sub).map(Protocols::Listed).ok_or_else(|| {
      Denial::audited(
        format!("Subcommand not allowed: git {sub}"),
        format!("subcommand_denied: {sub}"),
      )
    })
  }
}

/// The policy's git, as the repository check will run it; a missing one is refused as stage 6a
/// would refuse it. `shown` is the name the command gave.
fn git_binary(policy: &CommandPolicy, shown: &str) -> Result<PathBuf, Denial> {
  std::fs::canonicalize(&policy.binary).map_err(|_| {
    Denial::audited(
      format!("Binary not available: {shown}"),
      format!("binary_not_found_or_unresolvable: {}", policy.binary),
    )
  })
}

/// `git diff` compares revisions, never the files themselves (git's implicit `--no-index`).
/// Outside a repository, `git diff a b` is git's own file-to-file diff: it reads a hard link
/// inside a directory operand and `symlink/..` paths (which git hands to the kernel as written),
/// outside the jail. A bare repository has no work tree, so git takes an absolute path, or one
/// that climbs with `..`, for one outside it, and compares the files: `git diff <jail>/e <jail>`
/// would print the audit log.
fn diff_compares_revisions(
  sub: &str,
  repo: Option<&Repository>,
  operands: &[&str],
) -> Result<(), Denial> {
  if sub != "diff" {
    return Ok(());
  }
  let Some(repo) = repo else {
    return Err(Denial::audited(
      "Subcommand not allowed: git diff (no repository in the jail: git would compare the files themselves, as --no-index)",
      "subcommand_denied: diff without a repository",
    ));
  };
  let outside = |arg: &&&str| {
    arg.starts_with('/')
      || Path::new(arg)
        .components()
        .any(|c| c == Component::ParentDir)
  };
  match operands.iter().find(outside) {
    Some(arg) if repo.work_tree.is_none() => Err(Denial::audited(
      format!(
        "Path not allowed: {arg} (git diff in a bare repository would compare it as a file, as --no-index)"
      ),
      format!("path_rejected: {arg} (bare repository diff)"),
    )),
    _ => Ok(()),
  }
}

/// The arguments and environment that pin git to what was checked: the protocols, no editor
/// (`commit` without a message fails instead of starting one), the repository's paths and the
/// hidden directories excluded from its work tree. With no repository, the place git would look
/// first is pinned, so it discovers nothing else (a bare repository at the root); one made after
/// the check is the check-to-exec race. No `https` in the protocols: no network.
fn pinned(
  args: &[String],
  protocols: String,
  repo: Option<&Repository>,
  jail: &FilesystemJail,
) -> JailedArgs {
  let offline = !protocols.split(':').any(|p| p == "https");
  let mut env = vec![
    ("GIT_ALLOW_PROTOCOL".to_owned(), protocols),
    ("GIT_EDITOR".to_owned(), "false".to_owned()),
  ];
  let mut args = git::harden_args(args);
  match repo {
    Some(repo) => {
      env.extend(repo.env());
      if let Some(work_tree) = &repo.work_tree {
        args = git::exclude_paths(args, work_tree, jail.hidden());
      }
    }
    None => env.push((
      "GIT_DIR".to_owned(),
      jail.root().join(".git").to_string_lossy().into_owned(),
    )),
  }
  JailedArgs {
    args,
    env,
    offline,
    hosts: Vec::new(),
  }
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

  /// A jail with a directory `d`, a symlink `ln` to /etc, and a hidden directory `audit`.
  fn furnished() -> (tempfile::TempDir, FilesystemJail) {
    let (d, mut jail) = jail();
    let root = jail.root().to_path_buf();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::create_dir(root.join("audit")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("ln")).unwrap();
    jail.hide(&root.join("audit"));
    (d, jail)
  }

  fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
  }

  /// `O`ption, `V`alue, `P`ath, `G`it operand: one letter per argument.
  fn roles(s: &str) -> Vec<Role> {
    s.chars()
      .map(|c| match c {
        'O' => Role::Option,
        'V' => Role::Value,
        'P' => Role::Path,
        'G' => Role::GitOperand,
        _ => panic!("role {c}"),
      })
      .collect()
  }

  /// A refusal as a row expects it: the message and the audit reason.
  fn refused(d: Denial) -> (String, String) {
    (d.message, d.reason.unwrap_or_default())
  }

  #[test]
  fn path_operands_are_jailed_and_made_canonical_only_when_the_policy_validates_paths() {
    let (_d, jail) = furnished();
    let root = jail.root().to_string_lossy().into_owned();
    // (arguments, roles, validate paths) -> the arguments to run, `{root}` the jail's, or the
    // refusal's message.
    #[rustfmt::skip]
    let cases = [
      ("-l d", "OP", true, Ok("-l {root}/d")),
      ("-l d", "OP", false, Ok("-l d")),
      ("missing", "P", true, Ok("{root}/missing")),
      ("-I ../x", "OV", true, Ok("-I ../x")),
      ("../x", "P", false, Ok("../x")),
      ("../x", "P", true, Err("Path escapes jail: ../x")),
      ("ln", "P", true, Err("Symlink rejected: ln")),
      ("d audit/log", "PP", true, Err("Path is reserved for the host: audit/log")),
    ];
    for (args, r, validate, want) in cases {
      let got = jailed_paths(&words(args), &roles(r), &jail, validate);
      match want {
        Ok(want) => assert_eq!(
          got.unwrap(),
          words(&want.replace("{root}", &root)),
          "{args}"
        ),
        Err(message) => assert_eq!(
          refused(got.unwrap_err()),
          (message.to_owned(), format!("path_rejected: {message}")),
          "{args}"
        ),
      }
    }
  }

  #[test]
  fn every_git_argument_that_could_be_a_path_is_jailed() {
    let (_d, jail) = furnished();
    // (arguments, roles) -> the operands, or the refusal's message.
    #[rustfmt::skip]
    let cases = [
      ("log HEAD -- sub/file", "OGOP", Ok("HEAD sub/file")),
      ("log main..topic HEAD:a.txt", "OGG", Ok("main..topic HEAD:a.txt")),
      ("log --format /etc", "OOV", Ok("")),
      ("diff d", "OG", Ok("d")),
      ("diff ln", "OG", Err("Symlink rejected: ln")),
      ("diff a /dev/null", "OGG", Err("Path escapes jail: /dev/null")),
      ("log -- /etc", "OOP", Err("Path escapes jail: /etc")),
      ("status -- audit", "OOP", Err("Path is reserved for the host: audit")),
    ];
    for (args, r, want) in cases {
      let args = words(args);
      let got = git_operands(&args, &roles(r), &jail);
      match want {
        Ok(want) => assert_eq!(got.unwrap(), want.split_whitespace().collect::<Vec<_>>()),
        Err(message) => assert_eq!(
          refused(got.unwrap_err()),
          (message.to_owned(), format!("path_rejected: {message}")),
          "{args:?}"
        ),
      }
    }
  }

  #[test]
  fn commit_takes_no_operand() {
    for (sub, operands, refused_arg) in [
      ("commit", "", None),
      ("commit", "x y", Some("x")),
      ("commit", ".", Some(".")),
      ("add", "x", None),
      ("status", "", None),
    ] {
      let operands: Vec<&str> = operands.split_whitespace().collect();
      let got = no_commit_paths(sub, &operands);
      match refused_arg {
        None => assert!(got.is_ok(), "{sub} {operands:?}"),
        Some(arg) => assert_eq!(
          refused(got.unwrap_err()),
          (
            format!("Flag not allowed: {arg} (git commit takes no paths; stage them with git add)"),
            format!("commit_paths: {arg}")
          )
        ),
      }
    }
  }

  #[test]
  fn protocols_are_listed_for_local_subcommands_and_taken_from_the_remote_for_fetch_and_push() {
    // (subcommand, operands) -> where the protocols come from, or the refusal's message and
    // reason.
    #[rustfmt::skip]
    let cases = [
      ("log", "", Ok(Protocols::Listed(""))),
      ("add", "x", Ok(Protocols::Listed(""))),
      ("rev-parse", "", Ok(Protocols::Listed(""))),
      ("fetch", "origin", Ok(Protocols::OfRemote("origin"))),
      ("push", "origin main", Ok(Protocols::OfRemote("origin"))),
      ("clone", "x", Err(("Subcommand not allowed: git clone", "subcommand_denied: clone"))),
      ("remote", "", Err(("Subcommand not allowed: git remote", "subcommand_denied: remote"))),
      ("fetch", "", Err(("Flag not allowed: fetch (git fetch takes the name of a configured remote first)", "remote_operand: fetch"))),
      ("fetch", "https://x", Err(("Flag not allowed: https://x (git fetch takes the name of a configured remote, not a URL or path)", "remote_operand: https://x"))),
    ];
    for (sub, operands, want) in cases {
      let operands: Vec<&str> = operands.split_whitespace().collect();
      let got = Protocols::of(sub, &operands).map_err(refused);
      let want = want.map_err(|(m, r)| (m.to_owned(), r.to_owned()));
      assert_eq!(got, want, "{sub} {operands:?}");
    }
  }

  #[test]
  fn the_policys_git_is_found_or_refused_before_the_check_would_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    std::fs::write(real.join("git-real"), "").unwrap();
    std::os::unix::fs::symlink(real.join("git-real"), real.join("git")).unwrap();
    let policy = |binary: String| CommandPolicy {
      binary,
      subcommands: Vec::new(),
      denied_flags: Vec::new(),
      validate_paths: false,
    };
    let linked = policy(real.join("git").to_string_lossy().into_owned());
    assert_eq!(git_binary(&linked, "git").unwrap(), real.join("git-real"));
    let missing = policy("/__missing_binary__/git".into());
    assert_eq!(
      refused(git_binary(&missing, "git").unwrap_err()),
      (
        "Binary not available: git".into(),
        "binary_not_found_or_unresolvable: /__missing_binary__/git".into()
      )
    );
  }

  #[test]
  fn git_diff_is_refused_where_git_would_compare_files() {
    let work = Repository {
      git_dir: "/j/.git".into(),
      common_dir: "/j/.git".into(),
      work_tree: Some("/j".into()),
    };
    let bare = Repository {
      git_dir: "/j".into(),
      common_dir: "/j".into(),
      work_tree: None,
    };
    let none = (
      "Subcommand not allowed: git diff (no repository in the jail: git would compare the files themselves, as --no-index)".to_owned(),
      "subcommand_denied: diff without a repository".to_owned(),
    );
    let in_bare = |arg: &str| {
      (
        format!(
          "Path not allowed: {arg} (git diff in a bare repository would compare it as a file, as --no-index)"
        ),
        format!("path_rejected: {arg} (bare repository diff)"),
      )
    };
    // (subcommand, repository, operands) -> the refusal, if any.
    #[rustfmt::skip]
    let cases = [
      ("status", None, "", None),
      ("log", None, "/abs", None),
      ("diff", None, "", Some(none.clone())),
      ("diff", None, "HEAD", Some(none)),
      ("diff", Some(&work), "/j/e /j", None),
      ("diff", Some(&work), "e/.. e", None),
      ("diff", Some(&bare), "HEAD main", None),
      ("diff", Some(&bare), "a..b", None),
      ("diff", Some(&bare), "a /j/e", Some(in_bare("/j/e"))),
      ("diff", Some(&bare), "e/.. e", Some(in_bare("e/.."))),
      ("diff", Some(&bare), "e ../x /y", Some(in_bare("../x"))),
      ("log", Some(&bare), "/j/e", None),
    ];
    for (sub, repo, operands, want) in cases {
      let operands: Vec<&str> = operands.split_whitespace().collect();
      let got = diff_compares_revisions(sub, repo, &operands).map_err(refused);
      assert_eq!(got.err(), want, "{sub} {repo:?} {operands:?}");
    }
  }

  #[test]
  fn git_is_pinned_to_the_repository_checked_and_offline_without_https() {
    let (_d, jail) = furnished();
    let root = jail.root().to_path_buf();
    let work = Repository {
      git_dir: root.join(".git"),
      common_dir: root.join(".git"),
      work_tree: Some(root.clone()),
    };
    let bare = Repository {
      git_dir: root.clone(),
      common_dir: root.clone(),
      work_tree: None,
    };
    // (arguments, protocols, repository) -> the arguments to run, offline.
    #[rustfmt::skip]
    let cases = [
      ("status", "", None, "status", true),
      ("status", "", Some(&work), "status -- :(top,exclude,literal)audit", true),
      ("diff HEAD", "", Some(&work), "diff --no-ext-diff --no-textconv HEAD -- :(top,exclude,literal)audit", true),
      ("diff HEAD", "", Some(&bare), "diff --no-ext-diff --no-textconv HEAD", true),
      ("fetch origin", "https", Some(&work), "fetch origin", false),
      ("push origin main", "ssh:https", Some(&bare), "push origin main", false),
      ("fetch origin", "file:git", Some(&work), "fetch origin", true),
      ("fetch origin", "httpsx", Some(&work), "fetch origin", true),
    ];
    for (args, protocols, repo, want_args, offline) in cases {
      let got = pinned(&words(args), protocols.to_owned(), repo, &jail);
      assert_eq!(got.args, words(want_args), "{args}");
      assert_eq!(got.offline, offline, "{args} {protocols}");
      let mut env = vec![
        ("GIT_ALLOW_PROTOCOL".to_owned(), protocols.to_owned()),
        ("GIT_EDITOR".to_owned(), "false".to_owned()),
      ];
      match repo {
        Some(repo) => env.extend(repo.env()),
        None => env.push((
          "GIT_DIR".to_owned(),
          root.join(".git").to_string_lossy().into_owned(),
        )),
      }
      assert_eq!(got.env, env, "{args}");
    }
  }
}
