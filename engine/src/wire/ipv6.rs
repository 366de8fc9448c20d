//! IPv6 header view over a byte buffer (RFC 8200), prefixes and the addresses neighbour
//! discovery uses (solicited-node multicast groups and their Ethernet addresses, RFC 4291
//! §2.7.1 and RFC 2464 §7).
//!
//! `Packet::new_checked` validates the version and the payload length against the buffer,
//! so the accessors never panic; `payload()` stops at the payload length (Ethernet padding
//! excluded). Extension headers are not walked: `next_header()` is the first one.

pub type Addr = [u8; 16];

pub const HEADER_LEN: usize = 40;
pub const ETHERTYPE: u16 = 0x86dd;
pub const NEXT_TCP: u8 = 6;
pub const NEXT_UDP: u8 = 17;
pub const NEXT_ICMPV6: u8 = 58;
/// The smallest MTU every IPv6 link carries: an ICMPv6 error is at most this long.
pub const MIN_MTU: usize = 1280;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Malformed;

#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN || b[0] >> 4 != 6 {
            return Err(Malformed);
        }
        let pl = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if HEADER_LEN + pl > b.len() {
            return Err(Malformed);
        }
        Ok(Packet { buffer })
    }
    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }
    pub fn flow_label(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }
    pub fn payload_len(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(u16::from_be_bytes([b[4], b[5]]))
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }
    pub fn src(&self) -> Addr {
        self.buffer.as_ref()[8..24].try_into().unwrap_or([0; 16])
    }
    pub fn dst(&self) -> Addr {
        self.buffer.as_ref()[24..40].try_into().unwrap_or([0; 16])
    }
    /// The packet up to its payload length (no link-layer padding).
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN + self.payload_len()]
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }
}

/// A 40-byte header (traffic class and flow label 0).
pub fn header(src: Addr, dst: Addr, next: u8, hop_limit: u8, payload_len: usize) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(payload_len.min(0xffff) as u16).to_be_bytes());
    h[6] = next;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src);
    h[24..40].copy_from_slice(&dst);
    h
}

/// Decrement the hop limit of a header (`h.len() >= 40`, hop limit ≥ 1); IPv6 has no header
/// checksum to update.
pub fn decrement_hop_limit(h: &mut [u8]) {
    if h.len() >= HEADER_LEN && h[7] > 0 {
        h[7] -= 1;
    }
}

pub fn mask(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    }
}

/// `a` lies in `net/prefix`.
pub fn in_subnet(a: Addr, net: Addr, prefix: u8) -> bool {
    let m = mask(prefix);
    u128::from_be_bytes(a) & m == u128::from_be_bytes(net) & m
}

pub fn is_multicast(a: Addr) -> bool {
    a[0] == 0xff
}

/// fe80::/10: never forwarded by a router.
pub fn is_link_local(a: Addr) -> bool {
    a[0] == 0xfe && a[1] & 0xc0 == 0x80
}

/// Multicast, ::, ::1 or link-local: never forwarded, nor the target of an ICMPv6 error a
/// router originates.
pub fn is_special(a: Addr) -> bool {
    is_multicast(a) || is_link_local(a) || u128::from_be_bytes(a) <= 1
}

/// The solicited-node multicast group of `a`: ff02::1:ffXX:XXXX with its low 24 bits.
pub fn solicited_node(a: Addr) -> Addr {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x02;
    g[11] = 0x01;
    g[12] = 0xff;
    g[13..16].copy_from_slice(&a[13..16]);
    g
}

/// The Ethernet address of IPv6 multicast group `g`: 33:33 and its low 32 bits.
pub fn multicast_mac(g: Addr) -> [u8; 6] {
    [0x33, 0x33, g[12], g[13], g[14], g[15]]
}

/// The link-local address of an interface with Ethernet address `mac` (modified EUI-64,
/// RFC 4291 appendix A), as Linux makes it.
pub fn link_local(mac: [u8; 6]) -> Addr {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8] = mac[0] ^ 0x02;
    a[9] = mac[1];
    a[10] = mac[2];
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13] = mac[3];
    a[14] = mac[4];
    a[15] = mac[5];
    a
}

