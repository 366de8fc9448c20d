//! The TCP sink (ns-2 `Agent/TCPSink`, `Agent/TCPSink/DelAck`).
//!
//! One connection per (source address, source port); a SYN (re)starts it and is answered
//! with SYN/ACK (the sink's ISS is 0), permitting SACK if the sink does SACK and the SYN
//! asked for it. Every data segment is answered with a cumulative ACK;
//! out-of-order segments are buffered (up to [`MAX_OOO`] ranges per connection) and
//! answered at once with a duplicate ACK, so the ACK jumps when the hole is filled. With
//! SACK, every ACK while data is buffered out of order carries SACK blocks (RFC 2018): the
//! block holding the latest segment first, then the blocks of the previous arrivals.
//! With `delayed_ack`, an in-order segment that does not fill a hole is acknowledged with
//! the second such segment or 40 ms after it arrived, whichever comes first. A FIN in
//! sequence is acknowledged (the sink does not close its side). The advertised window is
//! always 65535 and ignored by the sender. RST drops the connection. Segments for an
//! unknown connection are ignored.
use std::collections::{BTreeMap, VecDeque};

use super::{unwrap_seq, Sack, Segment, TxSeg, ACK, FIN, MAX_SACK_BLOCKS, RST, SYN};
use crate::model::sim::ip::Addr;
use crate::time::Instant;

pub const DELACK_NS: u64 = 40_000_000;
/// Out-of-order ranges buffered per connection (more are dropped, i.e. not buffered).
pub const MAX_OOO: usize = 4096;

#[derive(Debug)]
struct Conn {
    irs: u32,
    /// In-order payload bytes received.
    rcv: u64,
    fin: bool,
    /// Out-of-order data: disjoint, non-adjacent ranges start → end.
    ooo: BTreeMap<u64, u64>,
    pending: u32,
    ack_at: Option<Instant>,
    sack_ok: bool,
    /// Offsets of the latest out-of-order arrivals, newest first (for SACK blocks).
    recent: VecDeque<u64>,
}

impl Conn {
    fn wire(&self, off: u64) -> u32 {
        self.irs.wrapping_add(1).wrapping_add(off as u32)
    }
    fn ack(&mut self) -> TxSeg {
        self.pending = 0;
        self.ack_at = None;
        let mut sack = Sack::default();
        if self.sack_ok {
            let mut seen: Vec<u64> = Vec::new();
            for &x in &self.recent {
                let Some((&s, &e)) = self.ooo.range(..=x).next_back() else {
                    continue;
                };
                if e > x && !seen.contains(&s) {
                    seen.push(s);
                    sack.push(self.wire(s), self.wire(e));
                }
                if seen.len() == MAX_SACK_BLOCKS {
                    break;
                }
            }
        }
        TxSeg {
            seq: 1,
            ack: self.wire(self.rcv).wrapping_add(u32::from(self.fin)),
            flags: ACK,
            sack,
            ..Default::default()
        }
    }

    /// Buffer `[s, e)` out of order, merging it with the ranges it touches.
    fn insert_ooo(&mut self, mut s: u64, mut e: u64) {
        if let Some((&ps, &pe)) = self.ooo.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        while let Some((&ns, &ne)) = self.ooo.range(s..).next() {
            if ns > e {
                break;
            }
            self.ooo.remove(&ns);
            e = e.max(ne);
        }
        if self.ooo.len() < MAX_OOO || self.ooo.contains_key(&s) {
            self.ooo.insert(s, e);
        }
    }
}

#[derive(Debug, Default)]
pub struct TcpSink {
    pub port: u16,
    pub delayed_ack: bool,
    /// Permit SACK when the sender asks for it.
    pub sack: bool,
    conns: BTreeMap<(Addr, u16), Conn>,
    /// Data segments received (in order, out of order and duplicates).
    pub pkts: u64,
    /// In-order payload bytes delivered.
    pub bytes: u64,
    pub dup_pkts: u64,
    pub ooo_pkts: u64,
}

/// A segment to send to (address, port).
pub type Reply = (Addr, u16, TxSeg);

