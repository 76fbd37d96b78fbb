//! Every process below a pid, by parent links in `/proc`, frozen and then signalled.
//!
//! A subreaper inherits every orphan of its subtree, so "the job's tree" is simply "all
//! descendants of the job's reaper": no process group or session to escape from. Each one is
//! stopped first (SIGSTOP, walking again until a walk finds no new one): a stopped process can
//! neither fork nor exit, so the tree holds still while it is walked. Every process is held
//! by a pidfd opened after it was found and checked against its parent link, so a pid
//! recycled in between is never hit.
//!
//! The walk reads `/proc/<pid>/task/<tid>/children` from the root down: a few small reads per
//! process of the tree. Scanning every `/proc/<pid>/stat` instead cost 60-120 ms from Node's
//! `kill -9` to the last process gone, with six processes (five reapers and the supervisor)
//! scanning a few hundred entries each on two cores; the full scan remains the fallback for
//! kernels built without `CONFIG_PROC_CHILDREN`.

use std::os::fd::OwnedFd;

use nix::sys::signal::Signal;

use finn_exec::pidfd;
use finn_exec::tree::{self, Proc};

/// Scans per freeze: a fork bomb cannot keep the walk going forever, and what it adds later is
/// caught by the next call.
const FREEZE_ROUNDS: usize = 16;

/// Live descendants of `root` (not `root` itself), leaving out the subtrees of pids for which
/// `spare` holds.
pub fn descendants(procs: &[Proc], root: i32, spare: &dyn Fn(i32) -> bool) -> Vec<Proc> {
  let mut out = Vec::new();
  let mut stack = vec![root];
  while let Some(parent) = stack.pop() {
    for p in procs.iter().filter(|p| p.ppid == parent) {
      if p.pid == root || spare(p.pid) || out.iter().any(|o: &Proc| o.pid == p.pid) {
        continue;
      }
      stack.push(p.pid);
      if !p.zombie {
        out.push(*p);
      }
    }
  }
  out
}

/// The live direct children of `pid` (of all its threads), or `None` when the kernel does not
/// provide the `children` files.
fn children_of(pid: i32) -> Option<Vec<i32>> {
  let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
  let mut out = Vec::new();
  let mut any = false;
  for task in tasks.flatten() {
    if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
      any = true;
      out.extend(
        text
          .split_ascii_whitespace()
          .filter_map(|p| p.parse::<i32>().ok()),
      );
    }
  }
  any.then_some(out)
}

/// Descendants of `root` found through the `children` files, as (pid, parent) pairs; `None`
/// when those files are missing. A process already frozen (in `held`) has a stable list of
/// children; the others are listed as they are at the moment of the read.
fn walk_children(root: i32, spare: &dyn Fn(i32) -> bool) -> Option<Vec<(i32, i32)>> {
  let mut out: Vec<(i32, i32)> = Vec::new();
  let mut stack = vec![root];
  let mut first = true;
  while let Some(parent) = stack.pop() {
    let kids = match children_of(parent) {
      Some(kids) => kids,
      // The root's files must be there; a child that just exited simply has none.
      None if first => return None,
      None => Vec::new(),
    };
    first = false;
    for pid in kids {
      if pid == root || spare(pid) || out.iter().any(|(p, _)| *p == pid) {
        continue;
      }
      out.push((pid, parent));
      stack.push(pid);
    }
  }
  Some(out)
}

/// The processes of one tree that have been frozen so far.
pub struct Tree {
  root: i32,
  held: Vec<(i32, OwnedFd)>,
}

impl Tree {
  pub fn new(root: i32) -> Tree {
    Tree {
      root,
      held: Vec::new(),
    }
  }

