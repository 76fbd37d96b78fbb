//! The supervisor process: started by the addon with `posix_spawn`, one per pool, its socket to
//! the addon on fd 3. Single-threaded, so `fork` is safe and cheap here.
//!
//! It forks a job reaper whenever the addon asks for one and hands the addon its end of the
//! reaper's socket. It is a child subreaper too: if a reaper is killed, that job's orphans
//! become the supervisor's children, and it kills every child that is not a reaper (with its
//! whole subtree). When the addon's socket closes (Node exited or died), it lets the reapers
//! kill their trees, kills whatever is left, and exits. Its own death closes the lifeline
//! pipe, on which every reaper waits.

use std::collections::HashSet;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::descendants;
use super::egress::Egress;
use super::protocol::{FromSupervisor, ToSupervisor};
use super::reaper;
use super::shield::{self, Guard};
use super::wire::{self, Conn};
use finn_exec::lifecycle::backoff;
use finn_exec::poll::{poll, watch};

/// The descriptor on which the supervisor finds its socket to the addon.
pub const ADDON_FD: RawFd = 3;
/// After the addon is gone, how long the reapers get to kill their trees and exit before the
/// supervisor kills everything below it.
const REAPERS_EXIT_BOUND: Duration = Duration::from_secs(2);

struct Supervisor {
  conn: Conn,
  sigchld: SignalFd,
  /// Write end of the lifeline: only this process holds it.
  lifeline_w: Option<OwnedFd>,
  lifeline_r: OwnedFd,
  reapers: HashSet<i32>,
  me: i32,
  reaper_idle: Duration,
  /// What the jobs' commands must not reach (see `shield.rs`).
  guard: Guard,
  /// The pool's egress proxy, once a job with a network allowlist asked for it (`egress.rs`).
  egress: Option<Egress>,
}

/// The argument that sets how long a reaper without a job lives, in milliseconds.
pub const REAPER_IDLE_ARG: &CStr = c"--reaper-idle-ms";
/// Default for [`REAPER_IDLE_ARG`]: as long as the pool keeps a parked worker thread.
pub const DEFAULT_REAPER_IDLE: Duration = Duration::from_secs(10);

/// The supervisor's `main`. Returns the process's exit code.
pub fn main() -> i32 {
  let args: Vec<String> = std::env::args().skip(1).collect();
  let reaper_idle = match args.as_slice() {
    [] => DEFAULT_REAPER_IDLE,
    [flag, ms] if REAPER_IDLE_ARG.to_str() == Ok(flag.as_str()) && ms.parse::<u64>().is_ok() => {
      Duration::from_millis(ms.parse().expect("checked"))
    }
    _ => {
      eprintln!("finn-supervisor: started by the finn-sandbox addon only (bad arguments {args:?})");
      return 2;
    }
  };
  match setup(reaper_idle).and_then(|mut s| s.serve()) {
    Ok(()) => 0,
    Err(e) => {
      eprintln!("finn-supervisor: {e}");
      1
    }
  }
}

fn setup(reaper_idle: Duration) -> io::Result<Supervisor> {
  // Only fds 0-3 are ours; anything else came from Node by mistake (an fd without
  // close-on-exec) and would keep someone's pipe open.
  close_from(ADDON_FD + 1);
  // SAFETY: fd 3 was set up by the addon's posix_spawn; it is ours from now on.
  let addon = unsafe { OwnedFd::from_raw_fd(ADDON_FD) };
  nix::fcntl::fcntl(
    &addon,
    nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
  )?;
  // SAFETY: setting a disposition to SIG_IGN runs no code of ours. Writes to a closed socket
  // then fail with EPIPE instead of killing the supervisor.
  unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigIgn) }?;
  nix::sys::prctl::set_child_subreaper(true)?;
  // Out of reach of the jobs' commands (ptrace, memory, fds, oom_score_adj): see `shield.rs`.
  shield::hide()?;
  // Compiled once here; every reaper forked below installs its copy before its first job. A
  // build that fails leaves the commands unguarded, and says so.
  let guard = Guard::around_me().unwrap_or_else(|e| {
    eprintln!("finn-supervisor: no guard for the commands (shield.rs): {e}");
    Guard::default()
  });
  // A job's command may stop this process (it runs as our user) and Node may then die: a
  // stopped process never sees its socket close. SIGCONT when the thread that started us
  // exits (Node's death, or only that worker thread's: then it does nothing) lets it wind
  // down, killing every tree below it.
  nix::sys::prctl::set_pdeathsig(Signal::SIGCONT)?;
  let mut mask = SigSet::empty();
  mask.add(Signal::SIGCHLD);
  mask.thread_block()?;
  let sigchld = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
  let (lifeline_r, lifeline_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
  Ok(Supervisor {
    conn: Conn::new(addon),
    sigchld,
    lifeline_w: Some(lifeline_w),
    lifeline_r,
    reapers: HashSet::new(),
    me: std::process::id() as i32,
    reaper_idle,
    guard,
    egress: None,
  })
}

