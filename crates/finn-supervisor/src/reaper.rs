//! A job reaper: a small process forked by the supervisor that runs one job at a time and
//! outlives none of them.
//!
//! It is a child subreaper, so every process the job leaves behind (double-forked, `setsid`,
//! anything) becomes its child: `waitpid(-1)` failing with ECHILD means the whole tree is gone.
//! The job's life is the owner's [`Lifecycle`] (`finn_exec::lifecycle`): when the leader
//! exits, the rest of the tree gets `drain_ms` to finish, then is killed; when the addon asks
//! (timeout, abort, output cap), the tree is frozen, sent SIGTERM, resumed, and SIGKILLed after
//! the grace. The job's deadline is kept here too, whether or not the addon asks: the addon's
//! side of a job sent inline is Node's thread, which JS can keep busy. When the addon's socket
//! closes (Node died) or the supervisor dies (the lifeline pipe hangs up), the tree is
//! SIGKILLed and the reaper exits. The loop in `run` only turns the socket, the lifeline,
//! SIGCHLD and the machine's wake-up time into events, and signals the tree as it is told.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::child::{self, StartError};
use super::descendants::{Tree, descendants};
use super::protocol::{FromReaper, Timeout, ToReaper};
use super::route::NetCalls;
use super::shield::{Guard, Watch};
use super::wire::Conn;
use finn_exec::lifecycle::{Action, Actions, COMMAND_END_BOUND, End, Event, Lifecycle};
use finn_exec::poll::{earliest, poll, watch};
use finn_exec::{ExitStatus, SpawnSpec, Stop};
use finn_isolate::{CheckedRoots, Plan, SharedNet, prepare_job};

/// Why the reaper must exit.
struct Gone;

/// How long `Spawned` may wait to go out in one write with the leader's exit and `TreeGone`.
/// The worker thread sleeps until the first message of a job: for a command that is done
/// within this (a `/bin/true` takes 0.3-0.6 ms from the spawn), it then wakes once per job
/// instead of three times (`Spawned`, the pipes' end, `TreeGone`). Longer commands report
/// `Spawned` after it, and are then supervised as usual; until then their output waits in
/// the pipes (a pipe holds 64 KiB) and a stop request waits in the worker's eventfd (1,000 x
/// `/bin/true` at concurrency 8 on 2 workers ran 1410 -> 1671/s, median of 5 interleaved runs
/// at load 4-8). A worker with a next job queued sends the previous job's reply once the next
/// job's `Run` is sent (`pool/worker.rs`, `carried`), not after this wait.
const SPAWNED_WITHIN: Duration = Duration::from_millis(1);

struct Reaper {
  conn: Conn,
  lifeline: OwnedFd,
  sigchld: SignalFd,
  me: i32,
  idle: Duration,
  /// Its commands are in its landlock signal scope (`shield::scope_signals`).
  scoped: bool,
  /// The seccomp program that hands a command's calls on other processes to this reaper,
  /// for jobs that no landlock scope covers (`shield::watch_program`).
  watch: Vec<libc::sock_filter>,
  /// The empty network namespace its jobs enter (`finn_isolate::SharedNet`), made at the first
  /// job that may share one. Sound because this reaper runs one job at a time and starts the
  /// next only once the previous one's tree is gone; `None` where it cannot be made (each job
  /// then makes its own).
  net: Option<SharedNet>,
  net_tried: bool,
}

/// Runs the reaper on `conn` (its socket to the addon) until the addon or the supervisor goes
/// away, or no job came for `idle`. `lifeline` is the read end of a pipe whose write end only
/// the supervisor holds. Its commands start under `guard` (see `shield.rs`), and, when
/// in a landlock domain of this reaper's own of an ABI up to `landlock` (see `shield::confine`).
pub fn main(conn: OwnedFd, lifeline: OwnedFd, idle: Duration, guard: &Guard, landlock: u8) -> ! {
  let code = match setup(conn, lifeline, idle, guard, landlock) {
    Ok(mut reaper) => {
      reaper.serve();
      0
    }
    Err(e) => {
      eprintln!("finn-supervisor: reaper setup failed: {e}");
      1
    }
  };
  // SAFETY: exits this forked process without running the supervisor's destructors.
  unsafe { libc::_exit(code) }
}

