//! Which addresses a name may lead to. The sandbox names a host; the controller resolves it
//! on the host, where a name pointed at 127.0.0.1 or at a cloud's metadata service would
//! reach services the sandbox must not see (DNS rebinding). Every address that is not on
//! the public internet needs a rule that names it, or its name, without wildcards.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not public; `None` from [`classify`] means it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    Loopback,
    Private,
    /// 169.254.0.0/16 and fe80::/10, where cloud metadata services live.
    LinkLocal,
    /// 0.0.0.0, ::, and other addresses that mean "this host".
    Unspecified,
    Multicast,
    /// Shared address space (carrier-grade NAT, and overlay networks such as Tailscale's)
    /// and the reserved 240.0.0.0/4 with broadcast: internal by use, never a public host.
    Special,
    /// An address of one of this machine's own interfaces.
    ThisHost,
}

impl Reserved {
    pub fn describe(self) -> &'static str {
        match self {
            Reserved::Loopback => "loopback",
            Reserved::Private => "a private network",
            Reserved::LinkLocal => "link-local (cloud metadata lives there)",
            Reserved::Unspecified => "unspecified (this host)",
            Reserved::Multicast => "multicast",
            Reserved::Special => "a special-purpose range",
            Reserved::ThisHost => "one of this machine's own addresses",
        }
    }
}

/// Classifies one address, `own` being this machine's interface addresses.
pub fn classify(ip: IpAddr, own: &[IpAddr]) -> Option<Reserved> {
    let ip = match ip {
        // An IPv4 address spelled as IPv6 reaches the IPv4 host.
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    let reserved = match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    };
    reserved.or_else(|| own.contains(&ip).then_some(Reserved::ThisHost))
}

fn classify_v4(ip: Ipv4Addr) -> Option<Reserved> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (127, _, _) => Reserved::Loopback,
        (10, _, _) | (192, 168, _) => Reserved::Private,
        (172, 16..=31, _) => Reserved::Private,
        (169, 254, _) => Reserved::LinkLocal,
        (0, _, _) => Reserved::Unspecified,
        (224..=239, _, _) => Reserved::Multicast,
        (100, 64..=127, _) => Reserved::Special, // shared address space
        (192, 0, 0) => Reserved::Special,        // protocol assignments (a cloud's metadata, once)
        (240..=255, _, _) => Reserved::Special,  // reserved, and broadcast
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Reserved> {
    if ip.is_loopback() {
        return Some(Reserved::Loopback);
    }
    if ip.is_unspecified() {
        return Some(Reserved::Unspecified);
    }
    if ip.is_multicast() {
        return Some(Reserved::Multicast);
    }
    let first = ip.segments()[0];
    Some(match first {
        0xfe80..=0xfebf => Reserved::LinkLocal,
        0xfc00..=0xfdff => Reserved::Private, // unique local
        0xfec0..=0xfeff => Reserved::Private, // old site-local
        // NAT64 and 6to4 embed an IPv4 address, which decides.
        0x0064 if ip.segments()[1] == 0xff9b => {
            let [.., a, b, c, d] = ip.octets();
            return classify_v4(Ipv4Addr::new(a, b, c, d));
        }
        0x2002 => {
            let o = ip.octets();
            return classify_v4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
        }
        // IPv4-compatible (deprecated, ::a.b.c.d) reaches IPv4 too.
        0 if ip.segments()[..6].iter().all(|s| *s == 0) => {
            let [.., a, b, c, d] = ip.octets();
            return classify_v4(Ipv4Addr::new(a, b, c, d));
        }
        _ => return None,
    })
}

