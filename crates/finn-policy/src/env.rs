//! The environment sandboxed commands run with, and git's hardening.

use std::path::Path;

/// loa-finn's sandbox environment, exactly, plus git hardening:
/// - `GIT_CEILING_DIRECTORIES` = the jail's parent, so discovery never walks up out of the jail
///   into an enclosing repository;
/// - `GIT_CONFIG_COUNT` overrides (they beat repository config) that switch off what a config
///   written by the agent could make git run on status/diff/log: fsmonitor, hooks, pager,
///   external diff;
/// - `GIT_OPTIONAL_LOCKS=0`, so `git status` does not write the index (no index hooks);
/// - `GIT_NO_LAZY_FETCH=1`; per job, `GIT_ALLOW_PROTOCOL` (empty) and the repository's paths
///   pinned (`jail_args.rs`).
pub fn sandbox_env(jail_root: &Path) -> Vec<(String, String)> {
  let root = jail_root.to_string_lossy().into_owned();
  let parent = jail_root
    .parent()
    .unwrap_or(Path::new("/"))
    .to_string_lossy()
    .into_owned();
  let mut env: Vec<(String, String)> = [
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("HOME", root.as_str()),
    ("LANG", "en_US.UTF-8"),
    ("TERM", "dumb"),
    ("GIT_PAGER", "cat"),
    ("PAGER", "cat"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_SYSTEM", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_CEILING_DIRECTORIES", parent.as_str()),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    // A partial clone's missing object is not fetched (the fetch ran `remote.*.uploadpack`).
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_ATTR_NOSYSTEM", "1"),
  ]
  .iter()
  .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
  .collect();
  let overrides = [
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("diff.external", ""),
    ("core.sshCommand", "false"),
    ("protocol.allow", "never"),
    ("log.showSignature", "false"),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    // Files outside the repository that status and diff would read.
    ("core.excludesFile", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("log.mailmap", "false"),
    // Submodules are refused; these keep git from looking into one made after the check.
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
  ];
  env.push(("GIT_CONFIG_COUNT".into(), overrides.len().to_string()));
  for (i, (key, value)) in overrides.iter().enumerate() {
    env.push((format!("GIT_CONFIG_KEY_{i}"), (*key).to_owned()));
    env.push((format!("GIT_CONFIG_VALUE_{i}"), (*value).to_owned()));
  }
  env
}
