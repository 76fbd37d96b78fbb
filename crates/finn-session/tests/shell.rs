//! The shell protocol and the state restore against real bash.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use finn_session::{
  CommandResult, CommandStatus, Cut, Host, RunOptions, Session, SessionConfig, SessionError,
};

fn bash() -> PathBuf {
  ["/bin/bash", "/usr/bin/bash"]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("bash is installed")
}

/// The host of the sessions under test: this process, or, with
/// `FINN_SESSION_TEST_SUPERVISOR` naming a `finn-supervisor` binary, a reaper of it (the same
/// tests then run against the reaper-held shell; `tests/session.rs` at the root does that).
fn host() -> Host {
  match std::env::var_os("FINN_SESSION_TEST_SUPERVISOR") {
    Some(path) => Host::Reaper {
      supervisor: std::sync::Arc::new(finn_supervisor::Supervisor::new(path.into())),
      isolation: None,
    },
    None => Host::Local,
  }
}

fn under_reaper() -> bool {
  matches!(host(), Host::Reaper { .. })
}

fn start_in(cwd: PathBuf) -> Session {
  let env = ["PATH", "HOME", "LANG"]
    .iter()
    .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
    .collect();
  Session::start(SessionConfig {
    shell: bash(),
    cwd,
    env,
    host: host(),
  })
  .expect("start a session")
}

fn start() -> Session {
  start_in(std::env::temp_dir())
}

fn run(s: &mut Session, cmd: &str) -> CommandResult {
  s.run(cmd.as_bytes(), &RunOptions::default())
    .expect("run a command")
}

fn stdout(s: &mut Session, cmd: &str) -> String {
  let r = run(s, cmd);
  assert_eq!(r.status, CommandStatus::Exited(0), "{cmd}: {r:?}");
  String::from_utf8(r.stdout).expect("utf-8")
}

/// A command after a restart sees every kind of state the restore brings back.
fn set_up_state(s: &mut Session, dir: &std::path::Path) {
  let cmd = format!(
    "cd '{}' && export FOO='a b\nc' && plain=kept && declare -a arr=(x 'y z') && f() {{ echo \"f:$1\"; }} && export -f f && readonly ro=fixed && alias hi='echo hello' && set -o pipefail && shopt -s extglob && umask 0027 && unset LANG",
    dir.display()
  );
  assert_eq!(run(s, &cmd).status, CommandStatus::Exited(0));
}

fn assert_state_restored(s: &mut Session, dir: &std::path::Path) {
  assert_eq!(stdout(s, "pwd"), format!("{}\n", dir.display()));
  assert_eq!(stdout(s, "printenv FOO"), "a b\nc\n");
  assert_eq!(
    stdout(s, "echo \"$plain ${arr[1]} ${#arr[@]}\""),
    "kept y z 2\n"
  );
  assert_eq!(stdout(s, "f 1"), "f:1\n");
  assert_eq!(
    stdout(s, "bash -c 'f 2'"),
    "f:2\n",
    "the function stays exported"
  );
  assert_eq!(
    stdout(s, "echo $ro; readonly -p | grep -c ' ro='"),
    "fixed\n1\n"
  );
  assert_eq!(stdout(s, "hi"), "hello\n");
  assert_eq!(
    stdout(s, "shopt -q extglob && [[ -o pipefail ]] && echo on"),
    "on\n"
  );
  assert_eq!(stdout(s, "echo \"${LANG-unset}\""), "unset\n");
  assert_eq!(stdout(s, "umask"), "0027\n");
}

#[test]
fn cd_export_functions_aliases_and_options_persist_between_commands() {
  let dir = tempfile::tempdir().unwrap();
  let dir = dir.path().canonicalize().unwrap();
  let mut s = start();
  set_up_state(&mut s, &dir);
  assert_state_restored(&mut s, &dir);
  let r = run(&mut s, "true");
  assert!(!r.session_restarted);
}

#[test]
fn output_bytes_are_kept_exactly() {
  let mut s = start();
  let r = run(
    &mut s,
    r"printf 'a\n\n\n'; printf 'x\0y\377\n' >&2; printf 'no newline'",
  );
  assert_eq!(r.stdout, b"a\n\n\nno newline");
  assert_eq!(r.stderr, b"x\0y\xff\n");
  assert_eq!(r.status, CommandStatus::Exited(0));
}

