//! Per-direction counters, serialized as-is in `stats` replies (field names are protocol).

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Frames offered to the direction (including those then dropped).
    pub in_pkts: u64,
    pub in_bytes: u64,
    /// Frames delivered by the direction (duplicates included).
    pub out_pkts: u64,
    pub out_bytes: u64,
    /// Refused by the queue (tail drop or RED).
    pub drop_queue: u64,
    /// Dropped by the loss model.
    pub drop_loss: u64,
    /// Dropped because the link (or LAN member) was down.
    pub drop_down: u64,
    /// Frames shorter than an Ethernet header, dropped on arrival from the TAP.
    pub drop_malformed: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames that skipped the delay (reorder).
    pub reordered: u64,
    /// Frames/bytes waiting in the queue now (not counting the one being serialized).
    pub qlen_pkts: u64,
    pub qlen_bytes: u64,
    pub peak_qlen_pkts: u64,
}

/// A distribution of durations in log-scale buckets: below 1 µs one bucket, then four buckets
/// per doubling (each ≤ 19 % wide), grown on demand, so an idle direction costs nothing and a
/// recording is one increment. Quantiles are reported as the upper bound of their bucket
/// (never above the largest sample), so they err high by at most one bucket; one below 1 µs
/// is reported as 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    max_ns: u64,
    sum_ns: u128,
}

/// Sub-buckets per doubling.
const SUB: u64 = 4;

impl Histogram {
    pub fn new() -> Self {
        Self::default()
    }

    fn index(ns: u64) -> usize {
        let us = ns / 1000;
        if us == 0 {
            return 0;
        }
        let k = 63 - us.leading_zeros(); // floor(log2(ns / 1 µs))
        let base = 1000u128 << k; // bucket group [base, 2·base)
        let sub = (ns as u128 - base) * SUB as u128 / base;
        1 + (k as u64 * SUB) as usize + sub as usize
    }

    /// Upper bound (exclusive) of bucket `i`, in ns.
    fn upper_ns(i: usize) -> u64 {
        if i == 0 {
            return 1000;
        }
        let i = i as u64 - 1;
        let (k, sub) = (i / SUB, i % SUB);
        let base = 1000u128 << k;
        (base + base * (sub as u128 + 1) / SUB as u128).min(u64::MAX as u128) as u64
    }

    pub fn record(&mut self, ns: u64) {
        let i = Self::index(ns);
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.n += 1;
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += ns as u128;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Add `other`'s samples (the partitions of a threaded engine each keep their own).
    pub fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// The `q` quantile (0..=1) in ns: the upper bound of the bucket holding it, at most the
    /// largest sample; 0 when empty or below 1 µs.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // Below 1 µs is "no wait": 0, not the bucket's bound.
                return if i == 0 {
                    0
                } else {
                    Self::upper_ns(i).min(self.max_ns)
                };
            }
        }
        self.max_ns
    }

    /// The summary carried in `stats` replies (see docs/engine-protocol.md).
    pub fn summary(&self) -> HistogramSummary {
        let us = |ns: u64| ns as f64 / 1000.0;
        HistogramSummary {
            count: self.n,
            mean_us: if self.n == 0 {
                0.0
            } else {
                (self.sum_ns / self.n as u128) as f64 / 1000.0
            },
            p50_us: us(self.quantile_ns(0.5)),
            p90_us: us(self.quantile_ns(0.9)),
            p99_us: us(self.quantile_ns(0.99)),
            max_us: us(self.max_ns),
            buckets: self
                .counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (us(Self::upper_ns(i)), *c))
                .collect(),
        }
    }
}

/// A [`Histogram`] as the protocol carries it: quantiles in µs and the non-empty buckets as
/// `[upper bound µs, count]` pairs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HistogramSummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub buckets: Vec<(f64, u64)>,
}

/// How far the frames a real-time engine wrote to its ports went out from their scheduled
/// departure, by its own clock: each frame's lateness is the clock read right after its
/// write minus the model time it left the network. That is what the engine controls (its
/// wake-up, its turn, the write itself); what the receiving node's scheduling adds comes
/// after. A frame that went out early (a deadline coalesced into an earlier wake-up, at most
/// `--coalesce-us` ahead) counts as 0 in the histogram and in `early`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Departures {
    pub late: Histogram,
    pub early: u64,
    pub max_early_ns: u64,
}

