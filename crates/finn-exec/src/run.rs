//! One child from spawn to a dead tree: capture, timeout, caller stops, termination.
//!
//! A run is blocking: its thread sleeps in `ppoll` on the child's two pipes, its pidfd and a
//! stop eventfd, with the next deadline as the timeout. The pool runs it on a worker thread of
//! tokio's blocking pool; [`run`] is the async form. In interleaved runs (3000 x /bin/true at
//! concurrency 8 on 4 workers, CPU read per thread from /proc as `bench/probe.js throughput`
//! does) driving the same descriptors through tokio's reactor spent 135-175 us per command in
//! the addon's threads, this loop 105-145 us: the reactor adds wake-ups between its threads.

use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::capture::{Capture, Pushed, Stream};
use super::outcome::{EndedBy, Finished};
use super::poll::{poll, watch};
use super::spawn::{SpawnError, SpawnSpec, spawn};
pub use super::stop::{Stop, StopCell};
use super::terminate::Terminator;

const READ_CHUNK: usize = 32 * 1024;
/// Reads per pipe per wake-up, so a flooding stream cannot starve the other checks.
const READS_PER_WAKE: usize = 16;

#[derive(Debug, Clone)]
pub struct Limits {
  /// Counted from spawn. `None`: no timeout.
  pub timeout: Option<Duration>,
  /// Cap on stdout+stderr bytes, marker included.
  pub max_output_bytes: usize,
  /// SIGTERM-to-SIGKILL grace after a timeout.
  pub kill_grace: Duration,
}

/// [`run_blocking`] on tokio's blocking pool. `stop` resolving asks for termination (abort,
/// shutdown); during a timeout's grace it can bring SIGKILL forward.
pub async fn run<R, F>(
  spec: &SpawnSpec,
  limits: &Limits,
  stop: F,
  on_spawn: impl FnOnce(i32) + Send + 'static,
) -> Result<Finished<R>, SpawnError>
where
  R: Send + 'static,
  F: Future<Output = Stop<R>>,
{
  let cell = Arc::new(StopCell::new());
  let (spec, limits) = (spec.clone(), limits.clone());
  let runner = Arc::clone(&cell);
  let mut worker = pin!(tokio::task::spawn_blocking(move || {
    run_blocking(&spec, &limits, &runner, on_spawn)
  }));
  let mut stop = pin!(stop);
  let mut stop_pending = true;
  loop {
    tokio::select! {
      done = &mut worker => {
        return done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
      }
      request = &mut stop, if stop_pending => {
        stop_pending = false;
        cell.request(request);
      }
    }
  }
}

/// Runs `spec` to the end on the calling thread. A request in `stop` asks for termination.
///
/// Returns once the leader is reaped and, if the run was stopped, no process of its tree is
/// left (or [`super::REAP_BOUND`] passed after SIGKILL).
///
/// `on_spawn` receives the leader's pid (= its pgid and sid) right after the spawn, so a caller
/// can reach the tree synchronously, e.g. with [`kill_tree_now`] when the host process exits.
pub fn run_blocking<R>(
  spec: &SpawnSpec,
  limits: &Limits,
  stop: &StopCell<R>,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, SpawnError> {
  let stop_fd = stop.attach().map_err(SpawnError::Setup)?;
  // Detached however the run ends (a panic included): a cell must never keep the descriptor
  // of a thread that may exit.
  struct Detach<'a, R>(&'a StopCell<R>);
  impl<R> Drop for Detach<'_, R> {
    fn drop(&mut self) {
      self.0.detach();
    }
  }
  let _detach = Detach(stop);
  supervise(spec, limits, stop, stop_fd, on_spawn)
}

