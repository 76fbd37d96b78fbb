//! A session's shell under a reaper of a real supervisor: a command's timeout ends the
//! command's whole tree (escapees included) and leaves the shell with its state; the end of
//! the session leaves nothing. Survival is judged by a scan of `/proc` for a token in the
//! command lines, not by recorded pids alone.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use finn_session::{CommandStatus, Cut, Host, RunOptions, Session, SessionConfig};
use finn_supervisor::Supervisor;

fn session() -> (Session, Arc<Supervisor>) {
  let supervisor = Arc::new(Supervisor::new(PathBuf::from(env!(
    "CARGO_BIN_EXE_finn-supervisor"
  ))));
  let env = ["PATH", "HOME"]
    .iter()
    .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
    .collect();
  let s = Session::start(SessionConfig {
    shell: PathBuf::from("/bin/bash"),
    cwd: std::env::temp_dir(),
    env,
    host: Host::Reaper {
      supervisor: Arc::clone(&supervisor),
      isolation: None,
    },
  })
  .expect("start a session");
  (s, supervisor)
}

/// Pids of live processes whose command line holds `token`.
fn with_token(token: &str) -> Vec<i32> {
  let mut out = Vec::new();
  for entry in std::fs::read_dir("/proc").unwrap().flatten() {
    let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
      continue;
    };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
      continue;
    };
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = state
      .rsplit_once(')')
      .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    if !zombie && String::from_utf8_lossy(&cmdline).contains(token) {
      out.push(pid);
    }
  }
  out
}

/// Waits (up to 10 s) until `n` processes carry `token`: the escapees exec after the command
/// that started them has returned.
fn wait_for(token: &str, n: usize) -> usize {
  let until = std::time::Instant::now() + Duration::from_secs(10);
  loop {
    let found = with_token(token).len();
    if found >= n || std::time::Instant::now() >= until {
      return found;
    }
    std::thread::yield_now();
  }
}

/// Waits (up to 10 s) until no process carries `token`; what is left then.
fn wait_for_none(token: &str) -> Vec<i32> {
  let until = std::time::Instant::now() + Duration::from_secs(10);
  loop {
    let found = with_token(token);
    if found.is_empty() || std::time::Instant::now() >= until {
      return found;
    }
    std::thread::yield_now();
  }
}

fn token(name: &str) -> String {
  format!("finn-sess-{name}-{}", std::process::id())
}

/// The escapes a command tries: a double fork, `setsid`, `cmd &`, `nohup`, each a `sleep` whose
/// argv carries the token (`exec -a`).
fn escapes(token: &str) -> String {
  format!(
    "(bash -c 'exec -a {token} sleep 300' &) ; setsid bash -c 'exec -a {token} sleep 300' & \
     bash -c 'exec -a {token} sleep 300' & nohup bash -c 'exec -a {token} sleep 300' >/dev/null 2>&1 & \
     echo started; bash -c 'exec -a {token} sleep 300'"
  )
}

#[test]
fn a_timeout_kills_every_escapee_of_the_command_and_the_shell_keeps_its_state() {
  let (mut s, _sup) = session();
  let t = token("timeout");
  let r = s
    .run(b"cd /tmp && export KEPT=yes", &RunOptions::default())
    .unwrap();
  assert_eq!(r.status, CommandStatus::Exited(0));
  let shell = s.pid();
  let opts = RunOptions {
    timeout: Some(Duration::from_millis(500)),
    ..RunOptions::default()
  };
  let r = s.run(escapes(&t).as_bytes(), &opts).unwrap();
  assert_eq!(r.cut, Some(Cut::Wall));
  assert_eq!(r.stdout, b"started\n");
  assert!(!r.session_restarted);
  assert_eq!(s.pid(), shell, "the shell lives on");
  assert_eq!(with_token(&t), Vec::<i32>::new(), "no escapee survives");
  let r = s.run(b"pwd; echo $KEPT", &RunOptions::default()).unwrap();
  assert_eq!(r.stdout, b"/tmp\nyes\n");
}

#[test]
fn a_command_that_is_the_shell_s_own_loop_ends_by_a_restored_shell() {
  let (mut s, _sup) = session();
  s.run(b"export KEPT=yes", &RunOptions::default()).unwrap();
  let opts = RunOptions {
    timeout: Some(Duration::from_millis(200)),
    ..RunOptions::default()
  };
  let r = s.run(b"while :; do :; done", &opts).unwrap();
  assert_eq!(r.cut, Some(Cut::Wall));
  assert_eq!(r.status, CommandStatus::TimedOut);
  assert!(r.session_restarted);
  let r = s.run(b"echo $KEPT", &RunOptions::default()).unwrap();
  assert_eq!(r.stdout, b"yes\n");
}

#[test]
fn ending_the_session_leaves_no_process_of_it() {
  let (mut s, _sup) = session();
  let t = token("end");
  let bg = format!(
    "(bash -c 'exec -a {t} sleep 300' &) ; setsid bash -c 'exec -a {t} sleep 300' & \
     bash -c 'exec -a {t} sleep 300' & echo ok"
  );
  let r = s.run(bg.as_bytes(), &RunOptions::default()).unwrap();
  assert_eq!(r.stdout, b"ok\n");
  assert_eq!(wait_for(&t, 3), 3, "the escapees run");
  s.end();
  assert_eq!(with_token(&t), Vec::<i32>::new());
}

#[test]
fn a_command_that_kills_its_shell_or_its_reaper_takes_nothing_with_it() {
  let (mut s, _sup) = session();
  let t = token("kill");
  s.run(b"export KEPT=yes", &RunOptions::default()).unwrap();
  let cmd = format!("setsid bash -c 'exec -a {t} sleep 300' & kill -9 $$");
  let r = s.run(cmd.as_bytes(), &RunOptions::default()).unwrap();
  assert_eq!(r.status, CommandStatus::Signaled(9));
  assert!(r.session_restarted);
  assert_eq!(
    with_token(&t),
    Vec::<i32>::new(),
    "the shell's tree died with it"
  );
  let r = s.run(b"echo $KEPT", &RunOptions::default()).unwrap();
  assert_eq!(r.stdout, b"yes\n");
  // The reaper runs as the command's user; killing it is refused by the reaper's guard or, if
  // it succeeds, its tree dies with it (the supervisor kills a dead reaper's orphans).
  let reaper = s.reaper_pid().unwrap();
  let cmd = format!("setsid bash -c 'exec -a {t} sleep 300' & kill -9 {reaper}; echo $?");
  let _ = s.run(cmd.as_bytes(), &RunOptions::default()).unwrap();
  s.end();
  // A killed reaper's orphans go to the supervisor, which kills them as they come.
  assert_eq!(wait_for_none(&t), Vec::<i32>::new());
}
