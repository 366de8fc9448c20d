//! Simulated TCP on simulated hosts (ns-2 `Agent/TCP/*` + `Application/FTP` and
//! `Agent/TCPSink`), with real TCP segments over IPv4 or IPv6 on the wire.
//!
//! * Wire format ([`build`], [`parse`], over [`crate::wire::tcp`]): a 20-byte TCP header,
//!   the only options window scale and SACK-permitted on a SYN and SYN/ACK, SACK blocks on
//!   an ACK (RFC 2018, at most [`MAX_SACK_BLOCKS`], as Linux with timestamps sends) and
//!   timestamps (RFC 7323) on every segment once both SYNs carried them; valid checksums,
//!   payload of zero bytes (only lengths matter).
//! * [`sender::TcpSender`]: 3-way handshake, then bulk data (infinite or `bytes`-limited)
//!   with Tahoe / Reno / NewReno (RFC 5681, RFC 6582) or CUBIC (RFC 9438) congestion control
//!   and an RFC 6298 retransmission timer; with SACK (when both ends permit it) Linux's loss
//!   recovery: a scoreboard, RACK-style loss marking and PRR. The SYN offers window
//!   scaling and timestamps (RFC 7323); a sink that accepts them (Linux's receiver)
//!   advertises its window, which the sender keeps its flight within, and measures its
//!   RTT from the timestamps the sender echoes; a sink that does not (ns-2's) advertises
//!   65535, which the sender ignores. The sender's own RTT samples come from its send
//!   times, not from timestamps.
//! * [`sink::TcpSink`]: cumulative ACKs, SACK blocks, out-of-order buffering; an ACK per
//!   segment (ns-2), ns-2's delayed ACK, or Linux's receiver ACKs ([`sink::Acks`]).
//!
//! Both are pure state machines driven by the network: segments in, segments out, and one
//! deadline each (`poll_at`) that the network keeps in its timer heap — never a wall clock.
use serde::ser::SerializeTuple;
use serde::Serialize;

use crate::model::sim::ip::Addr;
use crate::wire::tcp;

pub mod cubic;
pub mod hystart;
pub mod sender;
pub mod sink;

pub use crate::wire::tcp::{ACK, FIN, HEADER_LEN, PSH, RST, SYN};
/// Largest payload of one segment in one IPv4 packet (65535 − 20 − 20).
pub const MAX_MSS: usize = 65535 - 20 - HEADER_LEN;
/// The window field of a sink that does not scale windows (the sender ignores it).
pub const ADVERTISED_WINDOW: u16 = 65535;

/// SACK blocks per ACK (Linux sends 3 beside its timestamp option).
pub const MAX_SACK_BLOCKS: usize = 3;
const OPT_NOP: u8 = 1;
const OPT_WSCALE: u8 = 3;
const OPT_SACK_PERMITTED: u8 = 4;
const OPT_SACK: u8 = 5;
const OPT_TIMESTAMP: u8 = 8;

/// The SACK blocks of an ACK: `[start, end)` wire sequence numbers, most recent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sack {
    pub n: u8,
    pub blocks: [(u32, u32); MAX_SACK_BLOCKS],
}

impl Sack {
    pub fn push(&mut self, start: u32, end: u32) {
        if usize::from(self.n) < MAX_SACK_BLOCKS {
            self.blocks[usize::from(self.n)] = (start, end);
            self.n += 1;
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.blocks[..usize::from(self.n)].iter().copied()
    }
}

/// A TCP segment addressed to a host (header fields, options and payload length).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Segment {
    pub src: Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload_len: usize,
    pub sack_permitted: bool,
    pub sack: Sack,
    /// The window field (unscaled).
    pub window: u16,
    /// Window-scale option (SYN, SYN/ACK).
    pub wscale: Option<u8>,
    /// Timestamps option: (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
}

/// A segment to send (addresses and ports are the agent's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxSeg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub len: usize,
    /// SACK-permitted option (SYN, SYN/ACK).
    pub sack_permitted: bool,
    pub sack: Sack,
    /// The window field; `None` = [`ADVERTISED_WINDOW`].
    pub window: Option<u16>,
    /// Window-scale option (SYN, SYN/ACK).
    pub wscale: Option<u8>,
    /// Timestamps option: (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
}

/// The TCP timestamp clock (Linux's: milliseconds) at `now`.
pub fn ts_clock(now: crate::time::Instant) -> u32 {
    (now.nanos() / 1_000_000) as u32
}

