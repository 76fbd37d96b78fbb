//! The attacks `isolate.rs` (landlock, seccomp and namespaces) and `isolate_bwrap.rs`
//! (bubblewrap) both make, written once. A body takes the backend (how a command is prepared and
//! started) and the option sets to try, each with whether the attack must be stopped under it;
//! the test files keep one thin `#[test]` per attack that passes its own backend and settings, so
//! every backend runs every attack it ran before. Where the backends expect different outcomes,
//! or one checks more, the difference is a parameter the caller names, never a silent choice.
//!
//! Every attack is judged from the host (files, listeners, /proc), never from the command's own
//! output, and also runs with `mode: "off"`, where it must land: that proves the probe can fail.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::FromRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;

use finn_sandbox::core::isolate::probe;
use serde_json::{Value, json};

/// A command ready to spawn, and the handle on its preparation (None for `mode: "off"`).
pub type Started<P> = (Command, Option<Arc<P>>);

/// How a backend starts `argv` in `cwd` under isolation options.
pub trait Backend {
  /// The temporary directory's prefix: the two test binaries run side by side.
  const JAIL_PREFIX: &'static str;
  /// The job's preparation (its cgroup, for one): the command holds a handle in its pre_exec
  /// hook, and the caller gets another.
  type Prepared;

  /// `argv` in `cwd` under `opts`, stdin null, stdout and stderr piped. `Err` when the
  /// preparation refuses (a symlink at a protected path): the races count those starts as
  /// refused, everything else unwraps them.
  fn try_command(
    &self,
    opts: &Value,
    cwd: &Path,
    argv: &[&str],
  ) -> Result<Started<Self::Prepared>, String>;

  fn command(&self, opts: &Value, cwd: &Path, argv: &[&str]) -> Started<Self::Prepared> {
    self
      .try_command(opts, cwd, argv)
      .unwrap_or_else(|e| panic!("{opts}: prepare: {e}"))
  }

  fn jail(&self) -> Jail {
    jail(Self::JAIL_PREFIX)
  }
}

pub fn is_root() -> bool {
  probe().uid == 0
}

/// `<base>/jail` (the writable cwd), `<base>/jail-evil`, `<base>/outside`.
pub struct Jail {
  _dir: tempfile::TempDir,
  pub root: PathBuf,
  pub evil: PathBuf,
  pub out: PathBuf,
}

pub fn jail(prefix: &str) -> Jail {
  let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
  let base = dir.path().canonicalize().unwrap();
  let (root, evil, out) = (
    base.join("jail"),
    base.join("jail-evil"),
    base.join("outside"),
  );
  for d in [&root, &evil, &out] {
    std::fs::create_dir(d).unwrap();
  }
  Jail {
    _dir: dir,
    root,
    evil,
    out,
  }
}

pub struct Ran<P> {
  pub status: ExitStatus,
  pub stderr: String,
  pub prepared: Option<Arc<P>>,
}

pub fn run<B: Backend>(b: &B, opts: &Value, cwd: &Path, argv: &[&str]) -> Ran<B::Prepared> {
  let (mut cmd, prepared) = b.command(opts, cwd, argv);
  let out = cmd.output().unwrap();
  Ran {
    status: out.status,
    stderr: String::from_utf8_lossy(&out.stderr).into(),
    prepared,
  }
}

pub fn sh<B: Backend>(b: &B, opts: &Value, cwd: &Path, script: &str) -> Ran<B::Prepared> {
  run(b, opts, cwd, &["/bin/bash", "-c", script])
}

/// Runs this test binary's `attack_helper` inside the sandbox.
pub fn helper<B: Backend>(
  b: &B,
  opts: &Value,
  cwd: &Path,
  attack: &str,
  arg: &str,
) -> Ran<B::Prepared> {
  let exe = std::env::current_exe().unwrap();
  let (mut cmd, prepared) = b.command(opts, cwd, &helper_argv(&exe));
  cmd.env("FINN_ATTACK", attack).env("FINN_ATTACK_ARG", arg);
  let out = cmd.output().unwrap();
  Ran {
    status: out.status,
    stderr: String::from_utf8_lossy(&out.stderr).into(),
    prepared,
  }
}

/// The test binary `exe` running only `attack_helper`.
pub fn helper_argv(exe: &Path) -> [&str; 5] {
  [
    exe.to_str().unwrap(),
    "--exact",
    "attack_helper",
    "--nocapture",
    "--test-threads=1",
  ]
}

pub fn off() -> Value {
  json!({"mode": "off"})
}

pub fn merge(a: &mut Value, b: &Value) {
  match (a, b) {
    (Value::Object(a), Value::Object(b)) => {
      for (k, v) in b {
        merge(a.entry(k.clone()).or_insert(Value::Null), v);
      }
    }
    (a, b) => *a = b.clone(),
  }
}

