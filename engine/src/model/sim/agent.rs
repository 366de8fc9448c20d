//! Traffic agents on simulated hosts: UDP sources (constant bit rate, Poisson, on/off) and a UDP sink.
//!
//! CBR payload (ns-2 counts `packetSize_` as the payload): bytes 0..8 a sequence number
//! (u64 big endian, 0-based, continuing across stop/start), bytes 8..16 the send time in
//! engine ns; the rest zeros. The k-th packet after a `start` at time S leaves at exactly
//! S + floor(k · size · 8 · 10⁹ / rate_bps) ns (or S + k · interval), so no rounding error
//! accumulates.
//!
//! The same source also sends with random departure patterns ([`Pattern`]): Poisson
//! (exponential inter-departure times) and ns-2 style on/off (exponential or Pareto burst and
//! idle lengths). Their randomness comes from the agent's own generator, seeded from
//! `stream_seed(experiment seed, "agent:<id>")`, so a seed gives the same departures.
use flowstats::SeqTracker;
use serde::Serialize;

use super::ip::Addr;
use crate::rng::Rng;
use crate::time::Instant;

/// Minimum CBR payload: sequence number + timestamp.
pub const MIN_SIZE: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub struct CbrSpec {
    pub dst: Addr,
    pub dport: u16,
    pub size: usize,
    /// Period as a fraction of ns: num / den (Poisson: the mean; on/off: during ON).
    pub period_num: u128,
    pub period_den: u128,
    pub pattern: Pattern,
}

/// When a source sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Exactly every period, first packet at the start.
    Cbr,
    /// Exponential inter-departure times with mean = period; first packet one draw after start.
    Poisson,
    /// ns-2 `Application/Traffic/Exponential` or `/Pareto`: bursts of packets one period apart,
    /// separated by idle times (see [`Cbr::next_gap_ns`]).
    OnOff {
        on_ns: f64,
        off_ns: f64,
        dist: OnOffDist,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnOffDist {
    Exponential,
    /// Pareto with shape > 1 (ns-2 `shape_`, default 1.5).
    Pareto {
        shape: f64,
    },
}

#[derive(Debug)]
pub struct Cbr {
    pub spec: CbrSpec,
    pub sport: u16,
    start: Option<Instant>,
    k: u64,
    seq: u64,
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    /// Random patterns: the generator, the next departure as ns since the start (kept in f64
    /// so rounding to whole ns never accumulates), and the packets left in the current burst.
    rng: Rng,
    offset_ns: f64,
    burst_left: u64,
}

impl Cbr {
    /// `seed`: the agent's stream, `stream_seed(experiment seed, "agent:<id>")` (unused by CBR).
    pub fn new(spec: CbrSpec, sport: u16, seed: u64) -> Self {
        Cbr {
            spec,
            sport,
            start: None,
            k: 0,
            seq: 0,
            sent_pkts: 0,
            sent_bytes: 0,
            rng: Rng::new(seed),
            offset_ns: 0.0,
            burst_left: 0,
        }
    }

    fn period_ns(&self) -> f64 {
        self.spec.period_num as f64 / self.spec.period_den.max(1) as f64
    }

    /// Exponential sample with the given mean (inverse transform; 1 − u ∈ (0, 1]).
    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.rng.next_f64()).ln()
    }

    /// Pareto sample with mean `mean` (ns-2 `RNG::pareto(scale, shape)` with
    /// scale = mean·(shape − 1)/shape: scale / u^(1/shape), u ∈ (0, 1]).
    fn pareto(&mut self, mean: f64, shape: f64) -> f64 {
        let scale = mean * (shape - 1.0) / shape;
        scale / (1.0 - self.rng.next_f64()).powf(1.0 / shape)
    }

    /// Time from one departure (or the start) to the next, for the random patterns. On/off
    /// follows ns-2's `next_interval`: at the start of each burst draw its length in packets,
    /// `int(X + 0.5)` at least 1, with X of mean on/period, and an idle time of mean off; the
    /// gap before the burst's first packet is period + idle, the others are one period.
    fn next_gap_ns(&mut self) -> f64 {
        let period = self.period_ns();
        match self.spec.pattern {
            Pattern::Cbr => period,
            Pattern::Poisson => self.exponential(period),
            Pattern::OnOff {
                on_ns,
                off_ns,
                dist,
            } => {
                let mut t = period;
                if self.burst_left == 0 {
                    let (len, idle) = match dist {
                        OnOffDist::Exponential => {
                            (self.exponential(on_ns / period), self.exponential(off_ns))
                        }
                        OnOffDist::Pareto { shape } => (
                            self.pareto(on_ns / period, shape),
                            self.pareto(off_ns, shape),
                        ),
                    };
                    // Saturating float-to-int cast; a burst of at least one packet.
                    self.burst_left = ((len + 0.5) as u64).max(1);
                    t += idle;
                }
                self.burst_left -= 1;
                t
            }
        }
    }

    pub fn running(&self) -> bool {
        self.start.is_some()
    }

    /// Start at `now` (the first packet leaves at `now`); no effect when running.
    pub fn start(&mut self, now: Instant) {
        if self.start.is_none() {
            self.start = Some(now);
            self.k = 0;
            self.burst_left = 0;
            self.offset_ns = 0.0;
            if self.spec.pattern != Pattern::Cbr {
                self.offset_ns = self.next_gap_ns();
            }
        }
    }

    pub fn stop(&mut self) {
        self.start = None;
    }

    pub fn poll_at(&self) -> Option<Instant> {
        let s = self.start?;
        if self.spec.pattern != Pattern::Cbr {
            let off = self.offset_ns.round();
            // Saturating cast: a gap beyond u64 ns means "never".
            return Some(Instant::from_nanos(s.nanos().saturating_add(off as u64)));
        }
        let off = u128::from(self.k) * self.spec.period_num / self.spec.period_den.max(1);
        Some(Instant::from_nanos(
            s.nanos()
                .saturating_add(u64::try_from(off).unwrap_or(u64::MAX)),
        ))
    }

    /// If a packet is due at `now`, return its payload and advance.
    pub fn poll(&mut self, now: Instant) -> Option<Vec<u8>> {
        let d = self.depart(now)?;
        let mut p = vec![0u8; d.len];
        d.write(&mut p);
        Some(p)
    }

    /// If a packet is due at `now`, advance and say what its payload is (written into its
    /// frame by [`Departure::write`], without a buffer of its own).
    pub fn depart(&mut self, now: Instant) -> Option<Departure> {
        let at = self.poll_at()?;
        if at > now {
            return None;
        }
        let d = Departure {
            seq: self.seq,
            at,
            len: self.spec.size.max(MIN_SIZE),
        };
        self.seq += 1;
        self.k += 1;
        if self.spec.pattern != Pattern::Cbr {
            self.offset_ns += self.next_gap_ns();
        }
        self.sent_pkts += 1;
        self.sent_bytes += d.len as u64;
        Some(d)
    }
}

