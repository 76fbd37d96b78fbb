//! The repository check's own work on the host: the files it reads and the git processes it
//! starts. It runs before any isolation, on the host's behalf, over files the agent writes, so
//! each piece is bounded: a file is opened without following a symlink or blocking on a FIFO and
//! sized from the open file before a byte is read; a git runs with a deadline (the whole check's,
//! which the job's abort also ends), a bounded address space and bounded output. Git is started
//! with `posix_spawn` (std's `Command` takes that path: no `pre_exec`, an absolute program), never
//! a fork of Node, and the address-space bound is set by the `/bin/sh` it execs through.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use super::error::Denial;

/// The whole repository check of one command (files walked, every git run) ends within this:
/// past it the command is refused. A work tree at the walk's entry bound is walked in ~0.1 s and
/// git's own listings take milliseconds, so only a stalled git or a hostile repository reaches it.
pub const REPOSITORY_CHECK_MS: u64 = 10_000;
/// The address space (RLIMIT_AS) of each git the check runs. git holds an index whole in memory:
/// one within the walk's entry bound, with ordinary paths, needs a few tens of MiB.
pub const HOST_GIT_MEMORY_BYTES: u64 = 256 * 1024 * 1024;
/// The stderr kept from a host git, for the first line quoted in a refusal.
const STDERR_KEPT_BYTES: usize = 4096;
/// The most of a file's name or content a refusal quotes.
const QUOTED_CHARS: usize = 80;

fn refuse(what: impl Into<String>) -> Denial {
  let what = what.into();
  Denial::audited(
    format!("Repository config rejected: {what}"),
    format!("repository_rejected: {what}"),
  )
}

/// `text` as a refusal quotes it: its first [`QUOTED_CHARS`] characters, escaped (`{:?}`), and
/// when there is more, how long the whole is. An agent's file can be any size; its refusal is not.
pub fn quoted(text: &str) -> String {
  match text.char_indices().nth(QUOTED_CHARS) {
    None => format!("{text:?}"),
    Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
  }
}

/// A name or path from the repository as a refusal shows it: plain when short and printable
/// (callers match these), otherwise [`quoted`].
pub fn excerpt(text: &str) -> String {
  if text.len() <= 200 && !text.chars().any(char::is_control) {
    text.to_owned()
  } else {
    quoted(text)
  }
}

/// The job's request to stop its check (its AbortSignal), as a flag and a pipe that a waiting
/// check polls, so that an abort ends a running git at once. The pipe goes when the check ends
/// ([`Cancel::retire`]); the flag stays.
pub struct Cancel {
  cancelled: AtomicBool,
  pipe: Mutex<Option<(OwnedFd, OwnedFd)>>,
}

impl Cancel {
  pub fn new() -> io::Result<Self> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    Ok(Cancel {
      cancelled: AtomicBool::new(false),
      pipe: Mutex::new(Some((read, write))),
    })
  }

  /// Asks the check to stop; later calls do nothing.
  pub fn cancel(&self) {
    if !self.cancelled.swap(true, Ordering::SeqCst)
      && let Some((_, write)) = &*self.pipe.lock().unwrap_or_else(|e| e.into_inner())
    {
      // One byte makes the read end readable for good; a full pipe is readable already.
      let _ = nix::unistd::write(write, &[1]);
    }
  }

  pub fn is_cancelled(&self) -> bool {
    self.cancelled.load(Ordering::SeqCst)
  }

  /// Closes the pipe once nothing waits on it (the JS object holding this lives until collected).
  pub fn retire(&self) {
    self.pipe.lock().unwrap_or_else(|e| e.into_inner()).take();
  }

  /// A duplicate of the read end for one wait (`None` once retired).
  pub fn wake_fd(&self) -> Option<OwnedFd> {
    let pipe = self.pipe.lock().unwrap_or_else(|e| e.into_inner());
    pipe.as_ref().and_then(|(read, _)| read.try_clone().ok())
  }
}

/// One check's bounds in time: its deadline and the job's cancellation.
pub struct Watch<'a> {
  deadline: Instant,
  bound_ms: u64,
  cancel: Option<&'a Cancel>,
  /// The jail: host gits may read beneath it and the system's directories, nothing else.
  beneath: Option<&'a Path>,
}

