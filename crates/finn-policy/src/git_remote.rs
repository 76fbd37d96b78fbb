//! `git fetch` and `git push`, when a policy lists them: the only git subcommands that reach a
//! remote. The repository config that names the remote is the agent's, so the remote is held to
//! what the sandbox can check: every URL of the named remote is `https://`, or a repository inside
//! the jail that passes the same repository check as the jail's own (a local remote's alternates,
//! hooks or config would otherwise be read by `upload-pack`/`receive-pack` unchecked).

use std::path::Path;

use super::error::Denial;
use super::git::{self, Repository};
use super::git_config;
use super::host_git::{self, Watch};
use super::jail::resolve_lexically;

fn refuse(what: impl Into<String>) -> Denial {
  let what = what.into();
  Denial::audited(
    format!("Repository config rejected: {what}"),
    format!("repository_rejected: {what}"),
  )
}

fn bad_operand(sub: &str, arg: &str, why: &str) -> Denial {
  Denial::audited(
    format!("Flag not allowed: {arg} (git {sub} takes {why})"),
    format!("remote_operand: {arg}"),
  )
}

/// A remote's name as `git remote add` accepts it, minus anything that could read as a path or
/// a URL (git takes an unconfigured name as a URL).
fn is_name(s: &str) -> bool {
  let mut chars = s.chars();
  chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
    && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    && !s.contains("..")
}

/// A branch name to push: `[A-Za-z0-9][A-Za-z0-9._/-]*`, no `..`, no `//`, no refspec syntax
/// (`:` or `+`, which would delete or force).
fn is_branch(s: &str) -> bool {
  let mut chars = s.chars();
  chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
    && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    && !s.contains("..")
    && !s.contains("//")
    && !s.ends_with('/')
}

/// The remote `git <sub> operands…` contacts. `fetch <remote>`; `push <remote> <branch>…`.
pub fn remote_of<'a>(sub: &str, operands: &[&'a str]) -> Result<&'a str, Denial> {
  let (&remote, rest) = operands
    .split_first()
    .ok_or_else(|| bad_operand(sub, sub, "the name of a configured remote first"))?;
  if !is_name(remote) {
    return Err(bad_operand(
      sub,
      remote,
      "the name of a configured remote, not a URL or path",
    ));
  }
  match sub {
    "fetch" => {
      if let Some(extra) = rest.first() {
        return Err(bad_operand(sub, extra, "one remote name and no refspec"));
      }
    }
    _ => {
      if rest.is_empty() {
        return Err(bad_operand(sub, remote, "a remote name and branch names"));
      }
      if let Some(bad) = rest.iter().find(|b| !is_branch(b)) {
        return Err(bad_operand(sub, bad, "branch names, not refspecs"));
      }
    }
  }
  Ok(remote)
}

/// Every `remote.<name>.url` git would use, read by git with no system or global file.
fn urls(
  git_bin: &str,
  repo: &Repository,
  name: &str,
  watch: &Watch,
) -> Result<Vec<String>, Denial> {
  let mut command = host_git::sealed(git_bin);
  command
    .envs(repo.env())
    .current_dir(&repo.git_dir)
    .args(["config", "--no-includes", "-z", "--get-all"])
    .arg(format!("remote.{name}.url"));
  let mut out = Vec::new();
  let what = format!("git config (remote {name}'s URLs)");
  host_git::run(
    command,
    &what,
    watch,
    &mut host_git::collect_bounded(&mut out, git_config::MAX_LISTING_BYTES, &what),
  )?;
  let text = String::from_utf8(out).map_err(|_| refuse("a remote URL is not UTF-8"))?;
  // NUL-separated: a value with a line break is one URL, as git reads it.
  let urls: Vec<String> = text.split_terminator('\0').map(str::to_owned).collect();
  if urls.is_empty() {
    return Err(refuse(format!("remote {name} has no url")));
  }
  Ok(urls)
}