/// One packet of a source: its sequence number, send time and payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    pub seq: u64,
    pub at: Instant,
    pub len: usize,
}

impl Departure {
    /// The payload (see the module's header) into `p` (`len` bytes).
    pub fn write(&self, p: &mut [u8]) {
        p[0..8].copy_from_slice(&self.seq.to_be_bytes());
        p[8..16].copy_from_slice(&self.at.nanos().to_be_bytes());
        p[16..].fill(0);
    }
}

#[derive(Debug, Default)]
pub struct UdpSink {
    pub port: u16,
    /// Every datagram (duplicates and short ones included) and its payload bytes.
    pub pkts: u64,
    pub bytes: u64,
    /// Loss, reordering and duplicates: the one definition shared with wanlab-gen.
    pub seq: SeqTracker,
    owd_sum_ns: u128,
    owd_min_ns: Option<u64>,
    owd_max_ns: u64,
    /// Datagrams too short to carry a sequence number and timestamp (counted in pkts/bytes).
    pub short: u64,
}

impl UdpSink {
    pub fn new(port: u16) -> Self {
        UdpSink {
            port,
            ..Default::default()
        }
    }

    /// A datagram arrived at `now`. Loss is `flowstats`' definition: expected (highest
    /// sequence number + 1) − distinct received, so a reordered packet is not lost and a
    /// duplicate is not counted twice.
    pub fn receive(&mut self, payload: &[u8], now: Instant) {
        self.pkts += 1;
        self.bytes += payload.len() as u64;
        let (Some(seq), Some(sent)) = (be_u64(payload, 0), be_u64(payload, 8)) else {
            self.short += 1;
            return;
        };
        self.seq.record(seq);
        let owd = now.nanos().saturating_sub(sent);
        self.owd_sum_ns += u128::from(owd);
        self.owd_min_ns = Some(self.owd_min_ns.map_or(owd, |m| m.min(owd)));
        self.owd_max_ns = self.owd_max_ns.max(owd);
    }

    pub fn stats(&self) -> AgentStats {
        let timed = self.pkts - self.short;
        AgentStats::Sink {
            port: self.port,
            pkts: self.pkts,
            bytes: self.bytes,
            expected: self.seq.expected(),
            lost: self.seq.lost(),
            reordered: self.seq.reordered,
            duplicates: self.seq.duplicates,
            owd_min_us: self.owd_min_ns.map(|n| n as f64 / 1000.0),
            owd_avg_us: (timed > 0).then(|| self.owd_sum_ns as f64 / timed as f64 / 1000.0),
            owd_max_us: (timed > 0).then(|| self.owd_max_ns as f64 / 1000.0),
        }
    }
}

/// The big-endian u64 at `at`, if the payload is long enough.
fn be_u64(p: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(p.get(at..at + 8)?.try_into().ok()?))
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentStats {
    Cbr {
        running: bool,
        sent_pkts: u64,
        sent_bytes: u64,
    },
    Sink {
        port: u16,
        pkts: u64,
        bytes: u64,
        /// Highest sequence number + 1; lost = expected − distinct received.
        expected: u64,
        lost: u64,
        reordered: u64,
        duplicates: u64,
        owd_min_us: Option<f64>,
        owd_avg_us: Option<f64>,
        owd_max_us: Option<f64>,
    },
    /// A TCP sender (see `tcp/sender.rs`); windows in segments, payload bytes.
    Tcp {
        state: super::tcp::sender::State,
        cc: super::tcp::sender::Cc,
        sent_pkts: u64,
        sent_bytes: u64,
        retransmits: u64,
        timeouts: u64,
        fast_retransmits: u64,
        acked_bytes: u64,
        cwnd: f64,
        ssthresh: f64,
        srtt_us: Option<f64>,
        min_rtt_us: Option<f64>,
        rto_us: f64,
    },
    /// A TCP sink: `bytes` = in-order payload delivered.
    TcpSink {
        port: u16,
        pkts: u64,
        bytes: u64,
        dup_pkts: u64,
        ooo_pkts: u64,
        /// ACKs sent (not SYN/ACKs).
        acks: u64,
    },
}