impl<'a> Watch<'a> {
  /// A check that must end within `bound_ms` from now.
  pub fn new(bound_ms: u64, cancel: Option<&'a Cancel>) -> Self {
    Watch {
      deadline: Instant::now() + Duration::from_millis(bound_ms),
      bound_ms,
      cancel,
      beneath: None,
    }
  }

  /// Host gits of this check read only beneath `jail` (and the system's directories), where
  /// the launcher can ask landlock for it (see [`READ_BENEATH_ENV`]).
  pub fn reading_beneath(mut self, jail: &'a Path) -> Self {
    self.beneath = Some(jail);
    self
  }

  /// Refused once the job was aborted or the deadline passed.
  pub fn check(&self) -> Result<(), Denial> {
    if self.cancel.is_some_and(Cancel::is_cancelled) {
      return Err(self.cancelled());
    }
    if Instant::now() >= self.deadline {
      return Err(refuse(format!(
        "the repository check took longer than {} ms",
        self.bound_ms
      )));
    }
    Ok(())
  }

  fn cancelled(&self) -> Denial {
    refuse("the repository check was aborted")
  }

  fn too_slow(&self, what: &str) -> Denial {
    refuse(format!(
      "{what} did not finish within the check's {} ms",
      self.bound_ms
    ))
  }
}

/// Opens a repository file as every check reads one: refused unless it is a regular file, seen
/// from the open file itself (`O_NOFOLLOW`: a symlink is not followed; `O_NONBLOCK`: a FIFO
/// swapped in after the `lstat` does not block the open) and at most `max_bytes` long. The caller
/// reads this open file, never the path again. `Ok(None)`: there is no such file.
pub fn open_bounded(path: &Path, shown: &str, max_bytes: u64) -> Result<Option<File>, Denial> {
  // A device is not even opened (an open can act on one); the fstat below decides.
  match std::fs::symlink_metadata(path) {
    Ok(meta) if meta.file_type().is_symlink() => {
      return Err(refuse(format!("{shown} is a symlink")));
    }
    Ok(meta) if !meta.is_file() => return Err(not_regular(shown)),
    Ok(_) => {}
    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
    Err(_) => return Err(refuse(format!("{shown} is unreadable"))),
  }
  open_checked(path, shown, max_bytes)
}

/// The open and the checks on the open file, for whatever the path names by the time of the
/// open (the `lstat` above is only a first look).
fn open_checked(path: &Path, shown: &str, max_bytes: u64) -> Result<Option<File>, Denial> {
  let file = match std::fs::OpenOptions::new()
    .read(true)
    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
    .open(path)
  {
    Ok(file) => file,
    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
    Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
      return Err(refuse(format!("{shown} is a symlink")));
    }
    Err(_) => return Err(refuse(format!("{shown} is unreadable"))),
  };
  let meta = file
    .metadata()
    .map_err(|_| refuse(format!("{shown} is unreadable")))?;
  if !meta.is_file() {
    return Err(not_regular(shown));
  }
  if meta.size() > max_bytes {
    return Err(too_large(shown, max_bytes));
  }
  Ok(Some(file))
}

fn not_regular(shown: &str) -> Denial {
  refuse(format!(
    "{shown} is not a regular file (a FIFO or device would block the check)"
  ))
}

fn too_large(shown: &str, max_bytes: u64) -> Denial {
  refuse(format!("{shown} is larger than {max_bytes} bytes"))
}