fn setup(
  conn: OwnedFd,
  lifeline: OwnedFd,
  idle: Duration,
  guard: &Guard,
  landlock: u8,
) -> nix::Result<Reaper> {
  nix::sys::prctl::set_child_subreaper(true)?;
  // Before any job: every command inherits the guard. Where the kernel refuses it, the
  // reaper runs unguarded and says so on the supervisor's stderr.
  if let Err(e) = guard.enter() {
    eprintln!("finn-supervisor: no guard for the commands (shield.rs): {e}");
  }
  // After the guard, which sets no_new_privs where landlock needs it too. Without the scope
  // (asked for none, or the kernel has none), each job's commands start under the watch.
  let scoped = super::shield::confine(landlock) == super::shield::Confined::Scoped;
  let mut mask = SigSet::empty();
  mask.add(Signal::SIGCHLD);
  mask.thread_block()?;
  let sigchld = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
  Ok(Reaper {
    conn: Conn::new(conn),
    lifeline,
    sigchld,
    me: std::process::id() as i32,
    idle,
    scoped,
    watch: super::shield::watch_program().map_err(|e| {
      eprintln!("finn-supervisor: the watch's program: {e}");
      nix::errno::Errno::EINVAL
    })?,
    net: None,
    net_tried: false,
  })
}

impl Reaper {
  /// Waits for jobs and runs them, one at a time, until the addon or the supervisor is gone,
  /// or no job came for `idle` (an idle pool then holds no reaper).
  fn serve(&mut self) {
    // No idle limit before the first job: the addon asked for this reaper to run a job now,
    // and on a loaded machine its Run may come later than `idle` (a fresh reaper that retired
    // first sent the job around again, to another fresh one that could retire too). It still
    // exits when the addon or the supervisor is gone.
    let mut idle_until: Option<Instant> = None;
    // After a job whose `Run` asked for it: poll for the next one before sleeping (see
    // `ToReaper::Run::linger_us`).
    let mut linger_until: Option<Instant> = None;
    loop {
      let msg = match self.conn.take_frame() {
        Ok(Some(frame)) => frame,
        Ok(None) => {
          let mut fds = [
            watch(Some(self.conn.raw())),
            watch(Some(self.lifeline.as_raw_fd())),
          ];
          if let Some(spin_until) = linger_until.take() {
            // Polls without sleeping: the next `Run` then finds this reaper running, and its
            // wake-up (about 40 us when it lands on an idle vCPU) leaves the job's path.
            loop {
              poll(&mut fds, Some(Instant::now()));
              if fds[0].revents != 0 || fds[1].revents != 0 || Instant::now() >= spin_until {
                break;
              }
            }
          }
          if fds[0].revents == 0 && fds[1].revents == 0 {
            poll(&mut fds, idle_until);
          }
          if fds[1].revents != 0 {
            return;
          }
          if fds[0].revents == 0 && idle_until.is_some_and(|at| Instant::now() >= at) {
            // Nothing is read after this decision, so a Run already on its way is never
            // started: the addon sees `Retired` first and sends it elsewhere.
            let _ = self.send(FromReaper::Retired);
            return;
          }
          if fds[0].revents != 0 && !matches!(self.conn.fill(), Ok(true)) {
            return;
          }
          continue;
        }
        Err(_) => return,
      };
      match ToReaper::decode(&msg) {
        Ok(ToReaper::Run {
          spec,
          drain_ms,
          linger_us,
          timeout,
          mut isolation,
          attached,
        }) => {
          let (Some(out), Some(err)) = (self.conn.take_fd(), self.conn.take_fd()) else {
            return;
          };
          let stdin = if attached.stdin {
            let Some(fd) = self.conn.take_fd() else {
              return;
            };
            Some(fd)
          } else {
            None
          };
          // The fds that passed the addon's check; every one missing means a confused addon.
          // Taken into the plan, they are closed with it when the job is done (or on any
          // return from here).
          let mut checked = CheckedRoots::default();
          if attached.cwd {
            let Some(fd) = self.conn.take_fd() else {
              return;
            };
            checked.cwd = Some(Arc::new(fd));
          }
          for _ in 0..attached.writable {
            let Some(fd) = self.conn.take_fd() else {
              return;
            };
            checked.writable.push(Arc::new(fd));
          }
          if let Some(plan) = &mut isolation {
            if !checked.writable.is_empty() && checked.writable.len() != plan.writable.len() {
              return;
            }
            plan.checked = checked;
          }
          // Last: the job's channel to the egress proxy, for a plan with the egress route.
          let egress = if isolation.as_ref().is_some_and(|p| p.egress.is_some()) {
            let Some(fd) = self.conn.take_fd() else {
              return;
            };
            Some(fd)
          } else {
            None
          };
          if self
            .run(
              &spec,
              isolation,
              Stdio { stdin, out, err },
              Duration::from_millis(drain_ms),
              timeout,
              egress,
            )
            .is_err()
          {
            return;
          }
          idle_until = Some(Instant::now() + self.idle);
          linger_until =
            (linger_us > 0).then(|| Instant::now() + Duration::from_micros(u64::from(linger_us)));
        }
        // A request for a job that already ended.
        Ok(ToReaper::Terminate { .. } | ToReaper::EndCommand | ToReaper::Signal { .. }) => {}
        Err(_) => return,
      }
    }
  }

