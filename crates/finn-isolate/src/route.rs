//! The network through the reaper: the job stays in the host's network namespace, and its only
//! way out is the one address its reaper connects it to (`docs/network.md`, rung 2).
//!
//! The job's seccomp filter (`seccomp.rs`, [`SeccompRules::route`](super::seccomp::SeccompRules))
//! lets it make TCP sockets and Unix sockets only, and hands its `connect`, `bind` and `listen`
//! calls to the reaper (`SECCOMP_RET_USER_NOTIF`); its landlock ruleset denies TCP connect and
//! bind, so a TCP socket the job holds reaches nothing by its own calls. The reaper
//! (`finn-supervisor`'s `route.rs`) takes the socket from the job (`pidfd_getfd`) and acts on it
//! itself, on its own copy of the address: a connect to the job's proxy address is made to the
//! reaper's target, a bind to a loopback address is made as asked, everything else is refused.
//! What the job writes to its memory after the reaper read it changes nothing. This file holds
//! what both sides share: the route in the plan, the pure decisions, and the child's step that
//! installs the filter and sends its listener to the reaper.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

/// Where the job's network goes: `proxy` is the address the job is told (`HTTP_PROXY`), and a
/// connect to it is made by the reaper to `target`, a TCP listener in the host's network
/// namespace. Any other TCP connect is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetRoute {
  pub proxy: SocketAddr,
  pub target: SocketAddr,
}

/// The errno of a refused connect: the same as a port nobody listens on, which every client
/// reports as a refused connection.
pub const CONNECT_REFUSED: i32 = libc::ECONNREFUSED;
/// The errno of a refused bind or listen (a non-loopback address, an unbound socket, a port below
/// the unprivileged range).
pub const BIND_REFUSED: i32 = libc::EACCES;

/// What the reaper does with a job's `connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectVerdict {
  /// A Unix socket: the kernel carries the call out in the job's own context (its landlock
  /// domain and mount namespace decide). Safe against a socket swapped in under the same fd
  /// number meanwhile: the job's TCP connects are denied by its landlock ruleset.
  Continue,
  /// Connect the taken socket to this address (the route's target, as the socket's family
  /// writes it).
  ConnectTo(SocketAddr),
  /// Fail the call with this errno.
  Refuse(i32),
}

/// What the reaper does with a job's `bind` or `listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindVerdict {
  Continue,
  /// Bind the taken socket to this address (a copy of the one the job asked for).
  BindTo(SocketAddr),
  /// `listen` on the taken socket, which is a Unix socket or bound to loopback.
  Listen,
  Refuse(i32),
}

/// The address in `raw` (a `sockaddr_in` or `sockaddr_in6` as the job wrote it), if it is one
/// of `family`'s (`AF_INET`, `AF_INET6`). An IPv4-mapped IPv6 address is read as its IPv4 address.
pub fn parse_sockaddr(family: i32, raw: &[u8]) -> Option<SocketAddr> {
  let fam = u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]);
  if i32::from(fam) != family {
    return None;
  }
  let port = u16::from_be_bytes([*raw.get(2)?, *raw.get(3)?]);
  match family {
    libc::AF_INET if raw.len() >= std::mem::size_of::<libc::sockaddr_in>() => {
      let ip = Ipv4Addr::new(raw[4], raw[5], raw[6], raw[7]);
      Some(SocketAddr::new(IpAddr::V4(ip), port))
    }
    libc::AF_INET6 if raw.len() >= std::mem::size_of::<libc::sockaddr_in6>() => {
      let bytes: [u8; 16] = raw[8..24].try_into().ok()?;
      let ip = Ipv6Addr::from(bytes);
      let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
      Some(SocketAddr::new(ip, port))
    }
    _ => None,
  }
}

/// `addr` as a socket of `family` takes it: an IPv6 socket reaches an IPv4 address mapped.
pub fn for_family(family: i32, addr: SocketAddr) -> Option<SocketAddr> {
  match (family, addr.ip()) {
    (libc::AF_INET, IpAddr::V4(_)) | (libc::AF_INET6, IpAddr::V6(_)) => Some(addr),
    (libc::AF_INET6, IpAddr::V4(v4)) => Some(SocketAddr::new(
      IpAddr::V6(v4.to_ipv6_mapped()),
      addr.port(),
    )),
    _ => None,
  }
}