/// The content of a small repository file ([`open_bounded`]), at most `max_bytes` even if it
/// grows after it was sized. `Ok(None)`: there is no such file.
pub fn read_bounded(path: &Path, shown: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, Denial> {
  let Some(file) = open_bounded(path, shown, max_bytes)? else {
    return Ok(None);
  };
  let mut bytes = Vec::new();
  file
    .take(max_bytes + 1)
    .read_to_end(&mut bytes)
    .map_err(|_| refuse(format!("{shown} is unreadable")))?;
  if bytes.len() as u64 > max_bytes {
    return Err(too_large(shown, max_bytes));
  }
  Ok(Some(bytes))
}

/// Program-running switches for the checks' own git runs (`git config` and `git ls-files` run
/// none of them today; these keep it so), and one reader thread for the index (each thread
/// reserves its stack in the bounded address space). Listed with origin `command line:` and
/// skipped by the config check.
pub const OVERRIDES: &[(&str, &str)] = &[
  ("core.hooksPath", "/dev/null"),
  ("core.fsmonitor", "false"),
  ("index.threads", "1"),
];

/// Runs `$0 "$@"` with the address space bounded; fails (126) where `ulimit -v` does not.
const BOUNDED_EXEC: &str = "ulimit -v \"$1\" || exit 126; shift; exec \"$0\" \"$@\"";

/// The argument that makes the supervisor binary a launcher: `<binary> --finn-die-with-parent
/// <pid> <program> <args>` asks the kernel to SIGKILL it when the thread that started it ends
/// (`PR_SET_PDEATHSIG`, kept across `execve`), exits at once if its parent is no longer `<pid>`,
/// and execs `<program>`.
pub const DIE_WITH_PARENT_ARG: &str = "--finn-die-with-parent";

/// The launcher restricts what the program may open to reads beneath this directory and the
/// system's (`/usr`, `/lib*`, `/bin`, `/sbin`, `/etc`, `/proc`, `/dev`; writes to `/dev/null`
/// only), with landlock, and takes the variable out of the environment before the exec. The
/// check's git reads what the agent wrote by path (the config, `HEAD`, a split index's shared
/// part): a directory of the repository swapped for a symlink to outside the jail after the
/// walk then gets git an EACCES instead of a host file. Without landlock the git runs
/// unconfined.
pub const READ_BENEATH_ENV: &str = "FINN_SANDBOX_READ_BENEATH";
/// The git program itself, whose directory the launcher lets it read and run from too (a policy
/// may name a git outside the system's directories).
pub const READ_PROGRAM_ENV: &str = "FINN_SANDBOX_READ_PROGRAM";

/// The launcher host gits start through, set once by the first pool (its supervisor binary).
static LAUNCHER: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Host gits start through `launcher` (the supervisor binary, see [`DIE_WITH_PARENT_ARG`]) from
/// now on. A git is waited for by the thread that started it, which lives as long as Node does:
/// when Node dies by any means, the kernel kills the git its check left, even one blocked on a
/// FIFO swapped in after the walk. Without a launcher (no pool made yet) a host git that Node's
/// death interrupts is ended only by its own deadline.
pub fn set_launcher(launcher: std::path::PathBuf) {
  let _ = LAUNCHER.set(launcher);
}

/// `git` as the host-side checks run it: through `/bin/sh`, which bounds its address space to
/// [`HOST_GIT_MEMORY_BYTES`] and execs it; an empty environment with no system, global or XDG
/// config, no lazy fetch and no transport, hooks and fsmonitor off ([`OVERRIDES`]), C messages,
/// stdin `/dev/null`, its own process group (killed whole at the deadline). The caller adds the
/// repository (`GIT_DIR`, or `Repository::env`), the directory and git's arguments, and runs it
/// with [`run`].
pub fn sealed(git: &str) -> Command {
  let mut command = match LAUNCHER.get() {
    Some(launcher) => {
      let mut c = Command::new(launcher);
      c.arg(DIE_WITH_PARENT_ARG)
        .arg(std::process::id().to_string())
        .arg("/bin/sh");
      c
    }
    None => Command::new("/bin/sh"),
  };
  command
    .args(["-c", BOUNDED_EXEC, git])
    .arg((HOST_GIT_MEMORY_BYTES / 1024).to_string())
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .env("HOME", "/nonexistent-finn-sandbox-home")
    .env("XDG_CONFIG_HOME", "/nonexistent-finn-sandbox-home")
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_NO_LAZY_FETCH", "1")
    .env("GIT_ALLOW_PROTOCOL", "")
    .env("LC_ALL", "C")
    .env(READ_PROGRAM_ENV, git)
    .env("GIT_CONFIG_COUNT", OVERRIDES.len().to_string())
    .stdin(Stdio::null())
    .process_group(0);
  for (i, (k, v)) in OVERRIDES.iter().enumerate() {
    command
      .env(format!("GIT_CONFIG_KEY_{i}"), k)
      .env(format!("GIT_CONFIG_VALUE_{i}"), v);
  }
  command
}

/// How a host git ended: whether it succeeded, and the first line of its stderr (bounded).
#[derive(Debug)]
pub struct Ran {
  pub success: bool,
  pub first_line: String,
}

impl Ran {
  /// Why git failed, as a refusal quotes it: its first stderr line, and the memory bound when
  /// git says it ran out (the bound is the likely cause).
  pub fn why(&self) -> String {
    let line = quoted(&self.first_line);
    let lower = self.first_line.to_ascii_lowercase();
    if lower.contains("out of memory") || lower.contains("cannot allocate memory") {
      format!(
        "{line}; the check's git may use {} MiB",
        HOST_GIT_MEMORY_BYTES / (1024 * 1024)
      )
    } else {
      line
    }
  }
}

/// Runs `command` (from [`sealed`]) under `watch`, handing its stdout to `stdout` piece by piece:
/// nothing of it is kept here. `stdout` may refuse (an output bound); the deadline, the job's
/// abort and that refusal kill git's process group at once. `what` names the run in refusals.
pub fn run(
  mut command: Command,
  what: &str,
  watch: &Watch,
  stdout: &mut dyn FnMut(&[u8]) -> Result<(), Denial>,
) -> Result<Ran, Denial> {
  watch.check()?;
  command.stdout(Stdio::piped()).stderr(Stdio::piped());
  if let Some(jail) = watch.beneath {
    command.env(READ_BENEATH_ENV, jail);
  }
  let mut child = command
    .spawn()
    .map_err(|e| refuse(format!("{what} could not run ({e})")))?;
  let outcome = drive(&mut child, what, watch, stdout);
  if outcome.is_err() {
    // Its own process group: git and anything it started.
    let _ = nix::sys::signal::killpg(
      nix::unistd::Pid::from_raw(child.id() as i32),
      nix::sys::signal::Signal::SIGKILL,
    );
  }
  // Reaped either way; after SIGKILL this returns at once.
  let status = child.wait();
  let stderr = outcome?;
  let status = status.map_err(|e| refuse(format!("{what} could not be waited for ({e})")))?;
  let text = String::from_utf8_lossy(&stderr);
  Ok(Ran {
    success: status.success(),
    first_line: text
      .lines()
      .next()
      .unwrap_or("no message")
      .trim()
      .to_owned(),
  })
}

/// Reads git's stdout and stderr until both close and git has exited; returns the kept start of
/// its stderr.
fn drive(
  child: &mut Child,
  what: &str,
  watch: &Watch,
  stdout: &mut dyn FnMut(&[u8]) -> Result<(), Denial>,
) -> Result<Vec<u8>, Denial> {
  let could_not = |e: &dyn std::fmt::Display| refuse(format!("{what} could not run ({e})"));
  let out = child.stdout.take().map(OwnedFd::from);
  let err = child.stderr.take().map(OwnedFd::from);
  let (Some(out), Some(err)) = (out, err) else {
    return Err(could_not(&"no pipes"));
  };
  for fd in [&out, &err] {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
      .map_err(|e| could_not(&e))?;
  }
  let exited = pidfd(child.id()).map_err(|e| could_not(&e))?;
  let wake = watch.cancel.and_then(Cancel::wake_fd);
  let mut open = [Some(out), Some(err)];
  let mut kept = Vec::new();
  let mut buf = vec![0u8; 64 * 1024];
  // Once git has exited its pidfd stays readable: it leaves the poll set (a process git left
  // behind holding the pipes would otherwise make every poll return at once).
  let mut gone = false;
  loop {
    if gone && open.iter().all(Option::is_none) {
      return Ok(kept);
    }
    if watch.cancel.is_some_and(Cancel::is_cancelled) {
      return Err(watch.cancelled());
    }
    let left = watch.deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
      return Err(watch.too_slow(what));
    }
    let fd = |f: Option<BorrowedFd>| libc::pollfd {
      fd: f.map_or(-1, |f| f.as_raw_fd()),
      events: libc::POLLIN,
      revents: 0,
    };
    let mut fds = [
      fd(open[0].as_ref().map(AsFd::as_fd)),
      fd(open[1].as_ref().map(AsFd::as_fd)),
      fd(wake.as_ref().map(AsFd::as_fd)),
      fd((!gone).then(|| exited.as_fd())),
    ];
    let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid array of pollfd; a negative fd is ignored by the kernel.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    gone |= fds[3].revents != 0;
    for (i, pfd) in fds[..2].iter().enumerate() {
      if pfd.revents == 0 {
        continue;
      }
      let Some(fd) = &open[i] else { continue };
      match nix::unistd::read(fd, &mut buf) {
        Ok(0) => open[i] = None,
        Ok(n) if i == 0 => stdout(&buf[..n])?,
        Ok(n) => {
          let room = STDERR_KEPT_BYTES.saturating_sub(kept.len());
          kept.extend_from_slice(&buf[..n.min(room)]);
        }
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
        Err(e) => {
          return Err(refuse(format!(
            "{what}: its output could not be read ({e})"
          )));
        }
      }
    }
  }
}

