//! Keeps a job's command away from the processes that contain it: the supervisor, and Node.
//!
//! A command runs as the user of the supervisor and its reaper, so by default it may signal,
//! trace or re-limit them. One that SIGKILLed its reaper and the supervisor together had its
//! orphans reparented to init, out of every tree, with Node alive (a `setsid` child with a
//! token: 1 survivor of 1, `tests/supervisor.rs`). Only the supervisor needs to be out of
//! reach: a killed reaper's orphans go to it, and it kills them; a killed Node closes every
//! socket, and the supervisor and the reapers kill every tree. Without privileges:
//! - the supervisor makes itself non-dumpable, and its reapers inherit that: `/proc/<pid>` of
//!   them belongs to root, so the same user can neither ptrace them, read or write their
//!   memory, take their fds (`pidfd_getfd`), nor raise their `oom_score_adj`. A command does
//!   not inherit it (`execve` makes a process dumpable again);
//! - each reaper installs a seccomp filter before its first job, which every command it starts
//!   inherits: signals, I/O signals, limits, ptrace and `process_vm_*` aimed at the supervisor
//!   or Node (by pid, process group, or `kill(-1)`) fail with EPERM (Node's `/proc/<pid>/mem`
//!   stays as open to the command as Node is dumpable); signals by pidfd (which a
//!   command could make of `/proc/<supervisor>`) fail with ENOSYS, so tools fall back to
//!   `kill`, and so does the reaper for its own tree (`pidfd::send_signal_to`).
//!   `isolate::guard_helpers` lists them. The command still signals its own processes and its
//!   reaper;
//! - a reaper for jobs without isolation also puts itself in a landlock domain of its own whose
//!   only rule is the signal scope ([`scope_signals`]): its commands then reach nothing outside
//!   it, neither another job nor another pool's supervisor. Where the kernel lacks the scope
//!   (ABI < 6), they still reach every other process of their user but the two above.
//!
//! The same filter installed in each command between `clone` and `execve` instead cost about
//! 75 us of the command's CPU per start (the kernel prepares a filter at each install: 1,000 x
//! `/bin/true` at concurrency 8 ran 2,000-2,100/s against 2,320-2,390/s unguarded, `node
//! bench/probe.js throughput addon-2`); installed once in the reaper, nothing measurable. The
//! signal scope stays off the reapers of isolated jobs: a scope-only layer under a job's own
//! ruleset denies that job every rename across directories (REFER, which no rule of that layer
//! grants: git's push failed with EXDEV). Their own ruleset carries the scope instead.
//!
//! A filter matches pids, not processes: a job in a pid namespace (isolation) whose own pid
//! equals the supervisor's or Node's host pid cannot signal that process of its own. Seccomp
//! needs `no_new_privs` without CAP_SYS_ADMIN; the reaper sets it then, and its commands keep
//! it: a set-uid program runs with its caller's rights.

use std::io;

use seccompiler::BpfProgram;

use crate::core::isolate::guard_helpers;

/// The seccomp programs that keep a command from the supervisor and Node, compiled once by the
/// supervisor at its start; each reaper, forked from it, installs its copy ([`Guard::enter`]).
#[derive(Debug, Default)]
pub struct Guard(Vec<BpfProgram>);

impl Guard {
  /// Called by the supervisor at its start: itself, its parent (Node) and their process groups.
  pub fn around_me() -> io::Result<Guard> {
    let me = std::process::id() as i32;
    // SAFETY: getppid and getpgid take integers only.
    let (parent, groups) = unsafe {
      let parent = libc::getppid();
      (parent, [libc::getpgid(0), libc::getpgid(parent)])
    };
    let pids: Vec<i32> = [me, parent].into_iter().filter(|&p| p > 1).collect();
    let groups: Vec<i32> = groups.into_iter().filter(|&g| g > 1).collect();
    guard_helpers(&pids, &groups)
      .map(Guard)
      .map_err(io::Error::other)
  }

  /// In a reaper, before its first job: installs the programs, which every command it starts
  /// inherits. Sets `no_new_privs` first when the kernel asks for it (no CAP_SYS_ADMIN).
  pub fn enter(&self) -> io::Result<()> {
    for prog in &self.0 {
      let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
      };
      // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
      let install = || {
        check(unsafe {
          libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &fprog as *const libc::sock_fprog,
          )
        })
      };
      if let Err(e) = install() {
        if e.raw_os_error() != Some(libc::EACCES) {
          return Err(e);
        }
        // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } as libc::c_long)?;
        install()?;
      }
    }
    Ok(())
  }
}

/// In a reaper for jobs without isolation, before its first job: a landlock domain of the
/// reaper's own whose only rule is the signal scope. Its commands can then neither signal nor
/// trace (nor open `/proc/<pid>/fd` of) a process outside it: another job's reaper or command,
/// another pool's supervisor, Node. Their own tree and their reaper stay in reach. Isolated
/// jobs get the scope from their own ruleset, on a reaper without this layer (see the module
/// comment: a scope-only layer under a job's ruleset denies it renames across directories).
pub fn scope_signals() -> io::Result<()> {
  match crate::core::isolate::scope_signals() {
    Ok(true) => Ok(()),
    Ok(false) => Err(io::Error::other(
      "this kernel has no landlock signal scope (ABI < 6)",
    )),
    Err(e) => Err(io::Error::other(e.to_string())),
  }
}

/// Makes this process non-dumpable (the supervisor, at its start; its reapers inherit it).
pub fn hide() -> io::Result<()> {
  // SAFETY: PR_SET_DUMPABLE takes integers only.
  check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } as libc::c_long)
}

fn check(ret: libc::c_long) -> io::Result<()> {
  if ret < 0 {
    Err(io::Error::last_os_error())
  } else {
    Ok(())
  }
}
