//! The TCP sink (ns-2 `Agent/TCPSink`, `Agent/TCPSink/DelAck`, or a Linux receiver).
//!
//! One connection per (source address, source port); a SYN (re)starts it and is answered
//! with SYN/ACK (the sink's ISS is 0), permitting SACK if the sink does SACK and the SYN
//! asked for it. Out-of-order segments are buffered (up to [`MAX_OOO`] ranges per
//! connection), so the ACK jumps when the hole is filled. With SACK, every ACK while data
//! is buffered out of order carries SACK blocks (RFC 2018): the block holding the latest
//! segment first, then the blocks of the previous arrivals, newest first. The sink
//! remembers four blocks (Linux's TCP_NUM_SACKS; blocks that merged are one) and sends
//! three ([`MAX_SACK_BLOCKS`]). When ACKs are sent is the [`Acks`] policy:
//!
//! * [`Acks::Each`] (ns-2 `TCPSink`): every data segment at once.
//! * [`Acks::Delayed`] (ns-2 `DelAck`, `interval_`): an in-order segment that does not fill
//!   a hole is acknowledged with the second such segment or `interval` after it arrived,
//!   whichever comes first; out-of-order segments, hole fills and FIN at once.
//! * [`Acks::Linux`] (Linux's receiver, `tcp_input.c`): quick ACKs (every segment) for the
//!   first 16 ACKs of a connection, again after an idle gap longer than the receiver's RTO
//!   and after a duplicate segment; otherwise an ACK once more than one full segment
//!   (the largest seen, at least 536 bytes) is unacknowledged, else the delayed-ACK timer:
//!   `ato` starts at 40 ms, follows the gaps between in-order arrivals (halved plus the gap,
//!   at most the RTO), doubles when the timer fires, is bounded by max(SRTT, 40 ms) of the
//!   handshake when above 40 ms and by 200 ms. A segment that fills the last hole is
//!   acknowledged at once; while data is out of order the first three ACKs for each value
//!   of the cumulative ACK go at once and further ones are compressed (SACK compression:
//!   one ACK min(1 ms, SRTT/20) later, or at the 44th held back). While an ACK is held
//!   back, a segment that starts a new block when four are remembered sends it first
//!   (`tcp_sack_new_ofo_skb`), so the block forgotten reaches the sender.
//!
//! A Linux sink whose sender offers window scaling answers with its window scale
//! (ilog2(tcp_rmem[2]) − 15: [`RCV_WSCALE`] with Linux's defaults) and advertises Linux's
//! receive window, with an application that reads at once: half of tcp_rmem[1] less a
//! segment (64088 bytes with Linux's default 128 KiB), growing by two segments per
//! in-order segment up to a bound that autotuning raises once per receiver RTT to twice
//! the bytes read in the last one plus 16 segments, more while that amount grows (at most
//! half of tcp_rmem[2], Linux's default 6 MiB). tcp_rmem is the sink's [`Rmem`].
//!
//! The receiver's RTT comes from timestamps when the sender's SYN offered them (Linux's
//! `tcp_rcv_rtt_measure_ts`): a full segment that echoes a TSval not seen before gives a
//! sample, the time since the ACK carrying that TSval was sent (in milliseconds, at least
//! one); a sample below the estimate replaces it, a larger one moves it by an eighth. So
//! the estimate includes the queueing delay and the window keeps growing into a deep
//! queue. Without timestamps the handshake's RTT is used.
//!
//! **Every segment that grows the window is ACKed at once** (Linux's `tcp_grow_window`
//! sets a quick ACK), so in slow start, while the window keeps growing, the receiver ACKs
//! each segment, and one per two segments only once it has stopped.
//!
//! A FIN in sequence is acknowledged at once (the sink does not close its side). Other
//! sinks advertise 65535, which the sender ignores. RST drops the connection.
//! Segments for an unknown connection are ignored.
use std::collections::{BTreeMap, VecDeque};

use super::{ts_clock, unwrap_seq, Sack, Segment, TxSeg, ACK, FIN, MAX_SACK_BLOCKS, RST, SYN};
use crate::model::sim::ip::Addr;
use crate::time::Instant;

/// The engine's delayed-ACK interval for [`Acks::Delayed`] when none is given.
pub const DELACK_NS: u64 = 40_000_000;
/// Out-of-order ranges buffered per connection (more are dropped, i.e. not buffered).
pub const MAX_OOO: usize = 4096;

/// When the sink acknowledges (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    #[default]
    Each,
    /// Every second in-order segment, or this many ns after the first.
    Delayed(u64),
    Linux,
}

