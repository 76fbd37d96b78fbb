//! The class of an address the resolver (or a `hosts` entry, or an IP literal) gives: only
//! `Public` is reached unless the job sets `allowLocal`. IPv6 forms that carry an IPv4 address
//! (mapped, compatible, NAT64, 6to4) take the class of the address they carry, so
//! `::ffff:169.254.169.254` is the metadata service, not a public address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
  Public,
  /// 127.0.0.0/8, ::1.
  Loopback,
  /// 10/8, 172.16/12, 192.168/16.
  Private,
  /// 169.254.0.0/16 (but the metadata address), fe80::/10.
  LinkLocal,
  /// 169.254.169.254 and fd00:ec2::254: the cloud's instance metadata service.
  Metadata,
  /// 100.64.0.0/10, carrier-grade NAT.
  SharedCgnat,
  /// fc00::/7 (fd00::/8 in use).
  UniqueLocal,
  /// 0.0.0.0/8, ::: "this host".
  Unspecified,
  /// 224.0.0.0/4, 255.255.255.255, ff00::/8.
  Multicast,
  /// Documentation, benchmarking, reserved and protocol ranges nothing public answers on.
  Reserved,
}

impl AddrClass {
  /// The name a refusal gives.
  pub fn name(self) -> &'static str {
    match self {
      AddrClass::Public => "public",
      AddrClass::Loopback => "loopback",
      AddrClass::Private => "private",
      AddrClass::LinkLocal => "link-local",
      AddrClass::Metadata => "cloud metadata",
      AddrClass::SharedCgnat => "carrier-grade NAT",
      AddrClass::UniqueLocal => "unique local",
      AddrClass::Unspecified => "unspecified",
      AddrClass::Multicast => "multicast or broadcast",
      AddrClass::Reserved => "reserved",
    }
  }

  /// Whether a job with `allowLocal: true` may connect there. Multicast, unspecified and
  /// reserved addresses are no host a job connects to, local or not.
  pub fn allowed(self, allow_local: bool) -> bool {
    match self {
      AddrClass::Public => true,
      AddrClass::Loopback
      | AddrClass::Private
      | AddrClass::LinkLocal
      | AddrClass::Metadata
      | AddrClass::SharedCgnat
      | AddrClass::UniqueLocal => allow_local,
      AddrClass::Unspecified | AddrClass::Multicast | AddrClass::Reserved => false,
    }
  }
}

pub fn classify(ip: IpAddr) -> AddrClass {
  match ip {
    IpAddr::V4(v4) => classify_v4(v4),
    IpAddr::V6(v6) => classify_v6(v6),
  }
}

/// Ranges no public host answers on.
const RESERVED_V4: [([u8; 4], u32); 6] = [
  ([192, 0, 0, 0], 24),    // IETF protocol assignments
  ([192, 0, 2, 0], 24),    // TEST-NET-1
  ([198, 51, 100, 0], 24), // TEST-NET-2
  ([203, 0, 113, 0], 24),  // TEST-NET-3
  ([198, 18, 0, 0], 15),   // benchmarking
  ([192, 88, 99, 0], 24),  // 6to4 relay anycast (deprecated)
];

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
  let [a, b, _, _] = ip.octets();
  let in_net = |net: [u8; 4], bits: u32| {
    let mask = if bits == 0 {
      0
    } else {
      u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
  };
  if ip == Ipv4Addr::new(169, 254, 169, 254) {
    AddrClass::Metadata
  } else if a == 0 {
    AddrClass::Unspecified
  } else if a == 127 {
    AddrClass::Loopback
  } else if a == 10 || in_net([172, 16, 0, 0], 12) || in_net([192, 168, 0, 0], 16) {
    AddrClass::Private
  } else if a == 169 && b == 254 {
    AddrClass::LinkLocal
  } else if in_net([100, 64, 0, 0], 10) {
    AddrClass::SharedCgnat
  } else if a >= 224 {
    // 224/4 multicast, 240/4 reserved, 255.255.255.255 broadcast.
    if a < 240 || ip == Ipv4Addr::BROADCAST {
      AddrClass::Multicast
    } else {
      AddrClass::Reserved
    }
  } else if RESERVED_V4.iter().any(|&(net, bits)| in_net(net, bits)) {
    AddrClass::Reserved
  } else {
    AddrClass::Public
  }
}

