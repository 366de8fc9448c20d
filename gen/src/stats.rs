//! Receive-side report math: delay statistics (min/avg/max/stdev and percentiles) and
//! throughput. Loss, reordering and duplicates are counted by [`SeqTracker`] from the
//! `wanlab-flowstats` crate, the one definition the engine's simulated sinks use too
//! (reordered is not lost: lost = expected − distinct received).

pub use flowstats::SeqTracker;

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
