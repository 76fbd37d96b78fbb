//! The seccomp filters, compiled before the fork; the child only installs them
//! (`seccompiler::apply_filter` builds a `sock_fprog` on the stack: no allocation).
//!
//! `seccompiler` compiles the argument checks of each rule; `bpf.rs` lays each program out as a
//! binary search over syscall numbers, with an action per syscall: for the sandbox filter,
//! EPERM for what a sandboxed command must not do, and ENOSYS for `clone3`, whose flags live
//! behind a pointer that BPF cannot read (libc falls back to `clone`, whose flags are checked);
//! for the helpers' guard, EPERM, and ENOSYS for signals by pidfd.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::bpf::{self, Action, Listed};
use seccompiler::{BpfProgram, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
  #[error("compile the seccomp filter: {0}")]
  Compile(#[from] seccompiler::BackendError),
  #[error("compile the seccomp filter: syscall number {0} is out of range")]
  Number(i64),
  #[error("compile the seccomp filter: {0} instructions is over the kernel's 4,096")]
  TooLong(usize),
}

/// What the filter denies beyond the fixed list.
#[derive(Debug, Clone, Copy)]
pub struct SeccompRules {
  /// `socket()` of every family but AF_UNIX: UDP and raw sockets escape landlock's TCP rules.
  pub deny_network: bool,
  /// `socket(AF_UNIX)`: landlock cannot scope pathname sockets (`docker.sock`,
  /// `$SSH_AUTH_SOCK`) on ABI 7. `socketpair` stays allowed.
  pub deny_unix: bool,
  /// System V IPC and POSIX message queues: another process's segments and queues of the same
  /// uid are not files, landlock does not see them, and an IPC namespace costs ~2.6 ms per exec
  /// as nobody.
  pub deny_ipc: bool,
  /// The network through the reaper (`route.rs`), in place of `deny_network`'s rule: `socket()`
  /// makes only TCP sockets (`AF_INET`/`AF_INET6`, `SOCK_STREAM`, protocol 0 or TCP) and Unix
  /// ones (unless `deny_unix`); `connect`, `bind` and `listen` wait for the filter's listener
  /// (the reaper); TCP fast open (`MSG_FASTOPEN`, which connects from `sendto`/`sendmsg`) is
  /// refused.
  pub route: bool,
}

impl SeccompRules {
  /// Every rule on: the filter an isolated job with no network gets, and the one whose size
  /// `probeIsolation().seccompInstructions` reports.
  pub const STRICTEST: SeccompRules = SeccompRules {
    deny_network: true,
    deny_unix: true,
    deny_ipc: true,
    route: false,
  };
}

/// The calls `deny_ipc` refuses.
const IPC: &[i64] = &[
  libc::SYS_shmget,
  libc::SYS_shmat,
  libc::SYS_shmctl,
  libc::SYS_shmdt,
  libc::SYS_msgget,
  libc::SYS_msgsnd,
  libc::SYS_msgrcv,
  libc::SYS_msgctl,
  libc::SYS_semget,
  libc::SYS_semop,
  libc::SYS_semtimedop,
  libc::SYS_semctl,
  libc::SYS_mq_open,
  libc::SYS_mq_unlink,
  libc::SYS_mq_timedsend,
  libc::SYS_mq_timedreceive,
  libc::SYS_mq_notify,
  libc::SYS_mq_getsetattr,
];

/// Syscalls denied outright: debugging other processes, namespaces, mounts, kernel modules,
/// keyrings, io_uring (its operations bypass seccomp), bpf and perf.
const DENIED: &[i64] = &[
  libc::SYS_ptrace,
  libc::SYS_process_vm_readv,
  libc::SYS_process_vm_writev,
  libc::SYS_unshare,
  libc::SYS_setns,
  libc::SYS_mount,
  libc::SYS_umount2,
  libc::SYS_pivot_root,
  libc::SYS_chroot,
  libc::SYS_open_tree,
  libc::SYS_move_mount,
  libc::SYS_fsopen,
  libc::SYS_fsconfig,
  libc::SYS_fsmount,
  libc::SYS_fspick,
  libc::SYS_mount_setattr,
  libc::SYS_init_module,
  libc::SYS_finit_module,
  libc::SYS_delete_module,
  libc::SYS_kexec_load,
  libc::SYS_add_key,
  libc::SYS_request_key,
  libc::SYS_keyctl,
  libc::SYS_io_uring_setup,
  libc::SYS_io_uring_enter,
  libc::SYS_io_uring_register,
  libc::SYS_bpf,
  libc::SYS_perf_event_open,
  libc::SYS_swapon,
  libc::SYS_swapoff,
  libc::SYS_reboot,
];

/// Every CLONE_NEW* flag `clone` accepts (CLONE_NEWTIME shares its bit with CSIGNAL there). All
/// sit in the low 32 bits of the flags, where the filter looks (see `listed`).
const CLONE_NS_FLAGS: &[u64] = &[
  libc::CLONE_NEWNS as u64,
  libc::CLONE_NEWUTS as u64,
  libc::CLONE_NEWIPC as u64,
  libc::CLONE_NEWUSER as u64,
  libc::CLONE_NEWPID as u64,
  libc::CLONE_NEWNET as u64,
  libc::CLONE_NEWCGROUP as u64,
];

/// The programs to install, in order (one). Built once per set of rules and kept: a job's
/// preparation copies it.
pub fn compile(rules: SeccompRules) -> Result<Vec<BpfProgram>, SeccompError> {
  static COMPILED: [OnceLock<BpfProgram>; 16] = [const { OnceLock::new() }; 16];
  let slot = &COMPILED[usize::from(rules.deny_network)
    | usize::from(rules.deny_unix) << 1
    | usize::from(rules.deny_ipc) << 2
    | usize::from(rules.route) << 3];
  if let Some(prog) = slot.get() {
    return Ok(vec![prog.clone()]);
  }
  let prog = build(rules)?;
  Ok(vec![slot.get_or_init(|| prog).clone()])
}

/// The sandbox filter for `rules`, built anew (see [`compile`]).
fn build(rules: SeccompRules) -> Result<BpfProgram, SeccompError> {
  bpf::program(listed(rules)?, Action::Kill)
}

/// Instructions in the sandbox filter with every rule on (what `npm run bench` records beside the
/// isolation cost).
pub fn seccomp_instructions() -> usize {
  compile(SeccompRules::STRICTEST).map_or(0, |p| p.iter().map(Vec::len).sum())
}

/// What the sandbox filter refuses: EPERM where a rule matches, and `clone3` with ENOSYS.
fn listed(rules: SeccompRules) -> Result<BTreeMap<i64, Listed>, SeccompError> {
  let mut map: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&n| (n, vec![])).collect();
  if rules.deny_ipc {
    map.extend(IPC.iter().map(|&n| (n, vec![])));
  }

  // Each flag in the low half of the flags: the same as comparing all 64 bits, whose high half
  // holds no CLONE_NEW* flag (`clone_flags_in_the_low_word_are_the_whole_check`), in three
  // instructions fewer per flag.
  let flag_rules = CLONE_NS_FLAGS
    .iter()
    .map(|&f| {
      SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(f),
        f,
      )?])
    })
    .collect::<Result<Vec<_>, _>>()?;
  map.insert(libc::SYS_clone, flag_rules);

  // Limits and scheduling of another process: landlock's scopes do not cover them, and the same
  // uid needs no capability to lower them, so a command could set Node's RLIMIT_CPU to 1 (the
  // kernel kills it after a second of CPU), renice it to 19 or make it SCHED_IDLE. Only the
  // caller itself (pid 0) may be named; reading another's limits stays allowed.
  let cond =
    |arg: u8, op: SeccompCmpOp, v: u64| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v);
  let pid_not_self = |arg: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    Ok(vec![SeccompRule::new(vec![cond(
      arg,
      SeccompCmpOp::Ne,
      0,
    )?])?])
  };
  map.insert(
    libc::SYS_prlimit64,
    vec![SeccompRule::new(vec![
      cond(0, SeccompCmpOp::Ne, 0)?,
      SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)?,
    ])?],
  );
  for nr in [
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setattr,
  ] {
    map.insert(nr, pid_not_self(0)?);
  }
  // setpriority(which, who, prio) and ioprio_set(which, who, prio): `who` 0 is the caller (its
  // process, group or uid): the uid form reaches every process of the uid, so it is refused too.
  let mut prio = pid_not_self(1)?;
  prio.push(SeccompRule::new(vec![cond(
    0,
    SeccompCmpOp::Eq,
    libc::PRIO_USER as u64,
  )?])?);
  map.insert(libc::SYS_setpriority, prio);
  const IOPRIO_WHO_USER: u64 = 3;
  let mut ioprio = pid_not_self(1)?;
  ioprio.push(SeccompRule::new(vec![cond(
    0,
    SeccompCmpOp::Eq,
    IOPRIO_WHO_USER,
  )?])?);
  map.insert(libc::SYS_ioprio_set, ioprio);

  if rules.route {
    return routed(map, rules.deny_unix);
  }
  let socket_rules = match (rules.deny_network, rules.deny_unix) {
    (true, true) => Some(vec![]),
    (true, false) => Some(vec![SeccompRule::new(vec![SeccompCondition::new(
      0,
      SeccompCmpArgLen::Dword,
      SeccompCmpOp::Ne,
      libc::AF_UNIX as u64,
    )?])?]),
    (false, true) => Some(vec![SeccompRule::new(vec![SeccompCondition::new(
      0,
      SeccompCmpArgLen::Dword,
      SeccompCmpOp::Eq,
      libc::AF_UNIX as u64,
    )?])?]),
    (false, false) => None,
  };
  if let Some(r) = socket_rules {
    map.insert(libc::SYS_socket, r);
  }

  let mut listed = refused(map, Action::Errno(libc::EPERM));
  listed.insert(
    libc::SYS_clone3,
    Listed {
      rules: vec![],
      action: Action::Errno(libc::ENOSYS),
    },
  );
  Ok(listed)
}