fn close_from(fd: RawFd) {
  // SAFETY: closes descriptors of this process only; none above `fd` is in use yet.
  unsafe {
    libc::syscall(
      libc::SYS_close_range,
      fd as libc::c_uint,
      libc::c_uint::MAX,
      0,
    )
  };
}

impl Supervisor {
  fn serve(&mut self) -> io::Result<()> {
    loop {
      while let Some(frame) = self.conn.take_frame()? {
        match ToSupervisor::decode(&frame)? {
          ToSupervisor::NewReaper { landlock } => self.new_reaper(landlock)?,
          ToSupervisor::EgressJob { job, network } => self.egress_job(&job, &network)?,
        }
      }
      let mut fds = [
        watch(Some(self.conn.raw())),
        watch(Some(self.sigchld.as_raw_fd())),
        watch(self.egress.as_ref().map(|e| e.control.as_raw_fd())),
      ];
      poll(&mut fds, None);
      if fds[2].revents != 0 && !self.egress.as_ref().is_some_and(Egress::on_control) {
        // The proxy is gone: the next job with an allowlist starts another.
        self.egress = None;
      }
      if fds[1].revents != 0 {
        self.on_sigchld();
      }
      if fds[0].revents != 0 && !self.conn.fill()? {
        self.wind_down();
        return Ok(());
      }
    }
  }

  /// Forks a reaper and hands the addon its socket. When that fails (a job's command filled
  /// the uid's or the cgroup's process limit: EAGAIN), the addon is told so and this goes on:
  /// exiting would end every other running job with it.
  fn new_reaper(&mut self, landlock: u8) -> io::Result<()> {
    let failed = |errno: i32| FromSupervisor::ReaperFailed { errno }.encode();
    let (addon_end, reaper_end) = match wire::pair() {
      Ok(pair) => pair,
      Err(e) => {
        return self
          .conn
          .send(&failed(e.raw_os_error().unwrap_or(libc::EIO)), &[]);
      }
    };
    // SAFETY: this process is single-threaded; the child runs only `become_reaper`.
    let forked = match unsafe { nix::unistd::fork() } {
      Ok(forked) => forked,
      Err(errno) => return self.conn.send(&failed(errno as i32), &[]),
    };
    match forked {
      ForkResult::Child => become_reaper(
        reaper_end,
        &self.lifeline_r,
        self.reaper_idle,
        &self.guard,
        landlock,
      ),
      ForkResult::Parent { child } => {
        drop(reaper_end);
        self.reapers.insert(child.as_raw());
        let ready = FromSupervisor::ReaperReady {
          pid: child.as_raw(),
        };
        self.conn.send(&ready.encode(), &[addon_end.as_raw_fd()])
      }
    }
  }

  /// A channel to the egress proxy for a job (starting the proxy if none runs), or why not.
  /// The proxy's audit socket goes with the first channel of each proxy process.
  fn egress_job(&mut self, job: &str, network: &str) -> io::Result<()> {
    let mut audit = None;
    // A proxy that died since (its control socket refuses the message) is replaced once.
    let mut answer = Err(io::Error::other("no egress proxy"));
    for _ in 0..2 {
      if self.egress.is_none() {
        match Egress::start() {
          Ok((egress, audit_r)) => {
            self.egress = Some(egress);
            audit = Some(audit_r);
          }
          Err(e) => {
            answer = Err(e);
            break;
          }
        }
      }
      answer = self
        .egress
        .as_ref()
        .expect("started above")
        .add_job(job, network);
      match &answer {
        Err(e) if e.kind() != io::ErrorKind::InvalidInput => self.egress = None,
        _ => break,
      }
    }
    match answer {
      Ok(channel) => {
        let mut fds = vec![channel.as_raw_fd()];
        fds.extend(audit.as_ref().map(AsRawFd::as_raw_fd));
        let ready = FromSupervisor::EgressReady {
          audit: audit.is_some(),
        };
        self.conn.send(&ready.encode(), &fds)
      }
      Err(e) => {
        let failed = FromSupervisor::EgressFailed {
          reason: format!("the egress proxy: {e}"),
        };
        self.conn.send(&failed.encode(), &[])
      }
    }
  }

