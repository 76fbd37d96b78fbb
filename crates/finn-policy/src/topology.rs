//! The isolation each allowed command gets, derived from what it runs (its git topology):
//! which part of the jail it may write and whether it may reach the network. Pure
//! data and one function; the sandbox turns the answer into `IsolationOptions`.
//!
//! Allowlists: a git subcommand missing from every table has no topology and is refused, so a
//! policy that admits a new subcommand must also place it here.

/// What the command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
  /// Nothing: no writable root (the jail, the repository included, is read-only).
  Nothing,
  /// The jail (for git: the work tree and its `.git`), with `.git/hooks` and `.git/config`
  /// protected.
  Jail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
  Deny,
  Allow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
  pub writes: Writes,
  pub network: Network,
  /// Reads only the jail and the system directories (when the caller left `fs.readable` at
  /// all): a program whose every operand the jail checked (`cat notes.txt`), so that a symlink
  /// swapped in after that check reads nothing outside.
  pub reads_jail: bool,
}

const READ_ONLY: Topology = Topology {
  writes: Writes::Nothing,
  network: Network::Deny,
  reads_jail: false,
};
pub const READ_ONLY_PROGRAM: Topology = Topology {
  writes: Writes::Nothing,
  network: Network::Deny,
  reads_jail: true,
};
const LOCAL_WRITE: Topology = Topology {
  writes: Writes::Jail,
  network: Network::Deny,
  reads_jail: false,
};
pub const REMOTE: Topology = Topology {
  writes: Writes::Jail,
  network: Network::Allow,
  reads_jail: false,
};

/// git subcommands that only read the repository. `status` may try to refresh the index (an
/// optional lock, skipped when it cannot be taken; `GIT_OPTIONAL_LOCKS=0` skips it outright).
pub const GIT_READ_ONLY: &[&str] = &[
  "status",
  "log",
  "diff",
  "show",
  "rev-parse",
  "ls-files",
  "ls-tree",
  "blame",
  "cat-file",
  "describe",
  "shortlog",
  "show-ref",
  "for-each-ref",
  "grep",
  "rev-list",
  "merge-base",
  "name-rev",
];

/// git subcommands that write the work tree or the repository, never a remote.
pub const GIT_LOCAL_WRITE: &[&str] = &[
  "add",
  "commit",
  "checkout",
  "switch",
  "restore",
  "merge",
  "rebase",
  "cherry-pick",
  "revert",
  "reset",
  "rm",
  "mv",
  "stash",
  "branch",
  "tag",
  "worktree",
  "init",
  "apply",
];

/// The only git subcommands that may reach the network.
pub const GIT_REMOTE: &[&str] = &["fetch", "clone", "push"];

/// Programs that only read files: the jail is read-only for them. Every other program the
/// policy allows may write the jail (never outside it).
pub const READ_ONLY_PROGRAMS: &[&str] = &[
  "ls", "cat", "wc", "head", "tail", "grep", "rg", "find", "fd", "fdfind", "stat", "file", "du",
  "tree",
];

/// Subcommands of [`GIT_LOCAL_WRITE`] that only list with the right options ([`lists_only`]).
pub const GIT_LISTING: &[&str] = &["branch", "tag", "stash", "worktree"];

/// Options that leave `branch`, `tag`, `stash` and `worktree` listing only, and what lists.
pub fn lists_only(sub: &str, rest: &[String]) -> bool {
  let listing_flags: &[&str] = match sub {
    "branch" => &[
      "--list",
      "-l",
      "-a",
      "--all",
      "-r",
      "--remotes",
      "-v",
      "-vv",
      "--verbose",
      "--show-current",
      "--no-color",
    ],
    "tag" => &["--list", "-l", "-n"],
    _ => &[],
  };
  match sub {
    "branch" | "tag" => rest.iter().all(|a| listing_flags.contains(&a.as_str())),
    "stash" | "worktree" => rest.first().is_some_and(|a| a == "list"),
    _ => false,
  }
}