#[test]
fn the_exit_status_is_the_command_s() {
  let mut s = start();
  assert_eq!(run(&mut s, "false").status, CommandStatus::Exited(1));
  assert_eq!(run(&mut s, "(exit 42)").status, CommandStatus::Exited(42));
  assert_eq!(
    run(&mut s, "sh -c 'kill -TERM $$'").status,
    CommandStatus::Exited(128 + 15)
  );
  let r = run(&mut s, "exit 3");
  assert_eq!(r.status, CommandStatus::Exited(3));
  assert!(r.session_restarted);
}

#[test]
fn a_shell_ended_by_exit_exec_set_e_or_a_signal_comes_back_with_its_state() {
  let dir = tempfile::tempdir().unwrap();
  let dir = dir.path().canonicalize().unwrap();
  let mut s = start();
  set_up_state(&mut s, &dir);
  for (cmd, status, out) in [
    ("echo before; exit 7", CommandStatus::Exited(7), "before\n"),
    ("exec echo replaced", CommandStatus::Exited(0), "replaced\n"),
    ("exec sh -c 'exit 5'", CommandStatus::Exited(5), ""),
    (
      "set -e; echo one; false; echo two",
      CommandStatus::Exited(1),
      "one\n",
    ),
    ("kill -KILL $$", CommandStatus::Signaled(9), ""),
  ] {
    let pid = s.pid();
    let r = run(&mut s, cmd);
    assert_eq!(r.status, status, "{cmd}: {r:?}");
    assert_eq!(String::from_utf8_lossy(&r.stdout), out, "{cmd}");
    assert!(r.session_restarted, "{cmd}");
    assert_ne!(s.pid(), pid, "{cmd}: a new shell");
    assert_state_restored(&mut s, &dir);
    assert!(!run(&mut s, "true").session_restarted);
  }
}

#[test]
fn a_syntax_error_or_an_unterminated_quote_is_the_command_s_error_and_the_shell_goes_on() {
  let dir = tempfile::tempdir().unwrap();
  let dir = dir.path().canonicalize().unwrap();
  let mut s = start();
  set_up_state(&mut s, &dir);
  let pid = s.pid();
  for cmd in [
    "echo 'unterminated",
    "echo \"open",
    "if true; then",
    ")",
    "echo $(",
    "f() {",
  ] {
    let r = run(&mut s, cmd);
    assert_eq!(r.status, CommandStatus::Exited(2), "{cmd}: {r:?}");
    assert!(!r.stderr.is_empty(), "{cmd}: bash says why");
    assert!(!r.session_restarted, "{cmd}");
    assert_eq!(s.pid(), pid, "{cmd}: the same shell");
    assert_state_restored(&mut s, &dir);
  }
}

#[test]
fn a_special_builtin_s_error_in_posix_mode_ends_the_shell_and_the_state_comes_back() {
  let mut s = start();
  run(&mut s, "kept=1; set -o posix");
  let r = run(&mut s, "echo 'open");
  assert_eq!(r.status, CommandStatus::Exited(2), "{r:?}");
  assert!(
    !r.session_restarted,
    "bash 5 survives eval's syntax error even in posix mode"
  );
  let r = run(&mut s, ": > /nonexistent/x; echo not-reached");
  assert_eq!(r.status, CommandStatus::Exited(1), "{r:?}");
  assert!(r.stdout.is_empty());
  assert!(r.session_restarted);
  assert_eq!(
    stdout(&mut s, "echo $kept; [[ -o posix ]] && echo posix"),
    "1\nposix\n"
  );
}