/// [`listed`] for a job whose network goes through its reaper (`route.rs`): `map` holds every
/// other rule; the socket calls are added here.
fn routed(
  mut map: BTreeMap<i64, Vec<SeccompRule>>,
  deny_unix: bool,
) -> Result<BTreeMap<i64, Listed>, SeccompError> {
  let cond =
    |arg: u8, op: SeccompCmpOp, v: u64| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v);
  let (unix, inet, inet6) = (
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
  );
  // socket(family, type, protocol) is refused when the family is none of the three, ...
  let mut socket = vec![SeccompRule::new(vec![
    cond(0, SeccompCmpOp::Ne, unix)?,
    cond(0, SeccompCmpOp::Ne, inet)?,
    cond(0, SeccompCmpOp::Ne, inet6)?,
  ])?];
  if deny_unix {
    socket.push(SeccompRule::new(vec![cond(0, SeccompCmpOp::Eq, unix)?])?);
  }
  for family in [inet, inet6] {
    // ... or an IP socket's type (its low 4 bits; SOCK_NONBLOCK and SOCK_CLOEXEC sit above
    // them, and the kernel refuses any other high bit) is not SOCK_STREAM (1): bit 0 clear, or
    // any of bits 1-3 set. UDP, raw, packet and SCTP's SOCK_SEQPACKET all fail here.
    socket.push(SeccompRule::new(vec![
      cond(0, SeccompCmpOp::Eq, family)?,
      cond(1, SeccompCmpOp::MaskedEq(1), 0)?,
    ])?);
    for bit in [2u64, 4, 8] {
      socket.push(SeccompRule::new(vec![
        cond(0, SeccompCmpOp::Eq, family)?,
        cond(1, SeccompCmpOp::MaskedEq(bit), bit)?,
      ])?);
    }
    // ... or its protocol is neither 0 nor TCP: SCTP's one-to-one sockets are SOCK_STREAM too,
    // and connect from `sendmsg`; landlock's TCP rules do not cover them.
    socket.push(SeccompRule::new(vec![
      cond(0, SeccompCmpOp::Eq, family)?,
      cond(2, SeccompCmpOp::Ne, 0)?,
      cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
    ])?);
  }
  map.insert(libc::SYS_socket, socket);
  // TCP fast open connects from the first send, to the address passed to it.
  let fastopen = libc::MSG_FASTOPEN as u64;
  for (nr, flags_arg) in [
    (libc::SYS_sendto, 3),
    (libc::SYS_sendmsg, 2),
    (libc::SYS_sendmmsg, 3),
  ] {
    map.insert(
      nr,
      vec![SeccompRule::new(vec![cond(
        flags_arg,
        SeccompCmpOp::MaskedEq(fastopen),
        fastopen,
      )?])?],
    );
  }
  let mut listed = refused(map, Action::Errno(libc::EPERM));
  listed.insert(
    libc::SYS_clone3,
    Listed {
      rules: vec![],
      action: Action::Errno(libc::ENOSYS),
    },
  );
  for nr in [libc::SYS_connect, libc::SYS_bind, libc::SYS_listen] {
    listed.insert(
      nr,
      Listed {
        rules: vec![],
        action: Action::Notify,
      },
    );
  }
  Ok(listed)
}