/// A local remote's `hooks/` holds only git's `*.sample` files. `receive-pack` runs the remote's
/// hooks (pre-receive, update, post-receive, ...) with the pushing git's `GIT_CONFIG_*`
/// overrides removed (git clears them for a local transport), so `core.hooksPath` cannot switch
/// them off: a hook there ran any program, with the network push is given.
fn no_hooks(remote: &Repository, name: &str) -> Result<(), Denial> {
  for dir in [&remote.git_dir, &remote.common_dir] {
    let entries = match std::fs::read_dir(dir.join("hooks")) {
      Ok(entries) => entries,
      Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
      Err(_) => return Err(refuse(format!("remote {name}: hooks/ cannot be read"))),
    };
    for entry in entries {
      let entry = entry.map_err(|_| refuse(format!("remote {name}: hooks/ cannot be read")))?;
      let file = entry.file_name();
      if !file.to_string_lossy().ends_with(".sample") {
        return Err(refuse(format!(
          "remote {name} has a hook (receive-pack would run it): hooks/{}",
          file.to_string_lossy()
        )));
      }
    }
  }
  Ok(())
}

/// The `GIT_ALLOW_PROTOCOL` for contacting remote `name` of `repo`: `https` and/or `file`, each
/// URL checked; anything else refused.
pub fn protocols(
  git_bin: &str,
  repo: &Repository,
  jail_root: &Path,
  name: &str,
  watch: &Watch,
) -> Result<String, Denial> {
  protocols_and_hosts(git_bin, repo, jail_root, name, watch).map(|(p, _)| p)
}