impl NetRoute {
  /// A `connect` on a socket of `family` (the socket's own, read from the socket the reaper
  /// took) to the address `raw` (the reaper's copy of the job's memory). `own` are the job's own
  /// listeners (each held open by the reaper, so no one else can take its port meanwhile): a
  /// local server of the job's is reachable from the job, another job's is not.
  pub fn connect(&self, family: i32, raw: &[u8], own: &[SocketAddr]) -> ConnectVerdict {
    match family {
      libc::AF_UNIX => ConnectVerdict::Continue,
      libc::AF_INET | libc::AF_INET6 => match parse_sockaddr(family, raw) {
        Some(asked) if asked == self.proxy => for_family(family, self.target).map_or(
          ConnectVerdict::Refuse(CONNECT_REFUSED),
          ConnectVerdict::ConnectTo,
        ),
        Some(asked) if own.contains(&asked) => for_family(family, asked).map_or(
          ConnectVerdict::Refuse(CONNECT_REFUSED),
          ConnectVerdict::ConnectTo,
        ),
        _ => ConnectVerdict::Refuse(CONNECT_REFUSED),
      },
      _ => ConnectVerdict::Refuse(CONNECT_REFUSED),
    }
  }
}

/// A `bind` on a socket of `family` to `raw`: a Unix socket's goes ahead in the job's context
/// (its path is the job's, and landlock judges it); a TCP socket's only to 127.0.0.1 or ::1
/// (a local dev server), on port 0 or one at or above `unprivileged_from`, the host's
/// `net.ipv4.ip_unprivileged_port_start` (the reaper may hold a capability the job does not).
pub fn bind(family: i32, raw: &[u8], unprivileged_from: u16) -> BindVerdict {
  match family {
    libc::AF_UNIX => BindVerdict::Continue,
    libc::AF_INET | libc::AF_INET6 => match parse_sockaddr(family, raw) {
      Some(a) if is_local(a.ip()) && (a.port() == 0 || a.port() >= unprivileged_from) => {
        for_family(family, a).map_or(BindVerdict::Refuse(BIND_REFUSED), BindVerdict::BindTo)
      }
      _ => BindVerdict::Refuse(BIND_REFUSED),
    },
    _ => BindVerdict::Refuse(BIND_REFUSED),
  }
}

/// A `listen` on a socket of `family` now bound to `bound` (`None`: not bound, or not read):
/// the reaper listens on it itself, since a `listen` let through on an unbound TCP socket binds
/// it to every address (no landlock right covers that bind).
pub fn listen(family: i32, bound: Option<SocketAddr>) -> BindVerdict {
  match (family, bound) {
    (libc::AF_UNIX, _) => BindVerdict::Listen,
    (libc::AF_INET | libc::AF_INET6, Some(a)) if is_local(a.ip()) && a.port() != 0 => {
      BindVerdict::Listen
    }
    _ => BindVerdict::Refuse(BIND_REFUSED),
  }
}

/// 127.0.0.1 or ::1, the addresses a job may listen on.
fn is_local(ip: IpAddr) -> bool {
  ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
}

/// In the child, as its last layer: installs `prog` with a new listener (the kernel allows one
/// per chain) and sends the listener to the reaper over `to_reaper` (`SCM_RIGHTS`). The child
/// keeps no copy: a command holding it could answer its own calls. No allocation.
pub(super) fn install_and_send(
  prog: &[libc::sock_filter],
  to_reaper: &OwnedFd,
) -> Result<(), Errno> {
  let fprog = libc::sock_fprog {
    len: prog.len() as u16,
    filter: prog.as_ptr() as *mut libc::sock_filter,
  };
  // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
  let fd = unsafe {
    libc::syscall(
      libc::SYS_seccomp,
      libc::SECCOMP_SET_MODE_FILTER,
      libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as libc::c_ulong,
      &fprog as *const libc::sock_fprog,
    )
  };
  if fd < 0 {
    return Err(Errno::last());
  }
  let listener = fd as libc::c_int;
  let sent = send_fd(to_reaper.as_raw_fd(), listener);
  // SAFETY: closes the fd the kernel just made for us.
  unsafe { libc::close(listener) };
  sent
}