/// Every syscall of `map` with its rules, and `action` where one matches.
fn refused(map: BTreeMap<i64, Vec<SeccompRule>>, action: Action) -> BTreeMap<i64, Listed> {
  map
    .into_iter()
    .map(|(nr, rules)| (nr, Listed { rules, action }))
    .collect()
}

/// The helpers' guard (see `supervisor/shield.rs`): the ways a process reaches another's life
/// by its pid, refused when the pid is one of `pids` or the group one of `groups`: signals
/// (`kill` also to every process, -1; `tkill`, which names any thread, always; signals by
/// pidfd, which may be a `/proc/<pid>` fd, always, with ENOSYS so tools fall back to `kill`),
/// I/O signals (`F_SETOWN` to them; `F_SETOWN_EX`, `FIOSETOWN` and `SIOCSPGRP`, whose owner
/// sits behind a pointer, always), setting the limits of any process but the caller, their scheduling (class, affinity,
/// nice and I/O priority, the latter two also for any whole uid), tracing them, and their
/// memory.
/// Everything else is allowed; x32 syscalls are refused, as in [`compile`]. One program, laid out
/// as the sandbox filter is (`bpf.rs`).
pub fn guard_helpers(pids: &[i32], groups: &[i32]) -> Result<Vec<BpfProgram>, SeccompError> {
  Ok(vec![bpf::program(guarded(pids, groups)?, Action::Kill)?])
}

