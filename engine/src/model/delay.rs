//! The delay stage: propagation delay plus optional jitter.
//!
//! A frame that finishes serialization at `t` arrives at `t + delay + jitter`, where jitter is
//! uniform in ±`jitter` or normal with standard deviation `jitter`, and never before `t`.
//! Unless `jitter_reorder` is set, arrival = max(sample, previous arrival): frames keep their
//! order. The same rule makes a run-time *decrease* of the delay safe: frames already in
//! flight are not overtaken. Frames are held in a heap keyed by (arrival, sequence) so the
//! reordering case needs no special structure and ties leave in sending order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::packet::Packet;
use super::params::JitterDist;
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
}

impl Delay {
    /// Arrival time for a frame leaving serialization at `sent`.
    pub fn arrival(
        &mut self,
        sent: Instant,
        delay_ns: u64,
        jitter_ns: u64,
        dist: JitterDist,
        reorder: bool,
        rng: &mut Rng,
    ) -> Instant {
        let base = sent.add_nanos(delay_ns);
        let sample = if jitter_ns == 0 {
            base
        } else {
            let j = jitter_ns as f64;
            let off = match dist {
                JitterDist::Uniform => (rng.next_f64() * 2.0 - 1.0) * j,
                JitterDist::Normal => rng.normal() * j,
            };
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