/// The option bytes of `seg` (NOP-padded to 4-byte words).
fn options(seg: &TxSeg) -> Vec<u8> {
    let mut o = Vec::new();
    if let Some(shift) = seg.wscale {
        o.extend_from_slice(&[OPT_NOP, OPT_WSCALE, 3, shift]);
    }
    if seg.sack_permitted {
        o.extend_from_slice(&[OPT_NOP, OPT_NOP, OPT_SACK_PERMITTED, 2]);
    }
    if let Some((val, ecr)) = seg.ts {
        o.extend_from_slice(&[OPT_NOP, OPT_NOP, OPT_TIMESTAMP, 10]);
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
    }
    if seg.sack.n > 0 {
        o.extend_from_slice(&[OPT_NOP, OPT_NOP, OPT_SACK, 2 + 8 * seg.sack.n]);
        for (a, b) in seg.sack.iter() {
            o.extend_from_slice(&a.to_be_bytes());
            o.extend_from_slice(&b.to_be_bytes());
        }
    }
    o
}

/// Parse the options we know (window scale, SACK-permitted, SACK, timestamps) into `seg`;
/// others are skipped.
fn parse_options(opts: &[u8], seg: &mut Segment) {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            OPT_NOP => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    break;
                }
                let body = &opts[i + 2..i + len];
                match kind {
                    OPT_SACK_PERMITTED => seg.sack_permitted = true,
                    OPT_WSCALE => seg.wscale = body.first().copied(),
                    OPT_TIMESTAMP if body.len() == 8 => {
                        let v = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                        let e = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                        seg.ts = Some((v, e));
                    }
                    OPT_SACK => {
                        for b in body.chunks_exact(8) {
                            let a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                            let e = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                            seg.sack.push(a, e);
                        }
                    }
                    _ => {}
                }
                i += len;
            }
        }
    }
}

/// The TCP header + options + payload (zeros) of `seg`, with its checksum.
pub fn build(
    src: impl Into<Addr>,
    dst: impl Into<Addr>,
    sport: u16,
    dport: u16,
    seg: &TxSeg,
) -> Vec<u8> {
    let opts = options(seg);
    let mut t = vec![0u8; HEADER_LEN + opts.len() + seg.len.min(MAX_MSS - opts.len())];
    let h = tcp::Header {
        sport,
        dport,
        seq: seg.seq,
        ack: seg.ack,
        flags: seg.flags,
        window: seg.window.unwrap_or(ADVERTISED_WINDOW),
    };
    h.emit_with_options(&mut t, &opts, src.into(), dst.into());
    t
}

/// Parse and check (header length, checksum) the TCP part of an IPv4 or IPv6 packet.
pub fn parse(src: impl Into<Addr>, dst: impl Into<Addr>, t: &[u8]) -> Option<Segment> {
    let (src, dst) = (src.into(), dst.into());
    let p = tcp::Packet::new_checked(t).ok()?;
    if !p.verify_checksum(src, dst) {
        return None;
    }
    let mut seg = Segment {
        src,
        sport: p.src_port(),
        dport: p.dst_port(),
        seq: p.seq(),
        ack: p.ack(),
        flags: p.flags(),
        window: p.window(),
        payload_len: p.payload().len(),
        ..Default::default()
    };
    parse_options(p.options(), &mut seg);
    Some(seg)
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
            ..Default::default()
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
    fn sack_options_roundtrip() {
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let syn = TxSeg {
            flags: SYN,
            sack_permitted: true,
            ..Default::default()
        };
        let t = build(a, b, 1, 2, &syn);
        assert_eq!(t.len(), 24);
        let p = parse(a, b, &t).unwrap();
        assert!(p.sack_permitted && p.sack.n == 0);
        let mut ack = TxSeg {
            flags: ACK,
            ack: 100,
            ..Default::default()
        };
        ack.sack.push(300, 400);
        ack.sack.push(u32::MAX - 10, 5);
        ack.sack.push(500, 600);
        ack.sack.push(700, 800); // a fourth block does not fit
        let t = build(a, b, 1, 2, &ack);
        assert_eq!(t.len(), 20 + 4 + 24);
        let p = parse(a, b, &t).unwrap();
        assert!(!p.sack_permitted && p.ts.is_none());
        // with timestamps: 40 bytes of options, as Linux's ACKs with three SACK blocks
        let tsack = TxSeg {
            ts: Some((0xdead_beef, 7)),
            ..ack
        };
        let t = build(a, b, 1, 2, &tsack);
        assert_eq!(t.len(), 20 + 12 + 4 + 24);
        let q = parse(a, b, &t).unwrap();
        assert_eq!((q.ts, q.sack), (Some((0xdead_beef, 7)), p.sack));
        assert_eq!(
            p.sack.iter().collect::<Vec<_>>(),
            [(300, 400), (u32::MAX - 10, 5), (500, 600)]
        );
        assert_eq!(p.payload_len, 0);
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