  /// Stops every descendant not yet held; returns how many are held (alive or not).
  pub fn freeze(&mut self, spare: &dyn Fn(i32) -> bool) -> usize {
    self.held.retain(|(_, fd)| !pidfd::exited(fd));
    for _ in 0..FREEZE_ROUNDS {
      let mut again = false;
      let found = walk_children(self.root, spare).unwrap_or_else(|| {
        descendants(&tree::scan(), self.root, spare)
          .iter()
          .map(|p| (p.pid, p.ppid))
          .collect()
      });
      for (pid, ppid) in found {
        // A pid names the process held under it only while that process lives: once it has
        // exited, the pid may have come round to a new process of the tree.
        if self
          .held
          .iter()
          .any(|(held, fd)| *held == pid && !pidfd::exited(fd))
        {
          continue;
        }
        let Ok(fd) = pidfd::open(pid) else { continue };
        // The pid now names this very process: if it still has the parent the walk saw, it is
        // the one the walk saw (or a sibling of it, equally ours).
        match tree::read(pid) {
          Some(now) if now.zombie => continue,
          Some(now) if now.ppid == ppid => {}
          // Its parent died after the walk read it, so it hangs below the root or a subreaper
          // of the tree now (or the pid is another process's): the next walk finds it there.
          Some(_) => {
            again = true;
            continue;
          }
          None => continue,
        }
        pidfd::send_signal_to(&fd, pid, Signal::SIGSTOP);
        self.held.retain(|(held, _)| *held != pid);
        self.held.push((pid, fd));
        again = true;
      }
      if !again {
        break;
      }
    }
    self.held.len()
  }

  /// Freezes, sends `signal` to the whole tree, then SIGCONT so stopped processes act on it.
  /// Returns how many processes were signalled.
  pub fn signal(&mut self, signal: Signal, spare: &dyn Fn(i32) -> bool) -> usize {
    let n = self.freeze(spare);
    for sig in [signal, Signal::SIGCONT] {
      for (pid, fd) in &self.held {
        pidfd::send_signal_to(fd, *pid, sig);
      }
    }
    n
  }

  /// Like [`Tree::signal`], but `except` (frozen and resumed like the rest) is not sent
  /// `signal`: the bwrap backend's outer bwrap, which would die of a SIGTERM and take the
  /// sandbox with it (`--die-with-parent`) before the command ran its handler.
  pub fn signal_except(
    &mut self,
    signal: Signal,
    spare: &dyn Fn(i32) -> bool,
    except: i32,
  ) -> usize {
    let n = self.freeze(spare);
    for (pid, fd) in &self.held {
      if *pid != except {
        pidfd::send_signal_to(fd, *pid, signal);
      }
    }
    for (pid, fd) in &self.held {
      pidfd::send_signal_to(fd, *pid, Signal::SIGCONT);
    }
    n
  }

  /// Waits until every process held has exited (a zombie counts as gone) or `until` passes;
  /// returns whether all are gone.
  pub fn wait_gone(&self, until: std::time::Instant) -> bool {
    loop {
      let mut fds: Vec<libc::pollfd> = self
        .held
        .iter()
        .filter(|(_, fd)| !pidfd::exited(fd))
        .map(|(_, fd)| finn_exec::poll::watch(Some(std::os::fd::AsRawFd::as_raw_fd(fd))))
        .collect();
      if fds.is_empty() {
        return true;
      }
      if std::time::Instant::now() >= until {
        return false;
      }
      finn_exec::poll::poll(&mut fds, Some(until));
    }
  }

  /// [`Tree::wait_gone`] for every process held but `except` (which lives on).
  pub fn wait_gone_except(&self, except: i32, until: std::time::Instant) -> bool {
    loop {
      let mut fds: Vec<libc::pollfd> = self
        .held
        .iter()
        .filter(|(pid, fd)| *pid != except && !pidfd::exited(fd))
        .map(|(_, fd)| finn_exec::poll::watch(Some(std::os::fd::AsRawFd::as_raw_fd(fd))))
        .collect();
      if fds.is_empty() {
        return true;
      }
      if std::time::Instant::now() >= until {
        return false;
      }
      finn_exec::poll::poll(&mut fds, Some(until));
    }
  }

  /// Pids held and still alive.
  pub fn alive(&self) -> Vec<i32> {
    self
      .held
      .iter()
      .filter(|(_, fd)| !pidfd::exited(fd))
      .map(|(pid, _)| *pid)
      .collect()
  }
}

/// SIGKILLs every descendant of `root` now, without waiting (the caller or `root` reaps).
pub fn kill_now(root: i32, spare: &dyn Fn(i32) -> bool) {
  Tree::new(root).signal(Signal::SIGKILL, spare);
}