/// A pidfd for `pid`, readable once it has exited: waiting on it is bounded by the poll's timeout,
/// where `wait()` is not.
fn pidfd(pid: u32) -> io::Result<OwnedFd> {
  // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
  let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
  if fd < 0 {
    return Err(io::Error::last_os_error());
  }
  // SAFETY: `fd` is a descriptor this call just opened and nothing else owns.
  Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as std::os::fd::RawFd) })
}

/// Collects a host git's whole stdout up to `max_bytes`; more is refused as `what` printing too
/// much. For listings that are small in any repository the check accepts (config, a remote's
/// URLs).
pub fn collect_bounded<'b>(
  into: &'b mut Vec<u8>,
  max_bytes: usize,
  what: &'b str,
) -> impl FnMut(&[u8]) -> Result<(), Denial> + 'b {
  move |piece| {
    if into.len() + piece.len() > max_bytes {
      return Err(refuse(format!(
        "{what} printed more than {max_bytes} bytes"
      )));
    }
    into.extend_from_slice(piece);
    Ok(())
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn sh(script: &str) -> Command {
    // `sealed` with /bin/sh as the "git": the same bounds around any program.
    let mut command = sealed("/bin/sh");
    command.args(["-c", script]);
    command
  }

  fn run_sh(script: &str, watch: &Watch) -> (Result<Ran, Denial>, Vec<u8>) {
    let mut out = Vec::new();
    let ran = run(
      sh(script),
      "the script",
      watch,
      &mut collect_bounded(&mut out, 1 << 20, "the script"),
    );
    (ran, out)
  }

  /// What the open itself refuses, as when a symlink or FIFO is swapped in after the `lstat`:
  /// a FIFO must not block the open (the test would hang) and a symlink is not followed.
  #[test]
  fn the_open_refuses_what_is_swapped_in_after_the_first_look() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let got = open_checked(&p("fifo"), "fifo", 100).unwrap_err().message;
    assert!(got.contains("fifo is not a regular file"), "{got}");
    std::fs::write(p("small"), "12").unwrap();
    std::os::unix::fs::symlink(p("small"), p("link")).unwrap();
    let got = open_checked(&p("link"), "link", 100).unwrap_err().message;
    assert!(got.contains("link is a symlink"), "{got}");
    assert!(open_checked(&p("gone"), "gone", 100).unwrap().is_none());
    assert!(open_checked(&p("small"), "small", 2).unwrap().is_some());
    // A path through a file is unreadable: not absent, not a symlink, at either look.
    let got = open_bounded(&p("small/x"), "small/x", 100)
      .unwrap_err()
      .message;
    assert!(got.contains("small/x is unreadable"), "{got}");
    let got = open_checked(&p("small/x"), "small/x", 100)
      .unwrap_err()
      .message;
    assert!(got.contains("small/x is unreadable"), "{got}");
  }

  #[test]
  fn excerpts_are_plain_only_when_short_and_printable() {
    assert_eq!(excerpt("../x"), "../x");
    assert_eq!(excerpt("a\nb"), "\"a\\nb\"");
    let long = "y".repeat(201);
    assert!(excerpt(&long).ends_with("... (201 bytes)"));
    let edge = "y".repeat(200);
    assert_eq!(excerpt(&edge), edge);
  }

  /// The cancel's pipe wakes a run blocked in poll: the cancel comes from another thread once
  /// the script has printed, while the run waits for more.
  #[test]
  fn a_cancel_from_another_thread_wakes_a_waiting_run() {
    let cancel = Cancel::new().unwrap();
    let watch = Watch::new(60_000, Some(&cancel));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
      let cancel = &cancel;
      s.spawn(move || {
        if rx.recv().is_ok() {
          cancel.cancel();
        }
      });
      let started = Instant::now();
      let ran = run(
        sh("echo up; exec sleep 30"),
        "the script",
        &watch,
        &mut |_| {
          let _ = tx.send(());
          Ok(())
        },
      );
      assert!(ran.unwrap_err().message.contains("aborted"));
      assert!(started.elapsed() < Duration::from_secs(5));
      drop(tx);
    });
    // An uncancelled watch with a cancel runs to the end.
    let other = Cancel::new().unwrap();
    let (ran, out) = run_sh("echo fine", &Watch::new(60_000, Some(&other)));
    assert!(ran.unwrap().success);
    assert_eq!(out, b"fine\n");
  }

  #[test]
  fn output_at_the_bound_passes_and_one_byte_more_is_refused() {
    let watch = Watch::new(60_000, None);
    let bounded = |n: usize| {
      let mut out = Vec::new();
      let ran = run(
        sh(&format!("head -c {n} /dev/zero")),
        "the script",
        &watch,
        &mut collect_bounded(&mut out, 100_000, "the script"),
      );
      ran.map(|_| out.len())
    };
    assert_eq!(bounded(100_000).unwrap(), 100_000);
    assert!(bounded(100_001).is_err());
  }

  #[test]
  fn quoting_is_bounded_and_escaped() {
    assert_eq!(quoted("a\0b"), "\"a\\0b\"");
    let long = "\0".repeat(1_000_000);
    let q = quoted(&long);
    assert!(q.len() < 400, "{q}");
    assert!(q.ends_with("... (1000000 bytes)"), "{q}");
    let exact = "x".repeat(QUOTED_CHARS);
    assert_eq!(quoted(&exact), format!("{exact:?}"));
    // Cut on a character boundary.
    assert!(quoted(&"é".repeat(200)).contains("(400 bytes)"));
  }

  #[test]
  fn a_git_that_hangs_is_killed_at_the_deadline_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let watch = Watch::new(300, None);
    let started = Instant::now();
    let (ran, _) = run_sh(
      &format!("sleep 30 & echo $! > {}; wait", pid_file.display()),
      &watch,
    );
    let elapsed = started.elapsed();
    let got = ran.unwrap_err().message;
    assert!(
      got.contains("the script did not finish within the check's 300 ms"),
      "{got}"
    );
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
      .unwrap()
      .trim()
      .parse()
      .unwrap();
    // The background sleep was in git's process group: killed too. Its pidfd turns readable when
    // it dies (it is nobody's child here, so it cannot be waited for).
    if let Ok(fd) = pidfd(pid as u32) {
      let mut pfd = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
      }];
      // SAFETY: a valid array of one pollfd.
      unsafe { libc::poll(pfd.as_mut_ptr(), 1, 5_000) };
      assert_ne!(pfd[0].revents, 0, "the background sleep {pid} lives on");
    }
  }

  #[test]
  fn a_cancel_ends_the_run_at_once_and_a_cancelled_watch_refuses_to_start() {
    let cancel = std::sync::Arc::new(Cancel::new().unwrap());
    let watch = Watch::new(60_000, Some(&cancel));
    let waker = std::sync::Arc::clone(&cancel);
    // The script's first output is the signal that it runs; the cancel follows it.
    let started = Instant::now();
    let mut out = Vec::new();
    let ran = run(
      sh("echo up; exec sleep 30"),
      "the script",
      &watch,
      &mut |p| {
        out.extend_from_slice(p);
        waker.cancel();
        Ok(())
      },
    );
    assert!(ran.unwrap_err().message.contains("aborted"));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out, b"up\n");
    let (ran, _) = run_sh("echo never", &watch);
    assert!(ran.unwrap_err().message.contains("aborted"));
    cancel.retire();
    assert!(cancel.wake_fd().is_none());
    assert!(watch.check().is_err());
  }

  #[test]
  fn output_past_the_bound_is_refused_and_stderr_is_kept_bounded() {
    let watch = Watch::new(60_000, None);
    let mut out = Vec::new();
    let ran = run(
      sh("head -c 10000000 /dev/zero"),
      "the script",
      &watch,
      &mut collect_bounded(&mut out, 1000, "the script"),
    );
    assert!(
      ran
        .unwrap_err()
        .message
        .contains("the script printed more than 1000 bytes")
    );
    assert!(out.len() <= 1000);
    let (ran, out) = run_sh("echo ok; head -c 10000000 /dev/zero >&2; exit 3", &watch);
    let ran = ran.unwrap();
    assert!(!ran.success);
    assert_eq!(out, b"ok\n");
    assert!(ran.first_line.len() <= STDERR_KEPT_BYTES);
  }

  #[test]
  fn the_address_space_is_bounded() {
    let watch = Watch::new(60_000, None);
    // Within the bound, then past it (perl dies "Out of memory!" instead of allocating).
    let (ran, out) = run_sh("perl -e '$x = \"a\" x 20_000_000; print \"done\"'", &watch);
    assert!(ran.unwrap().success);
    assert_eq!(out, b"done");
    let (ran, out) = run_sh("perl -e '$x = \"a\" x 400_000_000; print \"done\"'", &watch);
    let ran = ran.unwrap();
    assert!(!ran.success);
    assert!(out.is_empty());
    assert!(
      ran.why().contains("the check's git may use 256 MiB"),
      "{}",
      ran.why()
    );
  }

  #[test]
  fn files_are_opened_bounded_and_never_through_a_symlink_or_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("small"), "12345").unwrap();
    assert_eq!(
      read_bounded(&p("small"), "small", 5).unwrap().unwrap(),
      b"12345"
    );
    let got = read_bounded(&p("small"), "small", 4).unwrap_err().message;
    assert!(got.contains("small is larger than 4 bytes"), "{got}");
    assert_eq!(read_bounded(&p("none"), "none", 4).unwrap(), None);
    std::os::unix::fs::symlink(p("small"), p("link")).unwrap();
    assert!(
      read_bounded(&p("link"), "link", 100)
        .unwrap_err()
        .message
        .contains("link is a symlink")
    );
    nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(
      read_bounded(&p("fifo"), "fifo", 100)
        .unwrap_err()
        .message
        .contains("fifo is not a regular file")
    );
    std::fs::create_dir(p("dir")).unwrap();
    assert!(
      read_bounded(&p("dir"), "dir", 100)
        .unwrap_err()
        .message
        .contains("dir is not a regular file")
    );
    // A sparse file is sized, not read.
    let sparse = File::create(p("sparse")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    assert!(
      read_bounded(&p("sparse"), "sparse", 4096)
        .unwrap_err()
        .message
        .contains("sparse is larger than 4096 bytes")
    );
  }

  /// git gone but its pipes held by a process it left: the run waits for them without spinning
  /// (CPU time well under the wall time), and the deadline ends it, killing the group.
  #[test]
  fn pipes_held_after_git_exits_are_waited_for_without_spinning() {
    let usage =
      || nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).unwrap();
    let cpu = |u: nix::sys::resource::Usage| {
      let t = u.user_time();
      let s = u.system_time();
      Duration::from_micros((t.tv_sec() * 1_000_000 + t.tv_usec()) as u64)
        + Duration::from_micros((s.tv_sec() * 1_000_000 + s.tv_usec()) as u64)
    };
    let before = cpu(usage());
    let (ran, _) = run_sh("sleep 30 & exit 0", &Watch::new(1_000, None));
    let spent = cpu(usage()) - before;
    assert!(
      ran
        .unwrap_err()
        .message
        .contains("did not finish within the check's 1000 ms")
    );
    assert!(
      spent < Duration::from_millis(50),
      "{spent:?} of CPU in a 1 s wait"
    );
  }
}