/// Sends `fd` over the socket `sock` with one byte, from buffers on the stack.
fn send_fd(sock: libc::c_int, fd: libc::c_int) -> Result<(), Errno> {
  #[repr(C)]
  union Control {
    buf: [u8; 64],
    _align: libc::cmsghdr,
  }
  let mut byte = [b'R'];
  let mut iov = libc::iovec {
    iov_base: byte.as_mut_ptr().cast(),
    iov_len: 1,
  };
  let mut control = Control { buf: [0; 64] };
  // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the header and its data are written inside
  // `control`, whose 64 bytes hold one cmsghdr with one int; msghdr points at live stack data.
  unsafe {
    let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    let cmsg = libc::CMSG_FIRSTHDR(&msg);
    (*cmsg).cmsg_level = libc::SOL_SOCKET;
    (*cmsg).cmsg_type = libc::SCM_RIGHTS;
    (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
    if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
      return Err(Errno::last());
    }
  }
  Ok(())
}

/// In the reaper, after the child exec'd: the listener it sent over `from_child`, if it sent one.
pub(super) fn receive_listener(from_child: &OwnedFd) -> Option<OwnedFd> {
  use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
  use std::os::fd::FromRawFd;
  let mut buf = [0u8; 1];
  let mut iov = [std::io::IoSliceMut::new(&mut buf)];
  let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
  let msg = recvmsg::<()>(
    from_child.as_raw_fd(),
    &mut iov,
    Some(&mut cmsg),
    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
  )
  .ok()?;
  for c in msg.cmsgs().ok()? {
    if let ControlMessageOwned::ScmRights(fds) = c
      && let Some(&fd) = fds.first()
    {
      // SAFETY: the kernel just installed this fd for us.
      return Some(unsafe { OwnedFd::from_raw_fd(fd) });
    }
  }
  None
}

