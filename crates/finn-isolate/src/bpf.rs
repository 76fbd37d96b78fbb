//! A seccomp program laid out as a binary search over syscall numbers.
//!
//! `seccompiler` lays a filter out as a linear chain: one comparison per listed syscall, in
//! order. The kernel pays for the length of that chain at every load, not only at every call:
//! when a filter is installed it runs the program once for each syscall number of each
//! architecture to find the calls it always allows (`seccomp_cache_prepare`), so a chain of
//! N syscalls costs about 450 x 2N emulated instructions per `seccomp()`, on top of a
//! per-instruction cost (checking and translating the program). Here the search reaches any
//! number in about log2(N) comparisons, and the program is short:
//! - listed numbers next to each other with the same action and no rules are one range, found by
//!   two comparisons however many numbers it holds;
//! - each leaf of the search ends in the returns its ranges and numbers jump to, one per action,
//!   so a number refused outright costs one comparison;
//! - the rules of a syscall (the argument checks `seccompiler` compiles, reused as they are) sit
//!   after the search in a block of their own, reached by an unconditional jump; syscalls with
//!   the same rules and action share one block.
//!
//! One program carries an action per syscall (an errno, or the notification of a listener), so
//! the filters that needed two programs (an EPERM one and an ENOSYS one) load as one.
//!
//! The layout: the arch check (any other arch gets the caller's `foreign` action), on x86_64 the
//! refusal of x32 numbers, the number loaded once, the search, then the rule blocks: each rule
//! followed by the syscall's action (a rule that does not match falls through to the next),
//! then "allow".

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompRule, sock_filter};

use super::seccomp::SeccompError;

/// What a listed syscall gets when one of its rules matches (or always, without rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
  /// It fails with this errno.
  Errno(i32),
  /// It waits for the filter's listener (`SECCOMP_RET_USER_NOTIF`), which answers for it.
  Notify,
  /// The process is killed (`SECCOMP_RET_KILL_PROCESS`).
  Kill,
}

impl Action {
  /// The filter's return value.
  pub fn ret(self) -> u32 {
    match self {
      Action::Errno(errno) => libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
      Action::Notify => libc::SECCOMP_RET_USER_NOTIF,
      Action::Kill => libc::SECCOMP_RET_KILL_PROCESS,
    }
  }
}

/// A listed syscall: its rules (ORed; none: every call) and what a match gets.
pub struct Listed {
  pub rules: Vec<SeccompRule>,
  pub action: Action,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGT_K: u16 = 0x25;
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
/// At most this many ranges are compared one by one in a leaf of the search.
const LEAF: usize = 4;

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

fn ret(k: u32) -> sock_filter {
  stmt(BPF_RET_K, k)
}

/// Where the search sends a range's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
  /// A return, in the leaf.
  Ret(u32),
  /// Rule block `i`, after the search.
  Block(usize),
}

/// Listed numbers `lo..=hi`, all sent to `target`.
#[derive(Debug, Clone, Copy)]
struct Range {
  lo: u32,
  hi: u32,
  target: Target,
}

/// Where a conditional jump of the search goes, before the returns are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
  Allow,
  Target(Target),
}

/// Which half of a conditional jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
  True,
  False,
}

/// Code with jumps not yet resolved: conditional ones to the returns (`(index, half, where)`)
/// and unconditional ones to blocks not yet placed (`(index, block)`).
struct Code {
  insns: Vec<sock_filter>,
  to_tail: Vec<(usize, Half, To)>,
  to_block: Vec<(usize, usize)>,
}

impl Code {
  fn new() -> Code {
    Code {
      insns: Vec::new(),
      to_tail: Vec::new(),
      to_block: Vec::new(),
    }
  }

  fn append(&mut self, other: Code) {
    let base = self.insns.len();
    self.to_tail.extend(
      other
        .to_tail
        .into_iter()
        .map(|(at, half, to)| (at + base, half, to)),
    );
    self
      .to_block
      .extend(other.to_block.into_iter().map(|(at, b)| (at + base, b)));
    self.insns.extend(other.insns);
  }