  /// Reaps exited children, then kills every non-reaper child with its subtree: orphans of a
  /// reaper that died. The egress proxy is spared.
  fn on_sigchld(&mut self) {
    while let Ok(Some(_)) = self.sigchld.read_signal() {}
    self.reap();
    let reapers = &self.reapers;
    let proxy = self.egress.as_ref().map(|e| e.pid);
    descendants::kill_now(self.me, &|pid| reapers.contains(&pid) || Some(pid) == proxy);
  }

  fn reap(&mut self) -> bool {
    loop {
      match waitpid(
        Pid::from_raw(-1),
        Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED),
      ) {
        Ok(WaitStatus::StillAlive) => return false,
        // A job's command may stop its reaper (same user; SIGSTOP cannot be blocked): let it
        // go on at once.
        Ok(WaitStatus::Stopped(pid, _)) => {
          let _ = nix::sys::signal::kill(pid, Signal::SIGCONT);
        }
        Ok(status) => {
          if let Some(pid) = status.pid() {
            self.reapers.remove(&pid.as_raw());
            if self.egress.as_ref().is_some_and(|e| e.pid == pid.as_raw()) {
              self.egress = None;
            }
          }
        }
        Err(Errno::EINTR) => {}
        // ECHILD: nothing below us at all.
        Err(_) => return true,
      }
    }
  }

  /// The addon is gone. Reapers see their own sockets close and kill their trees; the lifeline
  /// closing tells them too. Whatever is still below us after the bound is SIGKILLed, again on
  /// every wake, and the supervisor exits only once it has no child left: a process it gave up
  /// on would be inherited by init and outlive Node.
  fn wind_down(&mut self) {
    self.lifeline_w = None;
    self.egress = None;
    let give_up = Instant::now() + REAPERS_EXIT_BOUND;
    let mut checks = 0;
    loop {
      if self.reap() {
        return;
      }
      let reapers = &self.reapers;
      if Instant::now() >= give_up {
        descendants::kill_now(self.me, &|_| false);
      } else {
        descendants::kill_now(self.me, &|pid| reapers.contains(&pid));
      }
      let mut fds = [watch(Some(self.sigchld.as_raw_fd()))];
      checks += 1;
      poll(&mut fds, Some(Instant::now() + backoff(checks) * 4));
      while let Ok(Some(_)) = self.sigchld.read_signal() {}
    }
  }
}

/// In the forked child: keeps only its socket (as fd 3) and the lifeline (as fd 4), both
/// close-on-exec so the job's command inherits neither, and runs the reaper.
fn become_reaper(
  conn: OwnedFd,
  lifeline: &OwnedFd,
  idle: Duration,
  guard: &Guard,
  landlock: u8,
) -> ! {
  let moved = move_to(conn.as_raw_fd(), 3).and_then(|()| move_to(lifeline.as_raw_fd(), 4));
  if moved.is_err() {
    // SAFETY: exits the forked child at once.
    unsafe { libc::_exit(1) }
  }
  close_from(5);
  std::mem::forget(conn);
  // SAFETY: fds 3 and 4 were just set up above and nothing else owns them now (the
  // supervisor's own owners of those numbers are never used again in this process).
  let (conn, lifeline) = unsafe { (OwnedFd::from_raw_fd(3), OwnedFd::from_raw_fd(4)) };
  reaper::main(conn, lifeline, idle, guard, landlock)
}

/// Makes `fd` available as `target` with close-on-exec set.
fn move_to(fd: RawFd, target: RawFd) -> nix::Result<()> {
  if fd != target {
    // SAFETY: plain syscall on this process's descriptors.
    Errno::result(unsafe { libc::dup3(fd, target, libc::O_CLOEXEC) })?;
  }
  // SAFETY: as above.
  Errno::result(unsafe { libc::fcntl(target, libc::F_SETFD, libc::FD_CLOEXEC) })?;
  Ok(())
}