/// A program that hands the calls of `watched` (where one of their rules matches; every call,
/// without rules) to its listener, and allows everything else; a call of another arch fails
/// with EPERM (a 32-bit `int 0x80` names `kill` by another number), as does an x32 call. See
/// `supervisor/shield.rs`, whose watch it is.
pub fn hand_over(watched: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, SeccompError> {
  bpf::program(refused(watched, Action::Notify), Action::Errno(libc::EPERM))
}

/// What [`guard_helpers`] refuses, syscall by syscall.
fn guarded(pids: &[i32], groups: &[i32]) -> Result<BTreeMap<i64, Listed>, SeccompError> {
  // From the kernel's uapi (asm-generic/fcntl.h, asm-generic/sockios.h); not in `libc`.
  const F_SETOWN_EX: i64 = 15;
  const FIOSETOWN: i64 = 0x8901;
  const SIOCSPGRP: i64 = 0x8902;
  let eq = |arg: u8, v: i64| {
    SeccompCondition::new(
      arg,
      SeccompCmpArgLen::Dword,
      SeccompCmpOp::Eq,
      v as u32 as u64,
    )
  };
  let mut targets: Vec<i64> = pids.iter().map(|&p| i64::from(p)).collect();
  targets.extend(groups.iter().map(|&g| -i64::from(g)));
  targets.push(-1);
  targets.sort_unstable();
  targets.dedup();
  let mut pids: Vec<i64> = pids.iter().map(|&p| i64::from(p)).collect();
  pids.sort_unstable();
  pids.dedup();
  let each = |arg: u8, values: &[i64]| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    values
      .iter()
      .map(|&v| SeccompRule::new(vec![eq(arg, v)?]))
      .collect()
  };
  let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
  map.insert(libc::SYS_kill, each(0, &targets)?);
  map.insert(libc::SYS_tkill, vec![]);
  for nr in [
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
  ] {
    map.insert(nr, each(0, &pids)?);
  }
  let mut fcntl = targets
    .iter()
    .map(|&v| SeccompRule::new(vec![eq(1, i64::from(libc::F_SETOWN))?, eq(2, v)?]))
    .collect::<Result<Vec<_>, _>>()?;
  fcntl.push(SeccompRule::new(vec![eq(1, F_SETOWN_EX)?])?);
  map.insert(libc::SYS_fcntl, fcntl);
  map.insert(
    libc::SYS_ioctl,
    vec![
      SeccompRule::new(vec![eq(1, FIOSETOWN)?])?,
      SeccompRule::new(vec![eq(1, SIOCSPGRP)?])?,
    ],
  );
  // Limits of any process but the caller's own (pid 0: `setrlimit`, `ulimit`, `prlimit CMD`):
  // the same uid sets them without a capability and no landlock scope covers it, so a command
  // could crash another job by its reaper (RLIMIT_NOFILE 3: it failed mid-job) or a helper by
  // RLIMIT_CPU. Reading another's limits stays allowed.
  map.insert(
    libc::SYS_prlimit64,
    vec![SeccompRule::new(vec![
      SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)?,
      SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)?,
    ])?],
  );
  map.insert(libc::SYS_ptrace, each(1, &pids)?);
  for nr in [
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setattr,
    libc::SYS_sched_setaffinity,
  ] {
    map.insert(nr, each(0, &pids)?);
  }
  // Priorities: setpriority(which, who, prio) and ioprio_set(which, who, prio) name a process,
  // a group or a whole uid (which reaches them too): refused for theirs, and for any uid.
  let groups: Vec<i64> = groups.iter().map(|&g| i64::from(g)).collect();
  const IOPRIO_WHO_PROCESS: i64 = 1;
  const IOPRIO_WHO_PGRP: i64 = 2;
  const IOPRIO_WHO_USER: i64 = 3;
  for (nr, process, group, user) in [
    (
      libc::SYS_setpriority,
      i64::from(libc::PRIO_PROCESS),
      i64::from(libc::PRIO_PGRP),
      i64::from(libc::PRIO_USER),
    ),
    (
      libc::SYS_ioprio_set,
      IOPRIO_WHO_PROCESS,
      IOPRIO_WHO_PGRP,
      IOPRIO_WHO_USER,
    ),
  ] {
    let mut rules = Vec::new();
    for &p in &pids {
      rules.push(SeccompRule::new(vec![eq(0, process)?, eq(1, p)?])?);
    }
    for &g in &groups {
      rules.push(SeccompRule::new(vec![eq(0, group)?, eq(1, g)?])?);
    }
    rules.push(SeccompRule::new(vec![eq(0, user)?])?);
    map.insert(nr, rules);
  }
  let mut listed = refused(map, Action::Errno(libc::EPERM));
  listed.insert(
    libc::SYS_pidfd_send_signal,
    Listed {
      rules: vec![],
      action: Action::Errno(libc::ENOSYS),
    },
  );
  Ok(listed)
}