  /// Places the returns the jumps to `To` land on after the code: "allow", one return per
  /// distinct return value, and one jump per block; or, with `blocks` (their lengths, for
  /// blocks placed right after these returns, in order), no jump: the comparisons land on the
  /// blocks themselves. `None` when a jump would not reach.
  fn close(mut self, blocks: Option<&[usize]>) -> Option<Code> {
    let mut tails: Vec<To> = vec![To::Allow];
    for &(_, _, to) in &self.to_tail {
      let direct = blocks.is_some() && matches!(to, To::Target(Target::Block(_)));
      if !direct && !tails.contains(&to) {
        tails.push(to);
      }
    }
    let first = self.insns.len();
    let blocks_at = first + tails.len();
    for (at, half, to) in std::mem::take(&mut self.to_tail) {
      let target = match (to, blocks) {
        (To::Target(Target::Block(b)), Some(lens)) => blocks_at + lens[..b].iter().sum::<usize>(),
        _ => first + tails.iter().position(|&t| t == to).expect("listed"),
      };
      let off = u8::try_from(target - at - 1).ok()?;
      match half {
        Half::True => self.insns[at].jt = off,
        Half::False => self.insns[at].jf = off,
      }
    }
    for t in tails {
      match t {
        To::Allow => self.insns.push(ret(libc::SECCOMP_RET_ALLOW)),
        To::Target(Target::Ret(k)) => self.insns.push(ret(k)),
        To::Target(Target::Block(b)) => {
          self.to_block.push((self.insns.len(), b));
          self.insns.push(stmt(BPF_JMP_JA, 0));
        }
      }
    }
    Some(self)
  }
}

/// A leaf of the search: each range compared in turn (`known_min`: the number is at least
/// this, from the comparisons above); a number past the last goes to "allow". Its jumps are
/// left for [`Code::close`].
fn leaf(ranges: &[Range], known_min: u32) -> Code {
  let mut code = Code::new();
  for (i, r) in ranges.iter().enumerate() {
    let last = i + 1 == ranges.len();
    let to = To::Target(r.target);
    let at = code.insns.len();
    if r.lo == r.hi {
      code.insns.push(jump(BPF_JMP_JEQ_K, r.lo, 0, 0));
      code.to_tail.push((at, Half::True, to));
      if last {
        code.to_tail.push((at, Half::False, To::Allow));
      }
    } else if i == 0 && known_min >= r.lo {
      // At least `lo` already: past `hi` goes on, the rest is the range's.
      code.insns.push(jump(BPF_JMP_JGT_K, r.hi, 0, 0));
      code.to_tail.push((at, Half::False, to));
      if last {
        code.to_tail.push((at, Half::True, To::Allow));
      }
    } else {
      // Past `hi` goes on to the next range; below `lo` is below every later range too.
      code.insns.push(jump(BPF_JMP_JGT_K, r.hi, 1, 0));
      if last {
        code.to_tail.push((at, Half::True, To::Allow));
      }
      code.insns.push(jump(BPF_JMP_JGE_K, r.lo, 0, 0));
      code.to_tail.push((at + 1, Half::True, to));
      code.to_tail.push((at + 1, Half::False, To::Allow));
    }
  }
  // No range at all: the returns' first, "allow", follows at once.
  code
}

/// The search over `ranges` (sorted, disjoint); a number in none of them ends in "allow".
/// `shared`: every leaf jumps to one set of returns after the whole search (shortest, where
/// every jump reaches them), else each leaf ends in its own.
fn search(ranges: &[Range], known_min: u32, shared: bool) -> Option<Code> {
  if ranges.len() <= LEAF {
    let code = leaf(ranges, known_min);
    return if shared { Some(code) } else { code.close(None) };
  }
  let mid = ranges.len() / 2;
  let below = search(&ranges[..mid], known_min, shared)?;
  let above = search(&ranges[mid..], ranges[mid].lo, shared)?;
  let mut code = Code::new();
  // Numbers >= the upper half's first skip the lower half: a conditional jump reaches 255
  // instructions at most, an unconditional one any distance.
  match u8::try_from(below.insns.len()) {
    Ok(skip) => code
      .insns
      .push(jump(BPF_JMP_JGE_K, ranges[mid].lo, skip, 0)),
    Err(_) => {
      code.insns.push(jump(BPF_JMP_JGE_K, ranges[mid].lo, 0, 1));
      code.insns.push(stmt(BPF_JMP_JA, below.insns.len() as u32));
    }
  }
  code.append(below);
  code.append(above);
  Some(code)
}

/// The search with the shortest layout that fits, for rule blocks of `blocks` instructions
/// placed right after it: one set of returns for all leaves, whose comparisons land on the
/// blocks themselves, where every jump reaches; else the same with a jump per block among the
/// returns; else a set of returns per leaf.
fn tree(ranges: &[Range], blocks: &[usize]) -> Code {
  search(ranges, 0, true)
    .and_then(|c| c.close(Some(blocks)))
    .or_else(|| search(ranges, 0, true).and_then(|c| c.close(None)))
    .or_else(|| search(ranges, 0, false))
    .expect("a leaf's jumps reach its own returns")
}

