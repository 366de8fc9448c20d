//! Simulated TCP on simulated hosts (ns-2 `Agent/TCP/*` + `Application/FTP` and
//! `Agent/TCPSink`), with real TCP/IPv4 segments on the wire.
//!
//! * Wire format ([`build`], [`parse`], over [`crate::wire::tcp`]): a 20-byte TCP header
//!   without options, valid checksums, payload of zero bytes (only lengths matter).
//! * [`sender::TcpSender`]: 3-way handshake, then bulk data (infinite or `bytes`-limited)
//!   with Tahoe / Reno / NewReno (RFC 5681, RFC 6582) or CUBIC (RFC 9438) congestion control
//!   and an RFC 6298 retransmission timer. **No SACK, no timestamps, no window scaling**;
//!   the receiver's advertised window is ignored (the sink always advertises 65535).
//! * [`sink::TcpSink`]: cumulative ACKs, out-of-order buffering, optional delayed ACK.
//!
//! Both are pure state machines driven by the network: segments in, segments out, and one
//! deadline each (`poll_at`) that the network keeps in its timer heap — never a wall clock.
use serde::ser::SerializeTuple;
use serde::Serialize;

use crate::wire::ipv4::Addr;
use crate::wire::tcp;

pub mod cubic;
pub mod sender;
pub mod sink;

pub use crate::wire::tcp::{ACK, FIN, HEADER_LEN, PSH, RST, SYN};
/// Largest payload of one segment in one IPv4 packet (65535 − 20 − 20).
pub const MAX_MSS: usize = 65535 - 20 - HEADER_LEN;
/// The window advertised in every segment (the sender ignores it).
pub const ADVERTISED_WINDOW: u16 = 65535;

/// A TCP segment addressed to a host (header fields and payload length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub src: Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload_len: usize,
}

/// A segment to send (addresses and ports are the agent's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSeg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub len: usize,
}

/// The TCP header + payload (zeros) of `seg`, with its checksum.
pub fn build(src: Addr, dst: Addr, sport: u16, dport: u16, seg: &TxSeg) -> Vec<u8> {
    let mut t = vec![0u8; HEADER_LEN + seg.len.min(MAX_MSS)];
    let h = tcp::Header {
        sport,
        dport,
        seq: seg.seq,
        ack: seg.ack,
        flags: seg.flags,
        window: ADVERTISED_WINDOW,
    };
    h.emit(&mut t, src, dst);
    t
}

/// Parse and check (header length, checksum) the TCP part of an IPv4 packet.
pub fn parse(src: Addr, dst: Addr, t: &[u8]) -> Option<Segment> {
    let p = tcp::Packet::new_checked(t).ok()?;
    if !p.verify_checksum(src, dst) {
        return None;
    }
    Some(Segment {
        src,
        sport: p.src_port(),
        dport: p.dst_port(),
        seq: p.seq(),
        ack: p.ack(),
        flags: p.flags(),
        payload_len: p.payload().len(),
    })
}

/// One sample of a sender's trace. Serialized as the array
/// `[t_ns, cwnd, ssthresh, srtt_us or null, acked_bytes, retransmits]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpSample {
    pub t_ns: u64,
    /// Segments.
    pub cwnd: f64,
    /// Segments.
    pub ssthresh: f64,
    pub srtt_us: Option<f64>,
    pub acked_bytes: u64,
    pub retransmits: u64,
}

impl Serialize for TcpSample {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(6)?;
        t.serialize_element(&self.t_ns)?;
        t.serialize_element(&self.cwnd)?;
        t.serialize_element(&self.ssthresh)?;
        t.serialize_element(&self.srtt_us)?;
        t.serialize_element(&self.acked_bytes)?;
        t.serialize_element(&self.retransmits)?;
        t.end()
    }
}

/// Unwrap a 32-bit sequence number near a known one: the 64-bit value `v` with
/// `v ≡ wire (mod 2³²)` closest to `near` (whose wire value is `near_wire`). `None` if it
/// would be negative.
pub fn unwrap_seq(near: u64, near_wire: u32, wire: u32) -> Option<u64> {
    let d = i64::from(wire.wrapping_sub(near_wire) as i32);
    let v = near as i64 + d;
    (v >= 0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_parse_roundtrip() {
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let seg = TxSeg {
            seq: 0xdead_beef,
            ack: 7,
            flags: ACK | PSH,
            len: 13,
        };
        let t = build(a, b, 1234, 80, &seg);
        assert_eq!(t.len(), 33);
        let p = parse(a, b, &t).unwrap();
        assert_eq!(
            (p.sport, p.dport, p.seq, p.ack, p.flags, p.payload_len),
            (1234, 80, 0xdead_beef, 7, ACK | PSH, 13)
        );
        let mut bad = t.clone();
        bad[20] ^= 1;
        assert!(parse(a, b, &bad).is_none());
        assert!(parse(a, [10, 0, 0, 3], &t).is_none());
    }

    #[test]
    fn unwrap() {
        assert_eq!(unwrap_seq(10, 10, 15), Some(15));
        assert_eq!(unwrap_seq(10, 10, 5), Some(5));
        assert_eq!(unwrap_seq(10, 10, 0xffff_fff0), None);
        assert_eq!(unwrap_seq(1 << 32, 0, 0xffff_fff0), Some((1 << 32) - 16));
        assert_eq!(unwrap_seq(5, u32::MAX - 2, 3), Some(11));
    }
}
