//! The only route out of a job with a network allowlist: a listener on its own loopback,
//! forwarded by the job's reaper to the pool's egress proxy.
//!
//! The job's child, inside its fresh network namespace and still holding CAP_NET_ADMIN there,
//! brings `lo` up, listens on 127.0.0.1:[`PORT`] (and [::1]:[`PORT`] where IPv6 works) and sends
//! the listening sockets to its reaper over a socket pair made before the fork. A socket keeps
//! the namespace it was made in, so the reaper accepts the command's connections without ever
//! entering the namespace, as root and inside a user namespace alike, and passes each one to
//! the proxy over the job's channel. Nothing else in the namespace leads anywhere: it has no
//! device but `lo`. The command finds the proxy through the proxy variables ([`env`]).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// The port the job's listener takes on its own loopback (any port is free in a namespace of
/// the job's own; this one is the common proxy port, which some tools try by default).
pub const PORT: u16 = 3128;

/// The two ends of the socket pair the child sends its listeners over.
pub struct Link {
  /// Kept by the reaper.
  pub(super) parent: OwnedFd,
  /// The child's end; the reaper drops its copy once the child runs ([`Link::listeners`]).
  pub(super) child: Option<OwnedFd>,
}

impl Link {
  pub(super) fn new() -> std::io::Result<Link> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into `fds`, which we own from here.
    if unsafe {
      libc::socketpair(
        libc::AF_UNIX,
        libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
        0,
        fds.as_mut_ptr(),
      )
    } != 0
    {
      return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just made above, owned by nothing else.
    let (parent, child) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok(Link {
      parent,
      child: Some(child),
    })
  }

  /// In the reaper, after the fork: drops its copy of the child's end and takes the listeners
  /// the child sent (none when the child failed before it sent them: its end is then closed).
  pub(super) fn listeners(&mut self) -> Vec<OwnedFd> {
    self.child = None;
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let Ok(msg) = nix::sys::socket::recvmsg::<()>(
      self.parent.as_raw_fd(),
      &mut iov,
      Some(&mut space),
      nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
    ) else {
      return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
      for c in cmsgs {
        if let nix::sys::socket::ControlMessageOwned::ScmRights(fds) = c {
          // SAFETY: the kernel just installed these fds in this process for us.
          out.extend(fds.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
        }
      }
    }
    out
  }
}

fn check(r: libc::c_int) -> Result<libc::c_int, Errno> {
  if r < 0 { Err(Errno::last()) } else { Ok(r) }
}

/// Closes `fd` when dropped; the child's own guard (no allocation).
struct Fd(libc::c_int);
impl Drop for Fd {
  fn drop(&mut self) {
    // SAFETY: closes an fd this guard made.
    unsafe { libc::close(self.0) };
  }
}

/// In the child, inside its new network namespace and before the capabilities are dropped:
/// `lo` up, the listeners made, sent to the reaper over `link`. Async-signal-safe: raw
/// syscalls on the stack only.
pub(super) fn listen_in_child(link: RawFd) -> Result<(), Errno> {
  loopback_up()?;
  let v4 = Fd(listener_v4()?);
  // IPv6 may be off in the kernel or the namespace: then the command has 127.0.0.1 alone.
  let v6 = listener_v6().ok().map(Fd);
  let mut fds = [v4.0, -1];
  let mut n = 1;
  if let Some(v6) = &v6 {
    fds[1] = v6.0;
    n = 2;
  }
  // SAFETY: every buffer below is on this stack and sized by CMSG_SPACE for two fds.
  unsafe {
    let mut space = [0u64; 8];
    let mut byte = 0u8;
    let mut iov = libc::iovec {
      iov_base: (&raw mut byte).cast(),
      iov_len: 1,
    };
    let fd_bytes = (n * std::mem::size_of::<libc::c_int>()) as u32;
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = libc::CMSG_SPACE(fd_bytes) as usize;
    let cmsg = libc::CMSG_FIRSTHDR(&msg);
    (*cmsg).cmsg_level = libc::SOL_SOCKET;
    (*cmsg).cmsg_type = libc::SCM_RIGHTS;
    (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
    std::ptr::copy_nonoverlapping(
      fds.as_ptr().cast::<u8>(),
      libc::CMSG_DATA(cmsg),
      fd_bytes as usize,
    );
    if libc::sendmsg(link, &msg, libc::MSG_NOSIGNAL) < 0 {
      return Err(Errno::last());
    }
  }
  Ok(())
}

fn loopback_up() -> Result<(), Errno> {
  // SAFETY: socket and ioctl on a zeroed ifreq on our stack, naming "lo".
  unsafe {
    let s = Fd(check(libc::socket(
      libc::AF_INET,
      libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
      0,
    ))?);
    let mut ifr: libc::ifreq = std::mem::zeroed();
    ifr.ifr_name[0] = b'l' as libc::c_char;
    ifr.ifr_name[1] = b'o' as libc::c_char;
    check(libc::ioctl(s.0, libc::SIOCGIFFLAGS, &mut ifr))?;
    ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    check(libc::ioctl(s.0, libc::SIOCSIFFLAGS, &ifr))?;
  }
  Ok(())
}

fn listener_v4() -> Result<libc::c_int, Errno> {
  // SAFETY: socket, bind and listen with a sockaddr_in on our stack.
  unsafe {
    let s = Fd(check(libc::socket(
      libc::AF_INET,
      libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
      0,
    ))?);
    let mut addr: libc::sockaddr_in = std::mem::zeroed();
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = PORT.to_be();
    addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    check(libc::bind(
      s.0,
      (&raw const addr).cast(),
      std::mem::size_of::<libc::sockaddr_in>() as u32,
    ))?;
    check(libc::listen(s.0, 128))?;
    let fd = s.0;
    std::mem::forget(s);
    Ok(fd)
  }
}

fn listener_v6() -> Result<libc::c_int, Errno> {
  // SAFETY: socket, setsockopt, bind and listen with values on our stack.
  unsafe {
    let s = Fd(check(libc::socket(
      libc::AF_INET6,
      libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
      0,
    ))?);
    let one: libc::c_int = 1;
    check(libc::setsockopt(
      s.0,
      libc::IPPROTO_IPV6,
      libc::IPV6_V6ONLY,
      (&raw const one).cast(),
      std::mem::size_of::<libc::c_int>() as u32,
    ))?;
    let mut addr: libc::sockaddr_in6 = std::mem::zeroed();
    addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    addr.sin6_port = PORT.to_be();
    addr.sin6_addr.s6_addr[15] = 1;
    check(libc::bind(
      s.0,
      (&raw const addr).cast(),
      std::mem::size_of::<libc::sockaddr_in6>() as u32,
    ))?;
    check(libc::listen(s.0, 128))?;
    let fd = s.0;
    std::mem::forget(s);
    Ok(fd)
  }
}

/// The variables that send a command's HTTP clients to the proxy, replacing any of the same
/// name in `env`: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and lowercase) name the job's
/// listener, `NO_PROXY` is empty (nothing goes around the proxy: there is no other route), and
/// git's `http.proxy` is set through `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`, after any entries the
/// environment already holds.
pub fn env(env: &[CString]) -> Vec<CString> {
  let url = format!("http://127.0.0.1:{PORT}");
  const REPLACED: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
  ];
  let name = |e: &CString| {
    let b = e.as_bytes();
    let end = b.iter().position(|&c| c == b'=').unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
  };
  let git_count = env
    .iter()
    .find(|e| name(e) == "GIT_CONFIG_COUNT")
    .and_then(|e| e.to_str().ok()?.split_once('=')?.1.parse::<u32>().ok())
    .unwrap_or(0);
  let mut out: Vec<CString> = env
    .iter()
    .filter(|e| {
      let n = name(e);
      !REPLACED.contains(&n.as_str()) && n != "GIT_CONFIG_COUNT"
    })
    .cloned()
    .collect();
  let line = |s: String| CString::new(s).expect("no NUL in a proxy variable");
  for n in &REPLACED[..3] {
    out.push(line(format!("{n}={url}")));
    out.push(line(format!("{}={url}", n.to_lowercase())));
  }
  out.push(line("NO_PROXY=".into()));
  out.push(line("no_proxy=".into()));
  out.push(line(format!("GIT_CONFIG_COUNT={}", git_count + 1)));
  out.push(line(format!("GIT_CONFIG_KEY_{git_count}=http.proxy")));
  out.push(line(format!("GIT_CONFIG_VALUE_{git_count}={url}")));
  out
}

#[cfg(test)]
mod tests {
  use super::*;

