//! The TCP sink (ns-2 `Agent/TCPSink`, `Agent/TCPSink/DelAck`).
//!
//! One connection per (source address, source port); a SYN (re)starts it and is answered
//! with SYN/ACK (the sink's ISS is 0). Every data segment is answered with a cumulative ACK;
//! out-of-order segments are buffered (up to [`MAX_OOO`] ranges per connection) and
//! answered at once with a duplicate ACK, so the ACK jumps when the hole is filled.
//! With `delayed_ack`, an in-order segment that does not fill a hole is acknowledged with
//! the second such segment or 40 ms after it arrived, whichever comes first. A FIN in
//! sequence is acknowledged (the sink does not close its side). The advertised window is
//! always 65535 and ignored by the sender. RST drops the connection. Segments for an
//! unknown connection are ignored.
use std::collections::BTreeMap;

use super::{unwrap_seq, Segment, TxSeg, ACK, FIN, RST, SYN};
use crate::time::Instant;
use crate::wire::ipv4::Addr;

pub const DELACK_NS: u64 = 40_000_000;
/// Out-of-order ranges buffered per connection (more are dropped, i.e. not buffered).
pub const MAX_OOO: usize = 4096;

#[derive(Debug)]
struct Conn {
    irs: u32,
    /// In-order payload bytes received.
    rcv: u64,
    fin: bool,
    ooo: BTreeMap<u64, u64>,
    pending: u32,
    ack_at: Option<Instant>,
}

impl Conn {
    fn wire(&self, off: u64) -> u32 {
        self.irs.wrapping_add(1).wrapping_add(off as u32)
    }
    fn ack(&mut self) -> TxSeg {
        self.pending = 0;
        self.ack_at = None;
        TxSeg {
            seq: 1,
            ack: self.wire(self.rcv).wrapping_add(u32::from(self.fin)),
            flags: ACK,
            len: 0,
        }
    }
}

#[derive(Debug, Default)]
pub struct TcpSink {
    pub port: u16,
    pub delayed_ack: bool,
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
    pub fn new(port: u16, delayed_ack: bool) -> Self {
        TcpSink {
            port,
            delayed_ack,
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
                    len: 0,
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
                    if c.ooo.len() < MAX_OOO || c.ooo.contains_key(&s) {
                        let e = c.ooo.entry(s).or_insert(s + len);
                        *e = (*e).max(s + len);
                    }
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
            src: [10, 0, 0, 1],
            sport: 4000,
            dport: 80,
            seq,
            ack: 1,
            flags,
            payload_len: len,
        }
    }

    fn acks(out: &[Reply]) -> Vec<u32> {
        out.iter().map(|r| r.2.ack).collect()
    }

    #[test]
    fn cumulative_and_out_of_order() {
        let mut s = TcpSink::new(80, false);
        let mut out = Vec::new();
        let t = Instant::ZERO;
        s.receive(&seg(100, SYN, 0), t, &mut out);
        assert_eq!(
            out[0].2,
            TxSeg {
                seq: 0,
                ack: 101,
                flags: SYN | ACK,
                len: 0
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
        let mut s = TcpSink::new(80, true);
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
}