// Linux's constants (include/net/tcp.h, net/ipv4/tcp_input.c; HZ-independent in ns).
const MS: u64 = 1_000_000;
/// TCP_ATO_MIN = TCP_DELACK_MIN: the delayed-ACK timeout's floor.
const ATO_MIN_NS: u64 = 40 * MS;
/// TCP_DELACK_MAX.
const DELACK_MAX_NS: u64 = 200 * MS;
/// HZ / 2: the bound on `ato` above the floor, before the RTT's.
const ATO_MAX_NS: u64 = 500 * MS;
/// TCP_MAX_QUICKACKS.
const MAX_QUICKACKS: u32 = 16;
/// TCP_MSS_DEFAULT: the receiver's estimate of the sender's MSS before the first segment.
const RCV_MSS_DEFAULT: u64 = 536;
/// TCP_TIMEOUT_INIT: the receiver's RTO before an RTT sample.
const RTO_INIT_NS: u64 = 1_000 * MS;
const RTO_MIN_NS: u64 = 200 * MS;
/// sysctl tcp_comp_sack_nr, tcp_comp_sack_delay_ns.
const COMP_SACK_NR: u32 = 44;
const COMP_SACK_DELAY_NS: u64 = MS;
/// TCP_NUM_SACKS: the SACK blocks a receiver remembers (it sends at most
/// [`MAX_SACK_BLOCKS`] of them).
const NUM_SACKS: usize = 4;
/// TCP_FASTRETRANS_THRESH: ACKs per cumulative ACK value not compressed.
const FASTRETRANS_THRESH: u32 = 3;
/// The Linux receiver's MSS on a 1500-byte MTU (its `advmss`).
const ADVMSS: u64 = 1448;
/// The window scale a Linux receiver with Linux's default [`Rmem`] announces.
pub const RCV_WSCALE: u8 = 7;

/// The receiving host's sysctl `net.ipv4.tcp_rmem` (bytes): `default` is the initial
/// receive buffer, `max` the most autotuning gives it. Half a buffer is window (Linux's
/// initial scaling ratio; before 6.6, tcp_adv_win_scale 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rmem {
    pub default: u64,
    pub max: u64,
}

impl Default for Rmem {
    /// Linux's defaults: 128 KiB and 6 MiB.
    fn default() -> Self {
        Rmem {
            default: 131_072,
            max: 6_291_456,
        }
    }
}

impl Rmem {
    /// The window scale announced (`tcp_select_initial_window`: ilog2 of the largest
    /// buffer − 15, at most 14).
    pub fn wscale(&self) -> u8 {
        (self.max.max(1).ilog2().saturating_sub(15)).min(14) as u8
    }

    /// The initial window bound (`tcp_init_buffer_space`): half the initial buffer less a
    /// segment, at least two segments.
    fn initial_clamp(&self) -> u64 {
        (self.default / 2).saturating_sub(ADVMSS).max(2 * ADVMSS)
    }
}

/// Linux's receiver-side ACK state of one connection.
#[derive(Debug, Default)]
struct LinuxAck {
    /// In-order offset at the last ACK sent (`rcv_wup`).
    wup: u64,
    /// The receiver's estimate of the sender's MSS (`icsk_ack.rcv_mss`).
    rcv_mss: u64,
    last_seg: u64,
    /// Quick ACKs left (`icsk_ack.quick`).
    quick: u32,
    /// The delayed-ACK timeout (`icsk_ack.ato`); 0 before the first data.
    ato_ns: u64,
    /// Last in-order data arrival (`icsk_ack.lrcvtime`).
    lrcv: Instant,
    /// Send the next ACK at once (`ICSK_ACK_NOW`).
    now: bool,
    /// The SYN/ACK's send time, until the handshake's RTT is measured.
    synack_at: Option<Instant>,
    srtt_ns: Option<u64>,
    /// SACK compression: the cumulative ACK the counter is for, ACKs sent for it, ACKs
    /// held back and the compressed ACK's deadline.
    comp_rcv: u64,
    dup_acks: u32,
    compressed: u32,
    comp_at: Option<Instant>,
    /// The receive window (only when the sender scales windows): the window offered
    /// (`rcv_ssthresh`) and its bound (`window_clamp`), both bytes.
    rwnd: Option<Rwnd>,
    /// Timestamps (when the sender's SYN offered them): the TSval to echo (`ts_recent`)
    /// and the last TSecr a receiver RTT sample was taken from (`rcv_rtt_last_tsecr`).
    ts: Option<(u32, Option<u32>)>,
}

impl LinuxAck {
    /// A data segment of `len` bytes starting at `start` with timestamps `ts` arrived at
    /// `now`, before it is queued: the TSval to echo (RFC 7323: of the first segment
    /// after the last ACK) and `tcp_rcv_rtt_measure_ts`, one receiver RTT sample per
    /// echoed value, from full segments: the time since the ACK whose TSval it echoes
    /// was sent, so the queueing delay the data met is part of it.
    fn timestamps(&mut self, start: Option<u64>, len: u64, ts: (u32, u32), now: Instant) {
        let Some((recent, last_ecr)) = self.ts.as_mut() else {
            return;
        };
        let (val, ecr) = ts;
        if start.is_some_and(|s| s <= self.wup) && val.wrapping_sub(*recent) as i32 >= 0 {
            *recent = val;
        }
        if *last_ecr == Some(ecr) {
            return;
        }
        *last_ecr = Some(ecr);
        let delta = ts_clock(now).wrapping_sub(ecr) as i32;
        if len >= self.rcv_mss && delta >= 0 {
            if let Some(r) = self.rwnd.as_mut() {
                r.rtt_sample(u64::from(delta.max(1) as u32) * 1000);
            }
        }
    }
}

