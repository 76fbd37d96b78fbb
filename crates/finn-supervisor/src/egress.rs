//! The supervisor's side of the pool's egress proxy: one `finn-supervisor --finn-egress`
//! process, started at the first job with a network allowlist, and a channel per such job.
//!
//! The proxy gets its control socket as fd 3 and the write end of its audit socket as fd 4;
//! the addon gets the read end with the first channel of each proxy process (see
//! `client.rs`). The proxy is the supervisor's child and dies with it (`PR_SET_PDEATHSIG`); its
//! control socket closing ends it too. A proxy that died is started again at the next job.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use finn_egress::service;

/// The running proxy process.
pub struct Egress {
  pub pid: i32,
  /// The control socket: `addJob` messages out, `refused` messages in.
  pub control: OwnedFd,
}

/// The argument that runs the binary as the proxy (`entry.rs`).
pub const EGRESS_ARG: &std::ffi::CStr = c"--finn-egress";

impl Egress {
  /// Forks and execs this binary as the proxy; returns it and the read end of its audit
  /// socket. Call only from the single-threaded supervisor.
  pub fn start() -> io::Result<(Egress, OwnedFd)> {
    let exe = std::ffi::CString::new("/proc/self/exe").expect("no NUL");
    let (control, theirs) = service::seqpacket_pair()?;
    let (audit_r, audit_w) = service::seqpacket_pair()?;
    let argv = [
      c"finn-supervisor".as_ptr(),
      EGRESS_ARG.as_ptr(),
      std::ptr::null(),
    ];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: the supervisor is single-threaded; the child only moves fds and execs.
    match unsafe { nix::unistd::fork() }? {
      nix::unistd::ForkResult::Child => {
        // SAFETY: async-signal-safe calls on fds this process holds, then exec or _exit.
        unsafe {
          if place(theirs.as_raw_fd(), 3).is_err() || place(audit_w.as_raw_fd(), 4).is_err() {
            libc::_exit(126);
          }
          libc::syscall(libc::SYS_close_range, 5u32, u32::MAX, 0u32);
          let mut none: libc::sigset_t = std::mem::zeroed();
          libc::sigemptyset(&mut none);
          libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
          libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
          libc::_exit(127)
        }
      }
      nix::unistd::ForkResult::Parent { child } => Ok((
        Egress {
          pid: child.as_raw(),
          control,
        },
        audit_r,
      )),
    }
  }

  /// A new channel for `job`, whose other end the proxy now serves with `network`'s rules.
  pub fn add_job(&self, job: &str, network: &str) -> io::Result<OwnedFd> {
    let network: serde_json::Value = serde_json::from_str(network)
      .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let (ours, theirs) = service::seqpacket_pair()?;
    let msg = serde_json::json!({ "addJob": { "job": job, "network": network } });
    service::send(
      &self.control,
      msg.to_string().as_bytes(),
      Some(theirs.as_raw_fd()),
    )?;
    Ok(ours)
  }

  /// Reads one message from the control socket (it is readable); false when the proxy is gone.
  pub fn on_control(&self) -> bool {
    match service::recv(self.control.as_raw_fd()) {
      Ok(Some((bytes, _))) => {
        // The addon checks every list before it asks for a channel: a refusal here is a bug.
        eprintln!(
          "finn-supervisor: egress proxy: {}",
          String::from_utf8_lossy(&bytes)
        );
        true
      }
      Err(e) if e.raw_os_error() == Some(libc::EINTR) => true,
      _ => false,
    }
  }
}

impl Drop for Egress {
  fn drop(&mut self) {
    // Closing the control socket ends it; SIGKILL makes sure, the supervisor reaps it.
    let _ = nix::sys::signal::kill(
      nix::unistd::Pid::from_raw(self.pid),
      nix::sys::signal::Signal::SIGKILL,
    );
  }
}

/// `fd` as `target`, without close-on-exec.
fn place(fd: RawFd, target: RawFd) -> Result<(), Errno> {
  // SAFETY: plain syscalls on this process's descriptors.
  unsafe {
    if fd == target {
      if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
        return Err(Errno::last());
      }
    } else if libc::dup2(fd, target) < 0 {
      return Err(Errno::last());
    }
  }
  Ok(())
}