pub fn exists(p: &Path) -> bool {
  std::fs::symlink_metadata(p).is_ok()
}

pub fn rand_suffix() -> u32 {
  std::time::SystemTime::now()
    .duration_since(std::time::UNIX_EPOCH)
    .unwrap()
    .subsec_nanos()
}

pub fn find_git() -> Option<PathBuf> {
  ["/usr/bin/git", "/bin/git", "/usr/local/bin/git"]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Pids whose command line contains `token`.
pub fn pids_with(token: &str) -> Vec<i32> {
  std::fs::read_dir("/proc")
    .unwrap()
    .flatten()
    .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
    .filter(|pid| {
      std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
    })
    .collect()
}

pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
  fn drop(&mut self) {
    kill_all(&self.0);
  }
}

pub fn kill_all(token: &str) {
  for _ in 0..100 {
    let pids = pids_with(token);
    if pids.is_empty() {
      return;
    }
    for p in pids {
      let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p),
        nix::sys::signal::Signal::SIGKILL,
      );
    }
    std::thread::yield_now();
  }
}

/// Reads the child's stdout up to `line` (the real signal that it did what it was told); false
/// if it closed first.
pub fn wait_line(child: &mut Child, line: &str) -> bool {
  let mut r = BufReader::new(child.stdout.as_mut().unwrap());
  let mut s = String::new();
  loop {
    s.clear();
    if r.read_line(&mut s).unwrap() == 0 {
      return false;
    }
    // libtest may print "test attack_helper ... " on the same line first.
    if s.trim_end().ends_with(line) {
      return true;
    }
  }
}

/// A process outside the sandbox standing in for Node: it holds a secret in its environment.
pub fn victim(token: &str) -> Child {
  Command::new("sleep")
    .arg("60")
    .env("OPENAI_API_KEY", token)
    .stdin(Stdio::null())
    .spawn()
    .unwrap()
}

pub fn proc_field(pid: u32, field: &str) -> String {
  let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
  s.lines()
    .find_map(|l| l.strip_prefix(field))
    .unwrap()
    .trim()
    .to_string()
}

/// Every process below `pid`, `pid` included.
pub fn tree(pid: u32) -> Vec<u32> {
  let mut all = vec![pid];
  let mut i = 0;
  while i < all.len() {
    let p = all[i];
    for t in std::fs::read_dir(format!("/proc/{p}/task"))
      .into_iter()
      .flatten()
      .flatten()
    {
      let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
      all.extend(
        kids
          .split_whitespace()
          .filter_map(|k| k.parse::<u32>().ok()),
      );
    }
    i += 1;
  }
  all
}

pub fn fd_targets(pid: u32) -> Vec<(i32, PathBuf)> {
  std::fs::read_dir(format!("/proc/{pid}/fd"))
    .into_iter()
    .flatten()
    .flatten()
    .filter_map(|e| {
      let fd = e.file_name().to_string_lossy().parse::<i32>().ok()?;
      Some((fd, std::fs::read_link(e.path()).ok()?))
    })
    .collect()
}