/// Linux's receive window and its autotuning (`tcp_grow_window`, `tcp_rcv_space_adjust`,
/// `tcp_rcvbuf_grow`), with an application that reads every byte at once.
#[derive(Debug, Clone, Copy)]
struct Rwnd {
    ssthresh: u64,
    clamp: u64,
    /// `rcvq_space`: the bytes read in the last measured round trip, where and when the
    /// current measurement began.
    space: u64,
    space_seq: u64,
    space_at: Instant,
    /// The receiver's RTT estimate: from timestamps when the sender sends them, else the
    /// handshake's.
    rtt_ns: Option<u64>,
    /// `rcv_rtt_est.rtt_us` (eight times the estimate, µs; 0 before a sample).
    rtt_us8: u64,
    /// Window scale and tcp_rmem[2].
    wscale: u8,
    rmem_max: u64,
}

impl Rwnd {
    /// `tcp_select_initial_window` + `tcp_init_buffer_space`: half the default buffer less
    /// one segment, of which 10 segments count as read per round trip so far.
    fn new(now: Instant, rmem: Rmem) -> Self {
        let clamp = rmem.initial_clamp();
        Rwnd {
            ssthresh: clamp,
            clamp,
            space: 10 * ADVMSS,
            space_seq: 0,
            space_at: now,
            rtt_ns: None,
            rtt_us8: 0,
            wscale: rmem.wscale(),
            rmem_max: rmem.max,
        }
    }

    /// `tcp_rcv_rtt_update` with a timestamp sample: a sample below the estimate replaces
    /// it, a larger one moves it by an eighth of the difference.
    fn rtt_sample(&mut self, us: u64) {
        let m = us << 3;
        self.rtt_us8 = if self.rtt_us8 == 0 || m < self.rtt_us8 {
            m
        } else {
            self.rtt_us8 - (self.rtt_us8 >> 3) + us
        };
        self.rtt_ns = Some((self.rtt_us8 >> 3).max(1) * 1000);
    }

    /// In-order data of `len` bytes arrived at `now`, `rcv` bytes are in order and read.
    /// Returns whether the window grew (Linux then ACKs this segment at once).
    fn data(&mut self, rcv: u64, len: u64, mss: u64, now: Instant) -> bool {
        // tcp_grow_window: two segments more per full segment received
        let grown = len >= 128 && self.ssthresh < self.clamp;
        if grown {
            self.ssthresh = (self.ssthresh + 2 * mss.max(len)).min(self.clamp);
        }
        // tcp_rcv_space_adjust, once per round trip: room for twice what was read in the
        // last one plus 16 segments, more while that grows (slow start)
        let Some(rtt) = self.rtt_ns else {
            return grown;
        };
        if now.nanos_since(self.space_at) < rtt {
            return grown;
        }
        let copied = rcv - self.space_seq;
        if copied > self.space {
            let mut win = 2 * copied + 16 * ADVMSS;
            win += 2 * (win * (copied - self.space) / self.space.max(1));
            self.clamp = self.clamp.max(win.min(self.rmem_max / 2));
            self.space = copied;
        }
        self.space_seq = rcv;
        self.space_at = now;
        grown
    }

    /// The window field of an ACK (scaled).
    fn field(&self) -> u16 {
        (self.ssthresh >> self.wscale).min(u64::from(u16::MAX)) as u16
    }
}

impl LinuxAck {
    /// The receiver's RTO: Linux's from the handshake sample (SRTT + max(4·RTTVAR, 200 ms)
    /// with RTTVAR = SRTT/2), 1 s without one.
    fn rto_ns(&self) -> u64 {
        self.srtt_ns
            .map_or(RTO_INIT_NS, |s| s + (2 * s).max(RTO_MIN_NS))
    }

    /// `tcp_incr_quickack`: quick ACKs for half the advertised window, at most 16.
    fn incr_quick(&mut self) {
        let q = (u64::from(super::ADVERTISED_WINDOW) / (2 * self.rcv_mss.max(1))) as u32;
        let q = if q == 0 { 2 } else { q.min(MAX_QUICKACKS) };
        self.quick = self.quick.max(q);
    }

    /// `tcp_measure_rcv_mss`: the largest segment, or a smaller size seen twice in a row.
    fn measure(&mut self, len: u64) {
        if len >= self.rcv_mss || len == self.last_seg {
            self.rcv_mss = len.max(1);
        }
        self.last_seg = len;
    }

    /// `tcp_event_data_recv`: in-order data arrived at `now`.
    fn data_recv(&mut self, now: Instant) {
        if self.ato_ns == 0 {
            self.incr_quick();
            self.ato_ns = ATO_MIN_NS;
        } else {
            let m = now.nanos_since(self.lrcv);
            if m <= ATO_MIN_NS / 2 {
                self.ato_ns = self.ato_ns / 2 + ATO_MIN_NS / 2;
            } else if m < self.ato_ns {
                self.ato_ns = (self.ato_ns / 2 + m).min(self.rto_ns());
            } else if m > self.rto_ns() {
                self.incr_quick();
            }
        }
        self.lrcv = now;
    }

    /// `tcp_send_delayed_ack`'s timeout from `now`.
    fn delack_timeout(&self) -> u64 {
        let mut ato = self.ato_ns;
        if ato > ATO_MIN_NS {
            let mut max_ato = ATO_MAX_NS;
            if let Some(s) = self.srtt_ns {
                max_ato = max_ato.min(s.max(ATO_MIN_NS));
            }
            ato = ato.min(max_ato);
        }
        ato.min(DELACK_MAX_NS)
    }

