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
//!   only rule is the signal scope ([`confine`]): its commands then reach nothing outside it,
//!   neither another job nor another pool's supervisor. Where the kernel lacks the scope
//!   (ABI < 6, or `FINN_SANDBOX_LANDLOCK_ABI_MAX` caps it), the domain only keeps ptrace
//!   access in (ABI 2 to 5; none at ABI 1), and every command starts under the watch
//!   ([`watch_program`]): its calls that name another process by a number (signals by pid,
//!   thread id or group, pidfds, ptrace, process memory, scheduling) wait for its reaper, which
//!   allows only its own processes and its reaper ([`judge`]). A list of pids cannot do this:
//!   Node dies of a SIGKILL sent to any of its threads' ids, and threads and pools made after
//!   the reaper started would be missing from it. The watch costs a fork per command
//!   (`posix_spawn` cannot install a filter) and a round trip to the reaper per watched call.
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
//! equals the supervisor's or Node's host pid cannot signal that process of its own. The watch
//! allows a caller in a pid namespace other than the reaper's everything it hands over: its
//! numbers name only processes of that namespace, all of them the job's. Between the reaper's
//! answer and the kernel carrying the call out, a target of the job's that exits and is reaped
//! by its parent (in the job) frees its pid; only if the kernel handed that very pid to a
//! process outside the job in those microseconds would the call reach it. Seccomp
//! needs `no_new_privs` without CAP_SYS_ADMIN; the reaper sets it then, and its commands keep
//! it: a set-uid program runs with its caller's rights.

use std::io;

use seccompiler::BpfProgram;

use finn_isolate::guard_helpers;

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

/// The landlock domain a reaper for jobs without isolation put itself in (see [`confine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confined {
  /// The signal scope (ABI 6): its commands can neither signal nor trace (nor open
  /// `/proc/<pid>/fd` of) a process outside it.
  Scoped,
  /// A domain that keeps ptrace access in (ABI 2 to 5, `isolate::fence_tracing`); signals are
  /// the watch's.
  Fenced,
  /// None (ABI 1, no landlock, or capped below 2); the watch still judges ptrace.
  Not,
}