/// The body of each binary's `attack_helper` test: the attacks that need a syscall no shell tool
/// makes. Does nothing unless `FINN_ATTACK` is set.
pub fn attack_helper() {
  let Ok(attack) = std::env::var("FINN_ATTACK") else {
    return;
  };
  let arg = std::env::var("FINN_ATTACK_ARG").unwrap();
  match attack.as_str() {
    "unix-connect" => {
      use std::io::Write;
      if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&arg) {
        let _ = s.write_all(b"hi");
      }
    }
    "ptrace-hold" => {
      let pid: i32 = arg.parse().unwrap();
      // SAFETY: PTRACE_SEIZE takes a pid and no pointers; failure is the expected outcome.
      let _ = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) };
      println!("ready");
      // Hold the attachment (if any) until the test has looked and closes our stdin.
      let _ = std::io::stdin().read(&mut [0; 1]);
    }
    "fork-many" => {
      let sleep = std::ffi::CString::new("/bin/sleep").unwrap();
      let tok = std::ffi::CString::new(arg).unwrap();
      let argv = [sleep.as_ptr(), tok.as_ptr(), std::ptr::null()];
      for _ in 0..100 {
        // SAFETY: the child makes only async-signal-safe calls on memory prepared before the fork.
        unsafe {
          if libc::fork() == 0 {
            libc::setsid();
            // stdout/stderr close at exec, not before: the test's read of them ends only once
            // every sleeper has exec'd (or died), so it counts finished forks, not racing ones.
            libc::fcntl(1, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(2, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::execv(sleep.as_ptr(), argv.as_ptr());
            libc::_exit(127);
          }
        }
      }
    }
    "sigstop" => {
      let pid: i32 = arg.parse().unwrap();
      let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
      );
    }
    "pidfd-getfd" => {
      // "pid:fd": copies what the outside process's fd reads into ./stolen.
      let (pid, fd) = arg.split_once(':').unwrap();
      let (pid, fd): (i32, i32) = (pid.parse().unwrap(), fd.parse().unwrap());
      // SAFETY: pidfd_open and pidfd_getfd take integers; the results are checked.
      unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        let got = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        if pidfd < 0 || got < 0 {
          eprintln!("pidfd: {}", std::io::Error::last_os_error());
          return;
        }
        let mut f = std::fs::File::from_raw_fd(got);
        let mut s = String::new();
        let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0));
        let _ = f.read_to_string(&mut s);
        std::fs::write("stolen", s).unwrap();
      }
    }
    "pidfd-kill" => {
      let pid: i32 = arg.parse().unwrap();
      // SAFETY: pidfd_open and pidfd_send_signal take integers and a null siginfo.
      unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if libc::syscall(
          libc::SYS_pidfd_send_signal,
          pidfd,
          libc::SIGKILL,
          std::ptr::null::<u8>(),
          0,
        ) != 0
        {
          eprintln!("pidfd_send_signal: {}", std::io::Error::last_os_error());
        }
      }
    }
    #[cfg(target_arch = "x86_64")]
    "int80" => {
      // The i386 ABI from a 64-bit process: socketcall and friends behind other numbers, which
      // a filter keyed on x86_64 numbers would not know. i386 getpid is 20.
      let mut nr: u32 = 20;
      // SAFETY: i386 getpid takes no arguments and touches no memory.
      unsafe { std::arch::asm!("int 0x80", inout("eax") nr) };
      println!("int80 returned {nr}");
    }
    "setxattr" => {
      let path = std::ffi::CString::new(arg).unwrap();
      // SAFETY: NUL-terminated name and path, a 5-byte value; failure is the expected outcome.
      let r = unsafe {
        libc::setxattr(
          path.as_ptr(),
          c"user.finn".as_ptr(),
          b"pwned".as_ptr().cast(),
          5,
          0,
        )
      };
      if r != 0 {
        eprintln!("setxattr: {}", std::io::Error::last_os_error());
      }
    }
    other => panic!("unknown attack {other}"),
  }
}

pub fn writes_outside_the_jail<B: Backend>(b: &B, settings: Vec<(Value, bool)>) {
  for (opts, stopped) in settings {
    let j = b.jail();
    std::fs::write(j.out.join("victim"), "orig").unwrap();
    std::fs::write(j.root.join("mine"), "data").unwrap();
    let script = format!(
      r#"o={out}; e={evil}
      echo x > $o/direct
      echo x > $e/evil
      ln -s $o/viasym link; echo x > link
      ln $o/victim hard; echo pwned >> hard
      echo x > /proc/self/root$o/procroot
      mv mine $o/moved
      mkdir d; mv d $o/dir-moved"#,
      out = j.out.display(),
      evil = j.evil.display()
    );
    let r = sh(b, &opts, &j.root, &script);
    let escaped: Vec<&str> = [
      ("direct", exists(&j.out.join("direct"))),
      ("jail-evil", exists(&j.evil.join("evil"))),
      ("symlink", exists(&j.out.join("viasym"))),
      (
        "hardlink",
        std::fs::read_to_string(j.out.join("victim")).unwrap() != "orig",
      ),
      ("/proc/self/root", exists(&j.out.join("procroot"))),
      ("rename file out", exists(&j.out.join("moved"))),
      ("rename dir out", exists(&j.out.join("dir-moved"))),
    ]
    .into_iter()
    .filter_map(|(name, hit)| hit.then_some(name))
    .collect();
    if stopped {
      assert!(
        escaped.is_empty(),
        "{opts}: escaped via {escaped:?}; stderr: {}",
        r.stderr
      );
      // The jail itself stays writable.
      assert!(exists(&j.root.join("link")), "{opts}: {}", r.stderr);
    } else {
      assert_eq!(
        escaped.len(),
        7,
        "off: every write must land, got {escaped:?}: {}",
        r.stderr
      );
    }
  }
}

/// The fourth way at the denied directory `<outside>/dotssh`, besides reading its key directly.
pub enum DeniedDirProbe {
  /// `cat <outside>/link/id_ed25519` through a sibling symlink into it (made by the test):
  /// landlock's carving must not grant the symlink, and so its target.
  ReadThroughSiblingSymlink,
  /// `ls <outside>/dotssh`: the mount over it hides its names too.
  ListIt,
}

