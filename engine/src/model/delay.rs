//! The delay stage: propagation delay plus optional jitter.
//!
//! A frame that finishes serialization at `t` arrives at `t + delay + jitter`, where jitter is
//! uniform in ±`jitter`, or normal, Pareto or Pareto-normal with standard deviation
//! `jitter` (mean 0), and never before `t`. With a correlation `c`, a draw repeats the
//! previous one with probability `c` (the distribution is kept; consecutive delays agree).
//! Unless `jitter_reorder` is set, arrival = max(sample, previous arrival): frames keep their
//! order. The same rule makes a run-time *decrease* of the delay safe: frames already in
//! flight are not overtaken. Frames are held in a heap keyed by (arrival, sequence) so the
//! reordering case needs no special structure and ties leave in sending order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::packet::Packet;
use super::params::{JitterDist, LinkParams, PARETO_SHAPE};
use crate::rng::Rng;
use crate::time::Instant;

#[derive(Debug)]
struct InFlight {
    at: Instant,
    seq: u64,
    frame: Packet,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Debug, Default)]
pub struct Delay {
    heap: BinaryHeap<Reverse<InFlight>>,
    last_arrival: Instant,
    seq: u64,
    /// The previous jitter draw, in standard deviations (for correlated draws).
    last_draw: Option<f64>,
}

/// One standardised jitter draw: mean 0; uniform in [-1, 1), the others of variance 1.
pub fn jitter_draw(dist: JitterDist, rng: &mut Rng) -> f64 {
    match dist {
        JitterDist::Uniform => rng.next_f64() * 2.0 - 1.0,
        JitterDist::Normal => rng.normal(),
        JitterDist::Pareto => pareto(rng),
        JitterDist::ParetoNormal => (0.75 * pareto(rng) + 0.25 * rng.normal()) / PN_SD,
    }
}

/// Standard deviation of 3/4 Pareto + 1/4 normal, both standardised: sqrt(9/16 + 1/16).
const PN_SD: f64 = 0.790_569_415_042_094_8;

/// Pareto (shape 3, scale 1) standardised: (X - 1.5) / sqrt(3/4).
fn pareto(rng: &mut Rng) -> f64 {
    let u = 1.0 - rng.next_f64(); // (0, 1]
    let x = u.powf(-1.0 / PARETO_SHAPE);
    (x - 1.5) / 0.866_025_403_784_438_6
}

impl Delay {
    /// Arrival time for a frame leaving serialization at `sent`, `delay_ns` later with
    /// `p`'s jitter.
    pub fn arrival(
        &mut self,
        sent: Instant,
        delay_ns: u64,
        p: &LinkParams,
        rng: &mut Rng,
    ) -> Instant {
        let (jitter_ns, dist, corr, reorder) =
            (p.jitter_ns, p.jitter_dist, p.jitter_corr, p.jitter_reorder);
        let base = sent.add_nanos(delay_ns);
        let sample = if jitter_ns == 0 {
            base
        } else {
            let j = jitter_ns as f64;
            let draw = match self.last_draw {
                Some(d) if corr > 0.0 && rng.chance(corr) => d,
                _ => jitter_draw(dist, rng),
            };
            self.last_draw = Some(draw);
            let off = draw * j;
            // Never before the frame was sent; f64 → i128 saturates, no panic.
            let t = (base.nanos() as i128 + off.round() as i128)
                .clamp(sent.nanos() as i128, u64::MAX as i128);
            Instant(t as u64)
        };
        if reorder {
            sample
        } else {
            sample.max(self.last_arrival)
        }
    }

    pub fn push(&mut self, frame: Packet, at: Instant) {
        self.last_arrival = self.last_arrival.max(at);
        self.seq += 1;
        self.heap.push(Reverse(InFlight {
            at,
            seq: self.seq,
            frame,
        }));
    }

    /// Let a frame due at `due` leave at `leave` (earlier: a stamped direction's frames
    /// leave once serialized, `wire/stamp`); later frames still keep `due`'s order.
    pub fn push_early(&mut self, frame: Packet, leave: Instant, due: Instant) {
        self.push(frame, leave);
        self.last_arrival = self.last_arrival.max(due);
    }

    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|r| r.0.at)
    }

    /// Next frame that has arrived by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Packet> {
        if self.next_at()? <= now {
            self.heap.pop().map(|r| r.0.frame)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Take every frame with its arrival time, in (arrival, sending) order.
    pub fn take_ordered(&mut self) -> Vec<(Instant, Packet)> {
        let mut v: Vec<InFlight> = self.heap.drain().map(|r| r.0).collect();
        v.sort_unstable_by_key(|f| (f.at, f.seq));
        v.into_iter().map(|f| (f.at, f.frame)).collect()
    }

    pub fn drain(&mut self) -> impl Iterator<Item = Packet> + '_ {
        self.heap.drain().map(|r| r.0.frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every distribution has mean 0 and (but uniform) standard deviation 1; Pareto never
    /// falls below its bound and has the longer upper tail.
    #[test]
    fn standardised_draws() {
        for dist in [
            JitterDist::Normal,
            JitterDist::Pareto,
            JitterDist::ParetoNormal,
            JitterDist::Uniform,
        ] {
            let mut rng = Rng::new(4);
            let n = 400_000;
            let xs: Vec<f64> = (0..n).map(|_| jitter_draw(dist, &mut rng)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
            let want = if dist == JitterDist::Uniform {
                1.0 / 3.0
            } else {
                1.0
            };
            assert!(mean.abs() < 0.02, "{dist:?} mean {mean}");
            // Pareto of shape 3 has no fourth moment: its sample variance converges slowly
            assert!((var - want).abs() < 0.15 * want, "{dist:?} var {var}");
            if let Some(k) = dist.min_offset() {
                assert!(xs.iter().all(|x| *x >= -k - 1e-9), "{dist:?}");
            }
        }
        let mut rng = Rng::new(4);
        let p99 = {
            let mut v: Vec<f64> = (0..100_000)
                .map(|_| jitter_draw(JitterDist::Pareto, &mut rng))
                .collect();
            v.sort_by(f64::total_cmp);
            v[99_000]
        };
        assert!(p99 > 3.0, "pareto p99 {p99}"); // a normal's is 2.33
    }

    #[test]
    fn correlated_jitter_repeats_draws() {
        let mut d = Delay::default();
        let mut rng = Rng::new(2);
        let lp = LinkParams {
            delay_ns: 50_000_000,
            jitter_ns: 5_000_000,
            jitter_dist: JitterDist::Normal,
            jitter_corr: 0.75,
            jitter_reorder: true,
            ..Default::default()
        };
        let t: Vec<i64> = (0..20_000)
            .map(|k| {
                let sent = Instant::from_millis(k * 100);
                let at = d.arrival(sent, lp.delay_ns, &lp, &mut rng);
                at.nanos() as i64 - sent.nanos() as i64
            })
            .collect();
        let same = t.windows(2).filter(|w| w[0] == w[1]).count() as f64 / t.len() as f64;
        assert!((same - 0.75).abs() < 0.03, "{same}");
    }
}