/// The topology of `binary args…` (`binary` as the policy names it, `args[0]` git's
/// subcommand). `None`: a git subcommand in no table, refused.
pub fn topology(binary: &str, args: &[String]) -> Option<Topology> {
  if binary != "git" {
    return Some(if READ_ONLY_PROGRAMS.contains(&binary) {
      READ_ONLY_PROGRAM
    } else {
      LOCAL_WRITE
    });
  }
  let sub = args.first()?.as_str();
  let rest = &args[1..];
  let row = if GIT_READ_ONLY.contains(&sub) || lists_only(sub, rest) {
    READ_ONLY
  } else if GIT_LOCAL_WRITE.contains(&sub) {
    LOCAL_WRITE
  } else if GIT_REMOTE.contains(&sub) {
    REMOTE
  } else {
    return None;
  };
  // git's repository was checked inside the jail and pinned: it reads nothing else. A fetch
  // or push keeps its reads (certificates, resolver files wherever they lie) unless its remote
  // is inside the jail (`JailedArgs::offline`).
  Some(Topology {
    reads_jail: row.network == Network::Deny,
    ..row
  })
}

#[cfg(test)]
mod tests {
  use super::*;

  fn of(command: &str) -> Option<Topology> {
    let mut words = command.split_whitespace();
    let binary = words.next().unwrap();
    let args: Vec<String> = words.map(str::to_owned).collect();
    topology(binary, &args)
  }

  /// `row` as git gets it: reading only the jail.
  fn git(row: Topology) -> Option<Topology> {
    Some(Topology {
      reads_jail: true,
      ..row
    })
  }

  #[test]
  fn read_only_git_subcommands_write_nothing_and_reach_nothing() {
    for c in [
      "git status",
      "git log --oneline",
      "git diff",
      "git show HEAD",
      "git rev-parse HEAD",
      "git ls-files",
      "git blame f",
      "git branch",
      "git branch --list -a",
      "git tag -l",
      "git stash list",
      "git worktree list",
    ] {
      assert_eq!(of(c), git(READ_ONLY), "{c}");
    }
  }

  #[test]
  fn mutating_git_subcommands_write_the_jail_without_network() {
    for c in [
      "git add f",
      "git commit -m x",
      "git checkout -b x",
      "git switch main",
      "git merge x",
      "git reset --hard",
      "git stash",
      "git stash pop",
      "git branch new",
      "git branch -D old",
      "git tag v1",
      "git worktree add ../x",
    ] {
      assert_eq!(of(c), git(LOCAL_WRITE), "{c}");
    }
  }

  #[test]
  fn only_fetch_clone_and_push_get_the_network() {
    for c in ["git fetch", "git clone a b", "git push origin main"] {
      assert_eq!(of(c), Some(REMOTE), "{c}");
    }
    let with_network: Vec<&str> = GIT_READ_ONLY
      .iter()
      .chain(GIT_LOCAL_WRITE)
      .chain(GIT_REMOTE)
      .copied()
      .filter(|sub| of(&format!("git {sub}")).unwrap().network == Network::Allow)
      .collect();
    assert_eq!(with_network, GIT_REMOTE);
    for sub in [
      "pull",
      "remote",
      "ls-remote",
      "submodule",
      "config",
      "gc",
      "-C",
      "--git-dir=x",
    ] {
      assert_eq!(of(&format!("git {sub}")), None, "git {sub}");
    }
    assert_eq!(topology("git", &[]), None);
  }

  #[test]
  fn the_tables_do_not_overlap() {
    for sub in GIT_READ_ONLY {
      assert!(
        !GIT_LOCAL_WRITE.contains(sub) && !GIT_REMOTE.contains(sub),
        "{sub}"
      );
    }
    for sub in GIT_LOCAL_WRITE {
      assert!(!GIT_REMOTE.contains(sub), "{sub}");
    }
  }

  #[test]
  fn other_programs_by_name_read_only_tools_or_the_jail() {
    for c in ["ls -la", "cat f", "wc -l f", "rg x", "find . -delete"] {
      assert_eq!(of(c), Some(READ_ONLY_PROGRAM), "{c}");
    }
    for c in ["br sync", "node x.js", "sed -i s/a/b/ f"] {
      assert_eq!(of(c), Some(LOCAL_WRITE), "{c}");
    }
  }
}
