//! The TCP sender with an FTP application (ns-2 `Agent/TCP/{Tahoe,Reno,Newreno}` /
//! Linux-style CUBIC + `Application/FTP`).
//!
//! Sequence space: the SYN has sequence number ISS = 0; payload byte offset `o` (0-based)
//! has sequence number ISS + 1 + o (mod 2³²), the FIN ISS + 1 + bytes. Internally offsets are
//! 64-bit. Segments start at multiples of `mss`, so a retransmission re-sends exactly one
//! earlier segment.
//!
//! * ns-2 knobs: `max_burst` (`maxburst_`) caps the segments sent in response to one ACK
//!   (and at the start); `tcp_tick_ns` (`tcpTick_`) rounds every RTT sample to the nearest
//!   tick, at least one. Both off by default (Linux has neither).
//! * Windows are in segments (f64), the usable window is ⌊min(cwnd, window)⌋ segments,
//!   and the flight stays within the peer's advertised window when it scales windows.
//!   With SACK, cwnd grows only while it limits the sender (Linux's `tcp_is_cwnd_limited`:
//!   in slow start while below twice the most segments in flight in the last round trip).
//!   Initial ssthresh: 2³² − 1 segments ("infinite"). Initial cwnd `initial_window`, 1 if the
//!   SYN had to be retransmitted (and then the RTO is at least 3 s until the first sample).
//! * Slow start: cwnd += min(acked segments, 2) per new ACK (RFC 3465, L = 2); congestion
//!   avoidance: cwnd += acked/cwnd (Reno family) or CUBIC ([`super::cubic`]). CUBIC leaves
//!   slow start early, as Linux does (HyStart: ACK train and delay increase, [`super::hystart`]).
//! * Three duplicate ACKs (an ACK with no payload, no SYN/FIN, equal to snd_una, while data
//!   is outstanding) trigger fast retransmit of snd_una, unless snd_una has not passed
//!   `recover` (the highest sequence sent at the last reduction, RFC 6582 §3.2 step 2; for
//!   every variant). ssthresh = max(FlightSize/2, 2) (CUBIC: max(0.7·cwnd, 2)).
//!   Tahoe: cwnd = 1 and go-back-N from snd_una. Reno: cwnd = ssthresh + 3, +1 per further
//!   dup ACK, the first new ACK ends recovery with cwnd = ssthresh. NewReno and CUBIC
//!   (SACK-less Linux recovers like NewReno): a partial ACK (below `recover`) retransmits
//!   the next hole, deflates cwnd by the acked amount (+1 segment if ≥ 1 segment was acked)
//!   and restarts the timer only on the first partial ACK ("impatient" variant; CUBIC, as
//!   Linux, on every partial ACK: "slow but steady"); the full ACK sets cwnd = ssthresh.
//! * Retransmission timer (RFC 6298 with Linux's floor): one RTT sample per new ACK, from
//!   the latest segment it covers, unless any segment it covers was retransmitted (Karn);
//!   SRTT/RTTVAR with gains 1/8 and 1/4, RTO = SRTT + max(4·RTTVAR, min_rto) (Linux's
//!   `tcp_set_rto`: RFC 6298's max(SRTT + 4·RTTVAR, min_rto) sits just above a steady
//!   queueing delay and fires spuriously as soon as the queue grows), at most 60 s (1 s
//!   before the first sample). Expiry: the RTO doubles (capped at 60 s) until the next valid sample,
//!   ssthresh as for a loss (FlightSize/2 or CUBIC β; kept if in fast recovery, as Linux),
//!   cwnd = 1, go-back-N from snd_una,
//!   `recover` = highest sequence sent. The timer is restarted on every new ACK and stopped
//!   when nothing is outstanding. Timers are exact (no tick granularity).
//! * With SACK (asked for in the SYN when `sack` is set and the CC is not Tahoe, used when
//!   the SYN/ACK permits it) loss recovery is Linux's instead of the above: a scoreboard of
//!   SACKed segments; RACK (RFC 8985, no reordering window) marks a segment lost once a
//!   segment sent after it was delivered, from DupThresh SACKed segments on or inside
//!   recovery, so a lost retransmission is found too; recovery sets ssthresh as Linux
//!   (Reno cwnd/2, CUBIC β·cwnd) and sends by PRR (RFC 6937, slow-start reduction bound);
//!   lost segments go first, then new data, while the pipe (RFC 6675: neither SACKed nor
//!   lost) is below cwnd, which also gives limited transmit (RFC 3042). Slow start grows by
//!   every delivered segment (cumulatively or selectively acknowledged). A retransmission
//!   cumulatively acknowledged by an ACK whose timestamp echo predates it was not what
//!   arrived (Linux's `tcp_skb_spurious_retrans`): it neither advances RACK nor gives an
//!   RTT sample. RTT samples come
//!   from SACKed and retransmitted segments too (as Linux's timestamps give them), unless
//!   a retransmission is acknowledged within the minimum RTT. An RTO marks every segment not SACKed lost and resends only
//!   those, in slow start from cwnd 1 (Linux's Loss state, until `recover` is acknowledged).
//!   Not modelled: RACK's reordering timer and tail loss probes (a tail loss waits for the
//!   RTO), F-RTO, undo of spurious reductions, D-SACK.
//! * Timestamps (RFC 7323, offered in the SYN, used when the SYN/ACK carries them): every
//!   segment carries the sender's millisecond clock and echoes the newest TSval of the
//!   peer's ACKs, from which Linux's receiver measures its RTT. The sender's own RTT samples
//!   come from its send times.
//! * `bytes`: when everything is acknowledged the sender sends one FIN (not retransmitted)
//!   and is `done`. `stop` pauses the agent (no sending, no timers, incoming ACKs ignored);
//!   `start` resumes it.
use std::collections::VecDeque;

use serde::Serialize;

use super::cubic::Cubic;
use super::hystart::{self, HyStart};
use super::{ts_clock, unwrap_seq, Segment, TcpSample, TxSeg, ACK, FIN, PSH, SYN};
use crate::model::sim::ip::Addr;
use crate::time::Instant;

pub const DEFAULT_MSS: usize = 1000;
pub const DEFAULT_WINDOW: u32 = 100_000;
pub const DEFAULT_INITIAL_WINDOW: u32 = 10;
pub const DEFAULT_MIN_RTO_NS: u64 = 200_000_000;
pub const MAX_RTO_NS: u64 = 60_000_000_000;
pub const INITIAL_RTO_NS: u64 = 1_000_000_000;
pub const INITIAL_SSTHRESH: f64 = 4_294_967_295.0;
/// The window scale the sender offers in its SYN (its own receive window never matters).
const SND_WSCALE: u8 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cc {
    Tahoe,
    Reno,
    #[serde(rename = "newreno")]
    NewReno,
    Cubic,
}