#[cfg(test)]
mod tests {
  use super::*;
  use seccompiler::{SeccompAction, SeccompFilter, sock_filter};

  /// A program that fails the syscalls of `map` (where their rules match) with `errno`, and
  /// allows everything else, as `seccompiler` lays it out.
  fn refuse(map: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> BpfProgram {
    let arch = std::env::consts::ARCH.try_into().unwrap();
    SeccompFilter::new(
      map,
      SeccompAction::Allow,
      SeccompAction::Errno(errno as u32),
      arch,
    )
    .unwrap()
    .try_into()
    .unwrap()
  }

  /// On x86_64, x32 syscalls carry the same audit arch with bit 30 set in the number, so a
  /// number-keyed filter would let `0x40000000 | SYS_socket` through where the kernel has x32.
  /// Refuse them right after the arch check (which is the program's first three instructions; its
  /// only jump lands on the fourth, where this guard starts).
  fn guard_x32(mut prog: BpfProgram) -> BpfProgram {
    if std::env::consts::ARCH != "x86_64" {
      return prog;
    }
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let ld_nr = sock_filter {
      code: 0x20,
      jt: 0,
      jf: 0,
      k: 0,
    }; // BPF_LD|BPF_W|BPF_ABS, seccomp_data.nr
    let jge = sock_filter {
      code: 0x35,
      jt: 0,
      jf: 1,
      k: X32_SYSCALL_BIT,
    }; // BPF_JMP|BPF_JGE|BPF_K
    let ret = sock_filter {
      code: 0x06,
      jt: 0,
      jf: 0,
      k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    };
    prog.splice(3..3, [ld_nr, jge, ret]);
    prog
  }

  /// `listed` compiled by `seccompiler` as it lays filters out: one linear program per errno,
  /// each with the x32 guard. The reference the search layout must agree with.
  pub(super) fn reference(listed: BTreeMap<i64, Listed>) -> Vec<BpfProgram> {
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for (nr, Listed { rules, action }) in listed {
      let Action::Errno(errno) = action else {
        panic!("seccompiler's reference has errno actions only")
      };
      by_errno.entry(errno).or_default().insert(nr, rules);
    }
    by_errno
      .into_iter()
      .map(|(errno, map)| guard_x32(refuse(map, errno)))
      .collect()
  }

  /// What the kernel returns for `data` with `progs` all installed (in order, the last one
  /// newest): it runs the newest first and keeps a later result only when its action takes
  /// precedence (a lower action as a signed number: KILL_PROCESS, then ERRNO, then ALLOW), so
  /// of two errnos the newest program's wins.
  pub(super) fn verdict(progs: &[BpfProgram], data: &libc::seccomp_data) -> u32 {
    let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
    progs
      .iter()
      .rev()
      .map(|p| bpf::interpret::run(p, data))
      .reduce(|kept, r| if action(r) < action(kept) { r } else { kept })
      .unwrap()
  }

  /// Argument values that sit on and beside every rule's boundary: 0, small numbers, the
  /// address families, PRIO_USER, each namespace flag alone and together, high words.
  pub(super) fn probes() -> Vec<u64> {
    let mut v: Vec<u64> = vec![
      0,
      1,
      2,
      3,
      10,
      libc::AF_UNIX as u64,
      libc::AF_INET as u64,
      libc::AF_INET6 as u64,
      libc::AF_NETLINK as u64,
      libc::AF_PACKET as u64,
      u64::from(u32::MAX),
      u64::MAX,
      1 << 32,
      (1 << 32) | libc::AF_UNIX as u64,
      libc::SIGCHLD as u64,
    ];
    let all_ns = CLONE_NS_FLAGS.iter().fold(0, |a, f| a | f);
    v.extend(CLONE_NS_FLAGS.iter().copied());
    v.extend(CLONE_NS_FLAGS.iter().map(|f| f | libc::SIGCHLD as u64));
    v.push(all_ns);
    v.push(!all_ns);
    v
  }

  /// Every syscall number (and its x32 twin, and the i386 arch) with every argument probe in
  /// each of the first three arguments: the one program gives exactly the verdict of the
  /// linear programs `seccompiler` builds from the same rules.
  pub(super) fn assert_same_verdicts(ours: &[BpfProgram], theirs: &[BpfProgram]) {
    let probes = probes();
    for nr in (0..460i64).chain((0..460).map(|n| 0x4000_0000 | n)) {
      for arch in [bpf::AUDIT_ARCH_X86_64, 0x4000_0003] {
        for slot in 0..3 {
          for &value in &probes {
            let mut args = [0u64; 6];
            args[slot] = value;
            if slot == 2 {
              args[0] = value; // prlimit64(pid, _, new, _) and kill-like pairs
            }
            let data = libc::seccomp_data {
              nr: nr as i32,
              arch,
              instruction_pointer: 0,
              args,
            };
            assert_eq!(
              verdict(ours, &data),
              verdict(theirs, &data),
              "nr {nr:#x} arch {arch:#x} args {args:?}"
            );
          }
        }
      }
    }
  }

  #[test]
  fn the_search_layout_refuses_exactly_what_the_linear_one_does() {
    for deny_network in [false, true] {
      for deny_unix in [false, true] {
        for deny_ipc in [false, true] {
          let rules = SeccompRules {
            deny_network,
            deny_unix,
            deny_ipc,
            route: false,
          };
          let ours = compile(rules).unwrap();
          assert_eq!(ours.len(), 1);
          assert_same_verdicts(&ours, &reference(listed(rules).unwrap()));
        }
      }
    }
  }

  /// `clone`'s namespace flags checked in the low half of its flags refuse exactly what the same
  /// checks on all 64 bits refuse: every flag sits in the low half.
  #[test]
  fn clone_flags_in_the_low_word_are_the_whole_check() {
    assert!(
      CLONE_NS_FLAGS
        .iter()
        .all(|&f| f < 1 << 32 && f.is_power_of_two())
    );
    let qword = CLONE_NS_FLAGS
      .iter()
      .map(|&f| {
        let c = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f);
        SeccompRule::new(vec![c.unwrap()]).unwrap()
      })
      .collect::<Vec<_>>();
    let rules = SeccompRules::STRICTEST;
    let mut wide = listed(rules).unwrap();
    wide.get_mut(&libc::SYS_clone).unwrap().rules = qword;
    let wide = bpf::program(wide, Action::Kill).unwrap();
    assert_same_verdicts(&compile(rules).unwrap(), &[wide]);
  }