  fn send(&self, msg: FromReaper) -> Result<(), Gone> {
    self.conn.send(&msg.encode(), &[]).map_err(|_| Gone)
  }

  /// One job from spawn to an empty tree. `Err` when the reaper must exit (its tree is dead
  /// or past the reap bound by then).
  fn run(
    &mut self,
    spec: &SpawnSpec,
    mut isolation: Option<Box<Plan>>,
    stdio: Stdio,
    drain: Duration,
    timeout: Option<Timeout>,
    egress: Option<OwnedFd>,
  ) -> Result<(), Gone> {
    // From the `Run`'s arrival, before the preparation: the addon counts from before its send.
    let deadline = timeout.map(|t| {
      (
        Instant::now() + Duration::from_millis(t.after_ms),
        Duration::from_millis(t.grace_ms),
      )
    });
    // Built here, before the fork; held until the tree is gone (dropping it empties and
    // removes the job's cgroup).
    let mut prepared = match isolation.as_deref().map(prepare_job).transpose() {
      Ok(p) => p,
      Err(e) => {
        // Closed before the reply, as after a job that ran.
        drop(isolation);
        return self.send(match e.layer_failed() {
          Some(failed) => FromReaper::PrepareFailed(failed),
          // `Options` and `Unavailable` come from resolving a plan, which the addon did.
          None => FromReaper::SpawnFailed {
            errno: libc::EINVAL,
          },
        });
      }
    };
    if let Some(p) = prepared.as_mut().filter(|p| p.may_share_net()) {
      if !self.net_tried {
        self.net_tried = true;
        self.net = SharedNet::new().ok();
      }
      if let Some(net) = &self.net {
        p.enter_net(net);
      }
    }
    // The bwrap backend execs bwrap, which runs the command.
    let wrapped = prepared.as_ref().and_then(|p| {
      let (program, argv) = p.wrap(&spec.program, &spec.argv, &spec.cwd)?;
      Some(SpawnSpec {
        program,
        argv,
        env: spec.env.clone(),
        cwd: spec.cwd.clone(),
      })
    });
    // The proxy variables name the job's own listener (`finn_isolate::egress`).
    let wrapped = match prepared.as_ref().filter(|p| p.has_egress()) {
      Some(_) => {
        let base = wrapped.as_ref().unwrap_or(spec);
        Some(SpawnSpec {
          env: finn_isolate::egress::env(&base.env),
          ..base.clone()
        })
      }
      None => wrapped,
    };
    let spec = wrapped.as_ref().unwrap_or(spec);
    // No landlock scope keeps this job's signals in: the guard alone names pids, so every
    // call on another process goes to this reaper, which allows only the job's own.
    let watched = (!self.scoped && !isolation.as_deref().is_some_and(Plan::scopes_signals))
      .then_some(self.watch.as_slice());
    let Stdio { stdin, out, err } = stdio;
    let (i, o, e) = (
      stdin.as_ref().map(AsRawFd::as_raw_fd),
      out.as_raw_fd(),
      err.as_raw_fd(),
    );
    // A pid namespace is made by the fork itself: the command is then this reaper's child and
    // pid 1 there, with no waiter between them. The guard puts later forks back here.
    let pidns_at_fork = prepared.as_mut().and_then(|p| p.pid_namespace_at_fork());
    let started = match (&prepared, watched) {
      (Some(p), _) => child::start_watched(spec, i, o, e, &|| p.apply_in_child(), watched),
      (None, Some(_)) => child::start_watched(spec, i, o, e, &|| Ok(()), watched),
      (None, None) => child::start_fed(spec, i, o, e)
        .map(|pid| (pid, None))
        .map_err(StartError::Spawn),
    };
    drop(pidns_at_fork);
    // The child has its own copies; ours would keep the addon from ever seeing EOF (and the
    // command, on its stdin, from seeing the addon close it).
    drop((stdin, out, err));
    let (leader, listener) = match started {
      Ok(started) => started,
      Err(e) => {
        drop((prepared, isolation));
        return self.send(match e {
          StartError::Spawn(errno) => FromReaper::SpawnFailed {
            errno: errno as i32,
          },
          StartError::Layer(failed) => FromReaper::PrepareFailed(failed),
        });
      }
    };
    // Its mount namespace is then freed by the preparation's drop, on another thread, rather
    // than by the job's last exit, whose reaping would wait for the kernel's grace period.
    if let Some(p) = prepared.as_mut() {
      p.hold_namespace(leader.as_raw());
    }
    // The job's only route out: its listeners, each connection passed to the proxy (rung 1:
    // the child's, on the job's own loopback).
    let listeners = prepared
      .as_mut()
      .map(|p| p.egress_listeners())
      .unwrap_or_default();
    // The job's network through this reaper, on hosts without a network namespace for it (the
    // child sent its filter's listener before exec; `route.rs`).
    let taken = prepared.as_mut().and_then(|p| p.take_route());
    let (mut route, net_calls) = match (taken, egress) {
      // Rung 2: a connect to the proxy's address is made by this reaper to a listener of its
      // own on the host's loopback, whose connections go to the proxy like rung 1's. Without
      // it (no port free) every connect is refused: the job gets no network, never more.
      (Some((mut net, filter)), Some(channel)) => match route_target() {
        Ok((listener, addr)) => {
          net.target = addr;
          (
            Some(Route::new(vec![listener], channel)),
            Some(NetCalls::new(net, filter)),
          )
        }
        Err(_) => (None, Some(NetCalls::new(net, filter))),
      },
      (taken, egress) => (
        match egress {
          Some(channel) if !listeners.is_empty() => Some(Route::new(listeners, channel)),
          _ => None,
        },
        taken.map(|(net, filter)| NetCalls::new(net, filter)),
      ),
    };
    let mut life = Lifecycle::<()>::owner(
      deadline.map(|(at, _)| at),
      deadline.map_or(Duration::ZERO, |(_, grace)| grace),
      Some(drain),
    );
    let mut job = ReaperJob {
      leader,
      spare_leader: isolation.as_ref().is_some_and(|p| p.bwrap.is_some()),
      tree: Tree::new(self.me),
      host_gone: false,
      watch: listener.map(|l| Watch::new(l, self.me)),
      net_calls,
    };
    // Sent first in the next report, or alone at this time.
    let mut spawned_due = Some(Instant::now() + SPAWNED_WITHIN);
    loop {
      let (leader_status, gone) = self.reap(&job);
      if gone {
        // Its channel's close ends the job at the proxy.
        route = None;
        // Before `TreeGone` goes out: once the job settles, its cgroup is gone too, and so are
        // the checked fds (the plan's and the preparation's).
        drop(prepared.take());
        drop(isolation.take());
      }
      let now = Instant::now();
      if leader_status.is_some() {
        life.on(Event::LeaderExited, now);
      }
      if gone {
        life.on(Event::TreeGone, now);
      }
      let due = life.on(Event::Tick, now);
      let timed_out = due.iter().any(|a| a == Action::ReportTimedOut);
      // Both in one write when they come together (a command without background children):
      // the addon then wakes once.
      let mut report: Vec<Vec<u8>> = Vec::new();
      if let Some(at) = spawned_due
        && (leader_status.is_some() || gone || timed_out || now >= at)
      {
        spawned_due = None;
        report.push(
          FromReaper::Spawned {
            pid: leader.as_raw(),
          }
          .encode(),
        );
      }
      if timed_out {
        report.push(FromReaper::TimedOut.encode());
      }
      if let Some(status) = leader_status {
        report.push(FromReaper::Exited(status).encode());
      }
      if gone {
        report.push(FromReaper::TreeGone.encode());
      }
      if !report.is_empty() && !job.host_gone {
        let frames: Vec<&[u8]> = report.iter().map(Vec::as_slice).collect();
        if self.conn.send_all(&frames).is_err() {
          job.host_gone(&mut life);
        }
      }
      job.carry_out(due);
      match life.settled() {
        Some(End::TreeGone) => return if job.host_gone { Err(Gone) } else { Ok(()) },
        // Unkillable (uninterruptible sleep): leave it to the supervisor, which inherits it.
        Some(_) => return Err(Gone),
        None => {}
      }
      let wake = earliest([spawned_due, life.next_wake(now)]);
      let listening = route.as_ref().map(Route::fds).unwrap_or_default();
      let mut fds = [
        watch((!job.host_gone).then(|| self.conn.raw())),
        watch(Some(self.lifeline.as_raw_fd())),
        watch(Some(self.sigchld.as_raw_fd())),
        watch(job.watch.as_ref().map(Watch::fd)),
        watch(listening[0]),
        watch(listening[1]),
        watch(job.net_calls.as_ref().map(NetCalls::fd)),
      ];
      poll(&mut fds, wake);
      if let Some(r) = &route
        && (fds[4].revents != 0 || fds[5].revents != 0)
        && r.forward().is_err()
      {
        // The proxy is gone: the command's connections now find nothing listening.
        route = None;
      }
      if let Some(calls) = &mut job.net_calls {
        let ready = fds[6].revents;
        // Readable: a call waits. Hung up alone: no process of the job is left under it.
        if ready & libc::POLLIN != 0 {
          if calls.answer().is_err() {
            job.net_calls = None;
          }
        } else if ready != 0 {
          job.net_calls = None;
        }
      }
      if let Some(w) = &job.watch {
        let ready = fds[3].revents;
        // Readable: a call waits. Hung up alone: no process of the job is left under it.
        if ready & libc::POLLIN != 0 {
          if w.answer().is_err() {
            job.watch = None;
          }
        } else if ready != 0 {
          job.watch = None;
        }
      }
      if fds[2].revents != 0 {
        while let Ok(Some(_)) = self.sigchld.read_signal() {}
      }
      if fds[1].revents != 0 {
        job.host_gone(&mut life);
      }
      if fds[0].revents != 0 {
        if matches!(self.conn.fill(), Ok(true)) {
          while let Ok(Some(frame)) = self.conn.take_frame() {
            match ToReaper::decode(&frame) {
              Ok(ToReaper::Terminate { grace_ms }) => {
                let stop = Stop {
                  grace: Duration::from_millis(grace_ms),
                  reason: (),
                };
                let asked = life.on(Event::Stop(stop), Instant::now());
                job.carry_out(asked);
              }
              // The leader is a session's shell: its command's tree ends, the shell stays.
              Ok(ToReaper::EndCommand) => {
                let all_gone = self.end_command(job.leader.as_raw());
                if !job.host_gone && self.send(FromReaper::CommandEnded { all_gone }).is_err() {
                  job.host_gone(&mut life);
                }
              }
              // Only a signal a command could send itself: never SIGSTOP, which would leave
              // the tree stopped.
              Ok(ToReaper::Signal { signo }) => {
                if let Ok(signal) = Signal::try_from(signo)
                  && signal != Signal::SIGSTOP
                  && life.settled().is_none()
                {
                  job.tree.signal(signal, NO_SPARE);
                }
              }
              // A second job while one runs, or garbage: the addon is confused; stop it all.
              _ => job.host_gone(&mut life),
            }
          }
        } else {
          job.host_gone(&mut life);
        }
      }
    }
  }