#[test]
fn the_command_text_is_data_not_session_code() {
  let mut s = start();
  // Text that would break out of an interpolation: quotes, the request's own shape, newlines.
  let nasty = "echo \"a'b\" '\"'; echo '; __finn_sess_post 0 99'\n echo $((1+1))";
  assert_eq!(
    stdout(&mut s, nasty),
    "a'b \"\n; __finn_sess_post 0 99\n2\n"
  );
  assert_eq!(
    stdout(&mut s, "   \n  echo leading-space"),
    "leading-space\n"
  );
  assert_eq!(run(&mut s, "").status, CommandStatus::Exited(0));
  assert!(matches!(
    s.run(b"echo a\0b", &RunOptions::default()),
    Err(SessionError::NulInCommand)
  ));
}

#[test]
fn the_user_s_variables_functions_and_traps_are_left_alone() {
  let mut s = start();
  run(
    &mut s,
    "x=1; flags=mine; cmd=mine; read() { echo shadow; }; printf() { echo shadow; }; trap 'echo trapped' USR1; set -u",
  );
  assert_eq!(stdout(&mut s, "echo $x $flags $cmd"), "1 mine mine\n");
  assert_eq!(
    stdout(&mut s, "trap -p USR1"),
    "trap -- 'echo trapped' SIGUSR1\n"
  );
  assert_eq!(stdout(&mut s, "read"), "shadow\n");
  assert_eq!(
    stdout(&mut s, "[[ $- == *u* ]] && echo nounset"),
    "nounset\n"
  );
  // Only the session's prefixed names are its own, and none is exported to commands.
  assert_eq!(stdout(&mut s, "env | grep -c __finn_sess_ || true"), "0\n");
}

#[test]
fn allexport_does_not_export_the_session_s_variables() {
  let mut s = start();
  run(&mut s, "set -a");
  run(&mut s, "y=2");
  assert_eq!(
    stdout(&mut s, "env | grep -c '^__finn_sess_' || true"),
    "0\n"
  );
  assert_eq!(stdout(&mut s, "printenv y"), "2\n");
}

#[test]
fn a_one_mebibyte_line_comes_through_whole() {
  let mut s = start();
  let r = run(&mut s, "head -c 1048576 /dev/zero | tr '\\0' x; echo");
  assert_eq!(r.stdout.len(), 1024 * 1024 + 1);
  assert!(r.stdout[..1024 * 1024].iter().all(|&b| b == b'x'));
  assert_eq!(r.stdout.last(), Some(&b'\n'));
}

#[test]
fn stdin_is_eof_unless_given() {
  let mut s = start();
  let t = Instant::now();
  let r = run(&mut s, "cat; read line; echo \"read=$? [$line]\"");
  assert_eq!(r.stdout, b"read=1 []\n");
  assert!(t.elapsed() < Duration::from_secs(5));
  let given = RunOptions {
    stdin: Some(b"one\ntwo\0three".to_vec()),
    ..RunOptions::default()
  };
  let r = s
    .run(b"read first; echo \"[$first]\"; cat", &given)
    .unwrap();
  assert_eq!(r.stdout, b"[one]\ntwo\0three");
  // A command that does not read its stdin still ends.
  let big = RunOptions {
    stdin: Some(vec![b'z'; 1 << 20]),
    ..RunOptions::default()
  };
  assert_eq!(s.run(b"echo ignored", &big).unwrap().stdout, b"ignored\n");
  assert_eq!(stdout(&mut s, "wc -c"), "0\n");
}

#[test]
fn a_timeout_kills_the_command_and_the_state_survives() {
  let mut s = start();
  run(&mut s, "kept=1");
  let opts = RunOptions {
    timeout: Some(Duration::from_millis(200)),
    ..RunOptions::default()
  };
  let pid = s.pid().unwrap();
  let r = s.run(b"echo started; sleep 30", &opts).unwrap();
  assert_eq!(r.stdout, b"started\n");
  assert_eq!(r.cut, Some(Cut::Wall));
  if under_reaper() {
    // Only the command's tree is killed: the shell reports it, and lives on.
    assert_eq!(r.status, CommandStatus::Exited(128 + 9));
    assert!(!r.session_restarted);
    assert_eq!(s.pid(), Some(pid));
  } else {
    assert_eq!(r.status, CommandStatus::TimedOut);
    assert!(r.session_restarted);
    assert!(
      !std::path::Path::new(&format!("/proc/{pid}")).exists(),
      "the old shell is reaped"
    );
  }
  assert_eq!(stdout(&mut s, "echo $kept"), "1\n");
  // set -n stops a shell from running anything: only the timeout ends that command.
  let r = s.run(b"set -n; echo never", &opts).unwrap();
  assert_eq!(r.status, CommandStatus::TimedOut);
  assert!(r.stdout.is_empty());
  assert_eq!(
    stdout(&mut s, "echo $kept; [[ $- == *n* ]] || echo executes"),
    "1\nexecutes\n"
  );
}

