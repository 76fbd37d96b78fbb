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
  // does when Node is killed. It ends only once the program runs (the launcher has asked for
  // its parent-death signal by then).
  std::thread::spawn(move || {
    let mut git = host_git::sealed("/bin/sleep");
    git.arg(&arg).stdout(Stdio::null()).stderr(Stdio::null());
    let child = git.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while holders(&arg).is_empty() {
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