    /// The SACK-compression delay: 5 % of the RTT, at most 1 ms.
    fn comp_delay(&self) -> u64 {
        self.srtt_ns
            .map_or(COMP_SACK_DELAY_NS, |s| (s / 20).min(COMP_SACK_DELAY_NS))
    }

    /// An ACK for received data was sent (`tcp_event_ack_sent`).
    fn sent(&mut self, rcv: u64) {
        self.wup = rcv;
        self.now = false;
        self.compressed = 0;
        self.comp_at = None;
        if self.quick > 0 {
            self.quick -= 1;
            if self.quick == 0 {
                self.ato_ns = ATO_MIN_NS;
            }
        }
    }
}

#[derive(Debug)]
struct Conn {
    irs: u32,
    /// In-order payload bytes received.
    rcv: u64,
    fin: bool,
    /// Out-of-order data: disjoint, non-adjacent ranges start → end.
    ooo: BTreeMap<u64, u64>,
    /// In-order segments not yet acknowledged ([`Acks::Delayed`]).
    pending: u32,
    /// The delayed-ACK timer.
    ack_at: Option<Instant>,
    sack_ok: bool,
    lx: LinuxAck,
    /// Offsets of the latest out-of-order arrivals, newest first (for SACK blocks).
    recent: VecDeque<u64>,
}

impl Conn {
    fn wire(&self, off: u64) -> u32 {
        self.irs.wrapping_add(1).wrapping_add(off as u32)
    }
    fn ack(&mut self, now: Instant) -> TxSeg {
        self.pending = 0;
        self.ack_at = None;
        self.lx.sent(self.rcv);
        let mut sack = Sack::default();
        if self.sack_ok {
            for (s, e) in self.sack_ranges(MAX_SACK_BLOCKS) {
                sack.push(self.wire(s), self.wire(e));
            }
        }
        TxSeg {
            seq: 1,
            ack: self.wire(self.rcv).wrapping_add(u32::from(self.fin)),
            flags: ACK,
            sack,
            window: self.lx.rwnd.map(|r| r.field()),
            ts: self.lx.ts.map(|(recent, _)| (ts_clock(now), recent)),
            ..Default::default()
        }
    }

    /// The SACK blocks the receiver remembers, at most `n`: the buffered ranges holding
    /// the latest out-of-order arrivals, newest first.
    fn sack_ranges(&self, n: usize) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> = Vec::new();
        for &x in &self.recent {
            let Some((&s, &e)) = self.ooo.range(..=x).next_back() else {
                continue;
            };
            if e > x && !r.iter().any(|&(rs, _)| rs == s) {
                r.push((s, e));
            }
            if r.len() == n {
                break;
            }
        }
        r
    }

    /// Linux's `tcp_sack_new_ofo_skb`: an out-of-order segment `[s, e)` that extends none
    /// of the receiver's [`NUM_SACKS`] remembered blocks starts a new one, and the oldest
    /// is forgotten; if an ACK is being held back (SACK compression), it is sent first,
    /// so the sender hears of the forgotten block. Whether to send the held ACK now.
    fn sack_block_dropped(&self, s: u64, e: u64) -> bool {
        if self.lx.compressed == 0 {
            return false;
        }
        let blocks = self.sack_ranges(NUM_SACKS);
        blocks.len() == NUM_SACKS && !blocks.iter().any(|&(bs, be)| bs <= e && s <= be)
    }

    /// The out-of-order segment at `s` was buffered: its range becomes the newest SACK
    /// block, one entry per range (blocks it merged with are one block now), at most
    /// [`NUM_SACKS`] remembered.
    fn remember_block(&mut self, s: u64) {
        if let Some((&rs, &re)) = self.ooo.range(..=s).next_back() {
            self.recent.retain(|&x| x < rs || x >= re);
        }
        self.recent.push_front(s);
        self.recent.truncate(NUM_SACKS);
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
    pub acks: Acks,
    /// Permit SACK when the sender asks for it.
    pub sack: bool,
    /// The receive buffer of [`Acks::Linux`].
    pub rmem: Rmem,
    conns: BTreeMap<(Addr, u16), Conn>,
    /// Data segments received (in order, out of order and duplicates).
    pub pkts: u64,
    /// In-order payload bytes delivered.
    pub bytes: u64,
    pub dup_pkts: u64,
    pub ooo_pkts: u64,
    /// ACKs sent (SYN/ACKs not counted).
    pub acks_sent: u64,
}

/// A segment to send to (address, port).
pub type Reply = (Addr, u16, TxSeg);

/// What arrived, for the ACK policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Data already received (or beyond a FIN).
    Old,
    OutOfOrder,
    /// In-order data; whether it filled a hole (`had_hole`) and the last one (`closed`).
    InOrder {
        had_hole: bool,
        closed: bool,
    },
    /// A FIN without data.
    Fin,
}

impl TcpSink {
    pub fn new(port: u16, acks: Acks, sack: bool) -> Self {
        TcpSink {
            port,
            acks,
            sack,
            ..Default::default()
        }
    }

