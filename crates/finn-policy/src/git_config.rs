//! Repository config, read by git itself and held to an allowlist of keys that execute nothing
//! and point nowhere. git's parser decides what a line means (`\r` line breaks, a BOM, `[a][b]`
//! on one line, quoting): a parser of our own would disagree with it somewhere, and each
//! disagreement was a way to hide a key.

use std::fs::File;
use std::path::Path;

use super::error::Denial;
use super::host_git::{self, Watch};

/// Keys (section and variable lowercased, as git prints them) with no subsection.
const PLAIN_KEYS: &[&str] = &[
  // Written by `git init`: format and how the work tree's files are compared.
  "core.repositoryformatversion",
  "core.filemode",
  "core.bare",
  "core.logallrefupdates",
  "core.ignorecase",
  "core.precomposeunicode",
  "core.symlinks",
  // Identity: text that ends up in commits, never read as a path or program.
  "user.name",
  "user.email",
  "init.defaultbranch",
  // Format extensions git refuses to run without: sha256 objects, and per-worktree config
  // (whose keys `git config --list` then shows too, so they meet this list as well).
  "extensions.objectformat",
  "extensions.worktreeconfig",
];

/// `section.<subsection>.variable` keys. `remote.*.url` names a remote that only fetch and push
/// contact: every other subcommand runs with GIT_ALLOW_PROTOCOL empty and lazy fetch off, and
/// fetch and push (when a policy lists them) only reach a URL `git_remote.rs` accepts.
/// Never `remote.*.uploadpack`/`receivepack`/`proxy`/`promisor` (programs, lazy fetch).
const SUBSECTION_KEYS: &[(&str, &str)] = &[
  ("remote", "url"),
  ("remote", "fetch"),
  ("branch", "remote"),
  ("branch", "merge"),
];

/// Whether `key` is on the allowlist.
pub fn key_allowed(key: &str) -> bool {
  if PLAIN_KEYS.contains(&key) {
    return true;
  }
  let Some((section, rest)) = key.split_once('.') else {
    return false;
  };
  let Some((subsection, variable)) = rest.rsplit_once('.') else {
    return false;
  };
  !subsection.is_empty() && SUBSECTION_KEYS.contains(&(section, variable))
}

/// One entry of `git config --list --show-scope --show-origin -z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
  pub scope: String,
  pub origin: String,
  pub key: String,
}

/// Hands each entry of `scope NUL origin NUL key [LF value] NUL ...` to `each`, one at a time: a
/// listing is never held as entries (a few hundred thousand of them, over the worktree files, cost
/// Node hundreds of MB).
fn each_entry(
  out: &[u8],
  each: &mut dyn FnMut(ConfigEntry) -> Result<(), Denial>,
) -> Result<(), Denial> {
  if out.is_empty() {
    return Ok(());
  }
  let malformed = || refuse("git config printed a listing that does not parse".into());
  // A complete listing ends with NUL.
  let body = out.strip_suffix(b"\0").ok_or_else(malformed)?;
  let mut fields = body.split(|b| *b == 0);
  while let Some(scope) = fields.next() {
    let (Some(origin), Some(key)) = (fields.next(), fields.next()) else {
      return Err(malformed());
    };
    let key = key.split(|b| *b == b'\n').next().unwrap_or_default();
    each(ConfigEntry {
      scope: String::from_utf8_lossy(scope).into_owned(),
      origin: String::from_utf8_lossy(origin).into_owned(),
      key: String::from_utf8_lossy(key).into_owned(),
    })?;
  }
  Ok(())
}

/// Every entry of a listing (see [`each_entry`]).
pub fn parse_listing(out: &[u8]) -> Result<Vec<ConfigEntry>, String> {
  let mut entries = Vec::new();
  each_entry(out, &mut |e| {
    entries.push(e);
    Ok(())
  })
  .map_err(|d| d.message)?;
  Ok(entries)
}

fn refuse(what: String) -> Denial {
  Denial::audited(
    format!("Repository config rejected: {what}"),
    format!("repository_rejected: {what}"),
  )
}

/// The most a config listing may print: a config the allowlist accepts lists a few hundred bytes
/// per remote or branch, so this is far past any real one.
pub const MAX_LISTING_BYTES: usize = 1024 * 1024;