impl TcpSink {
    pub fn new(port: u16, delayed_ack: bool, sack: bool) -> Self {
        TcpSink {
            port,
            delayed_ack,
            sack,
            ..Default::default()
        }
    }

    pub fn poll_at(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.ack_at).min()
    }

    /// Delayed ACKs due by `now`.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Reply>) {
        for (&(a, p), c) in self.conns.iter_mut() {
            if c.ack_at.is_some_and(|t| t <= now) {
                out.push((a, p, c.ack()));
            }
        }
    }

    pub fn receive(&mut self, seg: &Segment, now: Instant, out: &mut Vec<Reply>) {
        let key = (seg.src, seg.sport);
        if seg.flags & RST != 0 {
            self.conns.remove(&key);
            return;
        }
        if seg.flags & SYN != 0 {
            if seg.flags & ACK != 0 {
                return;
            }
            let same = self.conns.get(&key).is_some_and(|c| c.irs == seg.seq);
            let sack_ok = self.sack && seg.sack_permitted;
            if !same {
                self.conns.insert(
                    key,
                    Conn {
                        irs: seg.seq,
                        rcv: 0,
                        fin: false,
                        ooo: BTreeMap::new(),
                        pending: 0,
                        ack_at: None,
                        sack_ok,
                        recent: VecDeque::new(),
                    },
                );
            }
            out.push((
                seg.src,
                seg.sport,
                TxSeg {
                    seq: 0,
                    ack: seg.seq.wrapping_add(1),
                    flags: SYN | ACK,
                    sack_permitted: sack_ok,
                    ..Default::default()
                },
            ));
            return;
        }
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let has_fin = seg.flags & FIN != 0;
        if seg.payload_len == 0 && !has_fin {
            return; // pure ACK
        }
        let start = unwrap_seq(c.rcv, c.wire(c.rcv), seg.seq);
        let len = seg.payload_len as u64;
        let mut immediate = true;
        if len > 0 {
            self.pkts += 1;
            match start {
                Some(s) if s + len <= c.rcv || c.fin => self.dup_pkts += 1,
                None => self.dup_pkts += 1,
                Some(s) if s > c.rcv => {
                    self.ooo_pkts += 1;
                    c.insert_ooo(s, s + len);
                    c.recent.retain(|&x| x != s);
                    c.recent.push_front(s);
                    c.recent.truncate(2 * MAX_SACK_BLOCKS);
                }
                Some(s) => {
                    let had_hole = !c.ooo.is_empty();
                    let end = s + len;
                    self.bytes += end - c.rcv;
                    c.rcv = end;
                    while let Some((&os, &oe)) = c.ooo.first_key_value() {
                        if os > c.rcv {
                            break;
                        }
                        c.ooo.pop_first();
                        if oe > c.rcv {
                            self.bytes += oe - c.rcv;
                            c.rcv = oe;
                        }
                    }
                    let rcv = c.rcv;
                    c.recent.retain(|&x| x >= rcv);
                    if self.delayed_ack && !had_hole && !has_fin {
                        c.pending += 1;
                        if c.pending < 2 {
                            immediate = false;
                            if c.ack_at.is_none() {
                                c.ack_at = Some(now.add_nanos(DELACK_NS));
                            }
                        }
                    }
                }
            }
        }
        if has_fin && !c.fin && start.is_some_and(|s| s + len == c.rcv) {
            c.fin = true;
        }
        if immediate {
            out.push((seg.src, seg.sport, c.ack()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, flags: u8, len: usize) -> Segment {
        Segment {
            src: [10, 0, 0, 1].into(),
            sport: 4000,
            dport: 80,
            seq,
            ack: 1,
            flags,
            payload_len: len,
            ..Default::default()
        }
    }

    fn acks(out: &[Reply]) -> Vec<u32> {
        out.iter().map(|r| r.2.ack).collect()
    }

    #[test]
    fn cumulative_and_out_of_order() {
        let mut s = TcpSink::new(80, false, false);
        let mut out = Vec::new();
        let t = Instant::ZERO;
        s.receive(&seg(100, SYN, 0), t, &mut out);
        assert_eq!(
            out[0].2,
            TxSeg {
                seq: 0,
                ack: 101,
                flags: SYN | ACK,
                ..Default::default()
            }
        );
        out.clear();
        s.receive(&seg(101, ACK, 10), t, &mut out);
        s.receive(&seg(121, ACK, 10), t, &mut out); // hole 111..121
        s.receive(&seg(131, ACK, 10), t, &mut out);
        s.receive(&seg(111, ACK, 10), t, &mut out); // fills it
        s.receive(&seg(111, ACK, 10), t, &mut out); // duplicate
        s.receive(&seg(141, FIN | ACK, 0), t, &mut out);
        assert_eq!(acks(&out), [111, 111, 111, 141, 141, 142]);
        assert_eq!((s.pkts, s.bytes, s.dup_pkts, s.ooo_pkts), (5, 40, 1, 2));
    }

    #[test]
    fn delayed_ack() {
        let mut s = TcpSink::new(80, true, false);
        let mut out = Vec::new();
        s.receive(&seg(0, SYN, 0), Instant::ZERO, &mut out);
        out.clear();
        s.receive(&seg(1, ACK, 10), Instant::from_millis(1), &mut out);
        assert!(out.is_empty());
        assert_eq!(s.poll_at(), Some(Instant::from_millis(41)));
        s.receive(&seg(11, ACK, 10), Instant::from_millis(2), &mut out);
        assert_eq!(acks(&out), [21]);
        assert_eq!(s.poll_at(), None);
        s.receive(&seg(21, ACK, 10), Instant::from_millis(3), &mut out);
        s.on_timer(Instant::from_millis(42), &mut out);
        assert!(out.len() == 1);
        s.on_timer(Instant::from_millis(43), &mut out);
        assert_eq!(acks(&out), [21, 31]);
        // Out of order: immediate.
        s.receive(&seg(41, ACK, 10), Instant::from_millis(50), &mut out);
        assert_eq!(acks(&out), [21, 31, 31]);
    }

    #[test]
    fn sack_blocks() {
        let mut s = TcpSink::new(80, false, true);
        let mut out = Vec::new();
        let t = Instant::ZERO;
        let syn = Segment {
            sack_permitted: true,
            ..seg(0, SYN, 0)
        };
        s.receive(&syn, t, &mut out);
        assert!(out[0].2.sack_permitted);
        out.clear();
        // segments of 10 bytes at 1, 11, ...; 11 and 31 and 51 are lost
        for seq in [1, 21, 41, 61, 71, 81] {
            s.receive(&seg(seq, ACK, 10), t, &mut out);
        }
        let blocks: Vec<Vec<(u32, u32)>> = out.iter().map(|r| r.2.sack.iter().collect()).collect();
        assert_eq!(blocks[0], []);
        assert_eq!(blocks[1], [(21, 31)]);
        assert_eq!(blocks[2], [(41, 51), (21, 31)]);
        assert_eq!(blocks[3], [(61, 71), (41, 51), (21, 31)]);
        // 71 joins 61's block: the block is reported once, grown
        assert_eq!(blocks[5], [(61, 91), (41, 51), (21, 31)]);
        assert!(out.iter().all(|r| r.2.ack == 11));
        out.clear();
        // the first hole filled: ACK 31, the blocks above it remain
        s.receive(&seg(11, ACK, 10), t, &mut out);
        assert_eq!(out[0].2.ack, 31);
        assert_eq!(
            out[0].2.sack.iter().collect::<Vec<_>>(),
            [(61, 91), (41, 51)]
        );
        // a sink without SACK, or a SYN without SACK-permitted: no blocks
        let mut plain = TcpSink::new(80, false, true);
        out.clear();
        plain.receive(&seg(0, SYN, 0), t, &mut out);
        plain.receive(&seg(21, ACK, 10), t, &mut out);
        assert!(!out[0].2.sack_permitted && out[1].2.sack.n == 0);
    }
}