/// `settings` without the deny list: it is added to every setting that must stop the reads
/// (`off` runs as it is).
pub fn denied_reads<B: Backend>(b: &B, settings: Vec<(Value, bool)>, fourth: DeniedDirProbe) {
  for (mut opts, stopped) in settings {
    let j = b.jail();
    let secret_dir = j.out.join("dotssh");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("id_ed25519"), "KEY-TOKEN").unwrap();
    std::fs::write(j.out.join("netrc"), "NETRC-TOKEN").unwrap();
    std::fs::write(j.out.join("public"), "PUBLIC").unwrap();
    if stopped {
      merge(
        &mut opts,
        &json!({"fs": {"denyRead": [secret_dir, j.out.join("netrc"), "/etc/shadow"]}}),
      );
    }
    let o = j.out.display();
    let (fourth_cmd, fourth_leak) = match fourth {
      DeniedDirProbe::ReadThroughSiblingSymlink => {
        std::os::unix::fs::symlink(&secret_dir, j.out.join("link")).unwrap();
        (format!("cat {o}/link/id_ed25519 > leak4"), "KEY-TOKEN")
      }
      DeniedDirProbe::ListIt => (format!("ls {o}/dotssh > leak4"), "id_ed25519"),
    };
    let r = sh(
      b,
      &opts,
      &j.root,
      &format!(
        "cat {o}/dotssh/id_ed25519 > leak1; cat {o}/netrc > leak2; cat /etc/shadow > leak3; cat {o}/public > pub; {fourth_cmd}"
      ),
    );
    let read = |f: &str| std::fs::read_to_string(j.root.join(f)).unwrap_or_default();
    assert_eq!(
      read("pub"),
      "PUBLIC",
      "{opts}: readable siblings stay readable: {}",
      r.stderr
    );
    let leaks = [
      read("leak1").contains("KEY-TOKEN"),
      read("leak2").contains("NETRC-TOKEN"),
      read("leak4").contains(fourth_leak),
    ];
    if stopped {
      assert_eq!(leaks, [false; 3], "{opts}: {}", r.stderr);
      assert_eq!(read("leak3"), "", "{opts}: /etc/shadow leaked");
    } else {
      assert_eq!(leaks, [true; 3], "off: {}", r.stderr);
      if is_root() {
        assert!(!read("leak3").is_empty(), "off: root reads /etc/shadow");
      }
    }
  }
}

/// mount, mknod, `unshare -U -r`, `unshare -m` and a sysctl write; with `remount`, also `mount -o remount,rw /`
/// (bwrap's read-only view of the host's root: were it to work, the write to `<outside>`, on
/// the same filesystem and read-only in the view, would land). As root every one lands off; as
/// nobody only `unshare -U -r` does, where the host allows user namespaces (the native file
/// runs its own nobody variant and calls this as root only).
pub fn root_operations_fail<B: Backend>(b: &B, settings: Vec<(Value, bool)>, remount: bool) {
  for (opts, stopped) in settings {
    let j = b.jail();
    std::fs::create_dir(j.root.join("m")).unwrap();
    let o = j.out.display();
    let remount_cmd = if remount {
      format!("mount -o remount,rw / && touch {o}/remounted")
    } else {
      String::new()
    };
    let r = sh(
      b,
      &opts,
      &j.root,
      &format!(
        "mount -t tmpfs none m && touch m/mounted
         {remount_cmd}
         mknod dev c 1 3
         unshare -U -r touch unshared
         unshare -m touch unshared-m
         v=$(cat /proc/sys/kernel/core_pattern) && printf '%s\n' \"$v\" > /proc/sys/kernel/core_pattern && touch sysctl"
      ),
    );
    let mounted = exists(&j.root.join("m/mounted"));
    if mounted {
      let m = std::ffi::CString::new(j.root.join("m").to_str().unwrap()).unwrap();
      // SAFETY: umount of a NUL-terminated path this test mounted.
      let unmounted = unsafe { libc::umount(m.as_ptr()) } == 0;
      // Off, the mount is the host's (root): it must come off. Isolated, it can only be in the
      // sandbox's own namespace (gone with it), and `hits` below fails the run anyway.
      assert!(unmounted || stopped, "off: umount {}", j.root.display());
    }
    let mut hits = vec![("mount", mounted)];
    if remount {
      hits.push(("remount", exists(&j.out.join("remounted"))));
    }
    hits.extend([
      ("mknod", exists(&j.root.join("dev"))),
      ("unshare -U -r", exists(&j.root.join("unshared"))),
      ("unshare -m", exists(&j.root.join("unshared-m"))),
      // The same value written back: harmless where it lands (off, as root). bwrap's new
      // /proc left `/proc/sys` writable to its root, and a pipe in `core_pattern` ran a program
      // of the command's as host root on the next crash.
      ("sysctl", exists(&j.root.join("sysctl"))),
    ]);
    let landed = |want: bool| hits.iter().filter(|(_, h)| *h == want).count() == hits.len();
    if stopped {
      assert!(landed(false), "{opts}: {hits:?}: {}", r.stderr);
    } else if is_root() {
      assert!(landed(true), "off: {hits:?}: {}", r.stderr);
    } else {
      // As nobody, mount, mknod and `unshare -m` fail without isolation too (the root run
      // proves them); the unprivileged user namespace does not, where the host allows it.
      let userns = hits.iter().find(|(n, _)| *n == "unshare -U -r").unwrap().1;
      assert_eq!(userns, probe().userns, "off: unshare -U -r: {}", r.stderr);
    }
  }
}