/// A rule as `seccompiler` compiles it, without the two jumps it opens with (one over the
/// other, which skips the rule: here nothing jumps to either). Its conditions jump past its
/// end when one fails.
fn rule_code(rule: SeccompRule) -> BpfProgram {
  without_opening_jumps(BpfProgram::from(rule))
}

/// `code` without `ja 1; ja k` at its start, where it opens so; as it is otherwise.
fn without_opening_jumps(mut code: BpfProgram) -> BpfProgram {
  let opens_with_jumps = code.len() > 2
    && code[0] == stmt(BPF_JMP_JA, 1)
    && code[1].code == BPF_JMP_JA
    && code[1].jt == 0
    && code[1].jf == 0;
  if opens_with_jumps {
    code.drain(..2);
  }
  code
}

/// The word a rule of one comparison loads and the value it compares it with, where the rule is
/// `seccompiler`'s code for a single `Dword` `Eq` condition: `ld word; jeq value, 0, 1`, whose
/// false branch skips the action's return that follows.
fn one_comparison(code: &[sock_filter]) -> Option<(u32, u32)> {
  match code {
    [ld, eq] if ld.code == BPF_LD_W_ABS && eq.code == BPF_JMP_JEQ_K && (eq.jt, eq.jf) == (0, 1) => {
      Some((ld.k, eq.k))
    }
    _ => None,
  }
}

/// A listed syscall's block: each rule followed by the action's return (a rule that does not
/// match falls through to the next), then "allow". Consecutive rules that each compare the same
/// word with one value share one load and one return: `ld word; jeq v1; ...; jeq vn; ret`.
fn block(rules: Vec<SeccompRule>, action: Action) -> BpfProgram {
  let codes: Vec<BpfProgram> = rules.into_iter().map(rule_code).collect();
  let mut block = Vec::new();
  let mut i = 0;
  while i < codes.len() {
    let run: Vec<u32> = match one_comparison(&codes[i]) {
      Some((word, _)) => codes[i..]
        .iter()
        .map_while(|c| {
          one_comparison(c)
            .filter(|&(w, _)| w == word)
            .map(|(_, v)| v)
        })
        .take(usize::from(u8::MAX))
        .collect(),
      None => Vec::new(),
    };
    if run.len() > 1 {
      block.push(stmt(
        BPF_LD_W_ABS,
        one_comparison(&codes[i]).expect("a run").0,
      ));
      for (j, &v) in run.iter().enumerate() {
        // Equal: on to the return after the last comparison; else the next comparison, or
        // past the return after the last.
        let last = j + 1 == run.len();
        block.push(jump(
          BPF_JMP_JEQ_K,
          v,
          (run.len() - 1 - j) as u8,
          u8::from(last),
        ));
      }
      i += run.len();
    } else {
      block.extend(codes[i].iter().cloned());
      i += 1;
    }
    block.push(ret(action.ret()));
  }
  block.push(ret(libc::SECCOMP_RET_ALLOW));
  block
}