/// SIGKILLs every descendant of each of `roots`, then waits until they are all dead (reaped or
/// not) or `until` passes.
pub fn kill_and_wait(roots: &[i32], until: std::time::Instant) -> bool {
  let mut trees: Vec<Tree> = roots.iter().map(|&r| Tree::new(r)).collect();
  for tree in &mut trees {
    tree.signal(Signal::SIGKILL, &|_| false);
  }
  trees.iter().all(|t| t.wait_gone(until))
}

#[cfg(test)]
pub(super) mod tests {
  use super::*;

  fn p(pid: i32, ppid: i32) -> Proc {
    Proc {
      pid,
      ppid,
      pgrp: pid,
      session: pid,
      zombie: false,
    }
  }

  #[test]
  fn descendants_follow_parent_links_and_skip_spared_subtrees() {
    let procs = [
      p(10, 1),
      p(11, 10),
      p(12, 11),
      p(13, 10), // spared, with its child
      p(14, 13),
      p(20, 1), // unrelated
      Proc {
        zombie: true,
        ..p(15, 10)
      },
    ];
    let mut found: Vec<i32> = descendants(&procs, 10, &|pid| pid == 13)
      .iter()
      .map(|p| p.pid)
      .collect();
    found.sort();
    assert_eq!(found, vec![11, 12]);
    assert!(descendants(&procs, 20, &|_| false).is_empty());
  }

