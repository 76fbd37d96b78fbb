//! A seccomp program laid out as a binary search over syscall numbers.
//!
//! `seccompiler` lays a filter out as a linear chain: one comparison per listed syscall, in
//! order. The kernel pays for the length of that chain at every load, not only at every call:
//! when a filter is installed it runs the program once for each syscall number of each
//! architecture to find the calls it always allows (`seccomp_cache_prepare`), so a chain of
//! N syscalls costs about 450 x 2N emulated instructions per `seccomp()`. Here the search
//! reaches any number in about log2(N) comparisons, and the rules of each listed syscall (the
//! argument checks `seccompiler` compiles, reused as they are) sit after the search, reached by
//! an unconditional jump. One program carries an action per syscall, so the filters that needed
//! two programs (an EPERM one and an ENOSYS one) load as one.
//!
//! The layout: the arch check (any other arch kills the process, as `seccompiler` does), on
//! x86_64 the refusal of x32 numbers, the number loaded once, the search, then one block per
//! listed syscall: each rule followed by the syscall's action (a rule that does not match falls
//! through to the next), then "allow".

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompRule, sock_filter};

use super::seccomp::SeccompError;

/// What a listed syscall gets when one of its rules matches (or always, without rules).
pub struct Listed {
  pub rules: Vec<SeccompRule>,
  /// The errno it fails with.
  pub errno: i32,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
/// From the kernel's uapi (linux/audit.h); not in `libc`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const AUDIT_ARCH_RISCV64: u32 = 0xC000_00F3;
const SECCOMP_DATA_ARCH: u32 = 4;
/// The kernel's limit on a classic BPF program (`BPF_MAXINSNS`).
const MAX_LEN: usize = 4096;
/// At most this many numbers are compared one by one at the end of a search.
const LEAF: usize = 3;

fn stmt(code: u16, k: u32) -> sock_filter {
  sock_filter {
    code,
    jt: 0,
    jf: 0,
    k,
  }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
  sock_filter { code, jt, jf, k }
}

fn ret_errno(errno: i32) -> sock_filter {
  stmt(
    BPF_RET_K,
    libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
  )
}

fn ret_allow() -> sock_filter {
  stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW)
}

/// Code with unconditional jumps to blocks not yet placed: `(index of the jump, block)`.
struct Code {
  insns: Vec<sock_filter>,
  to_block: Vec<(usize, usize)>,
}

impl Code {
  fn new() -> Code {
    Code {
      insns: Vec::new(),
      to_block: Vec::new(),
    }
  }

  fn push(&mut self, insn: sock_filter) {
    self.insns.push(insn);
  }

  fn jump_to_block(&mut self, block: usize) {
    self.to_block.push((self.insns.len(), block));
    self.insns.push(stmt(BPF_JMP_JA, 0));
  }

  fn append(&mut self, other: Code) {
    let base = self.insns.len();
    self
      .to_block
      .extend(other.to_block.into_iter().map(|(at, b)| (at + base, b)));
    self.insns.extend(other.insns);
  }
}

/// The search over `nrs[lo..hi]` (sorted), whose syscall `nrs[i]` has block `i`. An unlisted
/// number ends in "allow".
fn search(nrs: &[u32], lo: usize, hi: usize) -> Code {
  let mut code = Code::new();
  if hi - lo <= LEAF {
    for (i, &nr) in nrs.iter().enumerate().take(hi).skip(lo) {
      code.push(jump(BPF_JMP_JEQ_K, nr, 0, 1));
      code.jump_to_block(i);
    }
    code.push(ret_allow());
    return code;
  }
  let mid = lo + (hi - lo) / 2;
  let below = search(nrs, lo, mid);
  let above = search(nrs, mid, hi);
  // Numbers >= nrs[mid] skip the lower half: a conditional jump reaches 255 instructions at
  // most, an unconditional one any distance.
  match u8::try_from(below.insns.len()) {
    Ok(skip) => code.push(jump(BPF_JMP_JGE_K, nrs[mid], skip, 0)),
    Err(_) => {
      code.push(jump(BPF_JMP_JGE_K, nrs[mid], 0, 1));
      code.push(stmt(BPF_JMP_JA, below.insns.len() as u32));
    }
  }
  code.append(below);
  code.append(above);
  code
}