#[test]
fn a_shell_killed_between_commands_is_replaced_before_the_next() {
  let mut s = start();
  run(&mut s, "kept=1");
  let pid = s.pid().unwrap();
  nix::sys::signal::kill(
    nix::unistd::Pid::from_raw(pid),
    nix::sys::signal::Signal::SIGKILL,
  )
  .unwrap();
  assert!(exits(pid));
  let r = run(&mut s, "echo $kept");
  assert_eq!(r.stdout, b"1\n");
  assert!(r.session_restarted);
}

#[test]
fn an_echo_round_trip_is_timed() {
  let mut s = start();
  for _ in 0..20 {
    run(&mut s, "echo warm");
  }
  let mut times: Vec<Duration> = (0..200)
    .map(|_| {
      let t = Instant::now();
      let r = run(&mut s, "echo hi");
      let e = t.elapsed();
      assert_eq!(r.stdout, b"hi\n");
      e
    })
    .collect();
  times.sort();
  println!(
    "echo round trip: median {:?}, p90 {:?}, max {:?}",
    times[100], times[180], times[199]
  );
}

#[test]
fn a_background_child_does_not_hold_the_command_open() {
  let mut s = start();
  let t = Instant::now();
  let r = run(&mut s, "sleep 30 & echo $!");
  assert!(t.elapsed() < Duration::from_secs(10));
  let pid: i32 = String::from_utf8(r.stdout).unwrap().trim().parse().unwrap();
  assert!(
    std::path::Path::new(&format!("/proc/{pid}")).exists(),
    "the child runs on"
  );
  assert_eq!(stdout(&mut s, "kill $!; wait $! ; echo $?"), "143\n");
}

#[test]
fn a_missing_working_directory_is_refused_at_start() {
  let r = Session::start(SessionConfig {
    shell: bash(),
    cwd: PathBuf::from("/nonexistent/finn-session"),
    env: Vec::new(),
    host: host(),
  });
  assert!(matches!(r, Err(SessionError::Cwd(_))));
}

#[test]
fn the_first_shell_starts_in_the_given_directory_with_the_given_environment() {
  let dir = tempfile::tempdir().unwrap();
  let dir = dir.path().canonicalize().unwrap();
  let mut s = Session::start(SessionConfig {
    shell: bash(),
    cwd: dir.clone(),
    env: vec![
      ("ONLY".into(), "this".into()),
      ("PATH".into(), "/usr/bin:/bin".into()),
    ],
    host: host(),
  })
  .unwrap();
  assert_eq!(
    stdout(&mut s, "pwd; printenv ONLY; printenv HOME || echo no-home"),
    format!("{}\nthis\nno-home\n", dir.display())
  );
}

#[test]
fn a_deleted_working_directory_falls_back_to_the_configured_one_on_restart() {
  let home = tempfile::tempdir().unwrap();
  let home = home.path().canonicalize().unwrap();
  let mut s = start_in(home.clone());
  let gone = home.join("gone");
  run(
    &mut s,
    &format!("mkdir '{0}' && cd '{0}' && rmdir '{0}'", gone.display()),
  );
  let r = run(&mut s, "exit 0");
  assert!(r.session_restarted);
  assert_eq!(stdout(&mut s, "pwd -P"), format!("{}\n", home.display()));
}

