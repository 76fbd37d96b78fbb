//! What git could be made to do by a repository the agent wrote into the jail.
//!
//! The environment's `GIT_CONFIG_COUNT` overrides beat repository config for single keys
//! (fsmonitor, hooks, pager, gpg). `--no-ext-diff --no-textconv` disable diff drivers. What
//! neither can reach is refused here, before git runs: filter drivers (run on status/diff),
//! config includes, `core.worktree` and gitdir/commondir/alternates pointers out of the jail.

use std::path::{Path, PathBuf};

use super::error::Denial;
use super::jail::resolve_lexically;

/// Inserted right after the subcommand of `diff`, `log` and `show`; the policy denies the flags
/// that would switch them back on.
pub fn harden_args(args: &[String]) -> Vec<String> {
  match args.first().map(String::as_str) {
    Some("diff" | "log" | "show") => {
      let mut out = vec![
        args[0].clone(),
        "--no-ext-diff".into(),
        "--no-textconv".into(),
      ];
      out.extend_from_slice(&args[1..]);
      out
    }
    _ => args.to_vec(),
  }
}

fn refuse(what: &str) -> Denial {
  Denial::audited(
    format!("Repository config rejected: {what}"),
    format!("repository_rejected: {what}"),
  )
}

/// Checks the repository git would discover from `jail_root` (the sandbox's cwd; discovery
/// stops there because of `GIT_CEILING_DIRECTORIES`).
pub fn check_repository(jail_root: &Path) -> Result<(), Denial> {
  let dot_git = jail_root.join(".git");
  let git_dir = match std::fs::symlink_metadata(&dot_git) {
    Ok(meta) if meta.is_dir() => dot_git,
    Ok(meta) if meta.is_file() => {
      // `gitdir: <path>` (a worktree or submodule): follow it only inside the jail.
      let text = std::fs::read_to_string(&dot_git).map_err(|_| refuse(".git is unreadable"))?;
      let target = text
        .trim()
        .strip_prefix("gitdir:")
        .map(str::trim)
        .ok_or_else(|| refuse(".git file without gitdir"))?;
      inside(
        jail_root,
        jail_root,
        target,
        "gitdir points outside the jail",
      )?
    }
    Ok(_) => return Err(refuse(".git is a symlink")),
    // A bare repository at the jail root, or no repository at all.
    Err(_) if jail_root.join("HEAD").is_file() && jail_root.join("config").is_file() => {
      jail_root.to_path_buf()
    }
    Err(_) => return Ok(()),
  };
  let mut config_dirs = vec![git_dir.clone()];
  if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
    config_dirs.push(inside(
      jail_root,
      &git_dir,
      common.trim(),
      "commondir points outside the jail",
    )?);
  }
  for dir in &config_dirs {
    if dir.join("objects/info/alternates").exists() {
      return Err(refuse("object alternates"));
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("config")) {
      check_config(&text)?;
    }
  }
  Ok(())
}

/// `target` (relative to `base`) resolved, symlinks followed, and required inside `jail`.
fn inside(jail: &Path, base: &Path, target: &str, what: &str) -> Result<PathBuf, Denial> {
  let resolved = resolve_lexically(base, target);
  let real = std::fs::canonicalize(&resolved).unwrap_or(resolved);
  if real.starts_with(jail) {
    Ok(real)
  } else {
    Err(refuse(what))
  }
}

/// Refuses config sections git would act on that no override can switch off.
pub fn check_config(text: &str) -> Result<(), Denial> {
  let mut section = String::new();
  for raw in text.lines() {
    let line = raw.trim();
    if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
      continue;
    }
    let rest = if let Some(header) = line.strip_prefix('[') {
      let (name, after) = header.split_once(']').unwrap_or((header, ""));
      let name = name.trim();
      // `[filter "x"]` and `[filter.x]` both name the section `filter`.
      section = name
        .split(|c: char| c == '"' || c == '.' || c.is_whitespace())
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
      if matches!(section.as_str(), "filter" | "include" | "includeif") {
        return Err(refuse(&format!("{section} sections are not allowed")));
      }
      after.trim()
    } else {
      line
    };
    let key = rest
      .split(['=', ' ', '\t'])
      .next()
      .unwrap_or("")
      .to_ascii_lowercase();
    if section == "core" && key == "worktree" {
      return Err(refuse("core.worktree is not allowed"));
    }
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn config_sections_that_run_or_redirect_are_refused() {
    assert!(check_config("[core]\n\tbare = false\n[remote \"o\"]\n\turl = x\n").is_ok());
    assert!(check_config("[filter \"lfs\"]\n\tclean = evil\n").is_err());
    assert!(check_config("[Filter.lfs]\nclean=evil").is_err());
    assert!(check_config("[include]\n\tpath = /tmp/x").is_err());
    assert!(check_config("[includeIf \"gitdir:/\"]\n\tpath = x").is_err());
    assert!(check_config("[core]\n\tworktree = /etc").is_err());
    assert!(check_config("[core] worktree = /etc").is_err());
    // Overridden through GIT_CONFIG_COUNT, so allowed here.
    assert!(check_config("[core]\n\tfsmonitor = /tmp/evil\n\thooksPath = /tmp").is_ok());
  }

  #[test]
  fn pointers_out_of_the_jail_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let jail = std::fs::canonicalize(dir.path()).unwrap();
    assert!(check_repository(&jail).is_ok(), "no repository at all");
    std::fs::write(jail.join(".git"), "gitdir: /etc\n").unwrap();
    assert!(check_repository(&jail).is_err());
    std::fs::write(
      jail.join(".git"),
      format!("gitdir: {}/../x\n", jail.display()),
    )
    .unwrap();
    assert!(check_repository(&jail).is_err(), "lexical escape");
    std::fs::remove_file(jail.join(".git")).unwrap();
    std::fs::create_dir_all(jail.join(".git/objects/info")).unwrap();
    std::fs::write(jail.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    assert!(check_repository(&jail).is_ok());
    std::fs::write(jail.join(".git/commondir"), "../../elsewhere").unwrap();
    assert!(check_repository(&jail).is_err());
    std::fs::remove_file(jail.join(".git/commondir")).unwrap();
    std::fs::write(
      jail.join(".git/objects/info/alternates"),
      "/srv/other/objects",
    )
    .unwrap();
    assert!(check_repository(&jail).is_err());
  }

  #[test]
  fn flags_are_inserted_after_the_subcommand() {
    let args: Vec<String> = ["diff", "HEAD"].iter().map(|s| s.to_string()).collect();
    assert_eq!(
      harden_args(&args),
      ["diff", "--no-ext-diff", "--no-textconv", "HEAD"]
    );
    let status: Vec<String> = vec!["status".into()];
    assert_eq!(harden_args(&status), ["status"]);
  }
}