impl Cc {
    pub const NAMES: &'static [&'static str] = &["newreno", "reno", "tahoe", "cubic"];

    pub fn parse(s: &str) -> Option<Cc> {
        match s {
            "tahoe" => Some(Cc::Tahoe),
            "reno" => Some(Cc::Reno),
            "newreno" => Some(Cc::NewReno),
            "cubic" => Some(Cc::Cubic),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cc::Tahoe => "tahoe",
            Cc::Reno => "reno",
            Cc::NewReno => "newreno",
            Cc::Cubic => "cubic",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TcpSpec {
    pub dst: Addr,
    pub dport: u16,
    pub cc: Cc,
    /// Payload bytes per segment.
    pub mss: usize,
    /// Maximum cwnd in segments.
    pub window: u32,
    pub initial_window: u32,
    pub min_rto_ns: u64,
    /// Total payload bytes; `None` = infinite.
    pub bytes: Option<u64>,
    /// 0 = no trace.
    pub trace_interval_ns: u64,
    /// Ask for SACK (Reno, NewReno, CUBIC; Tahoe never does).
    pub sack: bool,
    /// Segments sent in response to one ACK at most (ns-2 `maxburst_`); 0 = no limit.
    pub max_burst: u32,
    /// RTT samples are rounded to this many ns, at least one tick (ns-2 `tcpTick_`);
    /// 0 = exact.
    pub tcp_tick_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Idle,
    Handshake,
    Established,
    Done,
}

/// A data segment in flight: RTT sampling and, with SACK, the scoreboard.
#[derive(Debug, Clone, Copy)]
struct Sent {
    start: u64,
    end: u64,
    /// Its latest transmission.
    at: Instant,
    retx: bool,
    sacked: bool,
    /// Marked lost and not retransmitted since.
    lost: bool,
}

impl Sent {
    fn new(start: u64, end: u64, at: Instant, retx: bool) -> Self {
        Sent {
            start,
            end,
            at,
            retx,
            sacked: false,
            lost: false,
        }
    }
}

/// Segments SACKed above a hole before it counts as lost (RFC 6675's DupThresh).
const DUPTHRESH: usize = 3;

#[derive(Debug)]
pub struct TcpSender {
    pub spec: TcpSpec,
    pub sport: u16,
    running: bool,
    state: State,
    iss: u32,
    /// Next sequence number expected from the peer (after its SYN).
    rcv_nxt: u32,
    syn_at: Option<Instant>,
    syn_retx: bool,
    snd_una: u64,
    snd_nxt: u64,
    snd_max: u64,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    in_recovery: bool,
    partial_seen: bool,
    recover: Option<u64>,
    srtt_ns: Option<f64>,
    rttvar_ns: f64,
    min_rtt_ns: Option<u64>,
    rto_ns: u64,
    rto_at: Option<Instant>,
    sent: VecDeque<Sent>,
    cubic: Cubic,
    /// SACK agreed in the handshake; then the fields below are the scoreboard.
    sack_ok: bool,
    n_sacked: usize,
    n_lost: usize,
    /// Transmissions in time order (send time, start), for RACK's loss marking.
    tsq: VecDeque<(Instant, u64)>,
    /// RACK: the latest transmission (send time, start) known delivered.
    rack: Option<(Instant, u64)>,
    /// No segment below this offset is marked lost.
    lost_hint: u64,
    /// After an RTO until `recover` is acknowledged (Linux's Loss state).
    in_loss: bool,
    prr_delivered: u64,
    prr_out: u64,
    recover_fs: u64,
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub fast_retransmits: u64,
    pub acked_bytes: u64,
    trace: Vec<TcpSample>,
    last_sample: Option<Instant>,
    hystart: HyStart,
    /// The peer's window scale, when it offered one (then its window limits the flight).
    snd_wscale: Option<u8>,
    /// The peer's receive window (bytes) when it scales windows.
    snd_wnd: Option<u64>,
    /// Timestamps agreed in the handshake: then every segment carries the sender's clock
    /// and echoes `ts_recent`, the peer's latest TSval (its receiver measures its RTT
    /// from the echo).
    ts_ok: bool,
    ts_recent: u32,
    /// Linux's `tcp_cwnd_validate`: the most segments in flight since `cwnd_usage_seq`
    /// and whether the last send was stopped by cwnd.
    max_packets_out: u64,
    cwnd_usage_seq: u64,
    cwnd_limited: bool,
}

impl TcpSender {
    pub fn new(spec: TcpSpec, sport: u16) -> Self {
        let cwnd = f64::from(spec.initial_window.max(1));
        let rto_ns = INITIAL_RTO_NS.max(spec.min_rto_ns).min(MAX_RTO_NS);
        TcpSender {
            spec,
            sport,
            running: false,
            state: State::Idle,
            iss: 0,
            rcv_nxt: 0,
            syn_at: None,
            syn_retx: false,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            cwnd,
            ssthresh: INITIAL_SSTHRESH,
            dupacks: 0,
            in_recovery: false,
            partial_seen: false,
            recover: None,
            srtt_ns: None,
            rttvar_ns: 0.0,
            min_rtt_ns: None,
            rto_ns,
            rto_at: None,
            sent: VecDeque::new(),
            cubic: Cubic::default(),
            sack_ok: false,
            n_sacked: 0,
            n_lost: 0,
            tsq: VecDeque::new(),
            rack: None,
            lost_hint: 0,
            in_loss: false,
            prr_delivered: 0,
            prr_out: 0,
            recover_fs: 0,
            sent_pkts: 0,
            sent_bytes: 0,
            retransmits: 0,
            timeouts: 0,
            fast_retransmits: 0,
            acked_bytes: 0,
            trace: Vec::new(),
            last_sample: None,
            hystart: HyStart::default(),
            snd_wscale: None,
            snd_wnd: None,
            ts_ok: false,
            ts_recent: 0,
            max_packets_out: 0,
            cwnd_usage_seq: 0,
            cwnd_limited: true,
        }
    }

    pub fn running(&self) -> bool {
        self.running
    }

    /// The reported state: `idle` also while stopped.
    pub fn state(&self) -> State {
        match self.state {
            State::Done => State::Done,
            _ if !self.running => State::Idle,
            s => s,
        }
    }
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }
    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }
    pub fn srtt_us(&self) -> Option<f64> {
        self.srtt_ns.map(|s| s / 1000.0)
    }
    pub fn min_rtt_us(&self) -> Option<f64> {
        self.min_rtt_ns.map(|s| s as f64 / 1000.0)
    }
    pub fn rto_us(&self) -> f64 {
        self.rto_ns as f64 / 1000.0
    }
    pub fn trace(&self) -> &[TcpSample] {
        &self.trace
    }
    pub fn take_trace(&mut self) -> Vec<TcpSample> {
        std::mem::take(&mut self.trace)
    }

    /// The retransmission deadline.
    pub fn poll_at(&self) -> Option<Instant> {
        if self.running {
            self.rto_at
        } else {
            None
        }
    }

    fn limit(&self) -> u64 {
        self.spec.bytes.unwrap_or(u64::MAX)
    }

    fn wire(&self, off: u64) -> u32 {
        self.iss.wrapping_add(1).wrapping_add(off as u32)
    }

    fn mss(&self) -> u64 {
        self.spec.mss.max(1) as u64
    }

    /// Start (or resume) at `now`; pushes the segments to send.
    pub fn start(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        if self.running || self.state == State::Done {
            return;
        }
        self.running = true;
        match self.state {
            State::Idle | State::Handshake => {
                if self.state == State::Handshake {
                    self.syn_retx = true;
                }
                self.state = State::Handshake;
                self.send_syn(now, out);
            }
            State::Established => {
                self.fill(now, out);
                if self.snd_max > self.snd_una {
                    self.arm(now);
                }
            }
            State::Done => {}
        }
    }

    pub fn stop(&mut self) {
        self.running = false;
        self.rto_at = None;
    }

    fn send_syn(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        self.syn_at = Some(now);
        out.push(TxSeg {
            seq: self.iss,
            ack: 0,
            flags: SYN,
            sack_permitted: self.spec.sack && self.spec.cc != Cc::Tahoe,
            wscale: Some(SND_WSCALE),
            ts: Some((ts_clock(now), 0)),
            ..Default::default()
        });
        self.arm(now);
    }

    /// The timestamps option of a segment sent at `now`, when agreed.
    fn ts(&self, now: Instant) -> Option<(u32, u32)> {
        self.ts_ok.then(|| (ts_clock(now), self.ts_recent))
    }

    fn arm(&mut self, now: Instant) {
        self.rto_at = Some(now.add_nanos(self.rto_ns));
    }

    fn rtt_sample(&mut self, r_ns: u64) {
        let tick = self.spec.tcp_tick_ns;
        let r_ns = match (r_ns + tick / 2).checked_div(tick) {
            Some(n) => n.max(1) * tick,
            None => r_ns,
        };
        let r = r_ns as f64;
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2.0;
            }
            Some(s) => {
                self.rttvar_ns = 0.75 * self.rttvar_ns + 0.25 * (s - r).abs();
                self.srtt_ns = Some(0.875 * s + 0.125 * r);
            }
        }
        self.min_rtt_ns = Some(self.min_rtt_ns.map_or(r_ns, |m| m.min(r_ns)));
        let srtt = self.srtt_ns.unwrap_or(r);
        // Linux (tcp_rtt_estimator): the variance term is at least the minimum RTO, so the
        // RTO stays a minimum RTO above the smoothed RTT however steady a deep queue makes
        // it (RFC 6298's max(SRTT + 4·RTTVAR, min) fires spuriously when the queue grows).
        let rto = srtt + (4.0 * self.rttvar_ns).max(self.spec.min_rto_ns as f64);
        self.rto_ns = (rto as u64).clamp(self.spec.min_rto_ns, MAX_RTO_NS);
    }

    /// CUBIC's per-ACK hook (Linux's `cubictcp_acked`, before loss recovery and window
    /// growth): HyStart with the ACK's RTT sample, if any.
    fn hystart_acked(&mut self, now: Instant, rtt_ns: Option<u64>) {
        let Some(rtt_ns) = rtt_ns.filter(|_| self.spec.cc == Cc::Cubic) else {
            return;
        };
        // Linux ignores samples in the first second of a congestion-avoidance epoch
        if self
            .cubic
            .epoch()
            .is_some_and(|e| now.nanos_since(e) < 1_000_000_000)
        {
            return;
        }
        let active = self.cwnd < self.ssthresh && self.cwnd >= hystart::LOW_WINDOW;
        // Linux's slow-start pacing rate: twice cwnd (or the flight) per SRTT
        let rate = match self.srtt_ns {
            Some(s) if s > 0.0 => {
                2.0 * self.cwnd.max(self.sent.len() as f64) * self.mss() as f64 / (s / 1e9)
            }
            _ => 0.0,
        };
        let (una, nxt) = (self.snd_una, self.snd_max);
        if self.hystart.acked(
            now.nanos() / 1000,
            rtt_ns / 1000,
            una,
            nxt,
            active,
            hystart::ack_delay_us(rate),
        ) {
            self.ssthresh = self.cwnd;
        }
    }

    /// CUBIC's slow-start growth on a new ACK starts HyStart's next round when due.
    fn hystart_round(&mut self, now: Instant) {
        if self.spec.cc == Cc::Cubic && self.cwnd < self.ssthresh {
            self.hystart
                .slow_start_ack(now.nanos() / 1000, self.snd_una, self.snd_max);
        }
    }

    /// Send the data segment starting at `start` (new or retransmitted).
    fn send_data(&mut self, start: u64, now: Instant, out: &mut Vec<TxSeg>) {
        let end = start.saturating_add(self.mss()).min(self.limit());
        if end <= start {
            return;
        }
        let len = (end - start) as usize;
        let retx = start < self.snd_max;
        out.push(TxSeg {
            seq: self.wire(start),
            ack: self.rcv_nxt,
            flags: ACK | PSH,
            len,
            ts: self.ts(now),
            ..Default::default()
        });
        self.sent_pkts += 1;
        self.sent_bytes += len as u64;
        if retx {
            self.retransmits += 1;
            let i = self.sent.partition_point(|s| s.start < start);
            match self.sent.get_mut(i).filter(|s| s.start == start) {
                Some(s) => {
                    s.retx = true;
                    s.at = now;
                    if s.lost {
                        s.lost = false;
                        self.n_lost -= 1;
                    }
                }
                None => self.sent.insert(i, Sent::new(start, end, now, true)),
            }
        } else {
            self.sent.push_back(Sent::new(start, end, now, false));
        }
        if self.sack_ok {
            self.tsq.push_back((now, start));
            if self.in_recovery {
                self.prr_out += 1;
            }
        }
        self.snd_max = self.snd_max.max(end);
    }

    /// Send new (or go-back-N) data as the window allows; arm the timer if needed.
    fn fill(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        if !self.running || self.state != State::Established {
            return;
        }
        if self.sack_ok {
            self.sack_fill(now, out);
            return;
        }
        let win = self.cwnd.max(1.0).floor() as u64;
        let allowed = self
            .snd_una
            .saturating_add(win.saturating_mul(self.mss()))
            .min(self.rwnd_end());
        let limit = self.limit();
        let mut burst = self.burst();
        while self.snd_nxt < limit && self.snd_nxt < allowed && burst > 0 {
            burst -= 1;
            let s = self.snd_nxt;
            self.send_data(s, now, out);
            self.snd_nxt = s.saturating_add(self.mss()).min(limit);
        }
        if self.rto_at.is_none() && self.snd_max > self.snd_una {
            self.arm(now);
        }
    }

    /// The end of the window the receiver allows: `window` segments (ns-2 `window_`),
    /// and the peer's advertised window when it scales windows.
    fn rwnd_end(&self) -> u64 {
        let w = u64::from(self.spec.window).saturating_mul(self.mss());
        self.snd_una
            .saturating_add(self.snd_wnd.map_or(w, |r| r.min(w)))
    }

    /// Linux's `tcp_cwnd_validate` after sending: `stopped_by_cwnd` when the window, not
    /// the data or the receiver, ended the send.
    fn cwnd_validate(&mut self, stopped_by_cwnd: bool) {
        let out = self.sent.len() as u64;
        if self.snd_una >= self.cwnd_usage_seq || stopped_by_cwnd || out > self.max_packets_out {
            self.max_packets_out = out;
            self.cwnd_usage_seq = self.snd_nxt;
            self.cwnd_limited = stopped_by_cwnd;
        }
    }

    /// Linux's `tcp_is_cwnd_limited`: cwnd grows only while it limits the sender (in slow
    /// start: while it is below twice the flight).
    fn is_cwnd_limited(&self) -> bool {
        self.cwnd_limited
            || (self.cwnd < self.ssthresh && self.cwnd < 2.0 * self.max_packets_out as f64)
    }

    /// Segments one call of `fill` may send (ns-2 `maxburst_`).
    fn burst(&self) -> u64 {
        match self.spec.max_burst {
            0 => u64::MAX,
            n => u64::from(n),
        }
    }

    fn sample(&mut self, now: Instant, force: bool) {
        let iv = self.spec.trace_interval_ns;
        if iv == 0 {
            return;
        }
        if force || self.last_sample.is_none_or(|t| now.nanos_since(t) >= iv) {
            self.trace.push(TcpSample {
                t_ns: now.nanos(),
                cwnd: self.cwnd,
                ssthresh: self.ssthresh,
                srtt_us: self.srtt_us(),
                acked_bytes: self.acked_bytes,
                retransmits: self.retransmits,
            });
            self.last_sample = Some(now);
        }
    }

    fn flight_segments(&self) -> f64 {
        (self.snd_max - self.snd_una) as f64 / self.mss() as f64
    }

    fn loss_ssthresh(&mut self) -> f64 {
        match self.spec.cc {
            Cc::Cubic => self.cubic.on_loss(self.cwnd),
            _ => (self.flight_segments() / 2.0).max(2.0),
        }
    }

    /// A segment from the peer arrived at `now`.
    pub fn receive(&mut self, seg: &Segment, now: Instant, out: &mut Vec<TxSeg>) {
        if !self.running {
            return;
        }
        match self.state {
            State::Handshake => {
                if seg.flags & (SYN | ACK) != SYN | ACK || seg.ack != self.iss.wrapping_add(1) {
                    return;
                }
                if let (false, Some(t)) = (self.syn_retx, self.syn_at) {
                    self.rtt_sample(now.nanos_since(t));
                }
                self.rcv_nxt = seg.seq.wrapping_add(1);
                self.state = State::Established;
                self.sack_ok = self.spec.sack && self.spec.cc != Cc::Tahoe && seg.sack_permitted;
                // RFC 7323: windows are scaled when both SYNs carry the option; only then
                // does the sender heed the peer's window (an ns-2 sink offers none)
                self.snd_wscale = seg.wscale.map(|s| s.min(14));
                self.snd_wnd = self.snd_wscale.map(|_| u64::from(seg.window));
                self.ts_ok = seg.ts.is_some();
                self.ts_recent = seg.ts.map_or(0, |t| t.0);
                if self.syn_retx {
                    // RFC 5681 §3.1 / RFC 6298 §5.7: after a lost SYN, IW = 1 and RTO ≥ 3 s
                    // until the first data RTT sample.
                    self.cwnd = 1.0;
                    self.rto_ns = self.rto_ns.clamp(3 * INITIAL_RTO_NS, MAX_RTO_NS);
                }
                self.rto_at = None;
                out.push(TxSeg {
                    seq: self.wire(0),
                    ack: self.rcv_nxt,
                    flags: ACK,
                    ts: self.ts(now),
                    ..Default::default()
                });
                self.sample(now, true);
                if self.limit() == 0 {
                    self.finish(now, out);
                    return;
                }
                self.fill(now, out);
            }
            State::Established => {
                if seg.flags & SYN != 0 {
                    // Our handshake ACK was lost and the peer repeats its SYN/ACK.
                    out.push(TxSeg {
                        seq: self.wire(self.snd_nxt),
                        ack: self.rcv_nxt,
                        flags: ACK,
                        ts: self.ts(now),
                        ..Default::default()
                    });
                    return;
                }
                self.on_ack(seg, now, out);
            }
            State::Idle | State::Done => {}
        }
    }

    fn finish(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        out.push(TxSeg {
            seq: self.wire(self.limit()),
            ack: self.rcv_nxt,
            flags: FIN | ACK,
            ts: self.ts(now),
            ..Default::default()
        });
        self.state = State::Done;
        self.rto_at = None;
        self.sent.clear();
    }

    fn on_ack(&mut self, seg: &Segment, now: Instant, out: &mut Vec<TxSeg>) {
        if seg.flags & ACK == 0 {
            return;
        }
        let Some(ack) = unwrap_seq(self.snd_una, self.wire(self.snd_una), seg.ack) else {
            return;
        };
        if ack > self.snd_max {
            return;
        }
        // RFC 7323 (Linux's tcp_replace_ts_recent): the peer's ACKs all carry the same
        // sequence number, so each newer TSval is the one to echo
        if let (true, Some((val, _))) = (self.ts_ok, seg.ts) {
            if val.wrapping_sub(self.ts_recent) as i32 >= 0 {
                self.ts_recent = val;
            }
        }
        if let (Some(shift), true) = (self.snd_wscale, ack >= self.snd_una) {
            self.snd_wnd = Some(u64::from(seg.window) << shift);
        }
        let before = self.cwnd;
        if self.sack_ok {
            if ack < self.snd_una {
                return;
            }
            self.sack_ack(ack, seg, now, out);
            self.sample(now, self.cwnd < before);
            return;
        }
        if ack > self.snd_una {
            self.new_ack(ack, now, out);
            if self.state == State::Done {
                self.sample(now, true);
                return;
            }
        } else if ack == self.snd_una
            && seg.payload_len == 0
            && seg.flags & (SYN | FIN) == 0
            && self.snd_max > self.snd_una
        {
            self.dup_ack(now, out);
        } else {
            return;
        }
        self.fill(now, out);
        self.sample(now, self.cwnd < before);
    }

    fn new_ack(&mut self, ack: u64, now: Instant, out: &mut Vec<TxSeg>) {
        let acked = ack - self.snd_una;
        self.acked_bytes += acked;
        let mut last = None;
        let mut ambiguous = false;
        while let Some(s) = self.sent.front() {
            if s.end > ack {
                break;
            }
            ambiguous |= s.retx;
            last = Some(s.at);
            self.sent.pop_front();
        }
        let mut rtt = None;
        if let (false, Some(t)) = (ambiguous, last) {
            rtt = Some(now.nanos_since(t));
            self.rtt_sample(now.nanos_since(t));
        }
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.hystart_acked(now, rtt);
        let acked_segs = acked as f64 / self.mss() as f64;
        let mut restart_timer = true;
        if self.in_recovery {
            let full = self.recover.is_none_or(|r| ack >= r);
            if self.spec.cc == Cc::Reno || full {
                self.cwnd = self.ssthresh;
                self.in_recovery = false;
                self.dupacks = 0;
            } else {
                // NewReno partial ACK: retransmit the next hole, deflate.
                self.send_data(ack, now, out);
                self.cwnd = (self.cwnd - acked_segs).max(1.0);
                if acked >= self.mss() {
                    self.cwnd += 1.0;
                }
                // NewReno/Reno: only the first partial ACK restarts the timer ("impatient",
                // RFC 6582 §4: after a burst of losses the timeout's go-back-N beats one
                // hole per RTT); CUBIC, modelled on Linux, restarts it on every ACK that
                // advances ("slow but steady", what Linux does without SACK)
                restart_timer = self.spec.cc == Cc::Cubic || !self.partial_seen;
                self.partial_seen = true;
            }
        } else {
            self.dupacks = 0;
            self.hystart_round(now);
            self.grow(acked_segs, now);
        }
        if ack >= self.limit() {
            self.finish(now, out);
            return;
        }
        if self.snd_una >= self.snd_max {
            self.rto_at = None;
        } else if restart_timer || self.rto_at.is_none() {
            self.arm(now);
        }
    }

    /// Segments in flight by RFC 6675's estimate: neither SACKed nor marked lost.
    fn pipe(&self) -> u64 {
        (self.sent.len() - self.n_sacked - self.n_lost) as u64
    }

    /// Index in `sent` of the segment starting at `start`.
    fn index_of(&self, start: u64) -> Option<usize> {
        let i = self.sent.partition_point(|s| s.start < start);
        (self.sent.get(i)?.start == start).then_some(i)
    }

    /// A segment newly delivered (cumulatively acknowledged or SACKed): RACK's latest
    /// delivered transmission and the RTT sample, skipping a retransmission acknowledged
    /// faster than the minimum RTT (the original was delivered, as Linux's
    /// `tcp_rack_advance`). Other retransmissions give samples, as Linux's timestamps do
    /// (Karn's rule would leave a sender after a timeout without a sample, its RTO backed
    /// off, for as long as it only retransmits).
    fn delivered(&mut self, s: Sent, now: Instant, newest: &mut Option<Instant>) {
        let rtt = now.nanos_since(s.at);
        if s.retx && self.min_rtt_ns.is_some_and(|m| rtt < m) {
            return;
        }
        if self.rack.is_none_or(|r| (s.at, s.start) > r) {
            self.rack = Some((s.at, s.start));
        }
        if newest.is_none_or(|t| s.at > t) {
            *newest = Some(s.at);
        }
    }

    /// RACK (RFC 8985) with no reordering window (the simulated paths do not reorder):
    /// a segment not SACKed is lost once a segment sent after it was delivered. Before
    /// recovery, only once DupThresh segments are SACKed (Linux's reordering guard).
    fn mark_lost(&mut self) {
        while self.tsq.front().is_some_and(|&(_, st)| st < self.snd_una) {
            self.tsq.pop_front(); // acknowledged: never lost
        }
        if !(self.in_recovery || self.in_loss || self.n_sacked >= DUPTHRESH) {
            return;
        }
        let Some(rack) = self.rack else { return };
        while let Some(&(at, start)) = self.tsq.front() {
            if (at, start) >= rack {
                break;
            }
            self.tsq.pop_front();
            if let Some(i) = self.index_of(start) {
                let e = &mut self.sent[i];
                if e.at == at && !e.sacked && !e.lost {
                    e.lost = true;
                    self.n_lost += 1;
                    self.lost_hint = self.lost_hint.min(start);
                }
            }
        }
    }

    /// An ACK with SACK agreed: update the scoreboard, detect losses, set cwnd (PRR in
    /// recovery, as Linux) and send what the window allows.
    fn sack_ack(&mut self, ack: u64, seg: &Segment, now: Instant, out: &mut Vec<TxSeg>) {
        let mut delivered = 0u64;
        let mut newest = None;
        let advanced = ack > self.snd_una;
        self.acked_bytes += ack - self.snd_una;
        let ecr = seg.ts.filter(|_| self.ts_ok).map(|t| t.1);
        while let Some(&s) = self.sent.front() {
            if s.end > ack {
                break;
            }
            self.sent.pop_front();
            if s.sacked {
                self.n_sacked -= 1;
            } else {
                delivered += 1;
                // Linux's tcp_skb_spurious_retrans: an ACK echoing a TSval older than
                // the retransmission was sent for the original (the hole below it was
                // filled), so the retransmission is not known delivered
                if !(s.retx && ecr.is_some_and(|e| (e.wrapping_sub(ts_clock(s.at)) as i32) < 0)) {
                    self.delivered(s, now, &mut newest);
                }
            }
            if s.lost {
                self.n_lost -= 1;
            }
        }
        let (una, una_wire) = (ack, self.wire(ack));
        for (a, b) in seg.sack.iter() {
            let (Some(a), Some(b)) = (unwrap_seq(una, una_wire, a), unwrap_seq(una, una_wire, b))
            else {
                continue;
            };
            if a < ack || b > self.snd_max || b <= a {
                continue;
            }
            let mut i = self.sent.partition_point(|s| s.start < a);
            while let Some(&e) = self.sent.get(i) {
                if e.end > b {
                    break;
                }
                if !e.sacked {
                    let m = &mut self.sent[i];
                    m.sacked = true;
                    self.n_sacked += 1;
                    if m.lost {
                        m.lost = false;
                        self.n_lost -= 1;
                    }
                    delivered += 1;
                    self.delivered(e, now, &mut newest);
                }
                i += 1;
            }
        }
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.lost_hint = self.lost_hint.max(ack);
        let mut rtt = None;
        if let Some(t) = newest {
            rtt = Some(now.nanos_since(t));
            self.rtt_sample(now.nanos_since(t));
        }
        self.hystart_acked(now, rtt);
        let done = self.recover.is_none_or(|r| ack >= r);
        if self.in_recovery && done {
            // Linux's tcp_end_cwnd_reduction
            self.cwnd = self.ssthresh;
            self.in_recovery = false;
        }
        if self.in_loss && done {
            self.in_loss = false;
        }
        self.mark_lost();
        if !self.in_recovery && !self.in_loss && self.n_lost > 0 {
            self.fast_retransmits += 1;
            self.ssthresh = self.linux_ssthresh();
            self.recover = Some(self.snd_max);
            self.in_recovery = true;
            self.prr_delivered = 0;
            self.prr_out = 0;
            self.recover_fs = self.sent.len() as u64;
        }
        if self.in_recovery {
            self.prr(delivered);
        } else if delivered > 0 {
            self.hystart_round(now);
            self.grow_linux(delivered as f64, now);
        }
        if ack >= self.limit() {
            self.finish(now, out);
            return;
        }
        if self.snd_una >= self.snd_max {
            self.rto_at = None;
        } else if advanced || self.rto_at.is_none() {
            self.arm(now);
        }
        self.sack_fill(now, out);
    }

    /// ssthresh after a loss, as Linux: Reno max(cwnd/2, 2), CUBIC β·cwnd.
    fn linux_ssthresh(&mut self) -> f64 {
        match self.spec.cc {
            Cc::Cubic => self.cubic.on_loss(self.cwnd),
            _ => (self.cwnd / 2.0).floor().max(2.0),
        }
    }

    /// Proportional rate reduction (RFC 6937, slow-start reduction bound, as Linux's
    /// `tcp_cwnd_reduction`): cwnd = pipe + what may be sent for this ACK.
    fn prr(&mut self, delivered: u64) {
        self.prr_delivered += delivered;
        let pipe = self.pipe() as i64;
        let ssthresh = self.ssthresh.floor() as i64;
        let delta = ssthresh - pipe;
        let mut sndcnt = if delta < 0 {
            let fs = self.recover_fs.max(1);
            let due = (self.prr_delivered * ssthresh as u64).div_ceil(fs);
            due as i64 - self.prr_out as i64
        } else {
            let bound = (self.prr_delivered as i64 - self.prr_out as i64).max(delivered as i64);
            delta.min(bound + 1)
        };
        sndcnt = sndcnt.max(i64::from(self.prr_out == 0));
        self.cwnd = (pipe + sndcnt).max(1) as f64;
    }

    /// Linux's growth by delivered segments: slow start up to ssthresh, the rest in
    /// congestion avoidance.
    fn grow_linux(&mut self, mut acked: f64, now: Instant) {
        if !self.is_cwnd_limited() {
            return;
        }
        if self.cwnd < self.ssthresh {
            let room = self.ssthresh - self.cwnd;
            let ss = acked.min(room.max(0.0));
            self.cwnd += ss;
            acked -= ss;
        }
        if acked > 0.0 && self.cwnd >= self.ssthresh {
            if self.spec.cc == Cc::Cubic {
                let delay_min_s = self.hystart.delay_min_us as f64 / 1e6;
                self.cwnd = self.cubic.on_ack(self.cwnd, acked, now, delay_min_s);
            } else {
                self.cwnd += acked / self.cwnd;
            }
        }
        self.cwnd = self.cwnd.min(f64::from(self.spec.window));
    }

    /// With SACK: retransmit segments marked lost, then send new data, while the pipe is
    /// below cwnd (RFC 6675 §5; the advertised window is `window` segments).
    fn sack_fill(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        let cwnd = self.cwnd.max(1.0).floor() as u64;
        let limit = self.limit();
        let rwnd_end = self.rwnd_end();
        let mut burst = self.burst();
        while self.pipe() < cwnd && burst > 0 {
            burst -= 1;
            if self.n_lost > 0 {
                let from = self.sent.partition_point(|s| s.start < self.lost_hint);
                let Some(off) = self.sent.range(from..).position(|s| s.lost) else {
                    break;
                };
                let start = self.sent[from + off].start;
                self.lost_hint = start;
                self.send_data(start, now, out);
            } else if self.snd_nxt < limit && self.snd_nxt < rwnd_end {
                let s = self.snd_nxt;
                self.send_data(s, now, out);
                self.snd_nxt = s.saturating_add(self.mss()).min(limit);
            } else {
                break;
            }
        }
        self.cwnd_validate(self.pipe() >= cwnd);
        if self.rto_at.is_none() && self.snd_max > self.snd_una {
            self.arm(now);
        }
    }

    /// The RTO with SACK (Linux's `tcp_enter_loss`): everything not SACKed is lost, cwnd 1,
    /// retransmitted in slow start; SACKed segments are not sent again.
    fn sack_timeout(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        self.timeouts += 1;
        if !self.in_recovery && !self.in_loss {
            self.ssthresh = self.linux_ssthresh();
        }
        self.cwnd = 1.0;
        self.in_recovery = false;
        self.in_loss = true;
        self.hystart = HyStart::new(now.nanos() / 1000, self.snd_max);
        self.recover = Some(self.snd_max);
        for e in self.sent.iter_mut() {
            if !e.sacked && !e.lost {
                e.lost = true;
                self.n_lost += 1;
            }
        }
        self.tsq.clear();
        self.lost_hint = self.snd_una;
        self.sack_fill(now, out);
        self.sample(now, true);
    }

    fn grow(&mut self, acked_segs: f64, now: Instant) {
        if self.cwnd < self.ssthresh {
            self.cwnd += acked_segs.min(2.0);
        } else if self.spec.cc == Cc::Cubic {
            let delay_min_s = self.hystart.delay_min_us as f64 / 1e6;
            self.cwnd = self.cubic.on_ack(self.cwnd, acked_segs, now, delay_min_s);
        } else {
            self.cwnd += acked_segs / self.cwnd;
        }
        self.cwnd = self.cwnd.min(f64::from(self.spec.window));
    }

    fn dup_ack(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        self.dupacks += 1;
        if self.in_recovery {
            self.cwnd += 1.0;
            return;
        }
        if self.dupacks != 3 || self.recover.is_some_and(|r| self.snd_una < r) {
            return;
        }
        self.fast_retransmits += 1;
        self.recover = Some(self.snd_max);
        self.ssthresh = self.loss_ssthresh();
        if self.spec.cc == Cc::Tahoe {
            self.cwnd = 1.0;
            self.snd_nxt = self.snd_una;
            self.sent.clear();
        } else {
            let s = self.snd_una;
            self.send_data(s, now, out);
            self.cwnd = self.ssthresh + 3.0;
            self.in_recovery = true;
            self.partial_seen = false;
        }
        self.arm(now);
    }

    /// The retransmission timer fired at `now` (ignored unless it is due).
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<TxSeg>) {
        if !self.running || self.rto_at.is_none_or(|t| t > now) {
            return;
        }
        self.rto_at = None;
        self.rto_ns = self.rto_ns.saturating_mul(2).min(MAX_RTO_NS);
        match self.state {
            State::Handshake => {
                self.syn_retx = true;
                self.send_syn(now, out);
            }
            State::Established if self.sack_ok => self.sack_timeout(now, out),
            State::Established => {
                self.timeouts += 1;
                // a timeout during fast recovery keeps the ssthresh that recovery set (as
                // Linux): the inflated cwnd of recovery is not a measure of the path
                if !self.in_recovery {
                    self.ssthresh = self.loss_ssthresh();
                }
                self.cwnd = 1.0;
                self.in_recovery = false;
                self.hystart = HyStart::new(now.nanos() / 1000, self.snd_max);
                self.dupacks = 0;
                self.recover = Some(self.snd_max);
                self.snd_nxt = self.snd_una;
                self.sent.clear();
                self.fill(now, out);
                self.sample(now, true);
            }
            State::Idle | State::Done => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sink::{Acks, TcpSink, DELACK_NS};
    use super::*;

    fn spec(bytes: u64, mss: usize) -> TcpSpec {
        TcpSpec {
            dst: [10, 0, 0, 2].into(),
            dport: 80,
            cc: Cc::NewReno,
            mss,
            window: 64,
            initial_window: 10,
            min_rto_ns: DEFAULT_MIN_RTO_NS,
            bytes: Some(bytes),
            trace_interval_ns: 0,
            sack: false,
            max_burst: 0,
            tcp_tick_ns: 0,
        }
    }

    fn to_seg(t: &TxSeg, src: [u8; 4], sport: u16, dport: u16) -> Segment {
        Segment {
            src: src.into(),
            sport,
            dport,
            seq: t.seq,
            ack: t.ack,
            flags: t.flags,
            payload_len: t.len,
            sack_permitted: t.sack_permitted,
            sack: t.sack,
            window: t.window.unwrap_or(super::super::ADVERTISED_WINDOW),
            wscale: t.wscale,
            ts: t.ts,
        }
    }

    /// Sender and sink back to back, one round trip per millisecond, `drop(i)` loses the
    /// i-th data segment.
    fn pump(s: &mut TcpSender, k: &mut TcpSink, drop: impl Fn(u64) -> bool) -> u64 {
        let mut now = Instant::ZERO;
        let mut out = Vec::new();
        s.start(now, &mut out);
        let mut n = 0u64;
        for _ in 0..1_000_000 {
            if s.state() == State::Done {
                break;
            }
            let mut replies = Vec::new();
            for t in out.drain(..) {
                if t.len > 0 {
                    n += 1;
                    if drop(n) {
                        continue;
                    }
                }
                k.receive(&to_seg(&t, [10, 0, 0, 1], s.sport, 80), now, &mut replies);
            }
            now = now.add_nanos(1_000_000);
            k.on_timer(now, &mut replies);
            for (_, _, r) in replies {
                s.receive(&to_seg(&r, [10, 0, 0, 2], 80, s.sport), now, &mut out);
            }
            if out.is_empty() {
                if let Some(t) = s.poll_at() {
                    now = now.max(t);
                    s.on_timer(now, &mut out);
                }
            }
        }
        n
    }

    #[test]
    fn sequence_numbers_wrap() {
        // 5 GB in 65495-byte segments crosses 2³² in both directions' ACK numbers.
        let bytes = 5_000_000_000;
        let mut s = TcpSender::new(spec(bytes, MAX_MSS_TEST), 49152);
        let mut k = TcpSink::new(80, Acks::Each, false);
        pump(&mut s, &mut k, |_| false);
        assert_eq!(s.state(), State::Done);
        assert_eq!(k.bytes, bytes);
        assert_eq!(s.acked_bytes, bytes);
        assert_eq!((s.retransmits, s.timeouts), (0, 0));
    }

    #[test]
    fn losses_across_the_wrap_are_recovered() {
        let bytes = 4_400_000_000;
        let mut s = TcpSender::new(spec(bytes, MAX_MSS_TEST), 49152);
        let mut k = TcpSink::new(80, Acks::Delayed(DELACK_NS), false);
        // Lose every 5000th data segment (one near the wrap at 2³²/65495 ≈ 65578).
        pump(&mut s, &mut k, |i| i % 5000 == 0 || i == 65578);
        assert_eq!(s.state(), State::Done);
        assert_eq!(k.bytes, bytes);
        assert!(
            s.fast_retransmits + s.timeouts >= 13,
            "{} {}",
            s.fast_retransmits,
            s.timeouts
        );
    }

    fn sack_spec(bytes: u64) -> TcpSpec {
        TcpSpec {
            sack: true,
            ..spec(bytes, 1000)
        }
    }

    #[test]
    fn sack_recovers_a_burst_loss_without_spurious_retransmissions() {
        // 30 segments lost in one window (a slow-start overshoot): with SACK each is sent
        // again exactly once, in one recovery, without a timeout.
        let mut s = TcpSender::new(sack_spec(1_000_000), 49152);
        let mut k = TcpSink::new(80, Acks::Each, true);
        pump(&mut s, &mut k, |i| (40..70).contains(&i));
        assert_eq!(s.state(), State::Done);
        assert_eq!(k.bytes, 1_000_000);
        assert_eq!((s.retransmits, s.timeouts, s.fast_retransmits), (30, 0, 1));
        assert_eq!(k.dup_pkts, 0, "a segment the sink had was sent again");
    }

    #[test]
    fn sack_lost_retransmission_is_detected_by_rack() {
        // segment 50 lost, then its retransmission (the 2nd transmission of it) too: RACK
        // sees later segments delivered and sends it a third time, still without a timeout
        let mut s = TcpSender::new(sack_spec(400_000), 49152);
        let mut k = TcpSink::new(80, Acks::Each, true);
        let n = pump(&mut s, &mut k, |i| i == 50 || i == 65);
        assert_eq!(k.bytes, 400_000);
        assert_eq!(k.dup_pkts, 0);
        assert!(
            s.timeouts == 0 && n == 400 + s.retransmits,
            "{n} {}",
            s.timeouts
        );
    }

    #[test]
    fn sack_timeout_resends_only_what_the_sink_lacks() {
        // the tail of the transfer is lost: nothing after it can be SACKed, the RTO fires,
        // and only the unSACKed segments are sent again (one earlier loss was recovered
        // by fast retransmit)
        let mut s = TcpSender::new(sack_spec(100_000), 49152);
        let mut k = TcpSink::new(80, Acks::Each, true);
        pump(&mut s, &mut k, |i| i == 50 || (96..=100).contains(&i));
        assert_eq!(k.bytes, 100_000);
        assert_eq!((s.retransmits, s.timeouts), (6, 1));
        assert_eq!(k.dup_pkts, 0);
    }

    #[test]
    fn rto_keeps_the_minimum_above_a_steady_rtt() {
        // Linux: RTO = SRTT + max(4·RTTVAR, min RTO). With a steady 1 ms RTT RFC 6298's
        // max(SRTT + 4·RTTVAR, 200 ms) is 200 ms; Linux's is 201 ms, so the timer does
        // not fire as soon as a deep queue's delay grows.
        let mut s = TcpSender::new(spec(200_000, 1000), 49152);
        let mut k = TcpSink::new(80, Acks::Each, false);
        pump(&mut s, &mut k, |_| false);
        let srtt = s.srtt_us().unwrap();
        assert!((srtt - 1000.0).abs() < 1.0, "{srtt}");
        assert!(s.rto_us() >= srtt + 200_000.0 - 1.0, "{}", s.rto_us());
    }

    #[test]
    fn max_burst_and_tcp_tick() {
        for sack in [false, true] {
            let mut s = TcpSender::new(
                TcpSpec {
                    max_burst: 3,
                    tcp_tick_ns: 10_000_000,
                    sack,
                    ..spec(100_000, 1000)
                },
                49152,
            );
            let mut out = Vec::new();
            s.start(Instant::ZERO, &mut out);
            let synack = Segment {
                flags: SYN | ACK,
                ack: 1,
                sack_permitted: sack,
                ..Default::default()
            };
            out.clear();
            s.receive(&synack, Instant::from_nanos(1_200_000), &mut out);
            // IW 10, but at most 3 segments at once (after the handshake's pure ACK)
            assert_eq!(out.iter().filter(|t| t.len > 0).count(), 3, "sack {sack}");
            // the 1.2 ms handshake RTT is counted as one 10 ms tick
            assert_eq!(s.srtt_us(), Some(10_000.0));
        }
    }

    #[test]
    fn a_scaled_receive_window_limits_the_flight() {
        // the SYN offers window scaling; a SYN/ACK that accepts it makes the peer's
        // window a limit (here 4 segments of 1000 bytes: a SYN's window is not scaled),
        // one that does not leaves the initial window (10) alone
        for (wscale, window, sent) in [(Some(7), 4000, 4), (None, 4000, 10)] {
            let mut s = TcpSender::new(sack_spec(100_000), 49152);
            let mut out = Vec::new();
            s.start(Instant::ZERO, &mut out);
            assert_eq!(out[0].wscale, Some(SND_WSCALE));
            let synack = Segment {
                flags: SYN | ACK,
                ack: 1,
                sack_permitted: true,
                wscale,
                window,
                ..Default::default()
            };
            out.clear();
            s.receive(&synack, Instant::from_millis(1), &mut out);
            assert_eq!(out.iter().filter(|t| t.len > 0).count(), sent, "{wscale:?}");
        }
    }

    #[test]
    fn a_spurious_retransmission_does_not_advance_rack() {
        // 20 segments at 1 ms; 0 and 8 are lost. 5 arrived but the receiver never reported
        // it, so RACK marks it lost and it is sent again at 12 ms, after 0's retransmission
        // and new segments (10 ms). The ACK for 0..7 echoes 0's retransmission's TSval
        // (10): it was 0 that filled the hole, and 5's retransmission, sent later, is not
        // known delivered (Linux's tcp_skb_spurious_retrans). Counting it delivered
        // advanced RACK to 12 ms and marked the new segments, still in flight, lost.
        let mut s = TcpSender::new(
            TcpSpec {
                initial_window: 20,
                ..sack_spec(100_000)
            },
            49152,
        );
        let mut out = Vec::new();
        s.start(Instant::ZERO, &mut out);
        let synack = Segment {
            flags: SYN | ACK,
            ack: 1,
            sack_permitted: true,
            ts: Some((1, 0)),
            ..Default::default()
        };
        s.receive(&synack, Instant::from_millis(1), &mut out);
        let wire = |seg: u32| 1 + 1000 * seg;
        let ack = |cum: u32, blocks: &[(u32, u32)], ecr: u32| {
            let mut a = Segment {
                flags: ACK,
                ack: wire(cum),
                ts: Some((0, ecr)),
                ..Default::default()
            };
            for &(x, y) in blocks {
                a.sack.push(wire(x), wire(y));
            }
            a
        };
        s.receive(&ack(0, &[(1, 5)], 1), Instant::from_millis(10), &mut out);
        let new_at_10ms = s.snd_max / 1000 - 20;
        assert_eq!(s.retransmits, 1, "0 again");
        assert!(new_at_10ms > 0);
        s.receive(
            &ack(0, &[(6, 8), (1, 5)], 1),
            Instant::from_millis(12),
            &mut out,
        );
        assert_eq!(s.retransmits, 2, "5 marked lost and sent again");
        s.receive(&ack(8, &[(9, 20)], 10), Instant::from_millis(31), &mut out);
        assert_eq!(s.retransmits, 3, "8 is lost; the new segments are not");
        assert_eq!(s.n_lost, 0);
    }

    const MAX_MSS_TEST: usize = super::super::MAX_MSS;
}
