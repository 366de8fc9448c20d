//! Receive-side report math: loss from sequence gaps, reordering, duplicates,
//! delay statistics (min/avg/max/stdev and percentiles) and throughput.
//!
//! Sequence bookkeeping uses a growable bitmap of seen sequence numbers, so
//! duplicates are exact. A datagram is "reordered" when it arrives after one
//! with a higher sequence number. Lost = expected - unique received, where
//! expected is the sender's total from its FIN datagram if one arrived and
//! otherwise the highest sequence number seen + 1.

/// Sequence numbers above this are treated as garbage (bitmap would be > 128 MiB).
pub const MAX_SEQ: u64 = 1 << 30;

#[derive(Default, Debug, Clone)]
pub struct SeqTracker {
    seen: Vec<u64>,
    pub unique: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub max_seq: Option<u64>,
    pub out_of_range: u64,
    pub fin_total: Option<u64>,
}

impl SeqTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one data datagram.
    pub fn record(&mut self, seq: u64) {
        if seq >= MAX_SEQ {
            self.out_of_range += 1;
            return;
        }
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.seen.len() {
            let n = (w + 1).max(self.seen.len() * 2).max(1024);
            self.seen.resize(n, 0);
        }
        if self.seen[w] & (1 << b) != 0 {
            self.duplicates += 1;
            return;
        }
        self.seen[w] |= 1 << b;
        self.unique += 1;
        match self.max_seq {
            Some(m) if seq < m => self.reordered += 1,
            Some(m) if seq > m => self.max_seq = Some(seq),
            None => self.max_seq = Some(seq),
            _ => {}
        }
    }

    /// Number of datagrams the sender is known to have sent.
    pub fn expected(&self) -> u64 {
        let by_seq = self.max_seq.map(|m| m + 1).unwrap_or(0);
        match self.fin_total {
            Some(t) => t.max(by_seq),
            None => by_seq,
        }
    }

    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.unique)
    }

    pub fn loss_ratio(&self) -> f64 {
        let e = self.expected();
        if e == 0 {
            0.0
        } else {
            self.lost() as f64 / e as f64
        }
    }
}

/// Running delay statistics (Welford) plus a 1 µs-bucket histogram up to
/// `HIST_US` for percentiles; larger values land in an overflow bucket.
#[derive(Debug, Clone)]
pub struct DelayStats {
    pub n: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    mean: f64,
    m2: f64,
    hist: Vec<u32>,
    overflow: u64,
    pub negative: u64,
}

pub const HIST_US: usize = 2_000_000;

impl Default for DelayStats {
    fn default() -> Self {
        Self::new()
    }
}

impl DelayStats {
    pub fn new() -> Self {
        DelayStats {
            n: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            mean: 0.0,
            m2: 0.0,
            hist: Vec::new(),
            overflow: 0,
            negative: 0,
        }
    }

    /// Add one sample given send and receive timestamps.
    pub fn record_pair(&mut self, tx_ns: u64, rx_ns: u64) {
        if rx_ns < tx_ns {
            self.negative += 1;
            return;
        }
        self.record(rx_ns - tx_ns);
    }

    pub fn record(&mut self, d_ns: u64) {
        self.n += 1;
        self.min_ns = self.min_ns.min(d_ns);
        self.max_ns = self.max_ns.max(d_ns);
        let x = d_ns as f64;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
        let us = (d_ns / 1000) as usize;
        if us < HIST_US {
            if self.hist.is_empty() {
                self.hist = vec![0; HIST_US];
            }
            self.hist[us] += 1;
        } else {
            self.overflow += 1;
        }
    }

    pub fn mean_ns(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.mean
        }
    }

    /// Sample standard deviation in ns.
    pub fn stdev_ns(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).sqrt()
        }
    }

    /// Percentile (0..=100) with 1 µs resolution (bucket midpoint); None when
    /// empty or when it falls into the overflow bucket.
    pub fn percentile_ns(&self, p: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut acc = 0u64;
        for (us, &c) in self.hist.iter().enumerate() {
            acc += c as u64;
            if acc >= rank {
                return Some(us as f64 * 1000.0 + 500.0);
            }
        }
        None
    }
}