  /// The guard's one program in the search layout gives exactly the verdicts of the linear
  /// programs `seccompiler` builds from the same rules (an EPERM one, then the ENOSYS one), for
  /// every syscall number, its x32 twin and i386's: for a listed syscall, with every
  /// combination of the guarded pids and groups (and their negations, neighbours and high
  /// halves) and the values its rules compare, in its first three arguments.
  #[test]
  fn the_guard_refuses_exactly_what_the_linear_programs_do() {
    let (pids, groups) = ([4242, 77], [4242, 999]);
    let ours = guard_helpers(&pids, &groups).unwrap();
    assert_eq!(ours.len(), 1);
    let listed = guarded(&pids, &groups).unwrap();
    let numbers: Vec<i64> = listed.keys().copied().collect();
    let theirs = reference(listed);
    println!(
      "guard: {} instructions in 1 program (linear layout: {} in {})",
      ours[0].len(),
      theirs.iter().map(Vec::len).sum::<usize>(),
      theirs.len()
    );
    assert!(ours[0].len() <= 140, "{} instructions", ours[0].len());
    let values: Vec<u64> = [
      0i64, 1, 2, 3, 8, 15, 0x8901, 0x8902, 4242, 4243, 77, 999, -4242, -77, -999, -1,
    ]
    .into_iter()
    .map(|v| v as u32 as u64)
    .flat_map(|v| [v, v | 1 << 32])
    .chain([u64::MAX])
    .collect();
    let check = |nr: i64, arch: u32, args: [u64; 6]| {
      let data = libc::seccomp_data {
        nr: nr as i32,
        arch,
        instruction_pointer: 0,
        args,
      };
      assert_eq!(
        verdict(&ours, &data),
        verdict(&theirs, &data),
        "nr {nr:#x} arch {arch:#x} args {args:?}"
      );
    };
    for nr in (0..460i64).chain((0..460).map(|n| 0x4000_0000 | n)) {
      for arch in [bpf::AUDIT_ARCH_X86_64, 0x4000_0003] {
        if numbers.contains(&nr) && arch == bpf::AUDIT_ARCH_X86_64 {
          for &a in &values {
            for &b in &values {
              for &c in &values {
                check(nr, arch, [a, b, c, 0, 0, 0]);
              }
            }
          }
        } else {
          for slot in 0..3 {
            for &v in &values {
              let mut args = [0; 6];
              args[slot] = v;
              check(nr, arch, args);
            }
          }
        }
      }
    }
  }