/// The program for `listed`: each listed syscall fails with its errno where one of its rules
/// matches (every call, for a syscall without rules); everything else is allowed.
pub fn program(listed: BTreeMap<i64, Listed>) -> Result<BpfProgram, SeccompError> {
  let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
  let audit_arch = match arch {
    seccompiler::TargetArch::x86_64 => AUDIT_ARCH_X86_64,
    seccompiler::TargetArch::aarch64 => AUDIT_ARCH_AARCH64,
    seccompiler::TargetArch::riscv64 => AUDIT_ARCH_RISCV64,
  };
  let mut nrs = Vec::with_capacity(listed.len());
  let mut blocks = Vec::with_capacity(listed.len());
  for (nr, Listed { rules, errno }) in listed {
    nrs.push(u32::try_from(nr).map_err(|_| SeccompError::Number(nr))?);
    let mut block: Vec<sock_filter> = Vec::new();
    if rules.is_empty() {
      block.push(ret_errno(errno));
    } else {
      for rule in rules {
        // A rule's conditions jump past its end when one fails: onto the next rule.
        block.extend(BpfProgram::from(rule));
        block.push(ret_errno(errno));
      }
      block.push(ret_allow());
    }
    blocks.push(block);
  }

  let mut prog = vec![
    stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
    jump(BPF_JMP_JEQ_K, audit_arch, 1, 0),
    stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
    stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
  ];
  if arch == seccompiler::TargetArch::x86_64 {
    // x32 calls carry x86_64's audit arch with bit 30 set in the number: a number-keyed filter
    // would let `0x40000000 | SYS_socket` through where the kernel has x32.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    prog.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
    prog.push(ret_errno(libc::EPERM));
  }
  let tree = search(&nrs, 0, nrs.len());
  let start = prog.len();
  let mut at = start + tree.insns.len();
  let mut block_at = Vec::with_capacity(blocks.len());
  for block in &blocks {
    block_at.push(at);
    at += block.len();
  }
  prog.extend(tree.insns);
  for (jump_at, block) in tree.to_block {
    let from = start + jump_at;
    prog[from].k = (block_at[block] - from - 1) as u32;
  }
  for block in blocks {
    prog.extend(block);
  }
  if !fits(prog.len()) {
    return Err(SeccompError::TooLong(prog.len()));
  }
  Ok(prog)
}

/// Whether the kernel takes a program of `len` instructions.
fn fits(len: usize) -> bool {
  len <= MAX_LEN
}