/// This machine's interface addresses (every namespace's view but its own is unknown, so a
/// container's bridge gateway counts when the host has it).
pub fn own_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs fills a list we walk read-only and free with freeifaddrs.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let addr = (*cur).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(addr as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// The IPv4 address C's `inet_aton` reads in `host`, when it is one: besides the dotted
/// quad, hex (`0x7f000001`), octal (`0177.0.0.1`), short forms whose last part fills the
/// bytes left (`127.1`, `127.0.1`) and a single number (`2130706433`). curl, Python and
/// glibc's `getaddrinfo` connect to that address, so the proxy must judge it as that
/// address, not as a name no rule or inspection choice was written for.
pub fn ipv4_spelling(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts
        .iter()
        .map(|p| {
            let (digits, radix) = match p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
                Some(hex) => (hex, 16),
                None if p.len() > 1 && p.starts_with('0') => (&p[1..], 8),
                None => (*p, 10),
            };
            // Bounded so that no part overflows; a longer one is no address.
            let bounded = !digits.is_empty() && digits.len() <= 12;
            let valid = digits.chars().all(|c| c.is_digit(radix));
            (bounded && valid).then(|| u64::from_str_radix(digits, radix).ok())?
        })
        .collect::<Option<_>>()?;
    let (last, leading) = numbers.split_last()?;
    // Each leading part is one byte; the last fills the bytes left.
    let rest_bits = 8 * (4 - leading.len() as u32);
    if leading.iter().any(|n| *n > 0xff) || *last >= 1u64 << rest_bits {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, n)| acc | ((*n as u32) << (24 - 8 * i)));
    Some(Ipv4Addr::from(high | *last as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling `inet_aton` reads as an address is that address; names are not.
    #[test]
    fn other_spellings_of_an_ipv4_address_are_read_as_it() {
        for spelling in [
            "0x7f000001",
            "0X7F000001",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "017700000001",
            "127.0.0.1",
        ] {
            assert_eq!(
                ipv4_spelling(spelling),
                Some(Ipv4Addr::LOCALHOST),
                "{spelling}"
            );
        }
        assert_eq!(
            ipv4_spelling("169.254.43518"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        for name in [
            "localhost",
            "example.org",
            "0x",
            "08.0.0.1",
            "256.0.0.1",
            "1.2.3.4.5",
            "127.0.0.256",
            "127.16777216",
            "4294967296",
            "1..1",
            "",
            "0xdeadbeef.com",
            "1.2.3.",
        ] {
            assert_eq!(ipv4_spelling(name), None, "{name}");
        }
    }

    fn class(s: &str) -> Option<Reserved> {
        classify(s.parse().unwrap(), &[])
    }

    #[test]
    fn reserved_ranges_are_named() {
        for (addr, want) in [
            ("127.0.0.1", Reserved::Loopback),
            ("127.255.0.9", Reserved::Loopback),
            ("::1", Reserved::Loopback),
            ("10.1.2.3", Reserved::Private),
            ("172.16.0.1", Reserved::Private),
            ("172.31.255.255", Reserved::Private),
            ("192.168.1.1", Reserved::Private),
            ("fd00::1", Reserved::Private),
            ("169.254.169.254", Reserved::LinkLocal),
            ("fe80::1", Reserved::LinkLocal),
            ("0.0.0.0", Reserved::Unspecified),
            ("::", Reserved::Unspecified),
            ("224.0.0.1", Reserved::Multicast),
            ("ff02::1", Reserved::Multicast),
            ("100.64.0.1", Reserved::Special),
            ("255.255.255.255", Reserved::Special),
            ("192.0.0.192", Reserved::Special),
        ] {
            assert_eq!(class(addr), Some(want), "{addr}");
        }
    }

    #[test]
    fn ipv4_hidden_in_ipv6_is_judged_as_ipv4() {
        // Mapped, compatible, NAT64 and 6to4 spellings of loopback and metadata.
        assert_eq!(class("::ffff:127.0.0.1"), Some(Reserved::Loopback));
        assert_eq!(class("::ffff:169.254.169.254"), Some(Reserved::LinkLocal));
        assert_eq!(class("::127.0.0.1"), Some(Reserved::Loopback));
        assert_eq!(class("64:ff9b::a9fe:a9fe"), Some(Reserved::LinkLocal));
        assert_eq!(class("2002:7f00:1::"), Some(Reserved::Loopback));
        assert_eq!(class("2002:0808:0808::"), None);
    }

    #[test]
    fn public_addresses_pass_and_neighbours_of_ranges_are_public() {
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "100.63.255.255",
            "100.128.0.0",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            // Documentation and benchmarking ranges are not internal services (some
            // resolvers hand out 198.18.0.0/15 addresses for every name).
            "203.0.113.80",
            "198.18.0.1",
            "2001:db8::1",
        ] {
            assert_eq!(class(addr), None, "{addr}");
        }
    }

    #[test]
    fn this_hosts_own_public_address_is_reserved() {
        let own: IpAddr = "203.1.2.3".parse().unwrap();
        assert_eq!(classify(own, &[own]), Some(Reserved::ThisHost));
        assert_eq!(classify("203.1.2.4".parse().unwrap(), &[own]), None);
        // The machine's own interfaces include loopback at least.
        assert!(own_addresses().contains(&"127.0.0.1".parse().unwrap()));
    }
}