/// [`Departures`] as the protocol carries it: the lateness histogram's summary and the early
/// frames.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeparturesSummary {
    #[serde(flatten)]
    pub late: HistogramSummary,
    pub early: u64,
    pub max_early_us: f64,
}

impl Departures {
    /// A frame due at `due_ns` whose write ended at `done_ns` (same clock).
    pub fn record(&mut self, due_ns: u64, done_ns: u64) {
        if done_ns < due_ns {
            self.early += 1;
            self.max_early_ns = self.max_early_ns.max(due_ns - done_ns);
        }
        self.late.record(done_ns.saturating_sub(due_ns));
    }

    /// Add `other`'s frames (each partition of a threaded engine keeps its own).
    pub fn merge(&mut self, other: &Departures) {
        self.late.merge(&other.late);
        self.early += other.early;
        self.max_early_ns = self.max_early_ns.max(other.max_early_ns);
    }

    pub fn summary(&self) -> DeparturesSummary {
        DeparturesSummary {
            late: self.late.summary(),
            early: self.early,
            max_early_us: self.max_early_ns as f64 / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_scale_and_contain_their_samples() {
        // Every value falls below its bucket's upper bound and at or above the previous one.
        for ns in [
            0u64,
            999,
            1000,
            1249,
            1250,
            1999,
            2000,
            3000,
            10_000,
            123_456_789,
            u64::MAX,
        ] {
            let i = Histogram::index(ns);
            assert!(
                ns < Histogram::upper_ns(i) || Histogram::upper_ns(i) == u64::MAX,
                "{ns}"
            );
            if i > 0 {
                assert!(ns >= Histogram::upper_ns(i - 1), "{ns}");
            }
        }
        // Four buckets per doubling: 1, 1.25, 1.5, 1.75, 2 µs boundaries.
        let ups: Vec<u64> = (0..6).map(Histogram::upper_ns).collect();
        assert_eq!(ups, vec![1000, 1250, 1500, 1750, 2000, 2500]);
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Histogram::new();
        assert_eq!(h.quantile_ns(0.99), 0);
        // 90 samples at 0 (an idle queue), 9 at 100 µs, 1 at 10 ms.
        for _ in 0..90 {
            h.record(0);
        }
        for _ in 0..9 {
            h.record(100_000);
        }
        h.record(10_000_000);
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile_ns(0.5), 0);
        assert_eq!(h.quantile_ns(0.9), 0);
        // p99 is in the 100 µs bucket: reported as its upper bound, within 25 %.
        let p99 = h.quantile_ns(0.99);
        assert!((100_000..=125_000).contains(&p99), "{p99}");
        assert_eq!(h.quantile_ns(1.0), 10_000_000);
        let s = h.summary();
        assert_eq!(s.max_us, 10_000.0);
        assert_eq!(s.buckets.iter().map(|b| b.1).sum::<u64>(), 100);
        assert_eq!(s.buckets[0], (1.0, 90));
        assert!((s.mean_us - 109.0).abs() < 1e-9);
        // All-idle: every quantile is 0.
        let mut idle = Histogram::new();
        for _ in 0..1000 {
            idle.record(0);
        }
        assert_eq!(idle.summary().p99_us, 0.0);
    }

    #[test]
    fn departures_count_late_and_early_frames_against_their_due_time() {
        let mut d = Departures::default();
        d.record(1_000_000, 1_003_000); // 3 µs late
        d.record(2_000_000, 2_000_000); // on time
        d.record(3_000_000, 2_990_000); // 10 µs early (a coalesced deadline)
        d.record(4_000_000, 4_250_000); // 250 µs late
        assert_eq!(d.late.count(), 4);
        assert_eq!((d.early, d.max_early_ns), (1, 10_000));
        assert_eq!(d.late.max_ns(), 250_000);
        let s = d.summary();
        assert_eq!(s.late.count, 4);
        // two of four under 1 µs (on time, early): the median is 0
        assert_eq!(
            (s.late.p50_us, s.late.p99_us, s.late.max_us),
            (0.0, 250.0, 250.0)
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["count"], 4);
        assert_eq!(v["early"], 1);
        assert_eq!(v["max_early_us"], 10.0);
        let mut m = Departures::default();
        m.record(0, 500_000);
        m.merge(&d);
        assert_eq!((m.late.count(), m.early, m.late.max_ns()), (5, 1, 500_000));
    }
}