  /// What the guard refuses, call by call, for supervisor 4242 in group 999: signals to it, to
  /// its group (a negative pid) and to everyone (-1), and I/O signals and priorities aimed the
  /// same way; the same numbers meaning another process or group pass.
  #[test]
  fn the_guard_refuses_the_guarded_pid_its_group_and_everyone() {
    let prog = guard_helpers(&[4242], &[999]).unwrap();
    let perm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let call = |nr: i64, args: [i64; 3]| {
      let data = libc::seccomp_data {
        nr: nr as i32,
        arch: bpf::AUDIT_ARCH_X86_64,
        instruction_pointer: 0,
        args: [args[0] as u64, args[1] as u64, args[2] as u64, 0, 0, 0],
      };
      verdict(&prog, &data)
    };
    for (pid, refused) in [
      (4242, true),
      (-999, true),
      (-1, true),
      (999, false),
      (-4242, false),
      (77, false),
    ] {
      let want = if refused {
        perm
      } else {
        libc::SECCOMP_RET_ALLOW
      };
      assert_eq!(call(libc::SYS_kill, [pid, 9, 0]), want, "kill {pid}");
      assert_eq!(
        call(libc::SYS_fcntl, [3, i64::from(libc::F_SETOWN), pid]),
        want,
        "F_SETOWN {pid}"
      );
    }
    let (process, group) = (i64::from(libc::PRIO_PROCESS), i64::from(libc::PRIO_PGRP));
    assert_eq!(call(libc::SYS_setpriority, [process, 4242, 19]), perm);
    assert_eq!(call(libc::SYS_setpriority, [group, 999, 19]), perm);
    assert_eq!(
      call(libc::SYS_setpriority, [group, 4242, 19]),
      libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(
      call(libc::SYS_setpriority, [process, 999, 19]),
      libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(call(libc::SYS_tgkill, [4242, 4242, 9]), perm);
    assert_eq!(call(libc::SYS_tgkill, [77, 77, 9]), libc::SECCOMP_RET_ALLOW);
    assert_eq!(
      call(libc::SYS_pidfd_send_signal, [3, 9, 0]),
      libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
  }

  /// The route's filter (`route.rs`): TCP and (unless denied) Unix sockets only, whatever the
  /// flags beside the type; connect, bind and listen to the listener; fast open refused; every
  /// other rule as in the strictest filter.
  #[test]
  fn the_routed_filter_makes_only_tcp_and_unix_sockets_and_hands_over_connects() {
    let perm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let (allow, notify) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_USER_NOTIF);
    for deny_unix in [false, true] {
      let prog = compile(SeccompRules {
        deny_unix,
        route: true,
        ..SeccompRules::STRICTEST
      })
      .unwrap();
      let call = |nr: i64, args: [u64; 4]| {
        let data = libc::seccomp_data {
          nr: nr as i32,
          arch: bpf::AUDIT_ARCH_X86_64,
          instruction_pointer: 0,
          args: [args[0], args[1], args[2], args[3], 0, 0],
        };
        verdict(&prog, &data)
      };
      let socket =
        |f: i32, t: i32, p: i32| call(libc::SYS_socket, [f as u64, t as u64, p as u64, 0]);
      let (inet, inet6, unix) = (libc::AF_INET, libc::AF_INET6, libc::AF_UNIX);
      let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
      for family in [inet, inet6] {
        assert_eq!(socket(family, libc::SOCK_STREAM, 0), allow);
        assert_eq!(
          socket(family, libc::SOCK_STREAM | flags, libc::IPPROTO_TCP),
          allow
        );
        for ty in [
          libc::SOCK_DGRAM,
          libc::SOCK_RAW,
          libc::SOCK_SEQPACKET,
          libc::SOCK_RDM,
          libc::SOCK_DGRAM | flags,
          libc::SOCK_STREAM | 2,
          libc::SOCK_STREAM | 8,
          0,
        ] {
          assert_eq!(socket(family, ty, 0), perm, "{family} type {ty:#x}");
        }
        for proto in [libc::IPPROTO_SCTP, libc::IPPROTO_MPTCP, libc::IPPROTO_UDP] {
          assert_eq!(
            socket(family, libc::SOCK_STREAM, proto),
            perm,
            "{family} {proto}"
          );
        }
      }
      for family in [libc::AF_PACKET, libc::AF_NETLINK, libc::AF_VSOCK, 0, 255] {
        assert_eq!(socket(family, libc::SOCK_STREAM, 0), perm, "{family}");
      }
      let unix_verdict = if deny_unix { perm } else { allow };
      assert_eq!(socket(unix, libc::SOCK_STREAM, 0), unix_verdict);
      assert_eq!(socket(unix, libc::SOCK_DGRAM | flags, 0), unix_verdict);
      for nr in [libc::SYS_connect, libc::SYS_bind, libc::SYS_listen] {
        assert_eq!(call(nr, [3, 0, 16, 0]), notify);
      }
      let fastopen = libc::MSG_FASTOPEN as u64;
      assert_eq!(call(libc::SYS_sendto, [3, 0, 1, fastopen]), perm);
      assert_eq!(call(libc::SYS_sendto, [3, 0, 1, fastopen | 0x40]), perm);
      assert_eq!(call(libc::SYS_sendto, [3, 0, 1, 0x40]), allow);
      assert_eq!(call(libc::SYS_sendmsg, [3, 0, fastopen, 0]), perm);
      assert_eq!(call(libc::SYS_sendmsg, [3, 0, 0, 0]), allow);
      assert_eq!(call(libc::SYS_sendmmsg, [3, 0, 1, fastopen]), perm);
      assert_eq!(call(libc::SYS_ptrace, [16, 1, 0, 0]), perm);
      assert_eq!(call(libc::SYS_shmget, [0, 0, 0, 0]), perm);
      assert_eq!(call(libc::SYS_read, [0, 0, 0, 0]), allow);
    }
  }

  /// The sandbox filter's instruction counts, printed for `npm run bench` to quote and kept
  /// small: the kernel emulates the program per syscall number at every load.
  #[test]
  fn the_sandbox_filter_is_one_short_program() {
    let rules = SeccompRules::STRICTEST;
    let ours = compile(rules).unwrap();
    assert_eq!(seccomp_instructions(), ours[0].len());
    let theirs = reference(listed(rules).unwrap());
    let their_len: usize = theirs.iter().map(Vec::len).sum();
    println!(
      "sandbox filter: {} instructions in 1 program (linear layout: {their_len} in {})",
      ours[0].len(),
      theirs.len()
    );
    // An unlisted syscall (read) passes the arch and x32 checks, the search and a leaf.
    let read = libc::seccomp_data {
      nr: libc::SYS_read as i32,
      arch: bpf::AUDIT_ARCH_X86_64,
      instruction_pointer: 0,
      args: [0; 6],
    };
    let (verdict, steps) = bpf::interpret::trace(&ours[0], &read);
    println!("read is allowed in {steps} steps");
    assert_eq!(verdict, libc::SECCOMP_RET_ALLOW);
    assert!(steps <= 16, "{steps} steps");
    // Every instruction costs at each job's load: a longer layout of the same rules fails here
    // (a rule more may move the bound, by what it costs).
    assert!(ours[0].len() <= 103, "{} instructions", ours[0].len());
  }

  /// The time a child takes from fork to exit when it installs `progs` first: the kernel's
  /// cost of loading them. Ignored (it measures, it does not test):
  /// `cargo test --release --lib seccomp_load_cost -- --ignored --nocapture`.
  #[test]
  #[ignore = "measurement; run by hand"]
  fn seccomp_load_cost() {
    fn fork_exit_us(progs: &[BpfProgram]) -> f64 {
      let start = std::time::Instant::now();
      // SAFETY: the child only installs prebuilt programs (no allocation) and `_exit`s.
      match unsafe { libc::fork() } {
        0 => {
          // SAFETY: prctl with constant arguments.
          unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
          for p in progs {
            if seccompiler::apply_filter(p).is_err() {
              // SAFETY: exits the forked child.
              unsafe { libc::_exit(1) }
            }
          }
          // SAFETY: exits the forked child.
          unsafe { libc::_exit(0) }
        }
        pid => {
          let mut status = 0;
          // SAFETY: waits for our own child.
          unsafe { libc::waitpid(pid, &mut status, 0) };
          assert_eq!(status, 0);
        }
      }
      start.elapsed().as_secs_f64() * 1e6
    }
    let rules = SeccompRules::STRICTEST;
    let ours = compile(rules).unwrap();
    let theirs = reference(listed(rules).unwrap());
    let mut t = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..300 {
      t[0].push(fork_exit_us(&[]));
      t[1].push(fork_exit_us(&theirs));
      t[2].push(fork_exit_us(&ours));
    }
    let median = |v: &mut Vec<f64>| {
      v.sort_by(f64::total_cmp);
      v[v.len() / 2]
    };
    let [none, lin, search] = t.each_mut().map(median);
    println!(
      "fork+exit median: no filter {none:.0} us, linear ({} insns in {}) {lin:.0} us, \
       search ({} insns) {search:.0} us",
      theirs.iter().map(Vec::len).sum::<usize>(),
      theirs.len(),
      ours[0].len()
    );
  }
}