#[cfg(test)]
pub(crate) mod tests {
  use super::*;
  use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};

  /// A classic BPF interpreter for the instructions seccomp programs here use: what the kernel
  /// would return for `data`. Panics on anything else, or on a jump out of the program.
  pub(crate) fn run(prog: &[sock_filter], data: &libc::seccomp_data) -> u32 {
    trace(prog, data).0
  }

  /// [`run`]'s verdict, and how many instructions it took to reach it.
  pub(crate) fn trace(prog: &[sock_filter], data: &libc::seccomp_data) -> (u32, usize) {
    let word = |off: u32| -> u32 {
      let bytes: [u8; 64] = unsafe {
        // SAFETY: seccomp_data is 64 bytes of plain integers.
        std::mem::transmute_copy(data)
      };
      let o = off as usize;
      u32::from_ne_bytes(bytes[o..o + 4].try_into().unwrap())
    };
    let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0usize);
    loop {
      let i = &prog[pc];
      pc += 1;
      steps += 1;
      match i.code {
        0x20 => acc = word(i.k),
        0x54 => acc &= i.k, // BPF_ALU|BPF_AND|BPF_K
        0x05 => pc += i.k as usize,
        0x15 | 0x35 | 0x25 | 0x45 => {
          let hit = match i.code {
            0x15 => acc == i.k,
            0x35 => acc >= i.k,
            0x25 => acc > i.k,
            _ => acc & i.k != 0,
          };
          pc += usize::from(if hit { i.jt } else { i.jf });
        }
        0x06 => return (i.k, steps),
        code => panic!("instruction {code:#x} at {}", pc - 1),
      }
    }
  }

  fn data(nr: i64, args: [u64; 6]) -> libc::seccomp_data {
    libc::seccomp_data {
      nr: nr as i32,
      arch: AUDIT_ARCH_X86_64,
      instruction_pointer: 0,
      args,
    }
  }

  fn eq(arg: u8, v: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v).unwrap()
  }

  /// Numbers from 0 to 1,000 and the x32 ones: listed syscalls fail with their errno, the
  /// rest are allowed, whatever the search's shape (one listed syscall, a few, many).
  #[test]
  fn every_number_reaches_its_own_block_or_allow() {
    for count in [0usize, 1, 2, 3, 4, 7, 50, 300] {
      let listed: BTreeMap<i64, Listed> = (0..count)
        .map(|i| {
          let nr = (i * 3 + 1) as i64;
          (
            nr,
            Listed {
              rules: vec![],
              errno: (i % 100 + 1) as i32,
            },
          )
        })
        .collect();
      let prog = program(listed).unwrap();
      for nr in 0..1000i64 {
        let want = if nr % 3 == 1 && ((nr - 1) / 3) < count as i64 {
          libc::SECCOMP_RET_ERRNO | (((nr - 1) / 3) % 100 + 1) as u32
        } else {
          libc::SECCOMP_RET_ALLOW
        };
        assert_eq!(
          run(&prog, &data(nr, [0; 6])),
          want,
          "count {count}, nr {nr}"
        );
      }
      if std::env::consts::ARCH == "x86_64" {
        let x32 = 0x4000_0000 | libc::SYS_read;
        assert_eq!(
          run(&prog, &data(x32, [0; 6])),
          libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
        );
      }
      let mut foreign = data(libc::SYS_read, [0; 6]);
      foreign.arch = 0x4000_0003; // AUDIT_ARCH_I386
      assert_eq!(run(&prog, &foreign), libc::SECCOMP_RET_KILL_PROCESS);
    }
  }

  /// Rules are ORed, conditions within a rule ANDed; a call no rule matches is allowed.
  #[test]
  fn rules_match_as_seccompiler_compiles_them() {
    let listed = BTreeMap::from([
      (
        libc::SYS_kill,
        Listed {
          rules: vec![
            SeccompRule::new(vec![eq(0, 100)]).unwrap(),
            SeccompRule::new(vec![eq(0, 200), eq(1, 9)]).unwrap(),
          ],
          errno: libc::EPERM,
        },
      ),
      (
        libc::SYS_clone3,
        Listed {
          rules: vec![],
          errno: libc::ENOSYS,
        },
      ),
    ]);
    let prog = program(listed).unwrap();
    let perm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let k = |a0, a1| run(&prog, &data(libc::SYS_kill, [a0, a1, 0, 0, 0, 0]));
    assert_eq!(k(100, 0), perm);
    assert_eq!(k(200, 9), perm);
    assert_eq!(k(200, 15), libc::SECCOMP_RET_ALLOW);
    assert_eq!(k(300, 9), libc::SECCOMP_RET_ALLOW);
    assert_eq!(
      run(&prog, &data(libc::SYS_clone3, [0; 6])),
      libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
  }

  /// Every syscall number below `n`, refused outright with EPERM.
  fn every_nr_below(n: i64) -> BTreeMap<i64, Listed> {
    (0..n)
      .map(|nr| {
        (
          nr,
          Listed {
            rules: vec![],
            errno: libc::EPERM,
          },
        )
      })
      .collect()
  }

  /// A program over the kernel's 4,096 instructions is refused here, naming its length, rather
  /// than by the kernel at every job's start.
  #[test]
  fn a_program_over_the_kernels_bound_is_refused() {
    assert!(fits(4096));
    assert!(!fits(4097));
    assert!(matches!(program(every_nr_below(5000)), Err(SeccompError::TooLong(n)) if n > 4096));
  }

  /// A search whose lower half is longer than a conditional jump reaches still lands right.
  #[test]
  fn long_halves_are_skipped_by_an_unconditional_jump() {
    let prog = program(every_nr_below(600)).unwrap();
    assert!(prog.iter().any(|i| i.code == BPF_JMP_JA && i.k > 255));
    for nr in 0..700 {
      let want = if nr < 600 {
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
      } else {
        libc::SECCOMP_RET_ALLOW
      };
      assert_eq!(run(&prog, &data(nr, [0; 6])), want, "nr {nr}");
    }
  }
}