pub fn network_tcp_udp_and_unix_socket_by_path<B: Backend>(b: &B, settings: Vec<(Value, bool)>) {
  use std::net::{TcpListener, UdpSocket};
  use std::os::unix::net::UnixListener;
  for (opts, stopped) in settings {
    let j = b.jail();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let sock = j.out.join("agent.sock");
    let unix = UnixListener::bind(&sock).unwrap();
    unix.set_nonblocking(true).unwrap();
    let script = format!(
      "echo tcp > /dev/tcp/127.0.0.1/{}; echo udp > /dev/udp/127.0.0.1/{}",
      tcp.local_addr().unwrap().port(),
      udp.local_addr().unwrap().port()
    );
    let r = sh(b, &opts, &j.root, &script);
    let u = helper(b, &opts, &j.root, "unix-connect", sock.to_str().unwrap());
    // The commands have exited (bwrap waits for its child): what they sent is queued here.
    let got = [
      tcp.accept().is_ok(),
      udp.recv(&mut [0; 16]).is_ok(),
      unix.accept().is_ok(),
    ];
    assert_eq!(got, [!stopped; 3], "{opts}: {} / {}", r.stderr, u.stderr);
  }
}

/// Which processes `only_fds_0_to_2_are_inherited` looks at.
#[derive(Clone, Copy, PartialEq)]
pub enum FdScope {
  /// The command alone: `/bin/sleep` itself, no shell (spawn() returns once exec has
  /// succeeded, through std's CLOEXEC error pipe).
  Command,
  /// The whole tree below the spawned process: `sh` prints `ready` once it runs, then becomes
  /// `sleep` with the same fds; by then bwrap and its pid-1 helper are set up. Isolated, the
  /// tree has at least two processes and the command holds exactly fds 0 to 2 (not even the
  /// seccomp memfds bwrap consumed reach it).
  Tree,
}

pub fn only_fds_0_to_2_are_inherited<B: Backend>(
  b: &B,
  settings: Vec<(Value, bool)>,
  scope: FdScope,
) {
  for (opts, stopped) in settings {
    let j = b.jail();
    // A file, a pipe and a socket without CLOEXEC, as a careless parent would leave them.
    let path = std::ffi::CString::new(j.out.join("f").to_str().unwrap()).unwrap();
    let mut leaked = [0; 5];
    // SAFETY: open/pipe/socketpair write fds into arrays on our stack; all are closed below.
    unsafe {
      leaked[0] = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600);
      assert_eq!(libc::pipe(leaked[1..3].as_mut_ptr()), 0);
      assert_eq!(
        libc::socketpair(
          libc::AF_UNIX,
          libc::SOCK_STREAM,
          0,
          leaked[3..5].as_mut_ptr()
        ),
        0
      );
    }
    let ours: Vec<PathBuf> = fd_targets(std::process::id())
      .into_iter()
      .filter(|(fd, _)| leaked.contains(fd))
      .map(|(_, t)| t)
      .collect();
    assert_eq!(ours.len(), 5);
    // The command may open files of its own while starting (locale), so what counts is whether
    // one of ours reached it, not the bare fd numbers. The preparation (and its cgroup, which
    // dropping it empties) is kept until the tree is gone, as the reaper keeps it.
    let argv: &[&str] = match scope {
      FdScope::Command => &["/bin/sleep", "60"],
      FdScope::Tree => &["/bin/sh", "-c", "echo ready; exec sleep 60"],
    };
    let (mut cmd, prepared) = b.command(&opts, &j.root, argv);
    let mut child = cmd.spawn().unwrap();
    if scope == FdScope::Tree && !wait_line(&mut child, "ready") {
      let mut e = String::new();
      std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut e).unwrap();
      panic!("{opts}: the command did not start: {:?} {e}", child.wait());
    }
    let procs = match scope {
      FdScope::Command => vec![child.id()],
      FdScope::Tree => tree(child.id()),
    };
    let mut inherited = Vec::new();
    let mut command_fds = Vec::new();
    for &pid in &procs {
      let fds = fd_targets(pid);
      // The command is alive (sleep 60) and holds 0 to 2: an empty list is an unreadable one.
      assert!(
        scope == FdScope::Tree || !fds.is_empty(),
        "{opts}: /proc/{pid}/fd"
      );
      inherited.extend(fds.iter().filter(|(_, t)| ours.contains(t)).cloned());
      // The command: `sh`, or `sleep` once it has exec'd (the same fds either way).
      if std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| !e.ends_with("bwrap")) {
        command_fds.push(fds.iter().map(|(fd, _)| *fd).collect::<Vec<_>>());
      }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop((cmd, prepared));
    for fd in leaked {
      // SAFETY: closing the fds opened above.
      unsafe { libc::close(fd) };
    }
    if stopped {
      assert_eq!(inherited, Vec::new(), "{opts}: leaked into {procs:?}");
      if scope == FdScope::Tree {
        assert!(procs.len() >= 2, "{opts}: bwrap's tree: {procs:?}");
        for fds in &mut command_fds {
          fds.sort();
        }
        assert_eq!(command_fds, [[0, 1, 2]], "{opts}: the command's fds");
      }
    } else {
      assert_eq!(
        inherited.len(),
        5,
        "off: every leaked fd reaches the command: {inherited:?}"
      );
    }
  }
}