  fn strings(env: &[CString]) -> Vec<String> {
    env
      .iter()
      .map(|e| e.to_str().unwrap().to_string())
      .collect()
  }

  /// A caller's own proxy variables or `NO_PROXY` cannot send the command around the job's
  /// listener, and git's existing config entries stay as they were.
  #[test]
  fn the_proxy_variables_replace_the_callers_and_git_gets_its_entry_after_theirs() {
    let given: Vec<CString> = [
      "PATH=/usr/bin",
      "HTTPS_PROXY=http://evil:1",
      "no_proxy=*",
      "GIT_CONFIG_COUNT=1",
      "GIT_CONFIG_KEY_0=core.pager",
      "GIT_CONFIG_VALUE_0=cat",
    ]
    .iter()
    .map(|s| CString::new(*s).unwrap())
    .collect();
    let out = strings(&env(&given));
    let url = format!("http://127.0.0.1:{PORT}");
    for n in [
      "HTTP_PROXY",
      "HTTPS_PROXY",
      "ALL_PROXY",
      "http_proxy",
      "https_proxy",
      "all_proxy",
    ] {
      let hits: Vec<&String> = out
        .iter()
        .filter(|e| e.starts_with(&format!("{n}=")))
        .collect();
      assert_eq!(hits, [&format!("{n}={url}")], "{n}");
    }
    assert!(out.contains(&"NO_PROXY=".to_string()));
    assert!(out.contains(&"no_proxy=".to_string()));
    assert!(!out.iter().any(|e| e.contains("evil") || e == "no_proxy=*"));
    assert!(out.contains(&"PATH=/usr/bin".to_string()));
    assert!(out.contains(&"GIT_CONFIG_KEY_0=core.pager".to_string()));
    assert!(out.contains(&"GIT_CONFIG_COUNT=2".to_string()));
    assert!(out.contains(&"GIT_CONFIG_KEY_1=http.proxy".to_string()));
    assert!(out.contains(&format!("GIT_CONFIG_VALUE_1={url}")));
    assert_eq!(
      out
        .iter()
        .filter(|e| e.starts_with("GIT_CONFIG_COUNT="))
        .count(),
      1
    );
  }
}