#[test]
fn set_e_persists_and_a_failure_under_it_restarts_with_it_still_on() {
  let mut s = start();
  assert_eq!(run(&mut s, "set -e").status, CommandStatus::Exited(0));
  assert_eq!(
    stdout(&mut s, "[[ $- == *e* ]] && echo errexit"),
    "errexit\n"
  );
  let r = run(&mut s, "false; echo not-reached");
  assert_eq!(r.status, CommandStatus::Exited(1));
  assert!(r.stdout.is_empty());
  assert!(r.session_restarted);
  assert_eq!(
    stdout(&mut s, "[[ $- == *e* ]] && echo errexit"),
    "errexit\n"
  );
  run(&mut s, "set +e");
  assert_eq!(run(&mut s, "false; echo reached").stdout, b"reached\n");
}

/// Waits (on a pidfd, bounded) until `pid` has exited.
fn exits(pid: i32) -> bool {
  let Ok(fd) = finn_exec::pidfd::open(pid) else {
    return true;
  };
  let mut p = [finn_exec::poll::watch(Some(
    std::os::fd::AsRawFd::as_raw_fd(&fd),
  ))];
  finn_exec::poll::poll(&mut p, Some(Instant::now() + Duration::from_secs(5)));
  finn_exec::pidfd::exited(&fd)
}

#[test]
fn background_jobs_die_with_the_shell_and_are_not_restored() {
  let mut s = start();
  let r = run(&mut s, "sleep 30 & echo $!; exit 0");
  assert!(r.session_restarted);
  let pid: i32 = String::from_utf8(r.stdout).unwrap().trim().parse().unwrap();
  assert!(exits(pid), "the dead shell's background job is killed");
  assert_eq!(stdout(&mut s, "jobs | wc -l"), "0\n");
}

#[test]
fn stdout_and_stderr_past_a_pipe_s_capacity_are_both_read_while_the_command_runs() {
  let mut s = start();
  let r = run(
    &mut s,
    "head -c 300000 /dev/zero >&2; head -c 300001 /dev/zero; head -c 5 /dev/zero >&2",
  );
  assert_eq!((r.stdout.len(), r.stderr.len()), (300_001, 300_005));
}

#[test]
fn a_long_command_text_arrives_whole() {
  let mut s = start();
  let text = format!("x='{}'; echo ${{#x}}", "y".repeat(100_000));
  let t = Instant::now();
  assert_eq!(stdout(&mut s, &text), "100000\n");
  println!("a 100 kB command text: {:?}", t.elapsed());
}

#[test]
fn a_timeout_under_job_control_kills_the_command_in_its_own_group() {
  let mut s = start();
  let opts = RunOptions {
    // Long enough for sh to start and say its pid on a loaded machine.
    timeout: Some(Duration::from_millis(1500)),
    ..RunOptions::default()
  };
  let r = s
    .run(b"set -m; sh -c 'echo $$; exec sleep 30'", &opts)
    .unwrap();
  assert_eq!(r.cut, Some(Cut::Wall));
  if !under_reaper() {
    assert_eq!(r.status, CommandStatus::TimedOut);
  }
  let pid: i32 = String::from_utf8(r.stdout).unwrap().trim().parse().unwrap();
  assert!(
    exits(pid),
    "the command in a group of its own is killed too"
  );
  let r = run(&mut s, "set -m; sleep 30 & echo $!; exit 0");
  let pid: i32 = String::from_utf8(r.stdout).unwrap().trim().parse().unwrap();
  assert!(
    exits(pid),
    "a job in a group of its own dies with the shell"
  );
}

#[test]
fn the_fifo_directory_is_private_and_emptied_after_each_command() {
  use std::os::unix::fs::PermissionsExt;
  let mut s = start();
  let dir = s.fifo_dir().to_path_buf();
  assert_eq!(
    std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
    0o700
  );
  run(&mut s, "echo x");
  let stdin = RunOptions {
    stdin: Some(b"y".to_vec()),
    ..RunOptions::default()
  };
  s.run(b"cat", &stdin).unwrap();
  // A reaper's shell keeps its own three fifos there (`script`, `data`, `done`).
  let left = std::fs::read_dir(&dir)
    .unwrap()
    .filter(|e| {
      !["script", "data", "done"].contains(&e.as_ref().unwrap().file_name().to_str().unwrap())
    })
    .count();
  assert_eq!(left, 0);
  drop(s);
  assert!(!dir.exists());
}