/// How the protect swap race is run: the backends start at different speeds and refuse a start
/// that meets the symlink in different ways.
pub struct SwapRace {
  /// Isolated, this many commands must start (and write nothing).
  pub starts: usize,
  /// Swap 3 ms of every 10 rather than all the time: a bwrap start takes a few ms and is
  /// refused whenever it meets the symlink (it follows it, or the verifier sees another
  /// object), so without quiet spells almost none start on a slow machine; starts that straddle
  /// a burst's edge are the ones that race.
  pub bursts: bool,
  /// `.git/alt` is `../../outside` rather than the absolute path: inside bwrap a relative one
  /// still names the outside directory (an absolute one is looked up by bwrap from its own
  /// root, and fails).
  pub relative_alt: bool,
  /// A start counts only when the script exits 0 (it ends `exit 0`): bwrap's own refusal is
  /// exit 1 with `bwrap: ...`. Otherwise it counts when spawn succeeds (a refused native start
  /// fails in pre_exec).
  pub started_means_exit_0: bool,
}

/// The bind's own race (the jail is bound from the checked fd, not by path): a host
/// thread swaps the protected `.git/hooks` with a symlink to outside (and straight back) while
/// isolated commands start and write into `.git/hooks/`. A bind made by path could follow the
/// symlink, protect the outside directory instead, and leave the real hooks directory writable
/// once it is swapped back. Bound from the checked object, the real directory is read-only in
/// every command that starts (a start that meets the symlink is refused). Judged from the host:
/// files in the real hooks directory (whatever its name at the end) or outside.
pub fn the_protect_swap_race_never_leaves_hooks_writable<B: Backend>(
  b: &B,
  settings: Vec<(Value, bool)>,
  race: SwapRace,
) {
  use std::sync::atomic::{AtomicBool, Ordering};
  for (opts, stopped) in settings {
    let j = b.jail();
    let git = j.root.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    // The real hooks directory, wherever the swapper will put it: through an fd opened now.
    let hooks = std::fs::File::open(git.join("hooks")).unwrap();
    let real_hooks = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&hooks));
    if race.relative_alt {
      std::os::unix::fs::symlink("../../outside", git.join("alt")).unwrap();
    } else {
      std::os::unix::fs::symlink(&j.out, git.join("alt")).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
      let (stop, git, bursts) = (stop.clone(), git.clone(), race.bursts);
      std::thread::spawn(move || {
        let a = std::ffi::CString::new(git.join("hooks").to_str().unwrap()).unwrap();
        let b = std::ffi::CString::new(git.join("alt").to_str().unwrap()).unwrap();
        let swap = || super::exchange(&a, &b);
        let phase = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
          // To the symlink and straight back: the symlink is there for moments only, so most
          // checks pass and the starts reach the window this test is about (between the check
          // and the mount); the yield lets them run on a 2-core machine.
          if !bursts || phase.elapsed().as_micros() % 10_000 < 3_000 {
            swap();
            swap();
          }
          std::thread::yield_now();
        }
      })
    };
    let landed = || {
      std::fs::read_dir(&real_hooks).unwrap().count() + std::fs::read_dir(&j.out).unwrap().count()
    };
    let script = if race.started_means_exit_0 {
      "for i in $(seq 1 20); do echo pwn > .git/hooks/f$i$RANDOM; done 2>/dev/null; exit 0"
    } else {
      "for i in $(seq 1 20); do echo pwn > .git/hooks/f$i$RANDOM; done 2>/dev/null"
    };
    let (mut tries, mut started) = (0, 0);
    // Isolated: the commands that start, none may write (a start refused because it met the
    // symlink writes nothing). Off: stop at the first write that lands: the attack must be able
    // to land at all.
    while tries < 20_000 && started < race.starts && (stopped || landed() == 0) {
      tries += 1;
      // A symlink at the protected path when the preparation checks it: refused.
      let Ok((mut cmd, prepared)) = b.try_command(&opts, &j.root, &["/bin/bash", "-c", script])
      else {
        continue;
      };
      cmd.stdout(Stdio::null()).stderr(Stdio::null());
      let status = cmd.status();
      drop((cmd, prepared));
      // A start that meets the swapped path fails (fail closed) and writes nothing.
      let ran = if race.started_means_exit_0 {
        status.is_ok_and(|s| s.success())
      } else {
        status.is_ok()
      };
      if ran {
        started += 1;
      }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let n = landed();
    eprintln!("{opts}: {n} writes landed, {started} started of {tries}");
    if stopped {
      assert_eq!(
        n, 0,
        "{opts}: {n} writes landed in {started} started of {tries}"
      );
      assert_eq!(
        started, race.starts,
        "{opts}: only {started} started in {tries} tries"
      );
    } else {
      assert!(n > 0, "off: no write landed in {tries} commands");
    }
  }
}

