//! The repository check's host gits end with Node: each starts through the supervisor binary as
//! a launcher, and the kernel kills it when the thread that waits for it ends. A git blocked on a
//! FIFO swapped into `.git` after the walk would otherwise outlive Node's death until its own
//! deadline, with nothing left to enforce it.
#![cfg(target_os = "linux")]

use std::process::Stdio;
use std::time::{Duration, Instant};

use finn_sandbox::core::policy::host_git;

mod common;
use common::holders;

#[test]
fn a_host_git_dies_with_the_thread_that_started_it() {
  host_git::set_launcher(env!("CARGO_BIN_EXE_finn-supervisor").into());
  let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000;
  let tok = format!("9999.{n:012}");
  let arg = tok.clone();
  // The thread starts a long "git" and ends without waiting for it, as every thread of Node
  // does when Node is killed. It ends only once `sleep` itself runs: the launcher, which
  // carries the token in its command line too, has asked for its parent-death signal by then.
  std::thread::spawn(move || {
    let mut git = host_git::sealed("/bin/sleep");
    git.arg(&arg).stdout(Stdio::null()).stderr(Stdio::null());
    let child = git.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let sleeping = || {
      holders(&arg).into_iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c == "sleep\n")
      })
    };
    while !sleeping() {
      assert!(Instant::now() < until, "the program never started");
      std::thread::sleep(Duration::from_millis(5));
    }
    drop(child);
  })
  .join()
  .unwrap();
  let until = Instant::now() + Duration::from_secs(5);
  let mut left = holders(&tok);
  while !left.is_empty() && Instant::now() < until {
    std::thread::sleep(Duration::from_millis(5));
    left = holders(&tok);
  }
  for &pid in &left {
    let _ = nix::sys::signal::kill(
      nix::unistd::Pid::from_raw(pid),
      nix::sys::signal::Signal::SIGKILL,
    );
  }
  assert_eq!(left, Vec::<i32>::new());
}

/// A repository outside the jail, as git would reach it through a `.git` swapped for a symlink
/// after the walk: the check's git, confined to the jail by its launcher, cannot read its
/// config, while the same git reads a repository inside the jail. Without the confinement the
/// outside config was listed (a refusal then quoted its keys).
#[test]
fn a_host_git_reads_nothing_outside_the_jail() {
  let git = ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("git");
  host_git::set_launcher(env!("CARGO_BIN_EXE_finn-supervisor").into());
  let jail = tempfile::tempdir().unwrap();
  let outside = tempfile::tempdir().unwrap();
  for dir in [jail.path(), outside.path()] {
    let ok = std::process::Command::new(git)
      .args(["init", "-q"])
      .arg(dir)
      .status()
      .unwrap()
      .success();
    assert!(ok);
  }
  std::fs::write(
    outside.path().join(".git/config"),
    "[core]\n\trepositoryformatversion = 0\n[credential]\n\thelper = outside-secret\n",
  )
  .unwrap();
  let list = |git_dir: &std::path::Path, confined: bool| {
    let mut command = host_git::sealed(git);
    command
      .env("GIT_DIR", git_dir)
      .current_dir(jail.path())
      .args(["config", "--list", "--local"]);
    let watch = host_git::Watch::new(10_000, None);
    let watch = if confined {
      watch.reading_beneath(jail.path())
    } else {
      watch
    };
    let mut out = Vec::new();
    let ran = host_git::run(command, "git config", &watch, &mut |b: &[u8]| {
      out.extend_from_slice(b);
      Ok(())
    })
    .unwrap();
    (ran.success, String::from_utf8_lossy(&out).into_owned())
  };
  let (ok, inside) = list(&jail.path().join(".git"), true);
  assert!(
    ok && inside.contains("core.repositoryformatversion"),
    "{inside}"
  );
  let (ok, leaked) = list(&outside.path().join(".git"), true);
  assert!(!ok && !leaked.contains("outside-secret"), "{leaked}");
  // The same run unconfined reads it: the confinement is what refuses it.
  let (ok, read) = list(&outside.path().join(".git"), false);
  assert!(ok && read.contains("outside-secret"), "{read}");
}
