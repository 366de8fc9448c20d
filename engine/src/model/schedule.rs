//! Schedules: a direction's delay, bandwidth and loss following a time series.
//!
//! Points are (time since the schedule was set, value) per column; between two points a
//! value holds (`step`) or moves in a straight line (`linear`); before the first point it
//! is the first value, after the last the last one, or (`looped`) the series starts again,
//! shifted by its last time. The pipeline reads each column at the instant it uses it: the
//! bandwidth when a frame starts serializing, the delay when it leaves the serializer, the
//! loss when it leaves the delay stage, so a change takes effect at the series' own time
//! whenever the direction is looked at.

use std::sync::Arc;

use crate::time::Instant;

/// Most points a schedule may hold.
pub const MAX_POINTS: usize = 10_000_000;

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Point times in ns since the schedule was set, non-decreasing.
    pub t_ns: Arc<Vec<u64>>,
    pub delay_ns: Option<Arc<Vec<u64>>>,
    pub bandwidth_bps: Option<Arc<Vec<u64>>>,
    pub loss: Option<Arc<Vec<f64>>>,
    pub linear: bool,
    pub looped: bool,
}

impl Schedule {
    /// Where `since` (ns after the origin) falls: the point at or before it and the
    /// fraction of the way to the next (0 without interpolation).
    fn locate(&self, since: u64) -> (usize, Option<(usize, f64)>) {
        let t = &self.t_ns;
        let n = t.len();
        let period = t[n - 1];
        let x = if self.looped && period > 0 {
            since % period
        } else {
            since
        };
        let i = t.partition_point(|&p| p <= x);
        if i == 0 {
            return (0, None);
        }
        let at = i - 1;
        if !self.linear || i == n || t[i] == t[at] {
            return (at, None);
        }
        let f = (x - t[at]) as f64 / (t[i] - t[at]) as f64;
        (at, Some((i, f)))
    }

    fn value(&self, col: &[f64], since: u64) -> f64 {
        match self.locate(since) {
            (i, None) => col[i],
            (i, Some((j, f))) => col[i] + (col[j] - col[i]) * f,
        }
    }

    fn value_u64(&self, col: &[u64], since: u64) -> u64 {
        match self.locate(since) {
            (i, None) => col[i],
            (i, Some((j, f))) => {
                (col[i] as f64 + (col[j] as f64 - col[i] as f64) * f).round() as u64
            }
        }
    }

    pub fn delay_at(&self, origin: Instant, t: Instant) -> Option<u64> {
        let c = self.delay_ns.as_ref()?;
        Some(self.value_u64(c, t.nanos_since(origin)))
    }

    pub fn bandwidth_at(&self, origin: Instant, t: Instant) -> Option<u64> {
        let c = self.bandwidth_bps.as_ref()?;
        Some(self.value_u64(c, t.nanos_since(origin)))
    }

    pub fn loss_at(&self, origin: Instant, t: Instant) -> Option<f64> {
        let c = self.loss.as_ref()?;
        Some(self.value(c, t.nanos_since(origin)))
    }

    /// The smallest delay it ever gives (a partition boundary's lookahead).
    pub fn min_delay_ns(&self) -> Option<u64> {
        self.delay_ns
            .as_ref()
            .map(|c| c.iter().copied().min().unwrap_or(0))
    }

    /// The largest bandwidth it ever gives (the queue's automatic limit).
    pub fn max_bandwidth_bps(&self) -> Option<u64> {
        self.bandwidth_bps
            .as_ref()
            .map(|c| c.iter().copied().max().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(linear: bool, looped: bool) -> Schedule {
        Schedule {
            t_ns: Arc::new(vec![0, 1_000, 3_000]),
            delay_ns: Some(Arc::new(vec![10, 20, 40])),
            bandwidth_bps: None,
            loss: Some(Arc::new(vec![0.0, 0.5, 1.0])),
            linear,
            looped,
        }
    }

    #[test]
    fn step_linear_and_loop() {
        let o = Instant::from_nanos(100);
        let at = |s: &Schedule, t: u64| s.delay_at(o, Instant::from_nanos(100 + t));
        let step = sched(false, false);
        assert_eq!(
            [0, 999, 1_000, 2_999, 3_000, 9_000].map(|t| at(&step, t)),
            [10, 10, 20, 20, 40, 40].map(Some)
        );
        let lin = sched(true, false);
        assert_eq!(
            [0, 500, 1_000, 2_000, 5_000].map(|t| at(&lin, t)),
            [10, 15, 20, 30, 40].map(Some)
        );
        assert_eq!(lin.loss_at(o, Instant::from_nanos(2_100)), Some(0.75));
        // looped: period 3000 ns
        let lp = sched(false, true);
        assert_eq!(at(&lp, 3_500), Some(10));
        assert_eq!(at(&lp, 4_200), Some(20));
        assert_eq!(lp.bandwidth_at(o, o), None);
        assert_eq!(
            (lp.min_delay_ns(), lp.max_bandwidth_bps()),
            (Some(10), None)
        );
    }
}