/// A terminal outside (the operator's shell, another session) is a `/dev/pts/N` the same uid owns:
/// writing to it injects output, reading it steals keystrokes.
pub fn an_outside_terminal_cannot_be_read_or_written<B: Backend>(
  b: &B,
  settings: Vec<(Value, bool)>,
) {
  use std::os::fd::{AsRawFd, OwnedFd};
  for (opts, stopped) in settings {
    let j = b.jail();
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two fds; null name, termios and winsize.
    let r = unsafe {
      libc::openpty(
        &mut master,
        &mut slave,
        std::ptr::null_mut(),
        std::ptr::null(),
        std::ptr::null(),
      )
    };
    assert_eq!(r, 0);
    // SAFETY: openpty returned two fresh fds we own.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let name = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
    // Typed by the operator, waiting in the terminal's input queue.
    let mut m = std::fs::File::from(master.try_clone().unwrap());
    std::io::Write::write_all(&mut m, b"hunter2\n").unwrap();
    let script = format!(
      "echo INJECTED > {t}; timeout 2 head -n 1 < {t} > stolen",
      t = name.display()
    );
    let ran = sh(b, &opts, &j.root, &script);
    // SAFETY: O_NONBLOCK on our own fd.
    unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let mut buf = vec![0u8; 4096];
    let n = std::io::Read::read(&mut m, &mut buf).unwrap_or(0);
    let out = String::from_utf8_lossy(&buf[..n]).to_string();
    let stolen = std::fs::read_to_string(j.root.join("stolen")).unwrap_or_default();
    let escaped: Vec<&str> = [
      ("write", out.contains("INJECTED")),
      ("read", stolen.contains("hunter2")),
    ]
    .into_iter()
    .filter_map(|(name, hit)| hit.then_some(name))
    .collect();
    drop(slave);
    if stopped {
      assert!(
        escaped.is_empty(),
        "{opts}: escaped via {escaped:?}; stderr: {}",
        ran.stderr
      );
    } else {
      assert_eq!(escaped.len(), 2, "off: {escaped:?} {out:?}: {}", ran.stderr);
    }
  }
}