  /// The fast path (the `children` files) is the one taken on this kernel, and it sees a
  /// grandchild with its parent link and skips a spared subtree. (Were it to give up, the full
  /// `/proc` scan would still find the tree: only a test of the walk itself tells them apart.)
  #[test]
  fn the_children_files_walk_finds_grandchildren_with_their_parents() {
    use std::process::{Command, Stdio};
    // A shell whose child is a sleep (grandchild of this test process), and a second shell.
    let mut a = Command::new("sh")
      .args(["-c", "sleep 30 & echo $!; wait"])
      .stdout(Stdio::piped())
      .spawn()
      .unwrap();
    let mut b = Command::new("sleep").arg("30").spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
      &mut std::io::BufReader::new(a.stdout.as_mut().unwrap()),
      &mut line,
    )
    .unwrap();
    let sleep: i32 = line.trim().parse().unwrap();
    let me = std::process::id() as i32;
    let (a_pid, b_pid) = (a.id() as i32, b.id() as i32);
    assert!(children_of(me).unwrap().contains(&a_pid));
    let found = walk_children(me, &|pid| pid == b_pid).unwrap();
    let _ = (a.kill(), b.kill());
    let _ = (a.wait(), b.wait());
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sleep), Signal::SIGKILL);
    assert!(found.contains(&(a_pid, me)), "{found:?}");
    assert!(found.contains(&(sleep, a_pid)), "{found:?}");
    assert!(!found.iter().any(|(p, _)| *p == b_pid), "{found:?}");
    // A root without the files (gone, or a kernel without them) sends callers to the full scan.
    assert_eq!(walk_children(i32::MAX, &|_| false), None);
  }

  /// `sh -c <script>` whose first output line is a pid it prints; returns (child, that pid).
  /// (Also the fake reaper of `run.rs`'s tests.)
  pub(in super::super) fn shell(script: &str) -> (std::process::Child, i32) {
    use std::process::{Command, Stdio};
    let mut c = Command::new("sh")
      .args(["-c", script])
      .stdout(Stdio::piped())
      .spawn()
      .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
      &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
      &mut line,
    )
    .unwrap();
    (c, line.trim().parse().unwrap())
  }

  /// Kills a test's root and every descendant when dropped, so a failing assertion leaves no
  /// stopped process holding the test harness's pipes.
  struct KillOnDrop(std::process::Child);

  impl Drop for KillOnDrop {
    fn drop(&mut self) {
      kill_now(self.0.id() as i32, &|_| false);
      let _ = self.0.kill();
      let _ = self.0.wait();
    }
  }

  fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(") ").next()?.chars().next()
  }

  /// Waits (for a real state change, with a deadline) until `pid` is in `want` or gone.
  fn wait_state(pid: i32, want: &[Option<char>]) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !want.contains(&state(pid)) {
      assert!(std::time::Instant::now() < until, "{pid}: {:?}", state(pid));
      std::thread::yield_now();
    }
  }

  #[test]
  fn freeze_stops_the_tree_and_counts_only_the_living() {
    let (mut root, first) = shell("sleep 30 & echo $!; sleep 30 & wait");
    let root_pid = root.id() as i32;
    let mut tree = Tree::new(root_pid);
    // Both sleeps (the second may still be starting: freeze walks until nothing new shows).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tree.freeze(&|_| false) < 2 {
      assert!(std::time::Instant::now() < until);
    }
    for pid in tree.alive() {
      wait_state(pid, &[Some('T')]);
    }
    // One dies and is reaped by its (running) shell: the next freeze holds only the other.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
    wait_state(first, &[None]);
    assert_eq!(tree.freeze(&|_| false), 1);
    let second = tree.alive();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first);
    assert_eq!(state(second[0]), Some('T'));
    // Frozen, it is alive at any deadline; killed, it is gone before a generous one.
    assert!(!tree.wait_gone(std::time::Instant::now() + std::time::Duration::from_millis(20)));
    assert_eq!(tree.signal(Signal::SIGKILL, &|_| false), 1);
    assert!(tree.wait_gone(std::time::Instant::now() + std::time::Duration::from_secs(10)));
    assert!(tree.alive().is_empty());
    let _ = root.kill();
    let _ = root.wait();
  }

  #[test]
  fn kill_and_wait_kills_every_descendant_and_reports_them_gone() {
    // A TERM-immune shell with a child: SIGKILL must reach both, and the call returns only once
    // they are dead.
    let (mut root, child) =
      shell("trap '' TERM; sleep 30 & echo $!; exec sh -c 'trap \"\" TERM; sleep 30'");
    let root_pid = root.id() as i32;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // The exec'd shell's own child: wait until the walk sees both descendants.
    let mut tree = Tree::new(root_pid);
    while tree.freeze(&|_| false) < 2 {
      assert!(std::time::Instant::now() < until);
    }
    tree.signal(Signal::SIGCONT, &|_| false);
    let held = tree.alive();
    assert!(held.contains(&child), "{held:?}");
    assert!(kill_and_wait(&[root_pid], until));
    for pid in held {
      // Gone, a zombie, or dead while its parent reaps it ('X').
      assert!(
        matches!(state(pid), None | Some('Z') | Some('X')),
        "{pid}: {:?}",
        state(pid)
      );
    }
    let _ = root.kill();
    let _ = root.wait();
  }

  /// A process forked after a round's walk read its parent's children is found by the next
  /// round, within the same call: `freeze` walks again until a walk finds nothing new. The
  /// `spare` callback, called by the walk after it has read the root's children, makes the
  /// root fork once more at exactly that moment.
  #[test]
  fn freeze_walks_again_until_a_walk_finds_nothing_new() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (root, _first) = shell(&format!(
      "sleep 30 & echo $!; while read x < {}; do sleep 30 & done",
      gate.display()
    ));
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    let forked = std::cell::Cell::new(false);
    let spare = |_pid: i32| {
      if !forked.replace(true) {
        std::fs::write(&gate, "go\n").unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while children_of(root_pid).unwrap_or_default().len() < 2 {
          assert!(std::time::Instant::now() < until, "the root never forked");
          std::thread::yield_now();
        }
      }
      false
    };
    let mut tree = Tree::new(root_pid);
    assert_eq!(tree.freeze(&spare), 2);
    assert!(forked.get());
    let held = tree.alive();
    assert_eq!(held.len(), 2, "{held:?}");
    for pid in &held {
      wait_state(*pid, &[Some('T')]);
    }
  }

  /// A process whose leader thread has exited (`SYS_exit`) while another thread runs shows `Z`
  /// in its `stat` and is held like any live process: stopped, then killed.
  #[test]
  fn a_process_whose_leader_thread_has_exited_is_held_and_killed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let hex = include_str!("../../../tests/fixtures/zombie-leader.hex").trim();
    let bytes: Vec<u8> = (0..hex.len())
      .step_by(2)
      .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
      .collect();
    let z = dir.path().join("z");
    std::fs::write(&z, bytes).unwrap();
    std::fs::set_permissions(&z, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (root, leader) = shell(&format!("{} & echo $!; wait", z.display()));
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    wait_state(leader, &[Some('Z')]);
    assert!(!tree::read(leader).unwrap().zombie);
    let mut tree = Tree::new(root_pid);
    assert_eq!(tree.freeze(&|_| false), 1);
    assert_eq!(tree.alive(), vec![leader]);
    assert!(!tree.wait_gone(std::time::Instant::now() + std::time::Duration::from_millis(20)));
    tree.signal(Signal::SIGKILL, &|_| false);
    assert!(tree.wait_gone(std::time::Instant::now() + std::time::Duration::from_secs(10)));
    // Reaped by its shell once its last thread is gone.
    wait_state(leader, &[None]);
  }

  /// A process whose parent dies between the walk that found it and its check is reparented
  /// (here to the root, a subreaper): it is no longer where the walk saw it, yet it is still
  /// of the tree, and the same call must walk again and hold it where it is now. The `spare`
  /// callback, called once the walk has read the middle process's children, kills that
  /// process at exactly that moment.
  #[test]
  fn a_process_reparented_during_the_walk_is_held_where_it_is_now() {
    use std::process::{Command, Stdio};
    // A subreaper shell (which stays, as a sleep, once its child is gone), its child shell (the
    // middle), and the middle's sleep.
    let mut root = Command::new("perl")
      .args([
        "-e",
        "syscall(157, 36, 1, 0, 0, 0) == 0 or die \"subreaper: $!\"; exec @ARGV",
        "sh",
        "-c",
        "sh -c 'sleep 30 & echo $$ $!; wait' & wait; exec sleep 30",
      ])
      .stdout(Stdio::piped())
      .spawn()
      .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
      &mut std::io::BufReader::new(root.stdout.take().unwrap()),
      &mut line,
    )
    .unwrap();
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    let pids: Vec<i32> = line
      .split_whitespace()
      .map(|p| p.parse().unwrap())
      .collect();
    let (middle, sleep) = (pids[0], pids[1]);
    wait_state(sleep, &[Some('S')]);
    let killed = std::cell::Cell::new(false);
    let spare = |pid: i32| {
      if pid == sleep && !killed.replace(true) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(middle), Signal::SIGKILL).unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while tree::read(sleep).map(|p| p.ppid) != Some(root_pid) {
          assert!(
            std::time::Instant::now() < until,
            "the sleep was never reparented"
          );
          std::thread::yield_now();
        }
      }
      false
    };
    let mut tree = Tree::new(root_pid);
    tree.freeze(&spare);
    assert!(killed.get());
    assert_eq!(tree.alive(), vec![sleep]);
    wait_state(sleep, &[Some('T')]);
  }

  /// A held process that dies (killed by a part of its tree not yet frozen) frees its pid, and
  /// a new process of the tree may get that pid within the same call: root can ask for a pid
  /// (`clone3` with `set_tid`); anyone can by cycling through the pid space. The new process
  /// is not the one held, and must be held (stopped) in its own right. The `spare` callback,
  /// called by the second walk once it has read the root's children, makes the swap at exactly
  /// that moment. Needs root (`set_tid` needs CAP_CHECKPOINT_RESTORE); skipped otherwise.
  #[test]
  fn a_pid_held_then_reused_within_one_freeze_holds_the_new_process() {
    use std::io::Write;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
      eprintln!("skipped: clone3 with set_tid needs root");
      return;
    }
    let (root, mut io) = forker();
    let root_pid = root.id() as i32;
    let first = read_pid(&mut io.1);
    let io = std::cell::RefCell::new(io);
    // Dropped before `io`: the tree dies before the forker sees its stdin close.
    let _root = KillOnDrop(root);
    wait_comm(first, "sleep\n");
    let seen = std::cell::Cell::new(0);
    let swapped = std::cell::Cell::new(false);
    let spare = |pid: i32| {
      // The second walk (the first one held it): the held process dies, and its pid is
      // given to a new sleep of the root before the walk's list is checked.
      if pid == first && seen.replace(seen.get() + 1) == 1 {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
        wait_state(first, &[None]);
        let (stdin, out) = &mut *io.borrow_mut();
        writeln!(stdin, "{first}").unwrap();
        assert_eq!(read_pid(out), first);
        swapped.set(true);
      }
      false
    };
    let mut tree = Tree::new(root_pid);
    tree.freeze(&spare);
    assert!(swapped.get());
    assert_eq!(tree.alive(), vec![first]);
    wait_state(first, &[Some('T')]);
  }

  /// A child that is gone by the time the walk reads its own `children` files has none; the
  /// walk goes on (only a root without the files sends callers to the full scan). `spare`,
  /// called once the walk has read the root's children, kills the child and waits until its
  /// shell has reaped it.
  #[test]
  fn a_child_gone_before_its_children_are_read_ends_only_its_own_branch() {
    let (root, child) = shell("sleep 30 & echo $!; wait; exec sleep 30");
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    wait_state(child, &[Some('S')]);
    let spare = |pid: i32| {
      if pid == child {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), Signal::SIGKILL).unwrap();
        wait_state(child, &[None]);
      }
      false
    };
    assert_eq!(
      walk_children(root_pid, &spare),
      Some(vec![(child, root_pid)])
    );
  }

  /// A walk that finds nothing new ends the call: one process is found by the first walk and
  /// seen again by the second, which ends it; a freeze that walked on to its 16-round bound
  /// every time would cost 16 reads of every `children` file of the tree.
  #[test]
  fn freeze_stops_walking_once_a_walk_finds_nothing_new() {
    let (root, sleep) = shell("sleep 30 & echo $!; wait");
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    wait_state(sleep, &[Some('S')]);
    let walks = std::cell::Cell::new(0);
    let spare = |pid: i32| {
      if pid == sleep {
        walks.set(walks.get() + 1);
      }
      false
    };
    let mut tree = Tree::new(root_pid);
    assert_eq!(tree.freeze(&spare), 1);
    assert_eq!(walks.get(), 2);
    // Already held: one walk, which finds nothing new.
    assert_eq!(tree.freeze(&spare), 1);
    assert_eq!(walks.get(), 3);
  }

  /// `signal_except` (the bwrap backend's graceful stop) sends the signal to every process of
  /// the tree but the one named, and resumes them all, that one included.
  #[test]
  fn signal_except_spares_only_the_named_process_and_resumes_all() {
    let (root, kept) = shell("sleep 30 & echo $!; sleep 30 & wait");
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    let mut tree = Tree::new(root_pid);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tree.freeze(&|_| false) < 2 {
      assert!(std::time::Instant::now() < until);
    }
    let other = *tree.alive().iter().find(|&&p| p != kept).unwrap();
    assert_eq!(tree.signal_except(Signal::SIGTERM, &|_| false, kept), 2);
    // The other dies of the SIGTERM (reaped by the shell); the one named runs on, resumed.
    wait_state(other, &[None, Some('Z')]);
    wait_state(kept, &[Some('S')]);
  }

  /// `kill_now` (the supervisor's sweep of a dead reaper's orphans) kills every descendant but
  /// the spared subtrees (the live reapers).
  #[test]
  fn kill_now_kills_every_descendant_but_the_spared() {
    let (root, spared) = shell("sleep 30 & echo $!; sh -c 'sleep 30 & wait' & wait");
    let root_pid = root.id() as i32;
    let _root = KillOnDrop(root);
    // Up when the inner shell's sleep is (a freeze would stop the inner shell before it forks).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let others = loop {
      let found: Vec<i32> = walk_children(root_pid, &|_| false)
        .unwrap()
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|&pid| pid != spared)
        .collect();
      if found.len() == 2 && found.iter().all(|&p| state(p) == Some('S')) {
        break found;
      }
      assert!(std::time::Instant::now() < until, "{found:?}");
      std::thread::yield_now();
    };
    kill_now(root_pid, &|pid| pid == spared);
    for pid in others {
      wait_state(pid, &[None, Some('Z')]);
    }
    wait_state(spared, &[Some('S')]);
  }

  /// The pid the walk found names a process outside the tree by the time it is checked (the
  /// walk's process died and the pid came round to an unrelated process): that process is
  /// not the tree's and is left alone. Here the tree's sleep dies from the first walk's
  /// `spare` callback and a forker outside the tree starts a sleep with that very pid. Root
  /// only, as above.
  #[test]
  fn a_pid_reused_outside_the_tree_during_the_walk_is_left_alone() {
    use std::io::Write;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
      eprintln!("skipped: clone3 with set_tid needs root");
      return;
    }
    let (mut tree_root, mut tree_io) = forker();
    let (mut outside, mut outside_io) = forker();
    // Its own first sleep.
    read_pid(&mut outside_io.1);
    let outside_io = std::cell::RefCell::new(outside_io);
    let root_pid = tree_root.id() as i32;
    let first = read_pid(&mut tree_io.1);
    wait_comm(first, "sleep\n");
    let swapped = std::cell::Cell::new(false);
    let spare = |pid: i32| {
      if pid == first && !swapped.replace(true) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
        wait_state(first, &[None]);
        let (stdin, out) = &mut *outside_io.borrow_mut();
        writeln!(stdin, "{first}").unwrap();
        assert_eq!(read_pid(out), first);
        wait_comm(first, "sleep\n");
      }
      false
    };
    let mut tree = Tree::new(root_pid);
    let held = tree.freeze(&spare);
    let outside_state = state(first);
    for c in [&mut tree_root, &mut outside] {
      kill_now(c.id() as i32, &|_| false);
      let _ = c.kill();
      let _ = c.wait();
    }
    drop(tree_io);
    assert!(swapped.get());
    assert_eq!(held, 0);
    // Running or sleeping (it may just have exec'd), never stopped.
    assert!(
      matches!(outside_state, Some('R' | 'S')),
      "{outside_state:?}"
    );
  }

  /// A perl process that starts a sleep, then for each pid read from its stdin a sleep with
  /// that very pid (`clone3` with `set_tid`), printing each pid. Its children are reaped by the
  /// kernel (SIGCHLD ignored), so a killed one frees its pid without a wait of the forker's.
  fn forker() -> (
    std::process::Child,
    (
      std::process::ChildStdin,
      std::io::BufReader<std::process::ChildStdout>,
    ),
  ) {
    use std::process::{Command, Stdio};
    let perl = r#"
      $| = 1; $SIG{CHLD} = 'IGNORE';
      sub start { my ($tid) = @_; my $tids = pack('i', $tid);
        my $args = pack('Q11', 0, 0, 0, 0, 17, 0, 0, 0, $tid ? unpack('Q', pack('p', $tids)) : 0, $tid ? 1 : 0, 0);
        my ($pid, $tries) = (-1, 0);
        # The kernel may free a dead process's pid number a moment after its /proc entry.
        while (($pid = syscall(435, $args, 88)) < 0 && $!{EEXIST} && ++$tries < 1000000) {}
        die "clone3: $!" if $pid < 0;
        if ($pid == 0) { exec 'sleep', '30'; exit 1 } print "$pid\n" }
      start(0); while (my $tid = <STDIN>) { start($tid + 0) }"#;
    let mut c = Command::new("perl")
      .args(["-e", perl])
      .stdin(Stdio::piped())
      .stdout(Stdio::piped())
      .spawn()
      .unwrap();
    let io = (
      c.stdin.take().unwrap(),
      std::io::BufReader::new(c.stdout.take().unwrap()),
    );
    (c, io)
  }

  fn read_pid(out: &mut std::io::BufReader<std::process::ChildStdout>) -> i32 {
    let mut line = String::new();
    std::io::BufRead::read_line(out, &mut line).unwrap();
    line.trim().parse().unwrap()
  }

  /// Waits, with a deadline, until `pid` runs the program named `comm` (it has exec'd).
  fn wait_comm(pid: i32, comm: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
      .ok()
      .as_deref()
      != Some(comm)
    {
      assert!(std::time::Instant::now() < until, "{pid} never ran {comm}");
      std::thread::yield_now();
    }
  }

  #[test]
  fn a_zombie_is_not_held() {
    // The child exits and is never reaped: its parent sleeps without waiting (a shell would
    // reap it between commands).
    let (mut root, zombie) =
      shell("exec perl -e '$| = 1; my $p = fork; exit 0 if $p == 0; print \"$p\\n\"; sleep 30'");
    wait_state(zombie, &[Some('Z')]);
    assert_eq!(Tree::new(root.id() as i32).freeze(&|_| false), 0);
    let _ = root.kill();
    let _ = root.wait();
  }
}