    pub fn poll_at(&self) -> Option<Instant> {
        self.conns
            .values()
            .flat_map(|c| [c.ack_at, c.lx.comp_at])
            .flatten()
            .min()
    }

    /// Delayed (and compressed) ACKs due by `now`.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Reply>) {
        for (&(a, p), c) in self.conns.iter_mut() {
            let delack = c.ack_at.is_some_and(|t| t <= now);
            if delack && self.acks == Acks::Linux {
                // tcp_delack_timer_handler: the timer fired, the gaps are longer than ato
                c.lx.ato_ns = (c.lx.ato_ns * 2).min(c.lx.rto_ns());
            }
            if delack || c.lx.comp_at.is_some_and(|t| t <= now) {
                out.push((a, p, c.ack(now)));
                self.acks_sent += 1;
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
            // a Linux receiver scales its window when the sender offers to; then its
            // window and autotuning limit the sender
            let scaled = self.acks == Acks::Linux && seg.wscale.is_some();
            // and answers timestamps (ns-2's sinks do not)
            let ts = seg.ts.filter(|_| self.acks == Acks::Linux);
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
                        lx: LinuxAck {
                            rcv_mss: RCV_MSS_DEFAULT,
                            synack_at: Some(now),
                            rwnd: scaled.then(|| Rwnd::new(now, self.rmem)),
                            ts: ts.map(|(val, _)| (val, None)),
                            ..Default::default()
                        },
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
                    wscale: scaled.then_some(self.rmem.wscale()),
                    ts: ts.map(|(val, _)| (ts_clock(now), val)),
                    // a SYN's window is never scaled
                    window: scaled
                        .then_some(self.rmem.initial_clamp().min(u64::from(u16::MAX)) as u16),
                    ..Default::default()
                },
            ));
            return;
        }
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        if seg.flags & ACK != 0 && seg.ack == 1 {
            // the handshake's RTT, as Linux's passive side measures it
            if let Some(t) = c.lx.synack_at.take() {
                c.lx.srtt_ns = Some(now.nanos_since(t));
                let ts = c.lx.ts.is_some();
                if let Some(r) = c.lx.rwnd.as_mut() {
                    // with timestamps Linux's receiver has no RTT until the first echo
                    if !ts {
                        r.rtt_ns = Some(now.nanos_since(t).max(1));
                    }
                    r.space_at = now;
                }
            }
        }
        let has_fin = seg.flags & FIN != 0;
        if seg.payload_len == 0 && !has_fin {
            return; // pure ACK
        }
        let start = unwrap_seq(c.rcv, c.wire(c.rcv), seg.seq);
        let len = seg.payload_len as u64;
        if let (Some(ts), true) = (seg.ts, len > 0) {
            if start.is_some_and(|s| s + len > c.rcv) {
                c.lx.timestamps(start, len, ts, now);
            }
        }
        let mut arrival = Arrival::Fin;
        if len > 0 {
            self.pkts += 1;
            arrival = match start {
                Some(s) if s + len <= c.rcv || c.fin => Arrival::Old,
                None => Arrival::Old,
                Some(s) if s > c.rcv => Arrival::OutOfOrder,
                Some(_) => {
                    let had_hole = !c.ooo.is_empty();
                    Arrival::InOrder {
                        had_hole,
                        closed: false,
                    }
                }
            };
            match (arrival, start) {
                (Arrival::Old, _) => self.dup_pkts += 1,
                (Arrival::OutOfOrder, Some(s)) => {
                    if self.acks == Acks::Linux && c.sack_ok && c.sack_block_dropped(s, s + len) {
                        out.push((seg.src, seg.sport, c.ack(now)));
                        self.acks_sent += 1;
                    }
                    self.ooo_pkts += 1;
                    c.insert_ooo(s, s + len);
                    c.remember_block(s);
                }
                (Arrival::InOrder { had_hole, .. }, Some(s)) => {
                    self.bytes += c.deliver(s + len);
                    let mss = c.lx.rcv_mss;
                    if c.lx
                        .rwnd
                        .as_mut()
                        .is_some_and(|r| r.data(c.rcv, len, mss, now))
                    {
                        // tcp_grow_window: a segment that grows the window is ACKed at
                        // once (`icsk_ack.quick |= 1`), so a receiver whose window still
                        // grows, in slow start, ACKs every segment
                        c.lx.quick = c.lx.quick.max(1);
                    }
                    arrival = Arrival::InOrder {
                        had_hole,
                        closed: had_hole && c.ooo.is_empty(),
                    };
                }
                _ => {}
            }
        }
        if has_fin && !c.fin && start.is_some_and(|s| s + len == c.rcv) {
            c.fin = true;
        }
        let now_ack = match self.acks {
            Acks::Each => true,
            Acks::Delayed(interval) => c.ns2_delack(arrival, has_fin, now, interval),
            Acks::Linux => c.linux_ack(arrival, has_fin, len, now),
        };
        if now_ack {
            out.push((seg.src, seg.sport, c.ack(now)));
            self.acks_sent += 1;
        }
    }
}

impl Conn {
    /// In-order data up to `end`: the offset advances over the buffered ranges it reaches.
    /// Returns the bytes delivered.
    fn deliver(&mut self, end: u64) -> u64 {
        let before = self.rcv;
        self.rcv = end;
        while let Some((&os, &oe)) = self.ooo.first_key_value() {
            if os > self.rcv {
                break;
            }
            self.ooo.pop_first();
            self.rcv = self.rcv.max(oe);
        }
        let rcv = self.rcv;
        self.recent.retain(|&x| x >= rcv);
        rcv - before
    }

