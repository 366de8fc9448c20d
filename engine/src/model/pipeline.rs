//! One link direction: queue → rate → delay → loss → duplicate/corrupt.
//!
//! The pipeline is a passive state machine. `enqueue(frame, now)` offers a frame;
//! `poll(now, emit)` delivers every frame due by `now`; `poll_at()` says when the next thing
//! happens (end of a serialization or an arrival). Internal transitions are computed at their
//! exact times whatever the polling granularity: a frame queued behind another starts
//! serializing at the instant the previous one finished, not when we happened to look.
//!
//! Loss, duplication and corruption are decided when a frame leaves the delay stage, so a
//! run-time change of those parameters affects every frame not yet delivered.

use super::delay::Delay;
use super::loss::Loss;
use super::params::LinkParams;
use super::queue::Queue;
use super::rate::Rate;
use crate::rng::Rng;
use crate::stats::Counters;
use crate::time::{min_deadline, Instant};
use crate::wire::ethernet::HEADER_LEN;

#[derive(Debug)]
pub struct Pipeline {
    params: LinkParams,
    queue: Queue,
    rate: Rate,
    delay: Delay,
    loss: Loss,
    rng: Rng,
    up: bool,
    counters: Counters,
}

impl Pipeline {
    pub fn new(params: LinkParams, seed: u64, now: Instant) -> Self {
        let limit = params.queue.effective_limit(params.bandwidth_bps, params.delay_ns);
        Pipeline {
            queue: Queue::new(params.queue, limit, now),
            rate: Rate::default(),
            delay: Delay::default(),
            loss: Loss::new(&params.loss),
            rng: Rng::new(seed),
            up: true,
            counters: Counters::default(),
            params,
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Replace the parameters at `now`. The frame being serialized keeps its bandwidth;
    /// frames in flight keep their arrival times; queued frames are kept.
    pub fn set_params(&mut self, params: LinkParams, now: Instant) {
        self.advance(now);
        let limit = params.queue.effective_limit(params.bandwidth_bps, params.delay_ns);
        self.queue.reconfigure(params.queue, limit);
        if params.loss != self.params.loss {
            self.loss = Loss::new(&params.loss);
        }
        self.params = params;
    }

    /// Offer a frame arriving at `now`.
    pub fn enqueue(&mut self, frame: Vec<u8>, now: Instant) {
        self.counters.in_pkts += 1;
        self.counters.in_bytes += frame.len() as u64;
        if !self.up {
            self.counters.drop_down += 1;
            return;
        }
        self.advance(now);
        let bw = self.params.bandwidth_bps;
        if bw == 0 {
            // Unlimited: no serialization and therefore no queue.
            self.send_to_delay(frame, now);
            return;
        }
        if self.queue.enqueue(frame, now, bw, &mut self.rng).is_err() {
            self.counters.drop_queue += 1;
            return;
        }
        if !self.rate.is_busy() {
            if let Some(f) = self.queue.dequeue() {
                self.queue.mark_busy();
                self.rate.start(f, now, bw);
            }
        }
    }

    /// Count a frame refused before the pipeline (shorter than an Ethernet header).
    pub fn count_malformed(&mut self, len: usize) {
        self.counters.in_pkts += 1;
        self.counters.in_bytes += len as u64;
        self.counters.drop_malformed += 1;
    }

    /// Move finished serializations into the delay stage and start the next ones, each at
    /// its exact time, up to `now`.
    fn advance(&mut self, now: Instant) {
        while let Some(done) = self.rate.finish(now) {
            self.send_to_delay(done.frame, done.done);
            match self.queue.dequeue() {
                Some(next) => {
                    self.queue.mark_busy();
                    self.rate.start(next, done.done, self.params.bandwidth_bps);
                }
                None => self.queue.mark_idle(done.done),
            }
        }
    }

    fn send_to_delay(&mut self, frame: Vec<u8>, sent: Instant) {
        let p = &self.params;
        let at = self.delay.arrival(sent, p.delay_ns, p.jitter_ns, p.jitter_dist, p.jitter_reorder, &mut self.rng);
        self.delay.push(frame, at);
    }

    /// Deliver every frame due by `now` through `emit`.
    pub fn poll(&mut self, now: Instant, mut emit: impl FnMut(Vec<u8>)) {
        self.advance(now);
        while let Some(mut frame) = self.delay.pop_due(now) {
            if self.loss.lose(&mut self.rng) {
                self.counters.drop_loss += 1;
                continue;
            }
            let dup = if self.rng.chance(self.params.duplicate) { Some(frame.clone()) } else { None };
            if frame.len() > HEADER_LEN && self.rng.chance(self.params.corrupt) {
                // Flip one bit past the Ethernet header so the switch still forwards it.
                let idx = HEADER_LEN + self.rng.below((frame.len() - HEADER_LEN) as u64) as usize;
                let bit = self.rng.below(8) as u32;
                frame[idx] ^= 1u8 << bit;
                self.counters.corrupted += 1;
            }
            self.counters.out_pkts += 1;
            self.counters.out_bytes += frame.len() as u64;
            emit(frame);
            if let Some(d) = dup {
                self.counters.duplicated += 1;
                self.counters.out_pkts += 1;
                self.counters.out_bytes += d.len() as u64;
                emit(d);
            }
        }
    }

    /// When this direction next needs `poll`; `None` when idle.
    pub fn poll_at(&self) -> Option<Instant> {
        min_deadline(self.rate.done_at(), self.delay.next_at())
    }

    /// Down drops everything queued, being serialized or in flight, and later arrivals.
    pub fn set_up(&mut self, up: bool, now: Instant) {
        if !up && self.up {
            let mut n = self.queue.drain().count() as u64 + self.delay.drain().count() as u64;
            if self.rate.current.take().is_some() {
                n += 1;
            }
            self.counters.drop_down += n;
            self.queue.mark_idle(now);
        }
        self.up = up;
    }

    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        c.qlen_pkts = self.queue.len_pkts() as u64;
        c.qlen_bytes = self.queue.len_bytes() as u64;
        c.peak_qlen_pkts = self.queue.peak_pkts() as u64;
        c
    }
}
