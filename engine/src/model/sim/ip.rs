//! An address of either family, as simulated hosts and their agents use it: an agent's
//! destination, a segment's source, a TCP sink's connection key. A simulated host speaks
//! IPv4, IPv6 or both; its agents use the family of the address they are given.
use std::fmt;

use crate::wire::{ipv4, ipv6};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpAddr {
    V4(ipv4::Addr),
    V6(ipv6::Addr),
}

/// The name the TCP and UDP code knows addresses by.
pub type Addr = IpAddr;

impl Default for IpAddr {
    fn default() -> Self {
        IpAddr::V4([0; 4])
    }
}

impl From<ipv4::Addr> for IpAddr {
    fn from(a: ipv4::Addr) -> Self {
        IpAddr::V4(a)
    }
}

impl From<ipv6::Addr> for IpAddr {
    fn from(a: ipv6::Addr) -> Self {
        IpAddr::V6(a)
    }
}

/// The address's bytes, as the transport checksum's pseudo-header takes them.
impl AsRef<[u8]> for IpAddr {
    fn as_ref(&self) -> &[u8] {
        match self {
            IpAddr::V4(a) => a,
            IpAddr::V6(a) => a,
        }
    }
}

impl fmt::Display for IpAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IpAddr::V4(a) => write!(f, "{}", std::net::Ipv4Addr::from(a)),
            IpAddr::V6(a) => write!(f, "{}", std::net::Ipv6Addr::from(a)),
        }
    }
}

impl IpAddr {
    /// Multicast, broadcast, unspecified, loopback or (IPv6) link-local: never an agent's peer.
    pub fn is_special(&self) -> bool {
        match *self {
            IpAddr::V4(a) => ipv4::is_special(a),
            IpAddr::V6(a) => ipv6::is_special(a),
        }
    }
}

/// `"a.b.c.d:port"` or `"[v6 address]:port"`.
pub fn parse_socket(s: &str) -> Result<(IpAddr, u16), String> {
    let bad = || format!("expected \"a.b.c.d:port\" or \"[ipv6]:port\", got \"{s}\"");
    let (ip, port) = if let Some(rest) = s.strip_prefix('[') {
        let (ip, port) = rest.split_once("]:").ok_or_else(bad)?;
        (IpAddr::V6(ipv6::parse_addr(ip)?), port)
    } else {
        let (ip, port) = s.rsplit_once(':').ok_or_else(bad)?;
        (IpAddr::V4(ipv4::parse_addr(ip)?), port)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port must be 1..=65535, got \"{port}\""))?;
    Ok((ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_of_both_families() {
        assert_eq!(
            parse_socket("10.0.0.2:5000"),
            Ok((IpAddr::V4([10, 0, 0, 2]), 5000))
        );
        let v6 = ipv6::parse_addr("fd00::2").unwrap();
        assert_eq!(parse_socket("[fd00::2]:80"), Ok((IpAddr::V6(v6), 80)));
        assert!(parse_socket("fd00::2:80").is_err(), "IPv6 needs brackets");
        assert!(parse_socket("[fd00::2]:0").is_err());
        assert!(parse_socket("[10.0.0.1]:5").is_err());
        assert_eq!(IpAddr::V6(v6).to_string(), "fd00::2");
        assert_eq!(IpAddr::V6(v6).as_ref().len(), 16);
    }
}