/// In a reaper for jobs without isolation, before its first job: a landlock domain of the
/// reaper's own, of an ABI up to `max`: the signal scope where the kernel has it, else a
/// domain that keeps ptrace access in. Its commands then reach nothing outside it: another
/// job's reaper or command, another pool's supervisor, Node. Their own tree and their reaper
/// stay in reach. Isolated jobs get this from their own ruleset, on a reaper without this
/// layer (see the module comment: a scope-only layer under a job's ruleset denies it renames
/// across directories).
pub fn confine(max: u8) -> Confined {
  if max >= 6 && matches!(finn_isolate::scope_signals(), Ok(true)) {
    Confined::Scoped
  } else if max >= 2 && matches!(finn_isolate::fence_tracing(), Ok(true)) {
    Confined::Fenced
  } else {
    Confined::Not
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

/// The calls the watch hands to the reaper, each naming a process by its number: signals (by
/// pid, thread id or group), pidfds (which `pidfd_getfd` and `process_madvise` use),
/// another's memory, and its scheduling. `ptrace` is handed over only for ATTACH and SEIZE
/// (every other request needs a tracee already attached), `fcntl` only for F_SETOWN (the
/// process or group its I/O signals go to, any signal with F_SETSIG).
const WATCHED: &[i64] = &[
  libc::SYS_kill,
  libc::SYS_tkill,
  libc::SYS_tgkill,
  libc::SYS_rt_sigqueueinfo,
  libc::SYS_rt_tgsigqueueinfo,
  libc::SYS_pidfd_open,
  libc::SYS_process_vm_readv,
  libc::SYS_process_vm_writev,
  libc::SYS_sched_setaffinity,
  libc::SYS_sched_setscheduler,
  libc::SYS_sched_setparam,
  libc::SYS_sched_setattr,
  libc::SYS_setpriority,
  libc::SYS_ioprio_set,
];

const PTRACE_ATTACH: u64 = 16;
/// asm-generic/fcntl.h, as on x86_64 and aarch64.
const F_SETOWN: u64 = 8;
const PTRACE_SEIZE: u64 = 0x4206;

/// The watch's seccomp program: the calls of [`WATCHED`], `fcntl`'s F_SETOWN and ptrace's ATTACH
/// and SEIZE go to the listener (the job's reaper), everything else is allowed; another arch's
/// calls (a 32-bit `int 0x80` names `kill` by another number) and x32's are refused. Laid out as
/// every filter here is (`isolate::hand_over`): a binary search over syscall numbers.
///
/// Where the kernel has the landlock signal scope, the scope does this in the kernel and the
/// command starts without the watch (posix_spawn, no filter to install). Without it (a kernel
/// before 6.12), the guard alone names pids: a command could still SIGKILL Node by the id of
/// one of its threads, or a second pool's supervisor, and no list of pids made when the reaper
/// starts covers the threads and pools made later. The watch asks instead whether the target
/// is the command's own: that holds for every process whenever it was made.
pub fn watch_program() -> io::Result<Vec<libc::sock_filter>> {
  use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
  // The low half of the argument, as the judge reads it (`judge`'s `arg`).
  let low_word_is = |arg: u8, v: u64| {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
      .and_then(|c| SeccompRule::new(vec![c]))
      .map_err(io::Error::other)
  };
  let mut watched: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
    WATCHED.iter().map(|&nr| (nr, vec![])).collect();
  watched.insert(libc::SYS_fcntl, vec![low_word_is(1, F_SETOWN)?]);
  watched.insert(
    libc::SYS_ptrace,
    vec![
      low_word_is(0, PTRACE_ATTACH)?,
      low_word_is(0, PTRACE_SEIZE)?,
    ],
  );
  let prog = finn_isolate::hand_over(watched).map_err(io::Error::other)?;
  Ok(
    prog
      .into_iter()
      .map(|i| libc::sock_filter {
        code: i.code,
        jt: i.jt,
        jf: i.jf,
        k: i.k,
      })
      .collect(),
  )
}

/// In the command's process, between fork and exec: installs `prog` (see [`watch_program`])
/// and returns its listener, which the caller hands to the reaper and closes (a command that
/// kept it could answer for itself).
pub fn install_watch(prog: &[libc::sock_filter]) -> io::Result<std::os::fd::OwnedFd> {
  use std::os::fd::FromRawFd;
  let fprog = libc::sock_fprog {
    len: prog.len() as u16,
    filter: prog.as_ptr() as *mut libc::sock_filter,
  };
  // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
  let fd = unsafe {
    libc::syscall(
      libc::SYS_seccomp,
      libc::SECCOMP_SET_MODE_FILTER,
      libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
      &fprog as *const libc::sock_fprog,
    )
  };
  check(fd)?;
  // SAFETY: a fresh fd the kernel just made for us.
  Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// What the reaper answers a watched call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
  /// The kernel carries the call out as asked.
  Allow,
  /// It fails with EPERM.
  Deny,
}

/// What the judge needs to know about processes, from `/proc` (or a table, in tests).
pub trait Family {
  /// `pid` (a process or a thread) descends from the reaper.
  fn in_job(&self, pid: i32) -> bool;
  /// `pid` is the reaper itself.
  fn is_reaper(&self, pid: i32) -> bool;
  /// Every process of group `pgid` descends from the reaper (none at all: the kernel answers).
  fn group_in_job(&self, pgid: i32) -> bool;
}

/// The answer to syscall `nr` with `args` from a process of the job (in the reaper's pid
/// namespace). A command may signal its own processes (by pid, thread id, or group, its own
/// group as 0) and its reaper (as under the landlock scope: a killed reaper's orphans are the
/// supervisor's, which kills them), never `-1`; it may open pidfds of, trace, read and write
/// the memory of, and reschedule only its own processes (itself as 0). Calls not named are
/// allowed.
pub fn judge(nr: i64, args: [u64; 6], family: &dyn Family) -> Verdict {
  let arg = |i: usize| args[i] as u32 as i32;
  let verdict = |ok: bool| if ok { Verdict::Allow } else { Verdict::Deny };
  let own = |pid: i32| pid > 0 && family.in_job(pid);
  let signalled = |pid: i32| own(pid) || (pid > 0 && family.is_reaper(pid));
  const IOPRIO_WHO_PROCESS: i32 = 1;
  const IOPRIO_WHO_PGRP: i32 = 2;
  let prio = |process: i32, group: i32| {
    let (which, who) = (arg(0), arg(1));
    verdict(if which == process {
      who == 0 || own(who)
    } else if which == group {
      who == 0 || (who > 0 && family.group_in_job(who))
    } else {
      // A whole uid reaches every process of it; anything else the kernel refuses.
      false
    })
  };
  match nr {
    libc::SYS_kill => {
      let pid = arg(0);
      verdict(match pid {
        0 => true,
        -1 => false,
        p if p > 0 => signalled(p),
        p => p != i32::MIN && family.group_in_job(-p),
      })
    }
    libc::SYS_tkill | libc::SYS_rt_sigqueueinfo => verdict(signalled(arg(0))),
    libc::SYS_tgkill | libc::SYS_rt_tgsigqueueinfo => {
      verdict(signalled(arg(0)) && signalled(arg(1)))
    }
    libc::SYS_pidfd_open | libc::SYS_process_vm_readv | libc::SYS_process_vm_writev => {
      verdict(own(arg(0)))
    }
    libc::SYS_fcntl if args[1] == F_SETOWN => {
      // 0 clears the owner; a negative owner is a process group.
      let owner = arg(2);
      verdict(match owner {
        0 => true,
        p if p > 0 => signalled(p),
        p => p != i32::MIN && family.group_in_job(-p),
      })
    }
    libc::SYS_ptrace => {
      if matches!(args[0], PTRACE_ATTACH | PTRACE_SEIZE) {
        verdict(own(arg(1)))
      } else {
        Verdict::Allow
      }
    }
    libc::SYS_sched_setaffinity
    | libc::SYS_sched_setscheduler
    | libc::SYS_sched_setparam
    | libc::SYS_sched_setattr => verdict(arg(0) == 0 || own(arg(0))),
    libc::SYS_setpriority => prio(libc::PRIO_PROCESS as i32, libc::PRIO_PGRP as i32),
    libc::SYS_ioprio_set => prio(IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP),
    _ => Verdict::Allow,
  }
}

/// The processes below one reaper, read from `/proc` at each question.
pub struct Below {
  pub reaper: i32,
}

/// Parent links followed at most: deeper than any real tree, short of a loop's cost.
const MAX_DEPTH: usize = 4096;

impl Family for Below {
  fn in_job(&self, pid: i32) -> bool {
    let mut at = pid;
    for _ in 0..MAX_DEPTH {
      if at <= 1 || at == self.reaper {
        return false;
      }
      let Some(p) = stat(at) else { return false };
      if p.ppid == self.reaper {
        return true;
      }
      at = p.ppid;
    }
    false
  }

  fn is_reaper(&self, pid: i32) -> bool {
    pid == self.reaper
  }

  fn group_in_job(&self, pgid: i32) -> bool {
    finn_exec::tree::scan()
      .iter()
      .filter(|p| p.pgrp == pgid)
      .all(|p| self.in_job(p.pid))
  }
}

fn stat(pid: i32) -> Option<finn_exec::tree::Proc> {
  let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
  finn_exec::tree::parse_stat(&text)
}

/// The reaper's end of one job's watch (see [`watch_program`]).
pub struct Watch {
  listener: std::os::fd::OwnedFd,
  below: Below,
  /// This process's pid namespace: a caller in another one names only processes of its own.
  pidns: Option<(u64, u64)>,
}

fn pidns_of(pid: &str) -> Option<(u64, u64)> {
  use std::os::unix::fs::MetadataExt;
  let m = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
  Some((m.dev(), m.ino()))
}

impl Watch {
  pub fn new(listener: std::os::fd::OwnedFd, reaper: i32) -> Watch {
    Watch {
      listener,
      below: Below { reaper },
      pidns: pidns_of("self"),
    }
  }

  pub fn fd(&self) -> std::os::fd::RawFd {
    std::os::fd::AsRawFd::as_raw_fd(&self.listener)
  }

  /// Answers one waiting call (the listener polled readable). `Err`: the listener is broken.
  pub fn answer(&self) -> io::Result<()> {
    // SAFETY: the kernel fills the zeroed struct it asks for (RECV refuses a dirty one).
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a valid seccomp_notif for the kernel to write.
    if unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } < 0 {
      let e = io::Error::last_os_error();
      // The caller was interrupted or died before it was read: nothing to answer.
      return match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EINTR) => Ok(()),
        _ => Err(e),
      };
    }
    let verdict = match (self.pidns, pidns_of(&req.pid.to_string())) {
      // In a pid namespace of the job's own (isolation's `pidns`, bwrap): its numbers name
      // only the processes inside it, all of them the job's.
      (Some(ours), Some(theirs)) if ours != theirs => Verdict::Allow,
      // Gone already, or no `/proc` to judge by.
      (_, None) => Verdict::Deny,
      _ => judge(i64::from(req.data.nr), req.data.args, &self.below),
    };
    // The caller read about above is still the one waiting (its pid was not reused).
    // SAFETY: reads the id from a valid u64.
    if unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) } < 0 {
      return Ok(());
    }
    let resp = libc::seccomp_notif_resp {
      id: req.id,
      val: 0,
      error: if verdict == Verdict::Allow {
        0
      } else {
        -libc::EPERM
      },
      flags: if verdict == Verdict::Allow {
        libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
      } else {
        0
      },
    };
    // SAFETY: `resp` is a valid seccomp_notif_resp for the kernel to read. A caller gone in
    // between (ENOENT) needs no answer.
    unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    Ok(())
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  /// A job below reaper 10: processes 11 and 12 (12's thread 13), group 11 all theirs; group
  /// 20 mixes a job process with an outside one; 1 and 5 (the supervisor, Node) are outside.
  /// It also answers yes for 0 and below, which name no process: the judge must not ask.
  struct Table;

  impl Family for Table {
    fn in_job(&self, pid: i32) -> bool {
      matches!(pid, 11..=13) || pid <= 0
    }
    fn is_reaper(&self, pid: i32) -> bool {
      pid == 10 || pid <= 0
    }
    fn group_in_job(&self, pgid: i32) -> bool {
      pgid == 11 || pgid <= 0
    }
  }

  fn call(nr: i64, args: &[i64]) -> Verdict {
    let mut a = [0u64; 6];
    for (slot, &v) in a.iter_mut().zip(args) {
      *slot = v as u64;
    }
    judge(nr, a, &Table)
  }

  use Verdict::{Allow, Deny};

  #[test]
  fn signals_reach_the_job_and_its_reaper_only() {
    for (args, want) in [
      (vec![11, 9], Allow),
      (vec![13, 9], Allow),
      (vec![10, 19], Allow),
      (vec![0, 9], Allow),
      (vec![-11, 9], Allow),
      (vec![5, 9], Deny),
      (vec![1, 9], Deny),
      (vec![-1, 9], Deny),
      (vec![-20, 9], Deny),
      (vec![-10, 9], Deny),
      (vec![i64::from(i32::MIN), 9], Deny),
    ] {
      assert_eq!(call(libc::SYS_kill, &args), want, "kill {args:?}");
    }
    for nr in [libc::SYS_tkill, libc::SYS_rt_sigqueueinfo] {
      assert_eq!(call(nr, &[12, 9]), Allow);
      assert_eq!(call(nr, &[10, 9]), Allow);
      for pid in [5, 0, -11] {
        assert_eq!(call(nr, &[pid, 9]), Deny, "{nr} {pid}");
      }
    }
    for nr in [libc::SYS_tgkill, libc::SYS_rt_tgsigqueueinfo] {
      assert_eq!(call(nr, &[12, 13, 9]), Allow);
      assert_eq!(call(nr, &[5, 5, 9]), Deny);
      // Both must be the job's: the kernel checks that one is a thread of the other.
      assert_eq!(call(nr, &[12, 5, 9]), Deny);
      assert_eq!(call(nr, &[5, 12, 9]), Deny);
    }
  }

  #[test]
  fn io_signals_go_to_the_job_and_its_reaper_only() {
    let setown = F_SETOWN as i64;
    for (owner, want) in [
      (0, Allow),
      (12, Allow),
      (10, Allow),
      (-11, Allow),
      (5, Deny),
      (-20, Deny),
      (-1, Deny),
      (i64::from(i32::MIN), Deny),
    ] {
      assert_eq!(call(libc::SYS_fcntl, &[3, setown, owner]), want, "{owner}");
    }
    // Other commands are the kernel's (F_GETOWN, F_SETFL, ...).
    assert_eq!(call(libc::SYS_fcntl, &[3, 9, 5]), Allow);
    assert_eq!(call(libc::SYS_fcntl, &[3, 4, 5]), Allow);
  }

  #[test]
  fn pidfds_memory_and_tracing_reach_the_job_only() {
    for nr in [
      libc::SYS_pidfd_open,
      libc::SYS_process_vm_readv,
      libc::SYS_process_vm_writev,
    ] {
      assert_eq!(call(nr, &[11]), Allow);
      // Not even its reaper (whose memory and fds only it may use).
      for pid in [10, 5, 0, -11] {
        assert_eq!(call(nr, &[pid]), Deny, "{nr} {pid}");
      }
    }
    for req in [PTRACE_ATTACH, PTRACE_SEIZE] {
      let req = req as i64;
      assert_eq!(call(libc::SYS_ptrace, &[req, 12]), Allow);
      assert_eq!(call(libc::SYS_ptrace, &[req, 10]), Deny);
      assert_eq!(call(libc::SYS_ptrace, &[req, 5]), Deny);
    }
    // Requests on a tracee already attached: the kernel checks that.
    assert_eq!(call(libc::SYS_ptrace, &[0x4200, 5]), Allow);
  }

  #[test]
  fn scheduling_reaches_the_caller_and_the_job_only() {
    for nr in [
      libc::SYS_sched_setaffinity,
      libc::SYS_sched_setscheduler,
      libc::SYS_sched_setparam,
      libc::SYS_sched_setattr,
    ] {
      assert_eq!(call(nr, &[0]), Allow);
      assert_eq!(call(nr, &[12]), Allow);
      assert_eq!(call(nr, &[5]), Deny, "{nr}");
      assert_eq!(call(nr, &[10]), Deny, "{nr}");
    }
    let (process, group, user) = (
      i64::from(libc::PRIO_PROCESS),
      i64::from(libc::PRIO_PGRP),
      i64::from(libc::PRIO_USER),
    );
    for (nr, process, group, user) in [
      (libc::SYS_setpriority, process, group, user),
      (libc::SYS_ioprio_set, 1, 2, 3),
    ] {
      for (args, want) in [
        ([process, 0], Allow),
        ([process, 12], Allow),
        ([process, 5], Deny),
        ([process, -12], Deny),
        ([group, 0], Allow),
        ([group, 11], Allow),
        ([group, 20], Deny),
        ([group, -11], Deny),
        ([user, 0], Deny),
        ([user, 1000], Deny),
        ([99, 0], Deny),
      ] {
        assert_eq!(call(nr, &args), want, "{nr} {args:?}");
      }
    }
  }

  #[test]
  fn other_calls_are_allowed() {
    assert_eq!(call(libc::SYS_getpid, &[5]), Allow);
    assert_eq!(call(libc::SYS_pidfd_send_signal, &[3, 9]), Allow);
  }

  /// `Below` on real processes, this test process standing for the reaper: a `setsid` shell
  /// (a group of its own) and its `sleep` are the job's, found by parent links from any
  /// depth; this process itself, init, and a group holding a process outside are not.
  #[test]
  fn below_follows_parent_links_to_the_reaper() {
    let (mut shell, sleep) =
      crate::descendants::tests::shell("exec setsid sh -c 'sleep 30 & echo $!; wait'");
    let me = std::process::id() as i32;
    let below = Below { reaper: me };
    let sh = shell.id() as i32;
    let ok = (
      below.in_job(sh),
      below.in_job(sleep),
      below.in_job(me),
      below.in_job(1),
      below.in_job(i32::MAX),
      below.is_reaper(me),
      below.is_reaper(sh),
      below.group_in_job(sh),
      below.group_in_job(stat(me).unwrap().pgrp),
    );
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sleep), nix::sys::signal::SIGKILL);
    let _ = shell.kill();
    let _ = shell.wait();
    assert_eq!(
      ok,
      (true, true, false, false, false, true, false, true, false)
    );
  }

  #[cfg(target_arch = "x86_64")]
  const AUDIT_ARCH: u32 = 0xC000_003E;
  #[cfg(target_arch = "aarch64")]
  const AUDIT_ARCH: u32 = 0xC000_00B7;

  /// Where a jump of the watch's program goes.
  #[derive(Clone, Copy, PartialEq, Eq, Debug)]
  enum To {
    Next,
    /// Over this many instructions.
    Skip(usize),
    Allow,
    Notify,
    Deny,
  }

  /// The watch written out by hand as a linear chain: the reference the search layout must agree
  /// with, call for call.
  fn linear_watch() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    // Offsets in `seccomp_data`: nr, arch, args[0] (its low half, little-endian).
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARG0: u32 = 16;
    const ARG1: u32 = 24;
    let mut prog: Vec<(u16, To, To, u32)> = vec![
      (LD_W_ABS, To::Next, To::Next, ARCH),
      (JEQ_K, To::Next, To::Deny, AUDIT_ARCH),
      (LD_W_ABS, To::Next, To::Next, NR),
    ];
    if cfg!(target_arch = "x86_64") {
      prog.push((JGE_K, To::Deny, To::Next, 0x4000_0000));
    }
    for &nr in WATCHED {
      prog.push((JEQ_K, To::Notify, To::Next, nr as u32));
    }
    prog.extend([
      (JEQ_K, To::Next, To::Skip(2), libc::SYS_fcntl as u32),
      (LD_W_ABS, To::Next, To::Next, ARG1),
      (JEQ_K, To::Notify, To::Allow, F_SETOWN as u32),
      (JEQ_K, To::Next, To::Allow, libc::SYS_ptrace as u32),
      (LD_W_ABS, To::Next, To::Next, ARG0),
      (JEQ_K, To::Notify, To::Next, PTRACE_ATTACH as u32),
      (JEQ_K, To::Notify, To::Allow, PTRACE_SEIZE as u32),
    ]);
    let allow = prog.len();
    let (notify, deny) = (allow + 1, allow + 2);
    let at = |to: To, pc: usize| -> u8 {
      let target = match to {
        To::Next => pc + 1,
        To::Skip(n) => pc + 1 + n,
        To::Allow => allow,
        To::Notify => notify,
        To::Deny => deny,
      };
      (target - pc - 1) as u8
    };
    let mut out: Vec<libc::sock_filter> = prog
      .iter()
      .enumerate()
      .map(|(pc, &(code, jt, jf, k))| libc::sock_filter {
        code,
        jt: at(jt, pc),
        jf: at(jf, pc),
        k,
      })
      .collect();
    for k in [
      libc::SECCOMP_RET_ALLOW,
      libc::SECCOMP_RET_USER_NOTIF,
      libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ] {
      out.push(libc::sock_filter {
        code: RET_K,
        jt: 0,
        jf: 0,
        k,
      });
    }
    out
  }

  /// Runs a watch program as the kernel would, on one call (the low halves of two arguments).
  fn run2(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64, arg1: u64) -> u32 {
    let prog: Vec<seccompiler::sock_filter> = prog
      .iter()
      .map(|i| seccompiler::sock_filter {
        code: i.code,
        jt: i.jt,
        jf: i.jf,
        k: i.k,
      })
      .collect();
    let data = libc::seccomp_data {
      nr: nr as i32,
      arch,
      instruction_pointer: 0,
      args: [arg0, arg1, 0, 0, 0, 0],
    };
    finn_isolate::run_filter(&prog, &data)
  }

  fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
    run2(prog, arch, nr, arg0, 0)
  }

  /// Every syscall number (and its x32 twin), on this arch and i386's, with the values each
  /// rule compares (and their neighbours, and high halves set) in the first two arguments:
  /// the watch hands over exactly the calls the linear chain does.
  #[test]
  fn the_watch_hands_over_exactly_what_the_linear_chain_does() {
    let ours = watch_program().unwrap();
    let theirs = linear_watch();
    println!(
      "watch: {} instructions (linear chain: {})",
      ours.len(),
      theirs.len()
    );
    let values: Vec<u64> = [0, 1, 3, 7, 8, 9, 15, 16, 17, 0x4200, 0x4205, 0x4206, 0x4207]
      .into_iter()
      .flat_map(|v: u64| [v, v | 1 << 32, v | 0xffff_ffff_0000_0000])
      .chain([u64::from(u32::MAX), u64::MAX])
      .collect();
    for nr in (0..460u32).chain((0..460).map(|n| 0x4000_0000 | n)) {
      for arch in [AUDIT_ARCH, 0x4000_0003] {
        for &a0 in &values {
          for &a1 in &values {
            assert_eq!(
              run2(&ours, arch, nr, a0, a1),
              run2(&theirs, arch, nr, a0, a1),
              "nr {nr:#x} arch {arch:#x} args {a0:#x} {a1:#x}"
            );
          }
        }
      }
    }
  }

  #[test]
  fn the_program_hands_over_the_watched_calls_and_refuses_other_arches() {
    let prog = watch_program().unwrap();
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let allow = libc::SECCOMP_RET_ALLOW;
    let deny = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    for &nr in WATCHED {
      assert_eq!(run(&prog, AUDIT_ARCH, nr as u32, 0), notify, "{nr}");
    }
    for nr in [
      libc::SYS_getpid,
      libc::SYS_read,
      libc::SYS_pidfd_send_signal,
    ] {
      assert_eq!(run(&prog, AUDIT_ARCH, nr as u32, 0), allow, "{nr}");
    }
    let ptrace = libc::SYS_ptrace as u32;
    assert_eq!(run(&prog, AUDIT_ARCH, ptrace, 16), notify);
    assert_eq!(run(&prog, AUDIT_ARCH, ptrace, 0x4206), notify);
    assert_eq!(run(&prog, AUDIT_ARCH, ptrace, 0x4200), allow);
    assert_eq!(run(&prog, AUDIT_ARCH, ptrace, 0), allow);
    let fcntl = libc::SYS_fcntl as u32;
    assert_eq!(run2(&prog, AUDIT_ARCH, fcntl, 3, 8), notify);
    assert_eq!(run2(&prog, AUDIT_ARCH, fcntl, 3, 4), allow);
    assert_eq!(run2(&prog, AUDIT_ARCH, fcntl, 8, 0), allow);
    // i386's kill (37) by `int 0x80`: another arch, refused.
    assert_eq!(run(&prog, 0x4000_0003, 37, 0), deny);
    if cfg!(target_arch = "x86_64") {
      assert_eq!(
        run(&prog, AUDIT_ARCH, 0x4000_0000 | libc::SYS_kill as u32, 0),
        deny
      );
    }
  }
}