/// [`protocols`], and the hosts of the remote's `https://` URLs as a network allowlist names
/// them (`host`, or `host:port` for a port other than 443): the only hosts the command's
/// network reaches where the egress route can be made.
pub fn protocols_and_hosts(
  git_bin: &str,
  repo: &Repository,
  jail_root: &Path,
  name: &str,
  watch: &Watch,
) -> Result<(String, Vec<String>), Denial> {
  let mut allowed: Vec<&str> = Vec::new();
  let mut hosts: Vec<String> = Vec::new();
  for url in urls(git_bin, repo, name, watch)? {
    if url.starts_with("https://") {
      let host = https_host(&url)
        .ok_or_else(|| refuse(format!("remote {name}'s https URL names no host")))?;
      if !hosts.contains(&host) {
        hosts.push(host);
      }
      if !allowed.contains(&"https") {
        allowed.push("https");
      }
      continue;
    }
    // A local repository: a path (relative to the jail, git's cwd) or a file:// URL with an
    // absolute path, spelled so that git reads the same path: only `[A-Za-z0-9._/-]`, not
    // starting with `-`. git percent-decodes a file:// URL, takes `file://host/path` as
    // `/path` and skips an `x@[y]` host, and `upload-pack` expands a leading `~user`; a
    // scheme or scp-like `host:path` is some other protocol.
    let path = match url.strip_prefix("file://") {
      Some(rest) if rest.starts_with('/') => rest,
      Some(_) => "",
      None => url.as_str(),
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-');
    if path.is_empty() || path.starts_with('-') || !path.bytes().all(plain) {
      return Err(refuse(format!(
        "remote {name} is neither https:// nor a plainly spelled repository inside the jail"
      )));
    }
    let dir = std::fs::canonicalize(resolve_lexically(jail_root, path))
      .ok()
      .filter(|d| d.starts_with(jail_root))
      .ok_or_else(|| refuse(format!("remote {name} points outside the jail")))?;
    // The remote as a repository of its own: a bare one at `dir`, checked like the jail's.
    match git::check_repository(&dir, git_bin, watch)? {
      Some(r) if r.work_tree.is_none() => no_hooks(&r, name)?,
      _ => {
        return Err(refuse(format!(
          "remote {name} is not a bare repository inside the jail"
        )));
      }
    }
    if !allowed.contains(&"file") {
      allowed.push("file");
    }
  }
  Ok((allowed.join(":"), hosts))
}

/// The host of an `https://` URL as an allowlist entry: lowercase, without user information,
/// with its port unless it is 443. `None` when it names none.
pub fn https_host(url: &str) -> Option<String> {
  let rest = url.strip_prefix("https://")?;
  let authority = rest.split(['/', '?', '#']).next()?;
  let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
  let (host, port) = match host_port.strip_prefix('[') {
    Some(v6) => {
      let (addr, after) = v6.split_once(']')?;
      (format!("[{addr}]"), after.strip_prefix(':'))
    }
    None => match host_port.rsplit_once(':') {
      Some((h, p)) => (h.to_owned(), Some(p)),
      None => (host_port.to_owned(), None),
    },
  };
  if host.is_empty() || host == "[]" {
    return None;
  }
  let host = host.to_ascii_lowercase();
  match port.filter(|p| !p.is_empty() && *p != "443") {
    Some(p) => Some(format!("{host}:{p}")),
    None => Some(host),
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::process::{Command, Stdio};

  /// The allowlist entry of a remote's URL: the host git connects to, never its user
  /// information (`https://evil.test@github.com/` reaches github.com).
  #[test]
  fn an_https_urls_host_is_its_allowlist_entry() {
    for (url, want) in [
      ("https://github.com/o/r.git", Some("github.com")),
      ("https://GitHub.com:443/o/r", Some("github.com")),
      (
        "https://git.example.com:8443/r",
        Some("git.example.com:8443"),
      ),
      ("https://user:pw@github.com/o/r", Some("github.com")),
      ("https://evil.test@github.com/o/r", Some("github.com")),
      ("https://[fd00::1]:8443/r", Some("[fd00::1]:8443")),
      ("https://[fd00::1]/r", Some("[fd00::1]")),
      ("https://github.com?x", Some("github.com")),
      ("https:///r", None),
      ("https://user@/r", None),
      ("http://github.com/r", None),
    ] {
      assert_eq!(https_host(url).as_deref(), want, "{url}");
    }
  }

  #[test]
  fn operands_are_a_remote_name_and_for_push_branch_names() {
    assert_eq!(remote_of("fetch", &["origin"]).unwrap(), "origin");
    assert_eq!(remote_of("push", &["up", "main", "feat/x"]).unwrap(), "up");
    for (sub, ops) in [
      ("fetch", &[][..]),
      ("fetch", &["/outside/repo"][..]),
      ("fetch", &["../repo"][..]),
      ("fetch", &["https://evil.example/x"][..]),
      ("fetch", &["host:path"][..]),
      ("fetch", &["origin", "main:refs/heads/x"][..]),
      ("fetch", &["origin", "main"][..]),
      ("push", &["origin"][..]),
      ("push", &["origin", "+main"][..]),
      ("push", &["origin", ":main"][..]),
      ("push", &["origin", "main:other"][..]),
      ("push", &["origin", "a/../b"][..]),
      ("push", &["-x", "main"][..]),
    ] {
      assert!(remote_of(sub, ops).is_err(), "git {sub} {ops:?}");
    }
  }

  fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
      .args(args)
      .current_dir(dir)
      .env("GIT_CONFIG_GLOBAL", "/dev/null")
      .stdout(Stdio::null())
      .stderr(Stdio::null())
      .status()
      .unwrap()
      .success();
    assert!(ok, "git {args:?}");
  }

  #[test]
  fn a_remote_must_be_https_or_a_checked_bare_repository_inside_the_jail() {
    let dir = tempfile::tempdir().unwrap();
    let jail = std::fs::canonicalize(dir.path()).unwrap().join("jail");
    std::fs::create_dir(&jail).unwrap();
    git(&jail, &["init", "-q"]);
    git(&jail, &["init", "-q", "--bare", "remote.git"]);
    let outside = dir.path().join("outside.git");
    git(dir.path(), &["init", "-q", "--bare", "outside.git"]);
    let git_bin = std::fs::canonicalize("/usr/bin/git").unwrap();
    let git_bin = git_bin.to_str().unwrap();
    let watch = Watch::new(host_git::REPOSITORY_CHECK_MS, None);
    let repo = git::check_repository(&jail, git_bin, &watch)
      .unwrap()
      .unwrap();
    let check = |url: &str| {
      git(&jail, &["config", "--replace-all", "remote.r.url", url]);
      protocols(git_bin, &repo, &jail, "r", &watch).map_err(|d| d.message)
    };
    assert_eq!(check("https://example.com/x.git").unwrap(), "https");
    assert_eq!(check("remote.git").unwrap(), "file");
    assert_eq!(
      check(&format!("file://{}", jail.join("remote.git").display())).unwrap(),
      "file"
    );
    for bad in [
      outside.to_str().unwrap(),
      "../outside.git",
      "ssh://host/x",
      "host:x",
      "ext::sh -c x",
      "git://host/x",
      "http://host/x",
      ".",
    ] {
      assert!(check(bad).is_err(), "{bad}");
    }
    // A bare repository inside the jail whose name has a colon: git reads `evil:x.git` as
    // scp-like ssh (host `evil`), so it is refused although the directory checks out.
    git(&jail, &["init", "-q", "--bare", "evil:x.git"]);
    assert!(check("evil:x.git").is_err());
    // Spellings git reads as another path than the one checked: `file://host/abs` is `/abs`,
    // `%2e` is decoded, `~` expanded, a line break is part of the one URL.
    let jailed = jail.join("remote.git");
    let jailed = jailed.to_str().unwrap();
    for bad in [
      format!("file://x{jailed}"),
      format!("file://{}/x@[y]{jailed}", jail.display()),
      "remote%2egit".to_owned(),
      "file://remote%2egit".to_owned(),
      "~/remote.git".to_owned(),
      "remote.git\nremote.git".to_owned(),
      "-remote.git".to_owned(),
    ] {
      assert!(check(&bad).is_err(), "{bad}");
    }
    // A directory git does not take for a repository (HEAD garbage): upload-pack would move on
    // to `fake.git`.
    std::fs::create_dir_all(jail.join("fake/objects")).unwrap();
    std::fs::create_dir_all(jail.join("fake/refs")).unwrap();
    std::fs::write(jail.join("fake/HEAD"), "garbage\n").unwrap();
    assert!(check("fake").is_err());
    // A hook in the remote: receive-pack would run it. git init's samples pass.
    assert_eq!(check("remote.git").unwrap(), "file");
    std::fs::write(jail.join("remote.git/hooks/pre-receive"), "#!/bin/sh\n").unwrap();
    assert!(
      check("remote.git")
        .unwrap_err()
        .contains("has a hook (receive-pack would run it): hooks/pre-receive")
    );
    std::fs::remove_file(jail.join("remote.git/hooks/pre-receive")).unwrap();
    // No hooks/ at all is fine; a hooks/ that cannot be listed (a file there) is refused.
    let hooks = jail.join("remote.git/hooks");
    std::fs::rename(&hooks, jail.join("hooks-away")).unwrap();
    assert_eq!(check("remote.git").unwrap(), "file");
    std::fs::write(&hooks, "").unwrap();
    assert!(
      check("remote.git")
        .unwrap_err()
        .contains("hooks/ cannot be read")
    );
    std::fs::remove_file(&hooks).unwrap();
    std::fs::rename(jail.join("hooks-away"), &hooks).unwrap();
    // file:// takes an absolute path only; a name starting with `-` is refused even when a bare
    // repository by that name checks out.
    assert!(check("file://remote.git").is_err());
    git(&jail, &["init", "-q", "--bare", "--", "-remote.git"]);
    assert!(
      check("-remote.git")
        .unwrap_err()
        .contains("plainly spelled")
    );
    // The local remote is checked like the jail's repository: alternates pointing out refused.
    git(
      &jail,
      &["config", "--replace-all", "remote.r.url", "remote.git"],
    );
    std::fs::write(
      jail.join("remote.git/objects/info/alternates"),
      format!("{}/objects\n", outside.display()),
    )
    .unwrap();
    let refused = protocols(git_bin, &repo, &jail, "r", &watch).unwrap_err();
    assert!(
      refused.message.contains("alternates"),
      "{}",
      refused.message
    );
    assert!(
      protocols(git_bin, &repo, &jail, "missing", &watch)
        .unwrap_err()
        .message
        .contains("has no url")
    );
  }
}