  /// SIGKILLs every process of the tree but `leader`, again until a scan finds none alive or
  /// [`COMMAND_END_BOUND`] has passed (a process forked between a walk and the kill is found by
  /// the next); returns whether none is left. The addon counts the command as over only then.
  fn end_command(&self, leader: i32) -> bool {
    let until = Instant::now() + COMMAND_END_BOUND;
    loop {
      let mut tree = Tree::new(self.me);
      tree.signal_except(Signal::SIGKILL, NO_SPARE, leader);
      tree.wait_gone_except(leader, until);
      let left = descendants(&finn_exec::tree::scan(), self.me, NO_SPARE)
        .iter()
        .any(|p| p.pid != leader);
      if !left {
        return true;
      }
      if Instant::now() >= until {
        return false;
      }
    }
  }

  /// Reaps every child that has exited; returns the leader's status if it was among them,
  /// and whether no child at all is left.
  fn reap(&self, job: &ReaperJob) -> (Option<ExitStatus>, bool) {
    let mut leader = None;
    loop {
      match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(pid, code)) if pid == job.leader => {
          leader = Some(ExitStatus::Exited(code));
        }
        Ok(WaitStatus::Signaled(pid, sig, _)) if pid == job.leader => {
          leader = Some(ExitStatus::Signaled(sig as i32));
        }
        Ok(WaitStatus::StillAlive) => return (leader, false),
        Ok(_) | Err(Errno::EINTR) => {}
        // ECHILD: with the subreaper bit, the whole tree is gone.
        Err(_) => return (leader, true),
      }
    }
  }
}