fn supervise<R>(
  spec: &SpawnSpec,
  limits: &Limits,
  stop: &StopCell<R>,
  stop_fd: RawFd,
  on_spawn: impl FnOnce(i32),
) -> Result<Finished<R>, SpawnError> {
  let started = Instant::now();
  let mut child = spawn(spec)?;
  let leader = child.pid();
  on_spawn(leader.as_raw());
  let mut pipes = [
    (child.stdout.take(), Stream::Stdout),
    (child.stderr.take(), Stream::Stderr),
  ];
  let mut capture = Capture::new(limits.max_output_bytes);
  // Grown on the first read and filled through spare capacity: never zeroed, and most
  // commands print too little to need it at all.
  let mut buf: Vec<u8> = Vec::new();

  let deadline = limits.timeout.and_then(|t| started.checked_add(t));
  let mut stop_pending = true;
  let mut ended_by: Option<EndedBy<R>> = None;
  let mut term: Option<Terminator> = None;
  let mut survivors = Vec::new();
  // The leader could not be waited for (someone else reaped it): end once its tree is gone.
  let mut lost = false;

  loop {
    let reaped = child.status().is_some();
    match &mut term {
      None if reaped && pipes.iter().all(|(p, _)| p.is_none()) => {
        ended_by = Some(EndedBy::Exit);
        break;
      }
      Some(t) if (reaped || lost) && t.tree_gone() => break,
      _ => {}
    }
    let wake_at = match &term {
      Some(t) => Some(t.next_wake()),
      None => deadline,
    };
    let now = Instant::now();
    if let Some(at) = wake_at
      && now >= at
    {
      match &mut term {
        None => {
          ended_by = Some(EndedBy::Timeout);
          term = Some(Terminator::start(leader, limits.kill_grace));
        }
        Some(t) => {
          if let Some(left) = t.on_tick(reaped) {
            survivors = left;
            break;
          }
        }
      }
      continue;
    }

    // Slots: stdout, stderr, pidfd, stop. A negative fd is ignored by poll.
    let mut fds = [
      watch(pipes[0].0.as_ref().map(AsRawFd::as_raw_fd)),
      watch(pipes[1].0.as_ref().map(AsRawFd::as_raw_fd)),
      watch((!reaped && !lost).then(|| child.pidfd())),
      watch(stop_pending.then_some(stop_fd)),
    ];
    poll(&mut fds, wake_at);

    for (slot, (pipe, stream)) in pipes.iter_mut().enumerate() {
      if fds[slot].revents != 0 && drain(pipe, *stream, &mut capture, &mut buf) && term.is_none() {
        ended_by = Some(EndedBy::OutputLimit);
        term = Some(Terminator::start(leader, Duration::ZERO));
      }
    }
    if fds[2].revents != 0
      && let Err(e) = child.try_reap()
    {
      tracing::warn!(error = %e, "waiting for the child failed");
      lost = true;
      term.get_or_insert_with(|| Terminator::start(leader, Duration::ZERO));
    }
    if fds[3].revents != 0
      && let Some(request) = stop.take(stop_fd)
    {
      stop_pending = false;
      match &mut term {
        // Already terminating: only bring the SIGKILL forward.
        Some(t) => t.shorten_grace(request.grace),
        None => {
          ended_by = Some(EndedBy::Stopped(request.reason));
          term = Some(Terminator::start(leader, request.grace));
        }
      }
    }
  }

  // Whatever the dead tree left buffered in the pipes (a stderr line written during a flood).
  // Bounded (one drain): a survivor past the reap bound could write forever.
  for (pipe, stream) in &mut pipes {
    drain(pipe, *stream, &mut capture, &mut buf);
  }
  let status = child.status();
  if status.is_none() && !lost {
    // Gave up after SIGKILL: keep reaping in the background so no zombie is left.
    std::thread::spawn(move || child.wait_blocking());
  }
  let (stdout, stderr, truncated) = capture.finish();
  Ok(Finished {
    status,
    stdout,
    stderr,
    truncated,
    ended_by: ended_by.unwrap_or(EndedBy::Exit),
    duration: started.elapsed(),
    survivors,
  })
}

/// Reads what the pipe has now (a bounded number of reads); closes it at EOF or on an error.
/// Returns true when this went over the output cap.
fn drain(
  pipe: &mut Option<OwnedFd>,
  stream: Stream,
  capture: &mut Capture,
  buf: &mut Vec<u8>,
) -> bool {
  let Some(fd) = pipe else { return false };
  let mut overflowed = false;
  if buf.capacity() < READ_CHUNK {
    buf.reserve_exact(READ_CHUNK);
  }
  for _ in 0..READS_PER_WAKE {
    buf.clear();
    let spare = buf.spare_capacity_mut();
    // SAFETY: reads at most `spare.len()` bytes into the vector's spare capacity.
    let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
    match n {
      n if n > 0 => {
        // SAFETY: the kernel initialised the first `n` bytes.
        unsafe { buf.set_len(n as usize) };
        overflowed |= capture.push(stream, buf) == Pushed::Overflowed;
      }
      n if n < 0 && Errno::last() == Errno::EINTR => continue,
      n if n < 0 && Errno::last() == Errno::EAGAIN => return overflowed,
      // EOF or a read error: this stream is done.
      _ => {
        *pipe = None;
        return overflowed;
      }
    }
  }
  overflowed
}
