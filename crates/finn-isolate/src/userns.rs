//! Whether a user namespace with a mount namespace inside can be made here, tried the way a
//! job's child makes them (`child.rs`): in a child of this process that runs no program. A
//! program found by PATH would be one a command could have put there, run as Node's user
//! outside every sandbox.
//!
//! The child is cloned with `CLONE_VM | CLONE_VFORK`, as `posix_spawn` does (no copy of the
//! caller's memory, the calling thread waits until it exits), straight into the new
//! namespaces; it maps its ids, makes the mounts private and exits. It makes raw syscalls only,
//! on data built before the clone, and reports through memory it shares with the caller.

use std::ffi::{CStr, CString, c_int, c_void};

use nix::errno::Errno;

use super::child::write_file;

/// What the child writes back: the step that failed and its errno.
struct Trial {
  uid_map: CString,
  gid_map: CString,
  failed: Option<(&'static str, i32)>,
}

const STACK_BYTES: usize = 64 * 1024;

extern "C" fn trial_child(arg: *mut c_void) -> c_int {
  // SAFETY: `arg` is the caller's `Trial`, which outlives this child (the caller is suspended
  // until it exits: CLONE_VFORK), and nothing else touches it meanwhile.
  let trial = unsafe { &mut *arg.cast::<Trial>() };
  match trial_steps(trial) {
    Ok(()) => 0,
    Err((step, e)) => {
      trial.failed = Some((step, e as i32));
      1
    }
  }
}

/// What a job's child does after `unshare` (`child.rs`): map its ids, then mount.
fn trial_steps(trial: &Trial) -> Result<(), (&'static str, Errno)> {
  write_file(c"/proc/self/setgroups", c"deny").map_err(|e| ("writing /proc/self/setgroups", e))?;
  write_file(c"/proc/self/uid_map", &trial.uid_map)
    .map_err(|e| ("writing /proc/self/uid_map", e))?;
  write_file(c"/proc/self/gid_map", &trial.gid_map)
    .map_err(|e| ("writing /proc/self/gid_map", e))?;
  // SAFETY: NUL-terminated target; no source, type or data.
  let r = unsafe {
    libc::mount(
      std::ptr::null(),
      c"/".as_ptr(),
      std::ptr::null(),
      libc::MS_REC | libc::MS_PRIVATE,
      std::ptr::null(),
    )
  };
  if r < 0 {
    return Err(("making the mounts private", Errno::last()));
  }
  Ok(())
}

fn id_line(id: u32) -> CString {
  CString::new(format!("{id} {id} 1\n")).expect("digits have no NUL")
}

/// `Err(why)` when the namespaces cannot be made (or used, as a job's child uses them).
pub(super) fn try_user_and_mount_namespace() -> Result<(), String> {
  // SAFETY: geteuid/getegid cannot fail and touch no memory of ours.
  let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
  let mut trial = Trial {
    uid_map: id_line(uid),
    gid_map: id_line(gid),
    failed: None,
  };
  let mut stack = vec![0u8; STACK_BYTES];
  // The stack grows down: its top, 16-byte aligned.
  let top = (stack.as_mut_ptr() as usize + STACK_BYTES) & !15;
  let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
  // SAFETY: the child runs `trial_child` on `stack`, which outlives it (CLONE_VFORK: this
  // thread resumes only once the child has exited); it touches `trial` and makes raw syscalls.
  let pid = unsafe {
    libc::clone(
      trial_child,
      top as *mut c_void,
      flags | libc::SIGCHLD,
      (&raw mut trial).cast(),
    )
  };
  if pid < 0 {
    let e = Errno::last();
    return Err(if e == Errno::EPERM {
      "clone(CLONE_NEWUSER | CLONE_NEWNS) fails with EPERM (a container's seccomp profile, or an LSM)"
        .into()
    } else {
      format!("clone(CLONE_NEWUSER | CLONE_NEWNS) fails: {}", e.desc())
    });
  }
  let mut status = 0;
  loop {
    // SAFETY: waits for our own child; `status` is ours.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r == pid || Errno::last() != Errno::EINTR {
      break;
    }
  }
  drop(stack);
  match trial.failed {
    None if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 => Ok(()),
    None => Err(format!(
      "the namespace trial's child ended with wait status {status:#x}"
    )),
    Some((step, errno)) => Err(format!(
      "in a new user and mount namespace, {step} fails: {}",
      describe(errno)
    )),
  }
}

fn describe(errno: i32) -> String {
  let e = Errno::from_raw(errno);
  let name: &CStr = match e {
    Errno::EPERM => c"EPERM (a container's seccomp profile, or an LSM)",
    Errno::EACCES => c"EACCES",
    _ => return format!("{e}"),
  };
  name.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
  use super::*;

  /// The trial agrees with util-linux's `unshare --user --map-root-user --mount`, where it is
  /// installed (run here by absolute path, by the test only).
  #[test]
  fn the_native_trial_agrees_with_unshare() {
    let native = try_user_and_mount_namespace();
    for unshare in ["/usr/bin/unshare", "/bin/unshare"] {
      if !std::path::Path::new(unshare).exists() {
        continue;
      }
      let ok = std::process::Command::new(unshare)
        .args(["--user", "--map-root-user", "--mount", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
      assert_eq!(native.is_ok(), ok, "{native:?}");
      return;
    }
  }

  /// This process's own namespaces are untouched by the trial.
  #[test]
  fn the_trial_leaves_the_callers_namespaces_alone() {
    let ns = |n: &str| std::fs::read_link(format!("/proc/self/ns/{n}")).unwrap();
    let before = (ns("user"), ns("mnt"));
    let _ = try_user_and_mount_namespace();
    assert_eq!((ns("user"), ns("mnt")), before);
  }
}
