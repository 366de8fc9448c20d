//! Wire format of generator datagrams.
//!
//! Every datagram starts with a 20-byte header (little endian):
//! `magic u16 | kind u8 | reserved u8 | seq u64 | tx_ns u64`, small enough
//! for a 64-byte Ethernet frame (22-byte UDP payload).
//! `tx_ns` is the sender's CLOCK_MONOTONIC time at transmission; since sender
//! and receiver share the host clock the sink can compute one-way delay.
//! A FIN datagram (kind 1) carries the total number of data datagrams sent in
//! `seq`, so the sink can count losses at the tail of the stream.
//! The rest of the payload is zero padding up to the requested size.

pub const MAGIC: u16 = 0x4757; // "WG"
pub const HEADER_LEN: usize = 20;
/// IPv4 (20) + UDP (8) + Ethernet header (14): UDP payload -> Ethernet frame.
pub const FRAME_OVERHEAD: usize = 42;
/// IPv4 + UDP header bytes.
pub const IP_OVERHEAD: usize = 28;
/// What an IPv6 header adds to both (40 bytes instead of 20).
pub const IPV6_EXTRA: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Data = 0,
    Fin = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub seq: u64,
    pub tx_ns: u64,
}

impl Header {
    /// Write the header into the start of `buf` (must be >= HEADER_LEN bytes).
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        buf[2] = self.kind as u8;
        buf[3] = 0;
        buf[4..12].copy_from_slice(&self.seq.to_le_bytes());
        buf[12..20].copy_from_slice(&self.tx_ns.to_le_bytes());
    }

    /// Parse a header; `None` for foreign or truncated datagrams.
    pub fn parse(buf: &[u8]) -> Option<Header> {
        if buf.len() < HEADER_LEN || buf[0..2] != MAGIC.to_le_bytes() {
            return None;
        }
        let kind = match buf[2] {
            0 => Kind::Data,
            1 => Kind::Fin,
            _ => return None,
        };
        Some(Header {
            kind,
            seq: u64::from_le_bytes(buf[4..12].try_into().ok()?),
            tx_ns: u64::from_le_bytes(buf[12..20].try_into().ok()?),
        })
    }
}

/// Overwrite only the timestamp of an already written header.
pub fn set_tx_ns(buf: &mut [u8], tx_ns: u64) {
    buf[12..20].copy_from_slice(&tx_ns.to_le_bytes());
}

/// Overwrite only the sequence number of an already written header.
pub fn set_seq(buf: &mut [u8], seq: u64) {
    buf[4..12].copy_from_slice(&seq.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn roundtrip() {
        let mut b = vec![0u8; 64];
        let h = Header {
            kind: Kind::Data,
            seq: 42,
            tx_ns: 123456789,
        };
        h.write(&mut b);
        assert_eq!(Header::parse(&b), Some(h));
        set_seq(&mut b, 7);
        set_tx_ns(&mut b, 9);
        assert_eq!(
            Header::parse(&b),
            Some(Header {
                kind: Kind::Data,
                seq: 7,
                tx_ns: 9
            })
        );
        let f = Header {
            kind: Kind::Fin,
            seq: 1000,
            tx_ns: 1,
        };
        f.write(&mut b);
        assert_eq!(Header::parse(&b).unwrap().kind, Kind::Fin);
    }
    #[test]
    fn rejects_foreign() {
        assert_eq!(Header::parse(&[0u8; 10]), None);
        assert_eq!(Header::parse(&[1u8; 40]), None);
    }
}