/// Rung 2's listener: a TCP socket of this reaper on 127.0.0.1, port chosen by the kernel. The
/// job cannot reach it but through its route (its own connects are refused by landlock, and the
/// reaper connects only the proxy's address here).
fn route_target() -> std::io::Result<(OwnedFd, std::net::SocketAddr)> {
  let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
  let addr = l.local_addr()?;
  Ok((OwnedFd::from(l), addr))
}

/// A job's route to the egress proxy: the listeners its child made on the job's loopback
/// (`finn_isolate::egress`) and the job's channel to the proxy.
struct Route {
  listeners: Vec<OwnedFd>,
  channel: OwnedFd,
}

impl Route {
  fn new(listeners: Vec<OwnedFd>, channel: OwnedFd) -> Route {
    for l in &listeners {
      let _ = nix::fcntl::fcntl(
        l,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
      );
    }
    Route { listeners, channel }
  }

  /// The listeners to poll (at most two: 127.0.0.1 and ::1).
  fn fds(&self) -> [Option<std::os::fd::RawFd>; 2] {
    let mut out = [None; 2];
    for (slot, l) in out.iter_mut().zip(&self.listeners) {
      *slot = Some(l.as_raw_fd());
    }
    out
  }

  /// Accepts every waiting connection and passes each to the proxy over the job's channel, as
  /// it is: the channel, not anything the command sends, names the job. `Err` when the
  /// channel is closed (the proxy is gone).
  fn forward(&self) -> Result<(), Gone> {
    for l in &self.listeners {
      loop {
        match nix::sys::socket::accept4(l.as_raw_fd(), nix::sys::socket::SockFlag::SOCK_CLOEXEC) {
          Ok(conn) => {
            // SAFETY: accept4 just made this fd; nothing else owns it.
            let conn = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(conn) };
            let sent = nix::sys::socket::sendmsg::<()>(
              self.channel.as_raw_fd(),
              &[std::io::IoSlice::new(b"c")],
              &[nix::sys::socket::ControlMessage::ScmRights(&[
                conn.as_raw_fd()
              ])],
              // Never waits: a proxy that does not keep up costs the command that connection
              // (closed as it is dropped here), never the reaper its watch over the job.
              nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
              None,
            );
            if matches!(
              sent,
              Err(Errno::EPIPE | Errno::ECONNRESET | Errno::ENOTCONN)
            ) {
              return Err(Gone);
            }
          }
          Err(Errno::EINTR | Errno::ECONNABORTED) => {}
          Err(_) => break,
        }
      }
    }
    Ok(())
  }
}