/// Per-interval byte/packet counters keyed by time since the first packet.
#[derive(Debug, Clone, Default)]
pub struct Intervals {
    pub width_ns: u64,
    pub start_ns: Option<u64>,
    pub pkts: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl Intervals {
    pub fn new(width_ns: u64) -> Self {
        Intervals {
            width_ns,
            ..Default::default()
        }
    }
    pub fn record(&mut self, now_ns: u64, pkts: u64, bytes: u64) {
        if self.width_ns == 0 {
            return;
        }
        let s = *self.start_ns.get_or_insert(now_ns);
        let i = (now_ns.saturating_sub(s) / self.width_ns) as usize;
        if i >= self.pkts.len() {
            self.pkts.resize(i + 1, 0);
            self.bytes.resize(i + 1, 0);
        }
        self.pkts[i] += pkts;
        self.bytes[i] += bytes;
    }
    /// Bits per second of each interval, counting `overhead` extra bytes per packet.
    pub fn bps(&self, overhead: u64) -> Vec<f64> {
        let w = self.width_ns as f64 / 1e9;
        self.pkts
            .iter()
            .zip(&self.bytes)
            .map(|(p, b)| (b + p * overhead) as f64 * 8.0 / w)
            .collect()
    }
}

/// Throughput of a backlogged stream measured between the first and last
/// arrival: the first packet's bytes are excluded because they arrived at
/// the window's start. Returns bits per second, or 0 for < 2 packets.
pub fn first_last_bps(total_bytes: u64, first_pkt_bytes: u64, first_ns: u64, last_ns: u64) -> f64 {
    if last_ns <= first_ns {
        return 0.0;
    }
    (total_bytes - first_pkt_bytes.min(total_bytes)) as f64 * 8.0
        / ((last_ns - first_ns) as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_no_loss() {
        let mut t = SeqTracker::new();
        for s in 0..1000 {
            t.record(s);
        }
        assert_eq!(
            (t.unique, t.lost(), t.reordered, t.duplicates),
            (1000, 0, 0, 0)
        );
    }

    #[test]
    fn gaps_reorder_dups() {
        let mut t = SeqTracker::new();
        for s in [0u64, 1, 3, 2, 5, 5, 7, 6, 9] {
            t.record(s);
        }
        // seen 0,1,2,3,5,6,7,9 -> unique 8, expected 10, lost 4 and 8
        assert_eq!(t.unique, 8);
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.reordered, 2); // 2 after 3, 6 after 7
        assert_eq!(t.lost(), 2);
        t.fin_total = Some(12);
        assert_eq!(t.lost(), 4);
        assert!((t.loss_ratio() - 4.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn fin_smaller_than_seen_is_ignored() {
        let mut t = SeqTracker::new();
        t.record(10);
        t.fin_total = Some(3);
        assert_eq!(t.expected(), 11);
    }

    #[test]
    fn out_of_range() {
        let mut t = SeqTracker::new();
        t.record(MAX_SEQ + 5);
        assert_eq!(t.out_of_range, 1);
        assert_eq!(t.expected(), 0);
        assert_eq!(t.loss_ratio(), 0.0);
    }

    #[test]
    fn delay_moments() {
        let mut d = DelayStats::new();
        for x in [1000u64, 2000, 3000, 4000] {
            d.record(x * 1000);
        }
        assert_eq!(d.min_ns, 1_000_000);
        assert_eq!(d.max_ns, 4_000_000);
        assert!((d.mean_ns() - 2_500_000.0).abs() < 1e-6);
        // sample stdev of 1,2,3,4 ms = 1.2909944 ms
        assert!((d.stdev_ns() - 1_290_994.448_7).abs() < 1.0);
        assert_eq!(d.percentile_ns(50.0), Some(2_000_500.0));
        assert_eq!(d.percentile_ns(100.0), Some(4_000_500.0));
        d.record_pair(10, 5);
        assert_eq!(d.negative, 1);
        assert_eq!(d.n, 4);
    }

    #[test]
    fn intervals_and_rates() {
        let mut iv = Intervals::new(1_000_000_000);
        iv.record(5_000_000_000, 10, 1000);
        iv.record(5_500_000_000, 10, 1000);
        iv.record(6_100_000_000, 5, 500);
        assert_eq!(iv.pkts, vec![20, 5]);
        assert_eq!(iv.bps(0), vec![16000.0, 4000.0]);
        assert_eq!(
            iv.bps(42),
            vec![(2000.0 + 840.0) * 8.0, (500.0 + 210.0) * 8.0]
        );
        // 11 packets of 100 bytes over 1 s: 10 count after the first
        assert_eq!(first_last_bps(1100, 100, 0, 1_000_000_000), 8000.0);
        assert_eq!(first_last_bps(100, 100, 5, 5), 0.0);
    }
}