/// Parse `"addr/len"` (`len` 0..=128).
pub fn parse_cidr(s: &str) -> Result<(Addr, u8), String> {
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| format!("expected \"addr/len\", got \"{s}\""))?;
    let ip = parse_addr(ip).map_err(|_| format!("bad IPv6 address in \"{s}\""))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= 128)
        .ok_or_else(|| format!("bad prefix length in \"{s}\" (0..=128)"))?;
    Ok((ip, len))
}

pub fn parse_addr(s: &str) -> Result<Addr, String> {
    s.parse::<std::net::Ipv6Addr>()
        .map(|a| a.octets())
        .map_err(|_| format!("bad IPv6 address \"{s}\""))
}

/// `a` in its usual text form (`fd00::1`).
pub fn display(a: Addr) -> String {
    std::net::Ipv6Addr::from(a).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Addr {
        parse_addr(s).unwrap()
    }

    #[test]
    fn header_round_trips_through_the_view() {
        let h = header(a("fd00::1"), a("fd00:1::2"), NEXT_UDP, 64, 12);
        assert_eq!(&h[..8], &[0x60, 0, 0, 0, 0, 12, 17, 64]);
        let mut buf = h.to_vec();
        buf.extend_from_slice(&[0xaa; 12]);
        buf.extend_from_slice(&[0; 6]); // Ethernet padding, cut off
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (12, 17, 64)
        );
        assert_eq!((p.src(), p.dst()), (a("fd00::1"), a("fd00:1::2")));
        assert_eq!((p.payload().len(), p.packet().len()), (12, 52));
        assert_eq!((p.traffic_class(), p.flow_label()), (0, 0));
        let mut tc = buf.clone();
        tc[0..4].copy_from_slice(&[0x6b, 0x81, 0x23, 0x45]);
        let p = Packet::new_checked(&tc[..]).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label()), (0xb8, 0x12345));
    }

    #[test]
    fn malformed_refused() {
        let h = header(a("fd00::1"), a("fd00::2"), NEXT_UDP, 64, 8);
        assert!(Packet::new_checked(&h[..39]).is_err());
        assert!(
            Packet::new_checked(&h[..]).is_err(),
            "payload 8 > 0 bytes left"
        );
        let mut v4 = h.to_vec();
        v4.extend_from_slice(&[0; 8]);
        v4[0] = 0x45;
        assert!(Packet::new_checked(&v4[..]).is_err());
    }

    #[test]
    fn hop_limit_prefixes_and_groups() {
        let mut h = header(a("fd00::1"), a("fd00::2"), NEXT_UDP, 1, 0);
        decrement_hop_limit(&mut h);
        assert_eq!(h[7], 0);
        decrement_hop_limit(&mut h);
        assert_eq!(h[7], 0);
        assert_eq!(parse_cidr("fd00:1::/64"), Ok((a("fd00:1::"), 64)));
        assert!(parse_cidr("fd00::/129").is_err() && parse_cidr("10.0.0.0/8").is_err());
        assert!(in_subnet(a("fd00:1::9"), a("fd00:1::"), 64));
        assert!(!in_subnet(a("fd00:2::9"), a("fd00:1::"), 64));
        assert!(in_subnet(a("2001:db8::1"), a("::"), 0));
        assert_eq!((mask(0), mask(128)), (0, u128::MAX));
        // RFC 4291's example form: the low 24 bits under ff02::1:ff00:0/104
        assert_eq!(solicited_node(a("fd00::12:3456")), a("ff02::1:ff12:3456"));
        assert_eq!(
            multicast_mac(a("ff02::1:ff12:3456")),
            [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]
        );
        // what Linux gives a TAP with MAC 02:ab:cd:00:01:02
        assert_eq!(
            link_local([0x02, 0xab, 0xcd, 0x00, 0x01, 0x02]),
            a("fe80::ab:cdff:fe00:102")
        );
        assert!(is_special(a("ff02::1")) && is_special(a("fe80::1")) && is_special(a("::")));
        assert!(is_special(a("::1")) && !is_special(a("fd00::1")));
        assert_eq!(display(a("fd00:0:0:1::1")), "fd00:0:0:1::1");
    }
}