#[test]
fn commands_inherit_no_descriptor_of_the_session_and_cannot_fake_a_record() {
  let mut s = start();
  let open_fds =
    "sh -c 'for f in $(seq 3 64) 255; do [ -e /proc/self/fd/$f ] && echo $f; done; true'";
  assert_eq!(stdout(&mut s, open_fds), "");
  // A record's shape on stdout is just output; the done fd's old number is closed.
  let r = run(
    &mut s,
    r"printf '7 0\n\0\0\0\0\0\0'; echo fake >&5; echo after",
  );
  assert_eq!(r.stdout, b"7 0\n\0\0\0\0\0\0after\n");
  assert!(String::from_utf8_lossy(&r.stderr).contains("Bad file descriptor"));
  assert_eq!(r.status, CommandStatus::Exited(0));
}

#[test]
fn exec_redirections_last_for_their_command_and_user_descriptors_persist() {
  let dir = tempfile::tempdir().unwrap();
  let file = dir.path().join("three");
  let mut s = start();
  let r = run(
    &mut s,
    &format!("exec >/dev/null 2>&1 7>'{}'; echo hidden", file.display()),
  );
  assert_eq!((r.stdout.len(), r.stderr.len()), (0, 0));
  assert_eq!(stdout(&mut s, "echo visible; echo seven >&7"), "visible\n");
  assert_eq!(std::fs::read_to_string(&file).unwrap(), "seven\n");
  assert!(!run(&mut s, "true").session_restarted);
}

/// A yielded command goes on with its shell: the result's output and the detached command's
/// add up to all of it, its stdin pipe is the holder's, and the session goes on at once from its
/// state before the command.
#[test]
fn a_yielded_command_runs_on_with_its_shell_and_the_session_keeps_its_state() {
  let dir = tempfile::tempdir().unwrap();
  let go = dir.path().join("go");
  let mut s = start();
  run(&mut s, "export KEPT=before");
  let opts = RunOptions {
    yield_after: Some(Duration::from_millis(30)),
    stdin_pipe: true,
    ..RunOptions::default()
  };
  let cmd = format!(
    "KEPT=during; i=0; while [ ! -e {} ]; do echo $i; i=$((i+1)); done; read -r x; echo \"$KEPT $x\"; exit 4",
    go.display()
  );
  let r = s.run(cmd.as_bytes(), &opts).unwrap();
  assert_eq!(r.status, CommandStatus::Running);
  let mut detached = s.take_detached().expect("the command runs on");
  let stdin = detached.take_stdin().expect("a stdin pipe");
  // The session goes on from its state before the command.
  assert_eq!(stdout(&mut s, "echo $KEPT"), "before\n");
  std::fs::write(&go, "").unwrap();
  nix::unistd::write(&stdin, b"in\n").unwrap();
  let (control_r, control_w) = nix::unistd::pipe().unwrap();
  let mut rest = Vec::new();
  let (status, by) = detached.follow(control_r, &mut |_, b| rest.extend_from_slice(b));
  drop(control_w);
  assert_eq!(
    (status, by),
    (
      Some(CommandStatus::Exited(4)),
      finn_session::DetachedEnd::Exit
    )
  );
  let mut all = r.stdout;
  all.extend_from_slice(&rest);
  let text = String::from_utf8(all).unwrap();
  let lines: Vec<&str> = text.lines().collect();
  assert_eq!(lines.last(), Some(&"during in"));
  let counted = &lines[..lines.len() - 1];
  assert!(!counted.is_empty());
  for (i, line) in counted.iter().enumerate() {
    assert_eq!(line, &i.to_string(), "no gap, no duplicate");
  }
  assert_eq!(stdout(&mut s, "echo $KEPT"), "before\n");
}

#[test]
fn a_control_message_round_trips() {
  use finn_session::Control;
  for c in [
    Control::Kill {
      grace: Duration::from_millis(1500),
    },
    Control::Kill {
      grace: Duration::ZERO,
    },
    Control::Signal(15),
  ] {
    assert_eq!(Control::decode(&c.encode()), Some(c));
  }
  assert_eq!(Control::decode(b"X0000"), None);
  assert_eq!(Control::decode(b"K1"), None);
}
