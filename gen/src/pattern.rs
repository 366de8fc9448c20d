//! Random departure times: ns-2's Poisson source and its on/off sources
//! (`Application/Traffic/Exponential`, `Application/Traffic/Pareto`).
//!
//! The same rules as the engine's simulated agents (docs/engine-protocol.md,
//! AGENT `poisson` and `onoff`): a Poisson source leaves exponential gaps of
//! mean `period`; an on/off source sends bursts of `max(1, int(X + 0.5))`
//! packets one `period` apart, X of mean `burst / period`, separated by idle
//! times of mean `idle` (the gap before a burst's first packet is one period
//! plus the idle time). Pareto draws are `scale / u^(1/shape)` with
//! `scale = mean · (shape − 1) / shape`. Deadlines are absolute (start + a
//! real-valued offset rounded per packet), so rounding never accumulates, and
//! kept only for packets not yet sent.

use std::collections::VecDeque;

/// The distribution of burst lengths and idle times of an on/off source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    Exponential,
    Pareto { shape: f64 },
}

/// Which random process the departures follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    Poisson,
    OnOff {
        burst_ns: f64,
        idle_ns: f64,
        dist: Dist,
    },
}

/// splitmix64: small, seedable, good enough for departure times.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    fn draw(&mut self, mean: f64, dist: Dist) -> f64 {
        let u = self.unit();
        match dist {
            Dist::Exponential => -mean * u.ln(),
            Dist::Pareto { shape } => mean * (shape - 1.0) / shape / u.powf(1.0 / shape),
        }
    }
}

/// Deadlines of a random source started at `start` (ns).
#[derive(Clone, Debug)]
pub struct RandomPacer {
    start: u64,
    period_ns: f64,
    pattern: Pattern,
    rng: Rng,
    offset_ns: f64,
    burst_left: u64,
    /// index of `times[0]`
    lo: u64,
    times: VecDeque<u64>,
}

impl RandomPacer {
    /// `pps_num / pps_den` packets per second is the mean rate (Poisson) or the
    /// rate during bursts (on/off); `seed` makes the departures reproducible.
    pub fn new(start: u64, pps_num: u128, pps_den: u128, pattern: Pattern, seed: u64) -> Self {
        let period_ns = 1e9 * pps_den.max(1) as f64 / pps_num.max(1) as f64;
        RandomPacer {
            start,
            period_ns,
            pattern,
            rng: Rng(seed),
            offset_ns: 0.0,
            burst_left: 0,
            lo: 0,
            times: VecDeque::new(),
        }
    }

    fn generate(&mut self) {
        let gap = match self.pattern {
            Pattern::Poisson => self.rng.draw(self.period_ns, Dist::Exponential),
            Pattern::OnOff {
                burst_ns,
                idle_ns,
                dist,
            } => {
                if self.burst_left == 0 {
                    let x = self.rng.draw(burst_ns / self.period_ns, dist);
                    self.burst_left = ((x + 0.5) as u64).max(1);
                    self.period_ns + self.rng.draw(idle_ns, dist)
                } else {
                    self.period_ns
                }
            }
        };
        self.burst_left = self.burst_left.saturating_sub(1);
        self.offset_ns += gap;
        let t = self.start as f64 + self.offset_ns;
        self.times.push_back(t.min(u64::MAX as f64) as u64);
    }

    /// Absolute deadline of packet `i` (not below the last index forgotten).
    pub fn deadline(&mut self, i: u64) -> u64 {
        while self.lo + (self.times.len() as u64) <= i {
            self.generate();
        }
        self.times[(i.max(self.lo) - self.lo) as usize]
    }

    /// Number of packets due at `now` (the index of the first packet not yet due).
    pub fn due_count(&mut self, now: u64) -> u64 {
        let mut i = self.lo;
        loop {
            if self.deadline(i) > now {
                return i;
            }
            i += 1;
        }
    }

    /// Packets below `i` are sent: their deadlines are no longer needed.
    pub fn forget_below(&mut self, i: u64) {
        while self.lo < i && !self.times.is_empty() {
            self.times.pop_front();
            self.lo += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_rate(p: Pattern, secs: u64) -> f64 {
        // 1000 pps during bursts / on average
        let mut r = RandomPacer::new(0, 1000, 1, p, 7);
        let n = r.due_count(secs * 1_000_000_000);
        n as f64 / secs as f64
    }

    #[test]
    fn poisson_keeps_its_mean_rate_and_is_increasing() {
        let rate = mean_rate(Pattern::Poisson, 200);
        assert!((rate - 1000.0).abs() < 20.0, "{rate}");
        let mut r = RandomPacer::new(5, 1000, 1, Pattern::Poisson, 1);
        let mut last = 0;
        for i in 0..1000 {
            let d = r.deadline(i);
            assert!(d >= last && d > 5);
            last = d;
            r.forget_below(i);
        }
    }

    #[test]
    fn exponential_on_off_sends_its_duty_cycle() {
        // on 400 ms, off 600 ms: 40 % of the burst rate
        let p = Pattern::OnOff {
            burst_ns: 400e6,
            idle_ns: 600e6,
            dist: Dist::Exponential,
        };
        let rate = mean_rate(p, 400);
        assert!((rate - 400.0).abs() < 400.0 * 0.05, "{rate}");
    }

    #[test]
    fn pareto_on_off_is_on_off_and_seeded() {
        let p = Pattern::OnOff {
            burst_ns: 400e6,
            idle_ns: 600e6,
            dist: Dist::Pareto { shape: 1.5 },
        };
        let a: Vec<u64> = {
            let mut r = RandomPacer::new(0, 1000, 1, p, 3);
            (0..3000).map(|i| r.deadline(i)).collect()
        };
        let mut r = RandomPacer::new(0, 1000, 1, p, 3);
        assert_eq!(a, (0..3000).map(|i| r.deadline(i)).collect::<Vec<_>>());
        // gaps are either one period (in a burst) or longer (an idle time before a burst)
        assert!(a.windows(2).all(|w| w[1] - w[0] >= 999_999));
        assert!(a.windows(2).any(|w| w[1] - w[0] > 2_000_000));
        let rate = mean_rate(p, 400);
        assert!(rate > 100.0 && rate < 1000.0, "{rate}");
    }
}