    /// ns-2 DelAck: whether to ACK now, else the timer is armed.
    fn ns2_delack(&mut self, a: Arrival, fin: bool, now: Instant, interval: u64) -> bool {
        if !matches!(
            a,
            Arrival::InOrder {
                had_hole: false,
                ..
            }
        ) || fin
        {
            return true;
        }
        self.pending += 1;
        if self.pending >= 2 {
            return true;
        }
        if self.ack_at.is_none() {
            self.ack_at = Some(now.add_nanos(interval));
        }
        false
    }

    /// Linux (`tcp_data_queue`, `__tcp_ack_snd_check`): whether to ACK now, else a delayed
    /// or compressed ACK is scheduled.
    fn linux_ack(&mut self, a: Arrival, fin: bool, len: u64, now: Instant) -> bool {
        let lx = &mut self.lx;
        match a {
            Arrival::Old => {
                // a retransmission of data we had: tcp_enter_quickack_mode
                lx.incr_quick();
                lx.ato_ns = ATO_MIN_NS;
            }
            Arrival::InOrder { closed, .. } => {
                lx.measure(len);
                lx.data_recv(now);
                lx.now |= closed;
            }
            Arrival::OutOfOrder | Arrival::Fin => {}
        }
        if fin || self.rcv - lx.wup > lx.rcv_mss || lx.quick > 0 || lx.now {
            return true;
        }
        if self.ooo.is_empty() {
            // tcp_send_delayed_ack
            let ato = lx.delack_timeout();
            let mut at = now.add_nanos(ato);
            if let Some(t) = self.ack_at {
                if t <= now.add_nanos(ato / 4) {
                    return true;
                }
                at = at.min(t);
            }
            self.ack_at = Some(at);
            return false;
        }
        // data out of order: SACK compression
        if !self.sack_ok || lx.compressed >= COMP_SACK_NR {
            return true;
        }
        if lx.comp_rcv != self.rcv {
            lx.comp_rcv = self.rcv;
            lx.dup_acks = 0;
        }
        if lx.dup_acks < FASTRETRANS_THRESH {
            lx.dup_acks += 1;
            return true;
        }
        lx.compressed += 1;
        if lx.comp_at.is_none() {
            lx.comp_at = Some(now.add_nanos(lx.comp_delay()));
        }
        false
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
        let mut s = TcpSink::new(80, Acks::Each, false);
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
        let mut s = TcpSink::new(80, Acks::Delayed(DELACK_NS), false);
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
        let mut s = TcpSink::new(80, Acks::Each, true);
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
        let mut plain = TcpSink::new(80, Acks::Each, true);
        out.clear();
        plain.receive(&seg(0, SYN, 0), t, &mut out);
        plain.receive(&seg(21, ACK, 10), t, &mut out);
        assert!(!out[0].2.sack_permitted && out[1].2.sack.n == 0);
    }

    /// A Linux sink after a handshake with a 10 ms RTT (SYN at 0, its ACK at 10 ms).
    fn linux_sink(sack: bool) -> TcpSink {
        let mut s = TcpSink::new(80, Acks::Linux, true);
        let mut out = Vec::new();
        let syn = Segment {
            sack_permitted: sack,
            ..seg(0, SYN, 0)
        };
        s.receive(&syn, Instant::ZERO, &mut out);
        s.receive(&seg(1, ACK, 0), Instant::from_millis(10), &mut out);
        assert_eq!(out.len(), 1);
        s
    }

    const MSS: u32 = 1448;

    /// Full segment `i` (0-based) at `ms`.
    fn data(s: &mut TcpSink, i: u32, ms: u64, out: &mut Vec<Reply>) {
        s.receive(
            &seg(1 + i * MSS, ACK, MSS as usize),
            Instant::from_millis(ms),
            out,
        );
    }

    #[test]
    fn linux_quick_acks_then_every_second_segment() {
        let mut s = linux_sink(false);
        let mut out = Vec::new();
        // 16 quick ACKs (half the 65535-byte window in segments, at most 16), one per segment
        for i in 0..16 {
            data(&mut s, i, 20 + u64::from(i), &mut out);
        }
        assert_eq!(
            acks(&out),
            (1..=16).map(|i| 1 + i * MSS).collect::<Vec<_>>()
        );
        out.clear();
        // then one ACK per two full segments, none pending after an even count
        for i in 16..40 {
            data(&mut s, i, 20 + u64::from(i), &mut out);
        }
        assert_eq!(
            acks(&out),
            (9..=20).map(|i| 1 + 2 * i * MSS).collect::<Vec<_>>()
        );
        assert_eq!(s.poll_at(), None);
        assert_eq!(s.acks_sent, 28);
    }