/// A config file the check reads itself, opened as [`host_git::open_bounded`] opens one: no
/// larger than the listing's bound.
pub const MAX_CONFIG_FILE_BYTES: u64 = MAX_LISTING_BYTES as u64;

/// Runs `git config --list` as `git` would read config with `repo` (the job's pinning:
/// `GIT_DIR`, `GIT_COMMON_DIR`, ...), run in `git_dir`, with no system, global or XDG file, no
/// includes followed (an include is itself a refused key), and the open `file` (read from its
/// descriptor as stdin, never by path again) instead of the repository's files when given; the
/// first key not on the allowlist is refused as the listing is read. `shown` names what is
/// listed in refusals.
fn check_listing(
  git: &str,
  git_dir: &Path,
  repo: &[(String, String)],
  file: Option<File>,
  shown: &str,
  watch: &Watch,
) -> Result<(), Denial> {
  let mut command = host_git::sealed(git);
  command
    .envs(repo.iter().map(|(k, v)| (k, v)))
    .current_dir(git_dir)
    .args([
      "config",
      "--list",
      "--show-origin",
      "--show-scope",
      "-z",
      "--no-includes",
    ]);
  match file {
    Some(file) => command.stdin(file).args(["--file", "-"]),
    // Fails unless git takes `git_dir` for a repository: without it git lists nothing and
    // succeeds, and `upload-pack`, given such a path, moves on to `<path>.git` (unchecked).
    None => command.arg("--local"),
  };
  let mut out = Vec::new();
  let what = format!("git config ({shown})");
  let ran = host_git::run(
    command,
    &what,
    watch,
    &mut host_git::collect_bounded(&mut out, MAX_LISTING_BYTES, &what),
  )?;
  if !ran.success {
    return Err(refuse(format!("git could not read it ({})", ran.why())));
  }
  each_entry(&out, &mut |mut entry| {
    // Our own overrides. A `--file` listing has scope `command` too, but another origin.
    if entry.scope == "command" && entry.origin == "command line:" {
      return Ok(());
    }
    if entry.origin == "standard input:" {
      entry.origin = format!("file:{shown}");
    }
    if !key_allowed(&entry.key) {
      return Err(refuse(format!(
        "{} is not on the allowlist ({})",
        host_git::excerpt(&entry.key),
        host_git::excerpt(&entry.origin)
      )));
    }
    Ok(())
  })
}