fn classify_v6(ip: Ipv6Addr) -> AddrClass {
  let s = ip.segments();
  if ip.is_loopback() {
    return AddrClass::Loopback;
  }
  if ip.is_unspecified() {
    return AddrClass::Unspecified;
  }
  // Forms that carry an IPv4 address take its class.
  if let Some(v4) = ip.to_ipv4_mapped() {
    return classify_v4(v4);
  }
  let low_v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
  if s[..6] == [0; 6] {
    // ::a.b.c.d, IPv4-compatible (deprecated, still routed by some stacks).
    return classify_v4(low_v4);
  }
  if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
    // NAT64: 64:ff9b::/96 and the local-use 64:ff9b:1::/48.
    return classify_v4(low_v4);
  }
  if s[0] == 0x2002 {
    // 6to4 carries the IPv4 address in bits 16..48.
    let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
    return classify_v4(v4);
  }
  if s[..4] == [0xfd00, 0x0ec2, 0, 0] && s[4..] == [0, 0, 0, 0x254] {
    return AddrClass::Metadata;
  }
  if s[0] & 0xfe00 == 0xfc00 {
    return AddrClass::UniqueLocal;
  }
  if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
    // Link-local, and the deprecated site-local.
    return AddrClass::LinkLocal;
  }
  if s[0] & 0xff00 == 0xff00 {
    return AddrClass::Multicast;
  }
  if s[0] == 0x2001 && s[1] == 0x0db8 {
    return AddrClass::Reserved; // documentation
  }
  if s[0] == 0x2001 && s[1] == 0 {
    return AddrClass::Reserved; // Teredo: carries an obfuscated IPv4 address
  }
  if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
    return AddrClass::Reserved; // discard-only
  }
  if s[0] & 0xe000 != 0x2000 {
    // Outside 2000::/3, the only global unicast space allocated.
    return AddrClass::Reserved;
  }
  AddrClass::Public
}

#[cfg(test)]
mod tests {
  use super::*;

  fn c(s: &str) -> AddrClass {
    classify(s.parse().unwrap())
  }

  #[test]
  fn every_local_range_is_classified_without_connecting() {
    use AddrClass::*;
    for (addr, class) in [
      ("127.0.0.1", Loopback),
      ("127.255.255.254", Loopback),
      ("10.1.2.3", Private),
      ("172.16.0.1", Private),
      ("172.31.255.255", Private),
      ("192.168.1.1", Private),
      ("169.254.0.1", LinkLocal),
      ("169.254.169.254", Metadata),
      ("100.64.0.1", SharedCgnat),
      ("100.127.255.255", SharedCgnat),
      ("0.0.0.0", Unspecified),
      ("0.1.2.3", Unspecified),
      ("224.0.0.251", Multicast),
      ("255.255.255.255", Multicast),
      ("240.0.0.1", Reserved),
      ("192.0.2.10", Reserved),
      ("198.18.0.1", Reserved),
      ("::1", Loopback),
      ("::", Unspecified),
      ("fd00::1", UniqueLocal),
      ("fc00::1", UniqueLocal),
      ("fe80::1", LinkLocal),
      ("fd00:ec2::254", Metadata),
      ("ff02::1", Multicast),
      ("2001:db8::1", Reserved),
      ("2001:0:4136:e378::1", Reserved),
      // IPv6 forms that carry a local IPv4 address.
      ("::ffff:127.0.0.1", Loopback),
      ("::ffff:169.254.169.254", Metadata),
      ("::ffff:10.0.0.1", Private),
      ("::127.0.0.1", Loopback),
      ("64:ff9b::a9fe:a9fe", Metadata),
      ("64:ff9b:1::a00:1", Private),
      ("2002:7f00:1::", Loopback),
      ("2002:c0a8:101::1", Private),
    ] {
      assert_eq!(c(addr), class, "{addr}");
      assert!(!class.allowed(false), "{addr}");
    }
  }

  #[test]
  fn public_addresses_are_public_and_neighbours_of_local_ranges_too() {
    for addr in [
      "1.1.1.1",
      "8.8.8.8",
      "172.15.255.255",
      "172.32.0.0",
      "100.63.255.255",
      "100.128.0.0",
      "169.253.255.255",
      "11.0.0.0",
      "126.255.255.255",
      "128.0.0.0",
      "2606:4700::1111",
      "::ffff:8.8.8.8",
      "2002:808:808::1",
    ] {
      assert_eq!(c(addr), AddrClass::Public, "{addr}");
    }
  }

  #[test]
  fn allow_local_opens_local_ranges_but_never_unroutable_ones() {
    for class in [
      AddrClass::Loopback,
      AddrClass::Private,
      AddrClass::LinkLocal,
      AddrClass::Metadata,
      AddrClass::SharedCgnat,
      AddrClass::UniqueLocal,
    ] {
      assert!(class.allowed(true), "{class:?}");
    }
    for class in [
      AddrClass::Unspecified,
      AddrClass::Multicast,
      AddrClass::Reserved,
    ] {
      assert!(!class.allowed(true), "{class:?}");
    }
  }
}
