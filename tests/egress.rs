//! The egress proxy in a process of its own: the `finn-supervisor` binary's `--finn-egress`
//! mode, driven over its control socket as the supervisor will drive it. The connection it
//! serves is refused or forwarded by that process, never by this one.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use finn_egress::service::{self, seqpacket_pair};
use serde_json::{Value, json};

fn next_message(control: &OwnedFd) -> Value {
  let (bytes, _) = service::recv(control.as_raw_fd()).unwrap().unwrap();
  serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn the_egress_mode_serves_a_job_in_its_own_process_and_ends_with_its_control_socket() {
  let (control, egress_end) = seqpacket_pair().unwrap();
  let raw = egress_end.as_raw_fd();
  let mut cmd = Command::new(env!("CARGO_BIN_EXE_finn-supervisor"));
  cmd.arg("--finn-egress").stdin(Stdio::null());
  // SAFETY: dup2 only, between fork and exec of this test's child.
  unsafe {
    cmd.pre_exec(move || {
      if libc::dup2(raw, 3) < 0 {
        return Err(std::io::Error::last_os_error());
      }
      Ok(())
    });
  }
  let mut child = cmd.spawn().unwrap();
  drop(egress_end);

  let server = TcpListener::bind("127.0.0.2:0").unwrap();
  let port = server.local_addr().unwrap().port();
  let (reaper_end, proxy_end) = seqpacket_pair().unwrap();
  let add = json!({ "addJob": { "job": "j1", "network": {
    "allow": ["allowed.test"], "allowLocal": true,
    "hosts": { "allowed.test": "127.0.0.1", "denied.test": "127.0.0.2" } } } });
  service::send(
    &control,
    add.to_string().as_bytes(),
    Some(proxy_end.as_raw_fd()),
  )
  .unwrap();
  drop(proxy_end);

  // A connection of the job's command, handed over as its reaper would.
  let front = TcpListener::bind("127.0.0.1:0").unwrap();
  let mut command = TcpStream::connect(front.local_addr().unwrap()).unwrap();
  let (accepted, _) = front.accept().unwrap();
  service::send(&reaper_end, b"c", Some(accepted.as_raw_fd())).unwrap();
  drop(accepted);
  command
    .set_read_timeout(Some(std::time::Duration::from_secs(20)))
    .unwrap();
  command
    .write_all(format!("CONNECT denied.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
    .unwrap();
  let mut reply = String::new();
  command.read_to_string(&mut reply).unwrap();
  assert!(
    reply.starts_with("HTTP/1.1 403 ") && reply.contains("denied.test"),
    "{reply}"
  );
  let m = next_message(&control);
  assert_eq!(m["audit"]["action"], "deny", "{m}");
  assert_eq!(m["audit"]["egress"]["job"], "j1", "{m}");
  server.set_nonblocking(true).unwrap();
  assert!(matches!(server.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock));

  drop(reaper_end);
  drop(control);
  let status = child.wait().unwrap();
  assert!(status.success(), "{status}");
}