/// A job's standard descriptors as its `Run` brought them.
struct Stdio {
  /// `None`: the command's stdin is `/dev/null`.
  stdin: Option<OwnedFd>,
  out: OwnedFd,
  err: OwnedFd,
}

/// What the reaper holds for the job it runs; its life is a [`Lifecycle`] in `run`.
struct ReaperJob {
  leader: Pid,
  /// The leader is the bwrap backend's outer bwrap: a graceful stop's SIGTERM goes to the
  /// command and the rest of the tree, not to it (the SIGKILL goes to all).
  spare_leader: bool,
  tree: Tree,
  /// The addon or the supervisor is gone: kill everything, then exit.
  host_gone: bool,
  /// The listener of the job's watch, answered here (see `shield::watch_program`).
  watch: Option<Watch>,
  /// The job's network through this reaper: its `connect`, `bind` and `listen`, answered here
  /// (`route.rs`).
  net_calls: Option<NetCalls>,
}

const NO_SPARE: &dyn Fn(i32) -> bool = &|_| false;

impl ReaperJob {
  fn host_gone(&mut self, life: &mut Lifecycle<()>) {
    self.host_gone = true;
    let stop = Stop {
      grace: Duration::ZERO,
      reason: (),
    };
    let now_due = life.on(Event::Stop(stop), Instant::now());
    self.carry_out(now_due);
  }

  /// Signals the tree as the job's machine asks (the report is sent by `run`).
  fn carry_out(&mut self, actions: Actions) {
    for action in actions.iter() {
      match action {
        Action::SignalTerm if self.spare_leader => {
          self
            .tree
            .signal_except(Signal::SIGTERM, NO_SPARE, self.leader.as_raw());
        }
        Action::SignalTerm => {
          self.tree.signal(Signal::SIGTERM, NO_SPARE);
        }
        Action::SignalKill => {
          self.tree.signal(Signal::SIGKILL, NO_SPARE);
        }
        // The owner's machine asks for none of the watcher's actions.
        Action::ReportTimedOut
        | Action::Nudge
        | Action::AskTerminate { .. }
        | Action::KillTree
        | Action::EndCommand
        | Action::Background => {}
      }
    }
  }
}
