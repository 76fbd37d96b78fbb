//! The seccomp filters, compiled with `seccompiler` before the fork; the child only installs them
//! (`seccompiler::apply_filter` builds a `sock_fprog` on the stack: no allocation).
//!
//! Two programs, because a seccompiler filter has one match action: EPERM for what a sandboxed
//! command must not do, and ENOSYS for `clone3`, whose flags live behind a pointer that BPF
//! cannot read; libc falls back to `clone`, whose flags the first filter checks.

use std::collections::BTreeMap;

use seccompiler::{
  BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
  SeccompRule, sock_filter,
};

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
  #[error("compile the seccomp filter: {0}")]
  Compile(#[from] seccompiler::BackendError),
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

/// Every CLONE_NEW* flag `clone` accepts (CLONE_NEWTIME shares its bit with CSIGNAL there).
const CLONE_NS_FLAGS: &[u64] = &[
  libc::CLONE_NEWNS as u64,
  libc::CLONE_NEWUTS as u64,
  libc::CLONE_NEWIPC as u64,
  libc::CLONE_NEWUSER as u64,
  libc::CLONE_NEWPID as u64,
  libc::CLONE_NEWNET as u64,
  libc::CLONE_NEWCGROUP as u64,
];

fn arch() -> Result<seccompiler::TargetArch, SeccompError> {
  Ok(std::env::consts::ARCH.try_into()?)
}

/// Both programs, in installation order.
pub fn compile(rules: SeccompRules) -> Result<Vec<BpfProgram>, SeccompError> {
  let mut map: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&n| (n, vec![])).collect();
  if rules.deny_ipc {
    map.extend(IPC.iter().map(|&n| (n, vec![])));
  }

  let flag_rules = CLONE_NS_FLAGS
    .iter()
    .map(|&f| {
      SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
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

  let deny = guard_x32(refuse(map, libc::EPERM)?);

  let clone3 = refuse_all(libc::SYS_clone3, libc::ENOSYS)?;
  Ok(vec![deny, clone3])
}

/// The helpers' guard (see `supervisor/shield.rs`): the ways a process reaches another's life
/// by its pid, refused when the pid is one of `pids` or the group one of `groups`: signals
/// (`kill` also to every process, -1; `tkill`, which names any thread, always; signals by
/// pidfd, which may be a `/proc/<pid>` fd, always, with ENOSYS so tools fall back to `kill`),
/// I/O signals (`F_SETOWN` to them; `F_SETOWN_EX`, `FIOSETOWN` and `SIOCSPGRP`, whose owner
/// sits behind a pointer, always), setting the limits of any process but the caller, their scheduling (class, affinity,
/// nice and I/O priority, the latter two also for any whole uid), tracing them, and their
/// memory.
/// Everything else is allowed; x32 syscalls are refused, as in [`compile`].
pub fn guard_helpers(pids: &[i32], groups: &[i32]) -> Result<Vec<BpfProgram>, SeccompError> {
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
  let deny = refuse(map, libc::EPERM)?;
  let by_pidfd = refuse_all(libc::SYS_pidfd_send_signal, libc::ENOSYS)?;
  Ok(vec![guard_x32(deny), by_pidfd])
}

/// A program that fails the syscalls of `map` (where their rules match) with `errno`, and
/// allows everything else.
fn refuse(map: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, SeccompError> {
  Ok(
    SeccompFilter::new(
      map,
      SeccompAction::Allow,
      SeccompAction::Errno(errno as u32),
      arch()?,
    )?
    .try_into()?,
  )
}

/// A program that fails every call of `nr` with `errno`.
fn refuse_all(nr: i64, errno: i32) -> Result<BpfProgram, SeccompError> {
  refuse(BTreeMap::from([(nr, vec![])]), errno)
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

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn compiles_for_every_rule_combination() {
    for deny_network in [false, true] {
      for deny_unix in [false, true] {
        let p = compile(SeccompRules {
          deny_network,
          deny_unix,
          deny_ipc: deny_network,
        })
        .unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|p| p.len() < u16::MAX as usize));
      }
    }
  }

  #[test]
  fn x32_guard_follows_the_arch_check() {
    let p = compile(SeccompRules {
      deny_network: true,
      deny_unix: true,
      deny_ipc: true,
    })
    .unwrap();
    if std::env::consts::ARCH == "x86_64" {
      // The arch check's jump over its kill lands on the guard's load.
      assert_eq!((p[0][1].jt, p[0][1].jf), (1, 0));
      assert_eq!(p[0][3].code, 0x20);
      assert_eq!(p[0][4].k, 0x4000_0000);
    }
  }
}