/// The host's devices beyond the few a shell needs: another process's POSIX shared memory in
/// `/dev/shm` (a file of mode 0644: any uid reads it without isolation), and, as root, the
/// first of the host's consoles, virtual terminals or raw disks that the test itself can open
/// (`/dev/tty1` gave an attack an operator's typed line, `/dev/loop0` a file of a `denyRead`
/// directory). `/dev/urandom` and `/dev/null` keep working.
pub fn host_devices_cannot_be_read<B: Backend>(b: &B, settings: Vec<(Value, bool)>) {
  let shm = PathBuf::from(format!("/dev/shm/finn-test-{}", rand_suffix()));
  std::fs::write(&shm, "SHMSECRET\n").unwrap();
  std::fs::set_permissions(&shm, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
  let device = if is_root() {
    [
      "/dev/tty1",
      "/dev/vcs1",
      "/dev/console",
      "/dev/loop0",
      "/dev/sda",
      "/dev/vda",
    ]
    .into_iter()
    .find(|d| {
      std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(d)
        .is_ok()
    })
  } else {
    None
  };
  for (opts, stopped) in settings {
    let j = b.jail();
    let dev = device.unwrap_or("/nonexistent-device");
    let ran = sh(
      b,
      &opts,
      &j.root,
      &format!(
        "cat {} > shm; (exec 3< {dev}) 2>/dev/null && touch device; \
         head -c 4 /dev/urandom | wc -c > random; echo x > /dev/null && touch null",
        shm.display()
      ),
    );
    let read = |f: &str| std::fs::read_to_string(j.root.join(f)).unwrap_or_default();
    let hits = [
      ("shm", read("shm").contains("SHMSECRET")),
      ("device", exists(&j.root.join("device"))),
    ];
    assert_eq!(read("random").trim(), "4", "{opts}: {}", ran.stderr);
    assert!(exists(&j.root.join("null")), "{opts}: {}", ran.stderr);
    if stopped {
      assert!(
        hits.iter().all(|(_, h)| !h),
        "{opts}: {hits:?} ({dev}): {}",
        ran.stderr
      );
    } else {
      // Off, the probes land: the shared memory file always, the device where one was found.
      assert!(hits[0].1, "off: {hits:?}: {}", ran.stderr);
      assert_eq!(
        hits[1].1,
        device.is_some(),
        "off: {hits:?} ({dev}): {}",
        ran.stderr
      );
    }
  }
  let _ = std::fs::remove_file(&shm);
}

/// A repository without `.git/hooks` (`git init --template=`, or made by a library that writes no
/// template): a hook the command creates would run at the next git outside the sandbox.
pub fn a_missing_hooks_directory_cannot_be_created_with_a_hook<B: Backend>(
  b: &B,
  settings: Vec<(Value, bool)>,
) {
  for (opts, stopped) in settings {
    let j = b.jail();
    let r = sh(
      b,
      &off(),
      &j.root,
      "git init -q --template= . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m && test ! -e .git/hooks",
    );
    assert!(r.status.success(), "{}", r.stderr);
    let marker = j.out.join("pwned");
    let r = sh(
      b,
      &opts,
      &j.root,
      &format!(
        "mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/post-commit && chmod +x .git/hooks/post-commit",
        m = marker.display()
      ),
    );
    // The host's own git, later, outside any sandbox.
    let _ = sh(
      b,
      &off(),
      &j.root,
      "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m2",
    );
    assert_eq!(marker.exists(), !stopped, "{opts}: {}", r.stderr);
  }
}

/// System V IPC outside (a shared memory segment of the same uid: another job's, Node's
/// addons', a host service's): not files, so landlock does not see it; the command could attach
/// and rewrite it, or remove it. `key_base`: the high half of the segment's key, one per test
/// binary, so the two binaries running side by side never ask for the same key.
pub fn an_outside_sysv_shared_memory_segment_stays_out_of_reach<B: Backend>(
  b: &B,
  settings: Vec<(Value, bool)>,
  key_base: i32,
) {
  for (opts, stopped) in settings {
    let j = b.jail();
    let key = key_base | (rand_suffix() as i32 & 0xffff);
    // SAFETY: shmget with a key, a size and flags.
    let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
    assert!(id >= 0, "{}", std::io::Error::last_os_error());
    let r = sh(b, &opts, &j.root, &format!("ipcrm -M {key}"));
    // SAFETY: a shmid_ds is plain data; all zeroes is a valid value.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT into a shmid_ds on our stack.
    let alive = unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } == 0;
    let removed = !alive || ds.shm_perm.mode & 0o1000 != 0; // SHM_DEST: marked for removal
    // SAFETY: IPC_RMID of our own segment (if it is still there).
    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    assert_eq!(removed, !stopped, "{opts}: {}", r.stderr);
  }
}

/// A `denyRead` path that does not exist when the job starts (`~/.aws` before `aws configure`),
/// created by the host while the job runs: a mount cannot cover what is not there. The deny
/// list is added to every setting (`off` included, where it means nothing); `stopped` says
/// whether the read must fail, and it is the caller's to say (README: bwrap does not stop it).
pub fn a_denied_path_created_during_the_job<B: Backend>(b: &B, settings: Vec<(Value, bool)>) {
  for (opts, stopped) in settings {
    let j = b.jail();
    let creds = j.out.join("creds");
    let mut deny = opts.clone();
    merge(
      &mut deny,
      &json!({"fs": {"denyRead": [creds.to_str().unwrap()]}}),
    );
    let script = format!(
      "for i in $(seq 30); do cat {c} > stolen 2>/dev/null && [ -s stolen ] && break; sleep 0.05; done",
      c = creds.display()
    );
    // Kept until the end: dropping the preparation would tear down the job's cgroup (root)
    // under the command.
    let (mut cmd, _prepared) = b.command(&deny, &j.root, &["/bin/bash", "-c", &script]);
    let child = cmd.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(&creds, "aws_secret_access_key=sk-created-later").unwrap();
    let out = child.wait_with_output().unwrap();
    let stolen = std::fs::read_to_string(j.root.join("stolen")).unwrap_or_default();
    assert_eq!(
      stolen.contains("sk-created-later"),
      !stopped,
      "{deny}: {:?} {}",
      out.status,
      String::from_utf8_lossy(&out.stderr)
    );
  }
}
