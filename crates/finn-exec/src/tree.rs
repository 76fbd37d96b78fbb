//! Finding every process of a child's tree, including those that left its process group.
//!
//! `killpg` reaches the group atomically (the kernel serialises it against fork), but a
//! descendant that called `setsid()` or `setpgid()` is no longer in the group. Those are found
//! through `/proc` by session id and parent links, and then signalled through a pidfd so a
//! recycled pid can never be hit.

use std::collections::{HashMap, HashSet};
use std::fs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
  pub pid: i32,
  pub ppid: i32,
  pub pgrp: i32,
  pub session: i32,
  /// Dead: a zombie or exiting, with no thread left running. A leader whose own thread has
  /// exited (`SYS_exit`) shows `Z` while its other threads run on: that process is alive
  /// (see [`read`]).
  pub zombie: bool,
}

/// Parses `/proc/<pid>/stat`; the command name may contain spaces and parentheses.
pub fn parse_stat(text: &str) -> Option<Proc> {
  let (head, rest) = text.rsplit_once(')')?;
  let pid = head.split_once(' ')?.0.trim().parse().ok()?;
  let mut fields = rest.split_ascii_whitespace();
  let state = fields.next()?;
  let ppid = fields.next()?.parse().ok()?;
  let pgrp = fields.next()?.parse().ok()?;
  let session = fields.next()?.parse().ok()?;
  Some(Proc {
    pid,
    ppid,
    pgrp,
    session,
    zombie: state == "Z" || state == "X",
  })
}

/// Whether the thread group `pid` has a thread other than its leader: its `task` directory
/// lists one. Used only for a leader shown as `Z`, so a plain zombie costs one directory read.
fn has_other_threads(pid: i32) -> bool {
  let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
    return false;
  };
  let me = pid.to_string();
  tasks
    .flatten()
    .any(|t| t.file_name().to_str().is_some_and(|tid| tid != me))
}

/// Reads `/proc/<pid>/stat`. A leader shown as `Z` whose other threads still run is alive:
/// it can be signalled and stopped, it keeps the tree's resources, and a parent's `waitpid`
/// does not see it until its last thread exits, so a walk that skipped it would wait for ever.
pub fn read(pid: i32) -> Option<Proc> {
  let mut p = parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
  if p.zombie && has_other_threads(pid) {
    p.zombie = false;
  }
  Some(p)
}

/// Every process visible in `/proc` right now.
pub fn scan() -> Vec<Proc> {
  let Ok(dir) = fs::read_dir("/proc") else {
    return Vec::new();
  };
  dir
    .filter_map(|entry| {
      let entry = entry.ok()?;
      let name = entry.file_name();
      let name = name.to_str()?;
      if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
      }
      read(name.parse().ok()?)
    })
    .collect()
}

/// Live processes of `leader`'s tree outside its process group: session members that changed
/// group, and descendants (by parent link) of the leader or of any member.
pub fn escapees(procs: &[Proc], leader: i32) -> Vec<i32> {
  let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
  for p in procs {
    children.entry(p.ppid).or_default().push(p);
  }
  let mut seen: HashSet<i32> = HashSet::new();
  let mut stack: Vec<i32> = vec![leader];
  stack.extend(
    procs
      .iter()
      .filter(|p| p.pgrp == leader || p.session == leader)
      .map(|p| p.pid),
  );
  let mut out = Vec::new();
  while let Some(pid) = stack.pop() {
    if !seen.insert(pid) {
      continue;
    }
    if let Some(kids) = children.get(&pid) {
      stack.extend(kids.iter().map(|k| k.pid));
    }
  }
  for p in procs {
    if seen.contains(&p.pid) && p.pid != leader && p.pgrp != leader && !p.zombie {
      out.push(p.pid);
    }
  }
  out
}

/// Whether a process other than a zombie is still in `leader`'s group or session.
pub fn group_alive(procs: &[Proc], leader: i32) -> bool {
  procs
    .iter()
    .any(|p| (p.pgrp == leader || p.session == leader) && !p.zombie)
}

#[cfg(test)]
mod tests {
  use super::*;

  fn p(pid: i32, ppid: i32, pgrp: i32, session: i32) -> Proc {
    Proc {
      pid,
      ppid,
      pgrp,
      session,
      zombie: false,
    }
  }

  #[test]
  fn parses_names_with_spaces_and_parens() {
    let stat = "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 0";
    assert_eq!(parse_stat(stat), Some(p(4242, 1, 4242, 4242)));
  }

  /// The full scan (the walk's fallback on kernels without `children` files) lists every
  /// process: a child of this test, with its parent link, and this process itself.
  #[test]
  fn scan_lists_every_process_with_its_parent() {
    let mut child = std::process::Command::new("sleep")
      .arg("30")
      .spawn()
      .unwrap();
    let procs = scan();
    let _ = child.kill();
    let _ = child.wait();
    let me = std::process::id() as i32;
    let pid = child.id() as i32;
    assert!(
      procs.iter().any(|p| p.pid == pid && p.ppid == me),
      "{procs:?}"
    );
    assert!(procs.iter().any(|p| p.pid == me));
  }

  #[test]
  fn finds_setsid_children_and_their_descendants() {
    let procs = [
      p(100, 1, 100, 100),   // leader
      p(101, 100, 100, 100), // group member: killpg reaches it
      p(102, 100, 102, 102), // setsid escapee
      p(103, 102, 102, 102), // its child
      p(104, 1, 104, 100),   // setpgid escapee still in the session, reparented
      p(200, 1, 200, 200),   // unrelated
    ];
    let mut found = escapees(&procs, 100);
    found.sort();
    assert_eq!(found, vec![102, 103, 104]);
    assert!(group_alive(&procs, 100));
    assert!(!group_alive(&procs, 300));
    // One member is enough: in the group only (another session), or in the session only.
    assert!(group_alive(&[p(105, 1, 100, 105)], 100));
    assert!(group_alive(&[p(104, 1, 104, 100)], 100));
    let dead = Proc {
      zombie: true,
      ..p(106, 1, 100, 100)
    };
    assert!(!group_alive(&[dead], 100));
  }
}