/// `at` as a C socket address: the storage and its length.
pub fn sockaddr(at: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
  // SAFETY: a zeroed sockaddr_storage is valid; each arm writes a sockaddr that fits in it.
  unsafe {
    let mut ss: libc::sockaddr_storage = std::mem::zeroed();
    let len = match at {
      SocketAddr::V4(a) => {
        let sin = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
        (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
        (*sin).sin_port = a.port().to_be();
        (*sin).sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        std::mem::size_of::<libc::sockaddr_in>()
      }
      SocketAddr::V6(a) => {
        let sin6 = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
        (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
        (*sin6).sin6_port = a.port().to_be();
        (*sin6).sin6_addr.s6_addr = a.ip().octets();
        std::mem::size_of::<libc::sockaddr_in6>()
      }
    };
    (ss, len as libc::socklen_t)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn v4(a: [u8; 4], port: u16) -> Vec<u8> {
    // SAFETY: a zeroed sockaddr_in is valid.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as u16;
    s.sin_port = port.to_be();
    s.sin_addr.s_addr = u32::from_ne_bytes(a);
    // SAFETY: reads the bytes of a plain C struct.
    unsafe {
      std::slice::from_raw_parts(
        (&s as *const libc::sockaddr_in).cast::<u8>(),
        std::mem::size_of_val(&s),
      )
    }
    .to_vec()
  }

  fn v6(ip: Ipv6Addr, port: u16) -> Vec<u8> {
    // SAFETY: a zeroed sockaddr_in6 is valid.
    let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as u16;
    s.sin6_port = port.to_be();
    s.sin6_addr.s6_addr = ip.octets();
    // SAFETY: reads the bytes of a plain C struct.
    unsafe {
      std::slice::from_raw_parts(
        (&s as *const libc::sockaddr_in6).cast::<u8>(),
        std::mem::size_of_val(&s),
      )
    }
    .to_vec()
  }

  const ROUTE: NetRoute = NetRoute {
    proxy: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 3128),
    target: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40000),
  };

  #[test]
  fn only_the_proxy_address_is_connected_and_to_the_target() {
    let target = ROUTE.target;
    assert_eq!(
      ROUTE.connect(libc::AF_INET, &v4([127, 0, 0, 1], 3128), &[]),
      ConnectVerdict::ConnectTo(target)
    );
    let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
    assert_eq!(
      ROUTE.connect(libc::AF_INET6, &v6(mapped, 3128), &[]),
      ConnectVerdict::ConnectTo(SocketAddr::new(IpAddr::V6(mapped), 40000))
    );
    for (family, raw) in [
      (libc::AF_INET, v4([127, 0, 0, 1], 3129)),
      (libc::AF_INET, v4([127, 0, 0, 2], 3128)),
      // The target itself is not the proxy address: the job never names where it lands.
      (libc::AF_INET, v4([127, 0, 0, 1], 40000)),
      (libc::AF_INET, v4([10, 0, 0, 1], 3128)),
      (libc::AF_INET6, v6(Ipv6Addr::LOCALHOST, 3128)),
      // A family that disagrees with the socket's, or a short address.
      (libc::AF_INET6, v4([127, 0, 0, 1], 3128)),
      (libc::AF_INET, v4([127, 0, 0, 1], 3128)[..8].to_vec()),
      (libc::AF_INET, vec![]),
      (libc::AF_PACKET, v4([127, 0, 0, 1], 3128)),
    ] {
      assert_eq!(
        ROUTE.connect(family, &raw, &["127.0.0.1:8080".parse().unwrap()]),
        ConnectVerdict::Refuse(libc::ECONNREFUSED),
        "{family} {raw:?}"
      );
    }
    assert_eq!(
      ROUTE.connect(libc::AF_UNIX, &[], &[]),
      ConnectVerdict::Continue
    );
  }

  #[test]
  fn the_jobs_own_listeners_are_reachable_and_no_other_local_port() {
    let own: [SocketAddr; 2] = [
      "127.0.0.1:8080".parse().unwrap(),
      "[::1]:9090".parse().unwrap(),
    ];
    assert_eq!(
      ROUTE.connect(libc::AF_INET, &v4([127, 0, 0, 1], 8080), &own),
      ConnectVerdict::ConnectTo(own[0])
    );
    assert_eq!(
      ROUTE.connect(libc::AF_INET6, &v6(Ipv6Addr::LOCALHOST, 9090), &own),
      ConnectVerdict::ConnectTo(own[1])
    );
    for raw in [v4([127, 0, 0, 1], 8081), v4([127, 0, 0, 1], 9090)] {
      assert_eq!(
        ROUTE.connect(libc::AF_INET, &raw, &own),
        ConnectVerdict::Refuse(libc::ECONNREFUSED)
      );
    }
  }

  #[test]
  fn binds_go_only_to_loopback_and_unprivileged_ports() {
    assert_eq!(
      bind(libc::AF_INET, &v4([127, 0, 0, 1], 8080), 1024),
      BindVerdict::BindTo("127.0.0.1:8080".parse().unwrap())
    );
    assert_eq!(
      bind(libc::AF_INET, &v4([127, 0, 0, 1], 0), 1024),
      BindVerdict::BindTo("127.0.0.1:0".parse().unwrap())
    );
    assert_eq!(
      bind(libc::AF_INET6, &v6(Ipv6Addr::LOCALHOST, 8080), 1024),
      BindVerdict::BindTo("[::1]:8080".parse().unwrap())
    );
    for (family, raw) in [
      (libc::AF_INET, v4([0, 0, 0, 0], 8080)),
      (libc::AF_INET, v4([127, 0, 0, 2], 8080)),
      (libc::AF_INET, v4([192, 168, 1, 1], 8080)),
      (libc::AF_INET, v4([127, 0, 0, 1], 80)),
      (libc::AF_INET6, v6(Ipv6Addr::UNSPECIFIED, 8080)),
      (libc::AF_INET, vec![2, 0]),
    ] {
      assert_eq!(
        bind(family, &raw, 1024),
        BindVerdict::Refuse(libc::EACCES),
        "{raw:?}"
      );
    }
    assert_eq!(bind(libc::AF_UNIX, &[], 1024), BindVerdict::Continue);
  }

  #[test]
  fn listen_needs_a_socket_bound_to_loopback() {
    let at = |s: &str| Some(s.parse().unwrap());
    assert_eq!(
      listen(libc::AF_INET, at("127.0.0.1:8080")),
      BindVerdict::Listen
    );
    assert_eq!(
      listen(libc::AF_INET6, at("[::1]:8080")),
      BindVerdict::Listen
    );
    assert_eq!(listen(libc::AF_UNIX, None), BindVerdict::Listen);
    for bound in [None, at("0.0.0.0:0"), at("127.0.0.1:0"), at("0.0.0.0:8080")] {
      assert_eq!(
        listen(libc::AF_INET, bound),
        BindVerdict::Refuse(libc::EACCES),
        "{bound:?}"
      );
    }
  }
}