    #[test]
    fn linux_window_grows_and_acks_every_segment_while_it_does() {
        // a sender that scales windows: the SYN/ACK offers Linux's scale and initial window
        let mut s = TcpSink::new(80, Acks::Linux, true);
        let mut out = Vec::new();
        let syn = Segment {
            wscale: Some(7),
            ..seg(0, SYN, 0)
        };
        s.receive(&syn, Instant::ZERO, &mut out);
        assert_eq!(out[0].2.wscale, Some(RCV_WSCALE));
        assert_eq!(out[0].2.window, Some(64_088));
        s.receive(&seg(1, ACK, 0), Instant::from_millis(10), &mut out);
        out.clear();
        for i in 0..16 {
            data(&mut s, i, 20, &mut out);
        }
        // the window is at its initial bound: 64088 bytes in units of 128
        assert_eq!(out.last().unwrap().2.window, Some(64_088 >> 7));
        out.clear();
        // one round trip (10 ms) later autotuning has seen 17 segments read where 10 were
        // expected: the bound rises, the window grows by two segments per segment, and every
        // segment that grows it is ACKed at once (the plain Linux sink ACKs every second one);
        // the bound rises when the first of them has been read, after it was queued
        for i in 16..40 {
            data(&mut s, i, 31, &mut out);
        }
        assert_eq!(
            acks(&out),
            (18..=40).map(|i| 1 + i * MSS).collect::<Vec<_>>()
        );
        let w: Vec<u16> = out.iter().map(|r| r.2.window.unwrap()).collect();
        assert!(w.windows(2).all(|p| p[1] > p[0]), "{w:?}");
        // once the window reaches the new bound, one ACK per two segments again
        for i in 40..200 {
            data(&mut s, i, 32, &mut out);
        }
        out.clear();
        for i in 200..210 {
            data(&mut s, i, 32, &mut out);
        }
        assert_eq!(out.len(), 5);
        // an ns-2 style SYN (no window scaling): no window, the sender's own limit applies
        let mut p = TcpSink::new(80, Acks::Linux, true);
        out.clear();
        p.receive(&seg(0, SYN, 0), Instant::ZERO, &mut out);
        assert_eq!((out[0].2.wscale, out[0].2.window), (None, None));
    }

    #[test]
    fn linux_window_follows_the_hosts_tcp_rmem() {
        // tcp_rmem 87380 / 16 MiB: scale 9 (ilog2(16 MiB) − 15), an initial window of half
        // 87380 less a segment, and a bound autotuning may raise to 8 MiB
        let rmem = Rmem {
            default: 87_380,
            max: 16 << 20,
        };
        assert_eq!((rmem.wscale(), rmem.initial_clamp()), (9, 43_690 - 1448));
        assert_eq!(Rmem::default().wscale(), RCV_WSCALE);
        let mut last = Vec::new();
        for rmem in [rmem, Rmem::default()] {
            let mut s = TcpSink::new(80, Acks::Linux, true);
            s.rmem = rmem;
            let mut out = Vec::new();
            let syn = Segment {
                wscale: Some(7),
                ts: Some((5, 0)),
                ..seg(0, SYN, 0)
            };
            s.receive(&syn, Instant::ZERO, &mut out);
            let synack = out[0].2;
            let shift = synack.wscale.unwrap();
            if rmem.max == 16 << 20 {
                assert_eq!(
                    (shift, synack.window, synack.ts),
                    (9, Some(42_242), Some((0, 5)))
                );
            }
            // the sender's ACK at 10 ms, then data echoing the SYN/ACK's TSval (0: a
            // 10 ms receiver RTT from the first segment), 100 segments per millisecond
            s.receive(&seg(1, ACK, 0), Instant::from_millis(10), &mut out);
            out.clear();
            for i in 0..8000u32 {
                let d = Segment {
                    ts: Some((10 + i / 100, 0)),
                    ..seg(1 + i * MSS, ACK, MSS as usize)
                };
                s.receive(&d, Instant::from_millis(10 + u64::from(i / 100)), &mut out);
            }
            last.push(u64::from(out.last().unwrap().2.window.unwrap()) << shift);
        }
        // 8 MiB (half of tcp_rmem[2]) within a scale unit; Linux's default: 3 MiB
        assert!(last[0] > (8 << 20) - 512 && last[0] <= 8 << 20, "{last:?}");
        assert!(last[1] > (3 << 20) - 128 && last[1] <= 3 << 20, "{last:?}");
    }

    #[test]
    fn linux_delayed_ack_timer() {
        let mut s = linux_sink(false);
        let mut out = Vec::new();
        for i in 0..16 {
            data(&mut s, i, 20, &mut out);
        }
        out.clear();
        // a lone segment waits for the 40 ms timer (ato's floor)
        data(&mut s, 16, 30, &mut out);
        assert!(out.is_empty());
        assert_eq!(s.poll_at(), Some(Instant::from_millis(70)));
        s.on_timer(Instant::from_millis(69), &mut out);
        assert!(out.is_empty());
        s.on_timer(Instant::from_millis(70), &mut out);
        assert_eq!(acks(&out), [1 + 17 * MSS]);
        // the timer fired: ato doubles to 80 ms, but above 40 ms it is bounded by
        // max(SRTT, 40 ms) = 40 ms with a 10 ms handshake RTT
        out.clear();
        data(&mut s, 17, 100, &mut out);
        assert_eq!(s.poll_at(), Some(Instant::from_millis(140)));
        // a second segment: ACK at once, the timer is cancelled
        data(&mut s, 18, 101, &mut out);
        assert_eq!(acks(&out), [1 + 19 * MSS]);
        assert_eq!(s.poll_at(), None);
    }