/// Every key git would read for the repository pinned by `repo` (its environment), plus those
/// of each extra config file (per-worktree files git reads only under an extension), on the
/// allowlist; the first key that is not is named in the refusal.
pub fn check(
  git: &str,
  git_dir: &Path,
  repo: &[(String, String)],
  extra_files: &[(std::path::PathBuf, String)],
  watch: &Watch,
) -> Result<(), Denial> {
  check_listing(git, git_dir, repo, None, "the repository's config", watch)?;
  for (path, shown) in extra_files {
    // Gone since the walk: nothing for git to read either.
    let Some(file) = host_git::open_bounded(path, shown, MAX_CONFIG_FILE_BYTES)? else {
      continue;
    };
    check_listing(git, git_dir, repo, Some(file), shown, watch)?;
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::process::Command;

  #[test]
  fn the_allowlist_takes_what_init_and_clone_write_and_nothing_that_runs() {
    for key in [
      "core.repositoryformatversion",
      "core.bare",
      "remote.origin.url",
      "remote.my.dotted.name.fetch",
      "branch.feature/x.merge",
      "user.email",
    ] {
      assert!(key_allowed(key), "{key}");
    }
    for key in [
      "core.worktree",
      "core.fsmonitor",
      "core.hookspath",
      "core.pager",
      "core.sshcommand",
      "filter.lfs.clean",
      "diff.x.textconv",
      "include.path",
      "includeif.gitdir:/.path",
      "remote.origin.uploadpack",
      "remote.origin.receivepack",
      "remote.origin.promisor",
      "extensions.partialclone",
      "protocol.file.allow",
      "protocol.allow",
      "remote.url",
      "branch..merge",
      "submodule.x.url",
      "user.signingkey",
      "core",
    ] {
      assert!(!key_allowed(key), "{key}");
    }
  }

  /// The listing reads the config the job's pinning makes git read: here `GIT_COMMON_DIR`
  /// names a copy with a filter, while the git directory itself (no `commondir`) is clean.
  #[test]
  fn the_listing_reads_the_config_of_the_pinned_common_dir() {
    let dir = tempfile::tempdir().unwrap();
    let git = super::super::command::resolve_binary("git", "/usr/bin:/bin");
    for name in ["repo", "other"] {
      let ok = Command::new(&git)
        .args(["init", "-q", "--bare", name])
        .current_dir(dir.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap()
        .success();
      assert!(ok);
    }
    let (repo, other) = (dir.path().join("repo"), dir.path().join("other"));
    let mut config = std::fs::read_to_string(other.join("config")).unwrap();
    config.push_str("[filter \"x\"]\n\tclean = sh evil.sh\n");
    std::fs::write(other.join("config"), config).unwrap();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let env = |common: &Path| {
      vec![
        ("GIT_DIR".to_owned(), s(&repo)),
        ("GIT_COMMON_DIR".to_owned(), s(common)),
      ]
    };
    let watch = Watch::new(host_git::REPOSITORY_CHECK_MS, None);
    assert!(check(&git, &repo, &env(&repo), &[], &watch).is_ok());
    let refused = check(&git, &repo, &env(&other), &[], &watch).unwrap_err();
    assert!(
      refused
        .message
        .contains("filter.x.clean is not on the allowlist"),
      "{}",
      refused.message
    );
  }

  /// A bare repository `r` in a fresh directory (kept while the directory lives), the git that
  /// made it, and the environment that pins git to it.
  fn bare_repository() -> (tempfile::TempDir, String, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let git = super::super::command::resolve_binary("git", "/usr/bin:/bin");
    let ok = Command::new(&git)
      .args(["init", "-q", "--bare", "r"])
      .current_dir(dir.path())
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .status()
      .unwrap()
      .success();
    assert!(ok);
    let repo = dir.path().join("r");
    let env = vec![("GIT_DIR".to_owned(), repo.to_string_lossy().into_owned())];
    (dir, git, env)
  }

  /// A listing up to the bound is read whole (200 remotes list ~18 KiB); past it, refused by name.
  #[test]
  fn a_listing_is_bounded_at_one_mib() {
    let (dir, git, env) = bare_repository();
    let repo = dir.path().join("r");
    let watch = Watch::new(host_git::REPOSITORY_CHECK_MS, None);
    let mut config = std::fs::read_to_string(repo.join("config")).unwrap();
    for i in 0..200 {
      config.push_str(&format!(
        "[remote \"r{i}\"]\n\turl = https://example.com/{i}\n"
      ));
    }
    std::fs::write(repo.join("config"), &config).unwrap();
    check(&git, &repo, &env, &[], &watch).unwrap();
    config.push_str(&format!("[user]\n{}", "\tname\n".repeat(40_000)));
    std::fs::write(repo.join("config"), &config).unwrap();
    let got = check(&git, &repo, &env, &[], &watch).unwrap_err().message;
    assert!(
      got.contains("git config (the repository's config) printed more than 1048576 bytes"),
      "{got}"
    );
  }

  /// A worktree file is listed from its open descriptor; a refusal names the file, not stdin.
  #[test]
  fn a_worktree_file_refusal_names_the_file() {
    let (dir, git, env) = bare_repository();
    let repo = dir.path().join("r");
    let watch = Watch::new(host_git::REPOSITORY_CHECK_MS, None);
    let wt = repo.join("config.worktree");
    std::fs::write(&wt, "[user]\n\tname = x\n").unwrap();
    let files = [(wt.clone(), "r/config.worktree".to_owned())];
    check(&git, &repo, &env, &files, &watch).unwrap();
    std::fs::write(&wt, "[core]\n\tpager = evil\n").unwrap();
    let got = check(&git, &repo, &env, &files, &watch)
      .unwrap_err()
      .message;
    assert!(
      got.ends_with("core.pager is not on the allowlist (file:r/config.worktree)"),
      "{got}"
    );
  }

  #[test]
  fn listings_parse_with_and_without_values() {
    let out = b"local\0file:.git/config\0core.bare\nfalse\0local\0file:.git/config\0core.x\0";
    let entries = parse_listing(out).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].key, "core.bare");
    assert_eq!(entries[1].key, "core.x");
    assert!(parse_listing(b"local\0file\0").is_err());
    assert!(parse_listing(b"local\0file\0core.bare\nfalse").is_err());
    assert_eq!(parse_listing(b"").unwrap(), []);
  }
}
