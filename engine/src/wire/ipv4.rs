//! IPv4 header view over a byte buffer, its checksum (`super::checksum`) and the RFC 1624 incremental
//! update used when a router decrements the TTL.
//!
//! `Packet::new_checked` validates version, IHL and total length against the buffer, so the
//! accessors never panic; `payload()` stops at the total length (Ethernet padding excluded).

pub type Addr = [u8; 4];

pub const MIN_HEADER_LEN: usize = 20;
pub const PROTO_ICMP: u8 = 1;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Malformed;

#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN || b[0] >> 4 != 4 {
            return Err(Malformed);
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        let tl = usize::from(u16::from_be_bytes([b[2], b[3]]));
        if hl < MIN_HEADER_LEN || tl < hl || tl > b.len() {
            return Err(Malformed);
        }
        Ok(Packet { buffer })
    }
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }
    pub fn total_len(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(u16::from_be_bytes([b[2], b[3]]))
    }
    /// Fragment offset in 8-byte units (0 for an unfragmented packet or a first fragment).
    pub fn frag_offset(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]]) & 0x1fff
    }
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }
    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[10], b[11]])
    }
    pub fn src(&self) -> Addr {
        let b = self.buffer.as_ref();
        [b[12], b[13], b[14], b[15]]
    }
    pub fn dst(&self) -> Addr {
        let b = self.buffer.as_ref();
        [b[16], b[17], b[18], b[19]]
    }
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    /// The packet up to its total length (no link-layer padding).
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len()]
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
    pub fn verify_checksum(&self) -> bool {
        checksum(self.header()) == 0
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The payload, borrowed from the buffer rather than from the view (it outlives it).
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[self.header_len()..self.total_len()]
    }
}

/// RFC 1071 Internet checksum (the value to store; verifying a correct header gives 0).
pub use super::checksum::checksum;

/// Decrement the TTL of a header (`h.len() >= 20`, TTL ≥ 1) and update its checksum
/// incrementally, RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
pub fn decrement_ttl(h: &mut [u8]) {
    if h.len() < MIN_HEADER_LEN || h[8] == 0 {
        return;
    }
    let old = u16::from_be_bytes([h[8], h[9]]);
    h[8] -= 1;
    let new = u16::from_be_bytes([h[8], h[9]]);
    let hc = u16::from_be_bytes([h[10], h[11]]);
    let mut s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    h[10..12].copy_from_slice(&(!(s as u16)).to_be_bytes());
}

/// A 20-byte header (no options, DF clear) with its checksum.
pub fn header(
    src: Addr,
    dst: Addr,
    protocol: u8,
    ttl: u8,
    ident: u16,
    payload_len: usize,
) -> [u8; 20] {
    let tl = (MIN_HEADER_LEN + payload_len).min(0xffff) as u16;
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&tl.to_be_bytes());
    h[4..6].copy_from_slice(&ident.to_be_bytes());
    h[8] = ttl;
    h[9] = protocol;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

pub fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

/// `a` lies in `net/prefix`.
pub fn in_subnet(a: Addr, net: Addr, prefix: u8) -> bool {
    let m = mask(prefix);
    u32::from_be_bytes(a) & m == u32::from_be_bytes(net) & m
}

/// Multicast, limited broadcast or 0.0.0.0: never a unicast destination or ICMP error target.
pub fn is_special(a: Addr) -> bool {
    a[0] >= 224 || a == [0, 0, 0, 0] || a[0] == 127
}

/// Parse `"a.b.c.d/len"` (`len` 0..=32).
pub fn parse_cidr(s: &str) -> Result<(Addr, u8), String> {
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| format!("expected \"a.b.c.d/len\", got \"{s}\""))?;
    let ip: std::net::Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("bad IPv4 address in \"{s}\""))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| format!("bad prefix length in \"{s}\" (0..=32)"))?;
    Ok((ip.octets(), len))
}

pub fn parse_addr(s: &str) -> Result<Addr, String> {
    s.parse::<std::net::Ipv4Addr>()
        .map(|a| a.octets())
        .map_err(|_| format!("bad IPv4 address \"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    // ICMP echo 10.0.0.1 -> 10.0.0.2, TTL 64; checksum 0x1473 (computed independently in Python).
    const HDR: [u8; 20] = [
        0x45, 0, 0x00, 0x54, 0x12, 0x34, 0x40, 0, 0x40, 0x01, 0x00, 0x00, 10, 0, 0, 1, 10, 0, 0, 2,
    ];

    fn fixture() -> [u8; 20] {
        let mut h = HDR;
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    #[test]
    fn checksum_known_value() {
        // RFC 1071 example words 0001 f203 f4f5 f6f7 sum to 0xddf2 → checksum 0x220d.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        let h = fixture();
        assert_eq!(u16::from_be_bytes([h[10], h[11]]), 0x1473);
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn view_accessors_and_padding() {
        let mut buf = fixture().to_vec();
        buf.extend_from_slice(&[0xaa; 64]); // 64 payload bytes + 0 padding: total 84
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (p.header_len(), p.total_len(), p.ttl(), p.protocol()),
            (20, 84, 64, 1)
        );
        assert_eq!((p.src(), p.dst()), ([10, 0, 0, 1], [10, 0, 0, 2]));
        assert_eq!(p.payload().len(), 64);
        assert!(p.verify_checksum());
        assert!(!p.more_frags() && p.frag_offset() == 0);
        buf.extend_from_slice(&[0; 6]); // padding is cut off
        assert_eq!(Packet::new_checked(&buf[..]).unwrap().packet().len(), 84);
    }

    #[test]
    fn malformed_refused() {
        let h = fixture();
        assert!(Packet::new_checked(&h[..19]).is_err());
        let mut v6 = h;
        v6[0] = 0x65;
        assert!(Packet::new_checked(&v6[..]).is_err());
        let mut ihl = h;
        ihl[0] = 0x44;
        assert!(Packet::new_checked(&ihl[..]).is_err());
        assert!(
            Packet::new_checked(&h[..]).is_err(),
            "total length 84 > 20-byte buffer"
        );
    }

    #[test]
    fn incremental_ttl_matches_full_recompute() {
        for ttl in 1..=255u8 {
            for proto in [0u8, 1, 6, 17, 255] {
                for id in [0u16, 0x1234, 0xffff, 0xfffe] {
                    let mut h = header([10, 0, 0, 1], [192, 168, 255, 255], proto, ttl, id, 100);
                    decrement_ttl(&mut h);
                    assert_eq!(h[8], ttl - 1);
                    assert_eq!(checksum(&h), 0, "ttl {ttl} proto {proto} id {id}");
                    let mut full = h;
                    full[10..12].copy_from_slice(&[0, 0]);
                    let c = checksum(&full);
                    assert_eq!(u16::from_be_bytes([h[10], h[11]]), c);
                }
            }
        }
    }

    #[test]
    fn cidr_and_subnets() {
        assert_eq!(parse_cidr("10.1.2.0/24"), Ok(([10, 1, 2, 0], 24)));
        assert!(
            parse_cidr("10.1.2.0").is_err()
                && parse_cidr("10.1.2.0/33").is_err()
                && parse_cidr("x/8").is_err()
        );
        assert!(
            in_subnet([10, 1, 2, 99], [10, 1, 2, 0], 24)
                && !in_subnet([10, 1, 3, 1], [10, 1, 2, 0], 24)
        );
        assert!(in_subnet([1, 2, 3, 4], [0, 0, 0, 0], 0));
        assert_eq!(mask(0), 0);
        assert_eq!(mask(32), u32::MAX);
    }
}