    #[test]
    fn linux_ato_follows_the_rtt_when_segments_are_sparse() {
        // a 300 ms handshake RTT: the receiver's RTO is 900 ms; segments 100 ms apart make
        // ato grow past 40 ms (ato/2 + gap), the delayed ACK then waits up to the SRTT
        let mut s = TcpSink::new(80, Acks::Linux, false);
        let mut out = Vec::new();
        s.receive(&seg(0, SYN, 0), Instant::ZERO, &mut out);
        s.receive(&seg(1, ACK, 0), Instant::from_millis(300), &mut out);
        for i in 0..16 {
            data(&mut s, i, 300, &mut out);
        }
        out.clear();
        data(&mut s, 16, 310, &mut out);
        s.on_timer(Instant::from_millis(350), &mut out); // ato 40 -> 80 ms
        data(&mut s, 17, 400, &mut out); // gap 90 ms >= ato: ato stays 80 ms
        assert_eq!(s.poll_at(), Some(Instant::from_millis(480)));
        s.on_timer(Instant::from_millis(480), &mut out); // ato 160 ms
        data(&mut s, 18, 600, &mut out); // gap 200 ms: ato stays 160, below SRTT
        assert_eq!(s.poll_at(), Some(Instant::from_millis(760)));
        s.on_timer(Instant::from_millis(760), &mut out); // ato 320 ms
        data(&mut s, 19, 1000, &mut out); // bounded by SRTT 300 ms... and 200 ms
        assert_eq!(s.poll_at(), Some(Instant::from_millis(1200)));
        // an idle gap longer than the receiver's RTO (900 ms): quick ACKs again
        s.on_timer(Instant::from_millis(1200), &mut out);
        out.clear();
        data(&mut s, 20, 2200, &mut out);
        data(&mut s, 21, 2201, &mut out);
        data(&mut s, 22, 2202, &mut out);
        assert_eq!(acks(&out), [1 + 21 * MSS, 1 + 22 * MSS, 1 + 23 * MSS]);
    }

    #[test]
    fn linux_out_of_order_hole_fill_and_sack_compression() {
        let mut s = linux_sink(true);
        let mut out = Vec::new();
        for i in 0..16 {
            data(&mut s, i, 20, &mut out);
        }
        data(&mut s, 16, 21, &mut out); // delayed
        out.clear();
        // segment 17 lost: 18.. arrive out of order, 0.1 ms apart
        let mut t = Instant::from_millis(22);
        for i in 18..26 {
            s.receive(&seg(1 + i * MSS, ACK, MSS as usize), t, &mut out);
            t = t.add_nanos(100_000);
        }
        // the first three for this cumulative ACK at once (with SACK blocks), the rest held
        assert_eq!(acks(&out), [1 + 17 * MSS; 3]);
        assert!(out.iter().all(|r| r.2.sack.n > 0));
        // compressed: one ACK 5 % of the 10 ms RTT (0.5 ms) after the first held back
        let due = s.poll_at().unwrap();
        assert_eq!(due, Instant::from_millis(22).add_nanos(300_000 + 500_000));
        s.on_timer(due, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(out[3].2.sack.blocks[0], (1 + 18 * MSS, 1 + (18 + 8) * MSS));
        out.clear();
        // the retransmission fills the hole: ACK at once, up to all buffered data
        data(&mut s, 17, 30, &mut out);
        assert_eq!(acks(&out), [1 + 26 * MSS]);
        assert_eq!(s.poll_at(), None);
        // without SACK every out-of-order segment is answered at once (a duplicate ACK)
        let mut p = linux_sink(false);
        out.clear();
        for i in 0..16 {
            data(&mut p, i, 20, &mut out);
        }
        out.clear();
        for i in 17..25 {
            data(&mut p, i, 21, &mut out);
        }
        assert_eq!(acks(&out), [1 + 16 * MSS; 8]);
    }

    #[test]
    fn linux_duplicate_segment_restarts_quick_acks() {
        let mut s = linux_sink(false);
        let mut out = Vec::new();
        for i in 0..20 {
            data(&mut s, i, 20, &mut out);
        }
        out.clear();
        data(&mut s, 3, 25, &mut out); // a spurious retransmission: ACK at once
        assert_eq!(acks(&out), [1 + 20 * MSS]);
        for i in 20..25 {
            data(&mut s, i, 26, &mut out); // and quick ACKs again, one per segment
        }
        assert_eq!(out.len(), 6);
    }

    #[test]
    fn linux_small_segments_ack_every_second_one() {
        // 500-byte segments: the MSS estimate follows them (the same size twice), so
        // two of them make more than one "full" segment
        let mut s = linux_sink(false);
        let mut out = Vec::new();
        for i in 0..16u32 {
            s.receive(
                &seg(1 + i * 500, ACK, 500),
                Instant::from_millis(20),
                &mut out,
            );
        }
        out.clear();
        for i in 16..20u32 {
            s.receive(
                &seg(1 + i * 500, ACK, 500),
                Instant::from_millis(21),
                &mut out,
            );
        }
        assert_eq!(acks(&out), [1 + 18 * 500, 1 + 20 * 500]);
    }
}
