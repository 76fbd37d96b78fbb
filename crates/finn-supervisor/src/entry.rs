//! What the `finn-supervisor` binary does, by its first argument. The binary (the addon
//! package's `src/bin/finn-supervisor.rs`) is only this function, so it links this crate and
//! the rooms below it, never the addon: the addon carries the napi binding, whose registration
//! constructors would run in every supervisor and reaper and keep its whole code mapped. Every
//! idle pool holds this process and its reapers, so their size is part of the pool's idle RSS.

/// `--finn-die-with-parent <pid> <program> <args>`: the launcher of the repository check's host
/// gits (`finn_policy::host_git::DIE_WITH_PARENT_ARG`). The kernel SIGKILLs this process, and
/// the programs it execs, when the thread that started it ends; a parent already gone (no
/// longer `<pid>`) ends it at once, since the request would then never fire.
#[cfg(target_os = "linux")]
fn die_with_parent(args: &[std::ffi::OsString]) -> ! {
  use std::os::unix::ffi::OsStrExt;
  use std::os::unix::process::CommandExt;
  let (Some(pid), Some(program)) = (args.first(), args.get(1)) else {
    std::process::exit(126);
  };
  let Some(pid) = pid.to_str().and_then(|p| p.parse::<i32>().ok()) else {
    std::process::exit(126);
  };
  // SAFETY: plain prctl with constant arguments.
  if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
    std::process::exit(126);
  }
  // SAFETY: getppid cannot fail.
  if unsafe { libc::getppid() } != pid {
    std::process::exit(126);
  }
  let mut command = std::process::Command::new(std::ffi::OsStr::from_bytes(program.as_bytes()));
  command.args(&args[2..]);
  let program_dir = std::env::var_os("FINN_SANDBOX_READ_PROGRAM")
    .map(std::path::PathBuf::from)
    .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
    .filter(|d| d.is_absolute());
  command.env_remove("FINN_SANDBOX_READ_PROGRAM");
  if let Some(jail) = std::env::var_os("FINN_SANDBOX_READ_BENEATH") {
    command.env_remove("FINN_SANDBOX_READ_BENEATH");
    if let Err(e) = read_only_beneath(std::path::Path::new(&jail), program_dir.as_deref()) {
      eprintln!("finn-supervisor: cannot confine the check's git to the jail: {e}");
      std::process::exit(126);
    }
  }
  let err = command.exec();
  eprintln!("finn-supervisor: {}: {err}", program.to_string_lossy());
  std::process::exit(126);
}

/// Lets this process (and what it execs) read beneath `jail`, the program's own directory and
/// the system's directories, and write only `/dev/null`, where landlock exists; where it does
/// not, changes nothing.
#[cfg(target_os = "linux")]
fn read_only_beneath(
  jail: &std::path::Path,
  program_dir: Option<&std::path::Path>,
) -> Result<(), landlock::RulesetError> {
  use landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
  };
  let abi = ABI::V1;
  let read = AccessFs::from_read(abi);
  let mut ruleset = Ruleset::default()
    .handle_access(AccessFs::from_all(abi))?
    .create()?;
  let roots = [
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/dev",
  ];
  for root in roots
    .iter()
    .map(std::path::Path::new)
    .chain([jail])
    .chain(program_dir)
  {
    if let Ok(fd) = PathFd::new(root) {
      ruleset = ruleset.add_rule(PathBeneath::new(fd, read))?;
    }
  }
  if let Ok(fd) = PathFd::new("/dev/null") {
    ruleset = ruleset.add_rule(PathBeneath::new(fd, read | AccessFs::WriteFile))?;
  }
  ruleset.restrict_self()?;
  Ok(())
}

/// `--finn-egress`: the pool's egress proxy (`finn_egress::service`), its control socket on
/// fd 3 and its audit socket on fd 4 (if open). Killed with the process that started it; ends when the control socket closes.
#[cfg(target_os = "linux")]
fn egress() -> ! {
  use std::os::fd::{FromRawFd, OwnedFd};
  // SAFETY: plain prctl with constant arguments.
  if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
    std::process::exit(126);
  }
  // SAFETY: fd 3 is the control socket its starter placed there; nothing else owns it.
  let control = unsafe { OwnedFd::from_raw_fd(3) };
  if nix::fcntl::fcntl(
    &control,
    nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
  )
  .is_err()
  {
    std::process::exit(126);
  }
  // Its starter's user runs the jobs' commands: no ptrace, no /proc/<pid>/mem for them.
  // SAFETY: PR_SET_DUMPABLE takes integers only.
  if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
    std::process::exit(126);
  }
  // fd 4, when open: the audit socket (the supervisor's start gives one; a bare start may not).
  // SAFETY: F_GETFD only reads the flags of a descriptor number.
  let audit = (unsafe { libc::fcntl(4, libc::F_GETFD) } >= 0).then(|| {
    // SAFETY: fd 4 is open, placed by the starter; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(4) };
    let _ = nix::fcntl::fcntl(
      &fd,
      nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    fd
  });
  let resolver = std::sync::Arc::new(finn_egress::SystemResolver);
  match finn_egress::service::run(control, audit, resolver) {
    Ok(()) => std::process::exit(0),
    Err(e) => {
      eprintln!("finn-supervisor: egress proxy: {e}");
      std::process::exit(1);
    }
  }
}

/// The process's whole life: a launcher (`--finn-die-with-parent`), the egress proxy, the bind verifier inside
/// a bwrap sandbox, or the supervisor; returns its exit code.
pub fn main() -> i32 {
  #[cfg(target_os = "linux")]
  {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--finn-die-with-parent") {
      die_with_parent(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "--finn-egress") {
      egress();
    }
    // Inside a bwrap sandbox, before the command: see `isolate::bwrap::verify_binds_main`.
    if args
      .first()
      .is_some_and(|a| a == finn_isolate::VERIFY_BINDS_ARG)
    {
      finn_isolate::verify_binds_main(&args[1..]);
    }
    // The reapers' bwrap jobs run this binary as the verifier.
    if let Ok(exe) = std::env::current_exe() {
      finn_isolate::set_bind_verifier(exe);
    }
  }
  crate::server::main()
}