/// The program for `listed`: each listed syscall gets its action where one of its rules
/// matches (every call, for a syscall without rules); everything else is allowed. A call of
/// another arch gets `foreign`; an x32 call, EPERM.
pub fn program(listed: BTreeMap<i64, Listed>, foreign: Action) -> Result<BpfProgram, SeccompError> {
  let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
  let audit_arch = match arch {
    seccompiler::TargetArch::x86_64 => AUDIT_ARCH_X86_64,
    seccompiler::TargetArch::aarch64 => AUDIT_ARCH_AARCH64,
    seccompiler::TargetArch::riscv64 => AUDIT_ARCH_RISCV64,
  };
  let mut ranges: Vec<Range> = Vec::with_capacity(listed.len());
  let mut blocks: Vec<BpfProgram> = Vec::new();
  for (nr, Listed { rules, action }) in listed {
    let nr = u32::try_from(nr).map_err(|_| SeccompError::Number(nr))?;
    let target = if rules.is_empty() {
      Target::Ret(action.ret())
    } else {
      let block = block(rules, action);
      // Syscalls with the same rules and action share one block.
      let i = blocks.iter().position(|b| *b == block).unwrap_or_else(|| {
        blocks.push(block);
        blocks.len() - 1
      });
      Target::Block(i)
    };
    match ranges.last_mut() {
      Some(last)
        if last.target == target && matches!(target, Target::Ret(_)) && last.hi + 1 == nr =>
      {
        last.hi = nr
      }
      _ => ranges.push(Range {
        lo: nr,
        hi: nr,
        target,
      }),
    }
  }

  let mut prog = vec![
    stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
    jump(BPF_JMP_JEQ_K, audit_arch, 1, 0),
    ret(foreign.ret()),
    stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
  ];
  if arch == seccompiler::TargetArch::x86_64 {
    // x32 calls carry x86_64's audit arch with bit 30 set in the number: a number-keyed filter
    // would let `0x40000000 | SYS_socket` through where the kernel has x32.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    prog.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
    prog.push(ret(Action::Errno(libc::EPERM).ret()));
  }
  let tree = tree(&ranges, &blocks.iter().map(Vec::len).collect::<Vec<_>>());
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

/// Runs the programs here without loading them: the tests of this crate and of the
/// supervisor's guard judge a program's verdicts with it.
pub mod interpret {
  use seccompiler::sock_filter;

  /// A classic BPF interpreter for the instructions seccomp programs here use: what the kernel
  /// would return for `data`. Panics on anything else, or on a jump out of the program.
  pub fn run(prog: &[sock_filter], data: &libc::seccomp_data) -> u32 {
    trace(prog, data).0
  }

  /// [`run`]'s verdict, and how many instructions it took to reach it.
  pub fn trace(prog: &[sock_filter], data: &libc::seccomp_data) -> (u32, usize) {
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
}

#[cfg(test)]
pub(crate) mod tests {
  use super::interpret::run;
  use super::*;
  use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};

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
              action: Action::Errno((i % 100 + 1) as i32),
            },
          )
        })
        .collect();
      let prog = program(listed, Action::Kill).unwrap();
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
          action: Action::Errno(libc::EPERM),
        },
      ),
      (
        libc::SYS_clone3,
        Listed {
          rules: vec![],
          action: Action::Errno(libc::ENOSYS),
        },
      ),
    ]);
    let prog = program(listed, Action::Kill).unwrap();
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

  /// Every even syscall number below `n`, refused outright with EPERM: no two of them make a
  /// range, so each costs its own comparison.
  fn every_other_nr_below(n: i64) -> BTreeMap<i64, Listed> {
    (0..n)
      .step_by(2)
      .map(|nr| {
        (
          nr,
          Listed {
            rules: vec![],
            action: Action::Errno(libc::EPERM),
          },
        )
      })
      .collect()
  }

  /// A search too long for one set of returns (each leaf ends in its own) still reaches the
  /// rule blocks after it, from any leaf.
  #[test]
  fn rule_blocks_are_reached_from_leaves_with_returns_of_their_own() {
    let mut listed = every_other_nr_below(1200);
    for nr in [1, 601, 1199] {
      listed.insert(
        nr,
        Listed {
          rules: vec![SeccompRule::new(vec![eq(0, 7)]).unwrap()],
          action: Action::Errno(libc::EACCES),
        },
      );
    }
    let prog = program(listed, Action::Kill).unwrap();
    let allows = prog
      .iter()
      .filter(|i| **i == ret(libc::SECCOMP_RET_ALLOW))
      .count();
    assert!(allows > 4, "a return of its own per leaf: {allows}");
    for nr in 0..1300 {
      for a0 in [0, 7] {
        let want = if nr < 1200 && nr % 2 == 0 {
          Action::Errno(libc::EPERM).ret()
        } else if [1, 601, 1199].contains(&nr) && a0 == 7 {
          Action::Errno(libc::EACCES).ret()
        } else {
          libc::SECCOMP_RET_ALLOW
        };
        assert_eq!(
          run(&prog, &data(nr, [a0, 0, 0, 0, 0, 0])),
          want,
          "nr {nr} a0 {a0}"
        );
      }
    }
  }

  /// A rule block too far for the search's conditional jumps is reached through an
  /// unconditional one among the shared returns; a syscall's 300 one-comparison rules on one
  /// word load it once per 255 comparisons.
  #[test]
  fn a_far_rule_block_is_reached_through_a_jump() {
    let many: Vec<SeccompRule> = (0..300)
      .map(|v| SeccompRule::new(vec![eq(0, v)]).unwrap())
      .collect();
    let listed = BTreeMap::from([
      (
        10,
        Listed {
          rules: many,
          action: Action::Errno(libc::EPERM),
        },
      ),
      (
        20,
        Listed {
          rules: vec![SeccompRule::new(vec![eq(1, 9)]).unwrap()],
          action: Action::Notify,
        },
      ),
      (
        30,
        Listed {
          rules: vec![],
          action: Action::Errno(libc::ENOSYS),
        },
      ),
    ]);
    let prog = program(listed, Action::Kill).unwrap();
    assert!(
      prog.iter().any(|i| i.code == BPF_JMP_JA),
      "a jump to a block"
    );
    let loads = prog
      .iter()
      .filter(|i| i.code == BPF_LD_W_ABS && i.k == 16)
      .count();
    assert_eq!(loads, 2, "one load per run of 255 comparisons");
    for a0 in [0, 1, 150, 254, 255, 256, 299, 300, 1000] {
      let want = if a0 < 300 {
        Action::Errno(libc::EPERM).ret()
      } else {
        libc::SECCOMP_RET_ALLOW
      };
      assert_eq!(run(&prog, &data(10, [a0, 0, 0, 0, 0, 0])), want, "a0 {a0}");
    }
    assert_eq!(
      run(&prog, &data(20, [0, 9, 0, 0, 0, 0])),
      libc::SECCOMP_RET_USER_NOTIF
    );
    assert_eq!(
      run(&prog, &data(20, [9, 0, 0, 0, 0, 0])),
      libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(
      run(&prog, &data(30, [0; 6])),
      Action::Errno(libc::ENOSYS).ret()
    );
    assert_eq!(run(&prog, &data(31, [0; 6])), libc::SECCOMP_RET_ALLOW);
  }

  /// A range that opens a leaf whose numbers are known to be at least its start costs one
  /// comparison (past its end goes on), elsewhere two; each lands right.
  #[test]
  fn a_range_opening_a_leaf_costs_one_comparison() {
    let perm = Action::Errno(libc::EPERM);
    let listed: BTreeMap<i64, Listed> = [0, 2, 4, 6, 200, 202, 204]
      .into_iter()
      .chain(100..=110)
      .chain(50..=52)
      .map(|nr| {
        (
          nr,
          Listed {
            rules: vec![],
            action: perm,
          },
        )
      })
      .collect();
    let prog = program(listed, Action::Kill).unwrap();
    let one = |k: u32| {
      prog
        .iter()
        .any(|i| i.code == BPF_JMP_JGT_K && i.k == k && i.jt == 0)
    };
    // Nine ranges: leaves [0, 2, 4, 6], [50..=52, 100..=110] (at least 50 there), [200, 202,
    // 204].
    assert!(one(52), "50..=52 opens a leaf of numbers at least 50");
    assert!(!one(110), "100..=110 does not open its leaf");
    for nr in 0..300 {
      let listed = [0, 2, 4, 6, 200, 202, 204].contains(&nr)
        || (100..=110).contains(&nr)
        || (50..=52).contains(&nr);
      let want = if listed {
        perm.ret()
      } else {
        libc::SECCOMP_RET_ALLOW
      };
      assert_eq!(run(&prog, &data(nr, [0; 6])), want, "nr {nr}");
    }
  }

  /// Numbers next to each other are one range only where they get the same return: another
  /// errno, or rules of their own, start a range of their own.
  #[test]
  fn neighbours_with_other_actions_are_not_one_range() {
    let plain = |errno| Listed {
      rules: vec![],
      action: Action::Errno(errno),
    };
    let listed = BTreeMap::from([
      (10, plain(libc::EPERM)),
      (11, plain(libc::ENOSYS)),
      (12, plain(libc::EPERM)),
      (13, plain(libc::EPERM)),
      (
        14,
        Listed {
          rules: vec![SeccompRule::new(vec![eq(0, 7)]).unwrap()],
          action: Action::Errno(libc::EPERM),
        },
      ),
      (15, plain(libc::EPERM)),
    ]);
    let prog = program(listed, Action::Kill).unwrap();
    let want = |nr: i64, a0: u64| match nr {
      10 | 12 | 13 | 15 => Action::Errno(libc::EPERM).ret(),
      11 => Action::Errno(libc::ENOSYS).ret(),
      14 if a0 == 7 => Action::Errno(libc::EPERM).ret(),
      _ => libc::SECCOMP_RET_ALLOW,
    };
    for nr in 0..30 {
      for a0 in [0, 7] {
        assert_eq!(
          run(&prog, &data(nr, [a0, 0, 0, 0, 0, 0])),
          want(nr, a0),
          "nr {nr} a0 {a0}"
        );
      }
    }
  }

  /// Only rules of one equality on one word share a load: an inequality, a bound, or an
  /// equality on another word keeps its own code, and each still decides as compiled.
  #[test]
  fn only_equalities_on_one_word_share_a_load() {
    let cond = |arg: u8, op: SeccompCmpOp, v: u64| {
      SeccompRule::new(vec![
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v).unwrap(),
      ])
      .unwrap()
    };
    let perm = Action::Errno(libc::EPERM);
    let listed = BTreeMap::from([
      (
        1,
        Listed {
          rules: vec![cond(0, SeccompCmpOp::Ne, 5), cond(0, SeccompCmpOp::Ne, 5)],
          action: perm,
        },
      ),
      (
        2,
        Listed {
          rules: vec![cond(0, SeccompCmpOp::Ge, 10), cond(0, SeccompCmpOp::Ge, 20)],
          action: perm,
        },
      ),
      (
        3,
        Listed {
          rules: vec![
            cond(0, SeccompCmpOp::Eq, 1),
            cond(0, SeccompCmpOp::Eq, 2),
            cond(1, SeccompCmpOp::Eq, 3),
          ],
          action: perm,
        },
      ),
    ]);
    let prog = program(listed, Action::Kill).unwrap();
    let loads_of_arg0 = prog
      .iter()
      .filter(|i| i.code == BPF_LD_W_ABS && i.k == 16)
      .count();
    assert_eq!(
      loads_of_arg0, 5,
      "two for 1, two for 2, one for 3's equalities"
    );
    for a0 in [0u64, 1, 2, 3, 5, 9, 10, 19, 20, 21] {
      for a1 in [0u64, 3] {
        let refused = |nr| run(&prog, &data(nr, [a0, a1, 0, 0, 0, 0])) == perm.ret();
        assert_eq!(refused(1), a0 != 5, "1: {a0}");
        assert_eq!(refused(2), a0 >= 10, "2: {a0}");
        assert_eq!(refused(3), a0 == 1 || a0 == 2 || a1 == 3, "3: {a0} {a1}");
      }
    }
  }

  /// Only the two jumps `seccompiler` opens a rule with go: code that opens otherwise, or has
  /// nothing after them, stays as it is.
  #[test]
  fn only_the_opening_jumps_of_a_rule_go() {
    let x = jump(BPF_JMP_JEQ_K, 5, 0, 1);
    let ja = |k| stmt(BPF_JMP_JA, k);
    assert_eq!(
      without_opening_jumps(vec![ja(1), ja(4), x.clone()]),
      vec![x.clone()]
    );
    let mut cond_second = ja(4);
    cond_second.jt = 1;
    for kept in [
      vec![ja(2), ja(4), x.clone()],
      vec![ja(1), x.clone(), x.clone()],
      vec![ja(1), cond_second.clone(), x.clone()],
      vec![ja(1), jump(BPF_JMP_JA, 4, 0, 1), x.clone()],
      vec![x.clone(), ja(4), x.clone()],
      vec![ja(1), ja(4)],
    ] {
      assert_eq!(without_opening_jumps(kept.clone()), kept);
    }
    // What seccompiler makes of a rule does open so.
    let rule = SeccompRule::new(vec![eq(0, 7)]).unwrap();
    assert_eq!(
      BpfProgram::from(rule.clone()).len(),
      rule_code(rule).len() + 2
    );
  }

  /// A program over the kernel's 4,096 instructions is refused here, naming its length, rather
  /// than by the kernel at every job's start.
  #[test]
  fn a_program_over_the_kernels_bound_is_refused() {
    assert!(fits(4096));
    assert!(!fits(4097));
    assert!(
      matches!(program(every_other_nr_below(10_000), Action::Kill), Err(SeccompError::TooLong(n)) if n > 4096)
    );
  }

  /// A search whose lower half is longer than a conditional jump reaches still lands right.
  #[test]
  fn long_halves_are_skipped_by_an_unconditional_jump() {
    let prog = program(every_other_nr_below(1200), Action::Kill).unwrap();
    assert!(prog.iter().any(|i| i.code == BPF_JMP_JA && i.k > 255));
    for nr in 0..1300 {
      let want = if nr < 1200 && nr % 2 == 0 {
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
      } else {
        libc::SECCOMP_RET_ALLOW
      };
      assert_eq!(run(&prog, &data(nr, [0; 6])), want, "nr {nr}");
    }
  }
}
