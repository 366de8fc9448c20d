//! Traffic agents on simulated hosts: a constant-bit-rate UDP source and a UDP sink.
//!
//! CBR payload (ns-2 counts `packetSize_` as the payload): bytes 0..8 a sequence number
//! (u64 big endian, 0-based, continuing across stop/start), bytes 8..16 the send time in
//! engine ns; the rest zeros. The k-th packet after a `start` at time S leaves at exactly
//! S + floor(k · size · 8 · 10⁹ / rate_bps) ns (or S + k · interval), so no rounding error
//! accumulates.
use serde::Serialize;

use crate::time::Instant;
use crate::wire::ipv4::Addr;

/// Minimum CBR payload: sequence number + timestamp.
pub const MIN_SIZE: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbrSpec {
    pub dst: Addr,
    pub dport: u16,
    pub size: usize,
    /// Period as a fraction of ns: num / den.
    pub period_num: u128,
    pub period_den: u128,
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
}

impl Cbr {
    pub fn new(spec: CbrSpec, sport: u16) -> Self {
        Cbr { spec, sport, start: None, k: 0, seq: 0, sent_pkts: 0, sent_bytes: 0 }
    }

    pub fn running(&self) -> bool {
        self.start.is_some()
    }

    /// Start at `now` (the first packet leaves at `now`); no effect when running.
    pub fn start(&mut self, now: Instant) {
        if self.start.is_none() {
            self.start = Some(now);
            self.k = 0;
        }
    }

    pub fn stop(&mut self) {
        self.start = None;
    }

    pub fn poll_at(&self) -> Option<Instant> {
        let s = self.start?;
        let off = u128::from(self.k) * self.spec.period_num / self.spec.period_den.max(1);
        Some(Instant::from_nanos(s.nanos().saturating_add(u64::try_from(off).unwrap_or(u64::MAX))))
    }

    /// If a packet is due at `now`, return its payload and advance.
    pub fn poll(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.poll_at()? > now {
            return None;
        }
        let at = self.poll_at()?;
        let mut p = vec![0u8; self.spec.size.max(MIN_SIZE)];
        p[0..8].copy_from_slice(&self.seq.to_be_bytes());
        p[8..16].copy_from_slice(&at.nanos().to_be_bytes());
        self.seq += 1;
        self.k += 1;
        self.sent_pkts += 1;
        self.sent_bytes += p.len() as u64;
        Some(p)
    }
}

#[derive(Debug, Default)]
pub struct UdpSink {
    pub port: u16,
    pub pkts: u64,
    pub bytes: u64,
    pub lost: u64,
    next_seq: u64,
    owd_sum_ns: u128,
    owd_min_ns: Option<u64>,
    owd_max_ns: u64,
    /// Datagrams too short to carry a sequence number and timestamp (counted in pkts/bytes).
    pub short: u64,
}

impl UdpSink {
    pub fn new(port: u16) -> Self {
        UdpSink { port, ..Default::default() }
    }

    /// A datagram arrived at `now`. Loss = gaps in the sequence numbers (a packet older than
    /// the highest seen is late/reordered and is not counted lost again or un-lost).
    pub fn receive(&mut self, payload: &[u8], now: Instant) {
        self.pkts += 1;
        self.bytes += payload.len() as u64;
        if payload.len() < MIN_SIZE {
            self.short += 1;
            return;
        }
        let seq = u64::from_be_bytes(payload[0..8].try_into().unwrap_or_default());
        let sent = u64::from_be_bytes(payload[8..16].try_into().unwrap_or_default());
        if seq >= self.next_seq {
            self.lost += seq - self.next_seq;
            self.next_seq = seq.saturating_add(1);
        }
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
            lost: self.lost,
            owd_min_us: self.owd_min_ns.map(|n| n as f64 / 1000.0),
            owd_avg_us: (timed > 0).then(|| self.owd_sum_ns as f64 / timed as f64 / 1000.0),
            owd_max_us: (timed > 0).then(|| self.owd_max_ns as f64 / 1000.0),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentStats {
    Cbr { running: bool, sent_pkts: u64, sent_bytes: u64 },
    Sink { port: u16, pkts: u64, bytes: u64, lost: u64, owd_min_us: Option<f64>, owd_avg_us: Option<f64>, owd_max_us: Option<f64> },
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
    TcpSink { port: u16, pkts: u64, bytes: u64, dup_pkts: u64, ooo_pkts: u64 },
}
