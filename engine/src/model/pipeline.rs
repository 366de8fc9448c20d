//! One link direction: queue → rate → delay (or, reordered, none) → loss → duplicate/corrupt.
//!
//! The pipeline is a passive state machine. `enqueue(frame, now)` offers a frame;
//! `poll(now, emit)` delivers every frame due by `now`; `poll_at()` says when the next thing
//! happens (end of a serialization or an arrival). Internal transitions are computed at their
//! exact times whatever the polling granularity: a frame queued behind another starts
//! serializing at the instant the previous one finished, not when we happened to look.
//!
//! Loss, duplication and corruption are decided when a frame leaves the delay stage, so a
//! run-time change of those parameters affects every frame not yet delivered.
//!
//! The direction has two halves with their own deadlines and random streams: the sending
//! half (queue and serializer; RED and jitter draws) and the receiving half (frames in flight
//! leaving the delay stage; loss, duplication and corruption draws). The parallel simulation
//! runs the halves of a link between two partitions on different threads and moves frames in
//! flight from one to the other ([`Pipeline::take_in_flight`], [`Pipeline::put_in_flight`]);
//! one random stream per half keeps every draw independent of that split.
//!
//! A TCP super-frame (TSO/GSO, up to 64 KB) crosses an unlimited direction whole. On a shaped
//! direction it is cut into its wire frames, so that the queue, the serializer and loss see
//! exactly those, except where the cut buys nothing: when nothing acts per wire frame (no
//! loss, duplication, corruption, RED or tunnel), every wire frame fits in the drop-tail
//! queue, and the direction is fast enough that the largest super-frame's serialization
//! takes at most [`WHOLE_NS`] (8.5 Gbit/s and more), the super-frame
//! is one queue entry counted as its wire frames, serialized for their bytes, and delivered
//! whole when its last wire frame would arrive: its first frames arrive up to [`WHOLE_NS`]
//! late, together (as a NIC's interrupt coalescing hands them over), and the receiving
//! kernel takes them in one write instead of one per frame. Without it a fast shaped link
//! carried TCP at the engine's per-frame ceiling (1.9 Gbit/s on a 100 Gbit/s link here).

use std::borrow::Cow;
use std::sync::Arc;

use super::delay::Delay;
use super::loss::Loss;
use super::packet::Packet;
#[cfg(test)]
use super::params::QueueParams;
use super::params::{LinkParams, LossParams};
use super::queue::Queue;
use super::rate::{serialization_ns, Rate};
use super::schedule::Schedule;
use super::trace::{Cursor, Trace};
use crate::rng::Rng;
use crate::stats::{Counters, Histogram};
use crate::time::{min_deadline, Instant};
use crate::wire::ethernet::HEADER_LEN;
use crate::wire::{gso, stamp};

/// Longest serialization of a super-frame that crosses a shaped direction whole; see the
/// module docs.
pub const WHOLE_NS: u64 = 64_000;
/// Wire bytes of the largest super-frame (64 KiB of TCP payload cut into 1448-byte segments,
/// 54 bytes of headers each). A direction passes super-frames whole only if even this one
/// takes at most [`WHOLE_NS`] (8.5 Gbit/s and more): on a slower one some would cross whole
/// and others cut, and that mix measured slower than cutting them all.
pub const LARGEST_SUPER_FRAME: usize = 65_536 + 46 * 54;

/// A direction's moving state on its way between replicas ([`Pipeline::hand_over`]).
#[derive(Debug)]
pub struct Handover {
    queue: Queue,
    rate: Rate,
    rng: Rng,
    rx: Option<(Delay, Loss, Rng)>,
}

#[derive(Debug)]
pub struct Pipeline {
    params: LinkParams,
    queue: Queue,
    rate: Rate,
    delay: Delay,
    loss: Loss,
    /// Draws of the sending half (RED, jitter).
    rng: Rng,
    /// Draws of the receiving half (loss, duplication, corruption).
    rng_rx: Rng,
    up: bool,
    counters: Counters,
    /// Queueing delay of each frame: arrival to start of serialization (0 on an unlimited
    /// direction, which has no queue).
    sojourn: Histogram,
    /// The direction feeds a tunnel to another engine (`wire/stamp`): a frame leaves as soon
    /// as it is serialized, carrying the instant it is due at the far end, where that engine
    /// holds it until then.
    stamped: bool,
    /// While a frame from a tunnel is offered: the instant it is due (it leaves no earlier).
    hold: Option<Instant>,
    /// A capture is on (no super-frame crosses a shaped direction whole then).
    captured: bool,
    /// Serializations finished here: model events whether or not a timer marked them
    /// ([`Pipeline::one_timer`]).
    serialized: u64,
    /// Frames delayed since the last reordered one (netem's reorder gap counter).
    since_reorder: u64,
    /// When the schedule in force was set (its time 0).
    sched_origin: Instant,
}

impl Pipeline {
    pub fn new(params: LinkParams, seed: u64, now: Instant) -> Self {
        let limit = params.limit();
        Pipeline {
            queue: Queue::new(params.queue, limit, now),
            rate: Rate {
                origin: now,
                ..Rate::default()
            },
            delay: Delay::default(),
            loss: Loss::new(&params.loss),
            rng: Rng::new(seed),
            rng_rx: Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15),
            up: true,
            counters: Counters::default(),
            sojourn: Histogram::new(),
            stamped: false,
            hold: None,
            captured: false,
            serialized: 0,
            since_reorder: 0,
            sched_origin: now,
            params,
        }
    }

    /// Make this direction feed a tunnel to another engine (see the field `stamped`).
    /// A capture records this direction's frames: super-frames are cut into wire frames so
    /// that each is captured at its own time.
    pub fn set_captured(&mut self, on: bool) {
        self.captured = on;
    }

    pub fn set_stamped(&mut self, on: bool) {
        self.stamped = on;
    }

    pub fn is_stamped(&self) -> bool {
        self.stamped
    }

    /// Offer a packet arriving at `now` that is due no earlier than `until` (a frame from a
    /// tunnel: the due time its sending engine stamped). Only an unlimited direction, whose
    /// frames go straight to the delay stage, holds it (the receiving end of a cut link is
    /// one).
    pub fn enqueue_held(&mut self, pkt: Packet, now: Instant, until: Option<Instant>) {
        self.hold = until;
        self.enqueue_packet(pkt, now);
        self.hold = None;
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
        let limit = params.limit();
        self.queue.reconfigure(params.queue, limit);
        // A trace or schedule a request carries starts now, even one equal to the one in
        // force (tevc restarting it); one merged in from before is the same allocation.
        if !same_schedule(&params.schedule, &self.params.schedule) {
            self.sched_origin = now; // a new schedule starts now
        }
        if !same_trace(&params.trace, &self.params.trace) {
            // a new trace starts now, from its offset
            self.rate.origin = now;
            self.rate.cursor = Default::default();
        }
        if params.loss != self.params.loss {
            self.loss = Loss::new(&params.loss);
        }
        self.params = params;
    }

    /// Something in this direction acts on individual wire frames other than the queue and
    /// serializer: loss, duplication or corruption.
    fn per_packet(&self) -> bool {
        self.params.loss != LossParams::None
            || self.params.duplicate > 0.0
            || self.params.corrupt > 0.0
            || self.params.reorder > 0.0
            || !self.params.framing.is_plain()
            || self.params.trace.is_some()
            || self.params.schedule.is_some()
    }

    /// When a frame starting at `start` leaves the serializer, taking a trace's bytes from
    /// `cur` (a direction whose unlooped trace has ended never sends it).
    fn done_of(&self, cur: &mut Cursor, start: Instant, pkt: &Packet) -> Instant {
        match &self.params.trace {
            None => {
                let (n, b) = pkt.wire_size();
                start.add_nanos(self.ser_ns_at(self.bandwidth_at(start), n, b))
            }
            Some(t) => {
                let (n, b) = pkt.wire_size();
                let f = &self.params.framing;
                let bytes = if f.is_plain() {
                    b
                } else {
                    f.wire_len(b) * n.max(1)
                };
                t.serialize(cur, self.rate.origin, start, bytes)
                    .unwrap_or(Instant(u64::MAX))
            }
        }
    }

    /// Start serializing `pkt` at `at`.
    fn start(&mut self, pkt: Packet, at: Instant) {
        let mut cur = self.rate.cursor;
        let done = self.done_of(&mut cur, at, &pkt);
        self.rate.cursor = cur;
        self.rate.start(pkt, at, done.nanos_since(at));
    }

    /// Serialization time of `pkts` wire frames of `bytes` in all, framing counted.
    fn ser_ns(&self, pkts: u64, bytes: u64) -> u64 {
        self.ser_ns_at(self.params.bandwidth_bps, pkts, bytes)
    }

    /// The bandwidth at `t` (a schedule's, else the direction's).
    fn bandwidth_at(&self, t: Instant) -> u64 {
        self.params
            .schedule
            .as_ref()
            .and_then(|s| s.bandwidth_at(self.sched_origin, t))
            .unwrap_or(self.params.bandwidth_bps)
    }

    /// The propagation delay at `t` (a schedule's, else the direction's).
    fn delay_at(&self, t: Instant) -> u64 {
        self.params
            .schedule
            .as_ref()
            .and_then(|s| s.delay_at(self.sched_origin, t))
            .unwrap_or(self.params.delay_ns)
    }

    /// [`Pipeline::ser_ns`] at bandwidth `bw`.
    fn ser_ns_at(&self, bw: u64, pkts: u64, bytes: u64) -> u64 {
        let f = &self.params.framing;
        let b = if f.is_plain() {
            bytes
        } else {
            let n = pkts.max(1);
            f.wire_len(bytes / n) * n
        };
        serialization_ns(b as usize, bw)
    }

    /// Whether an offloaded packet (super-frame or partial checksum) may cross this direction
    /// whole: only when nothing here acts per wire frame (unlimited bandwidth, no
    /// loss/dup/corrupt). Otherwise it is segmented on arrival.
    pub fn passes_whole(&self) -> bool {
        self.params.unlimited() && !self.per_packet() && !self.stamped
    }

    /// Offer a plain wire frame arriving at `now`.
    pub fn enqueue(&mut self, frame: Vec<u8>, now: Instant) {
        self.enqueue_packet(Packet::plain(frame), now);
    }

    /// Whether the super-frame `pkt` may cross this shaped direction whole now (module docs).
    fn takes_whole(&self, pkt: &Packet) -> bool {
        let bw = self.params.bandwidth_bps;
        if self.params.unlimited()
            || self.per_packet()
            || self.stamped
            || self.captured
            || !gso::is_super_frame(&pkt.vnet, &pkt.data)
        {
            return false;
        }
        let (pkts, bytes) = pkt.wire_size();
        serialization_ns(LARGEST_SUPER_FRAME, bw) <= WHOLE_NS && self.queue.fits(pkts, bytes)
    }

    /// Offer a packet arriving at `now`. An offloaded packet is segmented into wire frames
    /// first unless [`Pipeline::passes_whole`] or it may cross whole (module docs); a
    /// malformed one is counted as `drop_malformed`.
    pub fn enqueue_packet(&mut self, pkt: Packet, now: Instant) {
        if pkt.vnet.is_offloaded() && !self.passes_whole() && !self.takes_whole(&pkt) {
            let len = pkt.len();
            match pkt.into_wire() {
                Ok(frames) => {
                    for f in frames {
                        self.enqueue_packet(Packet::plain(f), now);
                    }
                }
                Err(_) => self.count_malformed(len),
            }
            return;
        }
        let (pkts, bytes) = pkt.wire_size();
        self.counters.in_pkts += pkts;
        self.counters.in_bytes += bytes;
        if !self.up {
            self.counters.drop_down += pkts;
            return;
        }
        self.advance(now);
        let bw = self.params.nominal_bps();
        if self.params.unlimited() {
            // Unlimited: no serialization and therefore no queue.
            self.sojourn.record(0);
            self.send_to_delay(pkt, now);
            return;
        }
        if self
            .queue
            .enqueue_packet(pkt, now, bw, &mut self.rng)
            .is_err()
        {
            self.counters.drop_queue += pkts;
            return;
        }
        if !self.rate.is_busy() {
            if let Some((f, at)) = self.queue.dequeue_timed() {
                self.queue.mark_busy();
                self.record_sojourn(&f, now.nanos_since(at));
                self.start(f, now);
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
            self.serialized += 1;
            self.send_to_delay(done.frame, done.done);
            match self.queue.dequeue_timed() {
                Some((next, at)) => {
                    self.queue.mark_busy();
                    self.record_sojourn(&next, done.done.nanos_since(at));
                    self.start(next, done.done);
                }
                None => self.queue.mark_idle(done.done),
            }
        }
    }

    /// One sojourn sample per wire frame (a super-frame's all wait as long).
    fn record_sojourn(&mut self, pkt: &Packet, ns: u64) {
        for _ in 0..Self::sojourn_samples(pkt) {
            self.sojourn.record(ns);
        }
    }

    fn sojourn_samples(pkt: &Packet) -> u64 {
        if pkt.vnet.is_gso() {
            pkt.wire_size().0
        } else {
            1
        }
    }

    fn send_to_delay(&mut self, mut frame: Packet, sent: Instant) {
        let p = &self.params;
        // netem's reorder: after `gap - 1` delayed frames, each frame skips the delay with
        // probability `reorder` (no draw when there is no reordering)
        let skip = p.reorder > 0.0
            && self.since_reorder + 1 >= u64::from(p.reorder_gap)
            && self.rng.chance(p.reorder);
        let at = if skip {
            self.since_reorder = 0;
            self.counters.reordered += 1;
            sent
        } else {
            if p.reorder > 0.0 {
                self.since_reorder += 1;
            }
            let d = self.delay_at(sent);
            self.delay.arrival(sent, d, &self.params, &mut self.rng)
        };
        let at = self.hold.map_or(at, |h| at.max(h));
        if self.stamped {
            // due at `at` (engine time; the network makes it Unix time at the port)
            stamp::append(&mut frame.data, at.nanos());
            self.delay.push_early(frame, sent, at);
        } else {
            self.delay.push(frame, at);
        }
    }

    /// Deliver every frame due by `now` through `emit` (both halves); returns how many left
    /// the delay stage ([`Pipeline::poll_rx`]).
    pub fn poll(&mut self, now: Instant, emit: impl FnMut(Packet)) -> usize {
        self.advance(now);
        self.poll_rx(now, emit)
    }

    /// The sending half at `now`: finish serializations due by then, start the next ones.
    pub fn poll_tx(&mut self, now: Instant) {
        self.advance(now);
    }

    /// The receiving half at `now`: deliver every frame in flight due by then; returns how
    /// many left the delay stage (delivered or lost).
    pub fn poll_rx(&mut self, now: Instant, mut emit: impl FnMut(Packet)) -> usize {
        let mut n = 0;
        while let Some(pkt) = self.delay.pop_due(now) {
            n += 1;
            if pkt.vnet.is_offloaded() && self.per_packet() {
                // Loss/dup/corrupt were set while this super-frame was in flight: decide them
                // per wire frame.
                match pkt.into_wire() {
                    Ok(frames) => {
                        for f in frames {
                            self.deliver(Packet::plain(f), now, &mut emit);
                        }
                    }
                    Err(_) => self.counters.drop_malformed += 1,
                }
            } else {
                self.deliver(pkt, now, &mut emit);
            }
        }
        n
    }

    /// Loss, duplication and corruption of one frame leaving the delay stage.
    fn deliver(&mut self, mut pkt: Packet, now: Instant, emit: &mut impl FnMut(Packet)) {
        let (pkts, mut bytes) = pkt.wire_size();
        // a due-time trailer is no part of the frame
        let trailer = if self.stamped { stamp::LEN } else { 0 };
        bytes = bytes.saturating_sub((trailer as u64) * pkts);
        let scheduled = self
            .params
            .schedule
            .as_ref()
            .and_then(|s| s.loss_at(self.sched_origin, now));
        let lost = match scheduled {
            Some(p) => self.rng_rx.chance(p),
            None => self.loss.lose(&mut self.rng_rx),
        };
        if lost {
            self.counters.drop_loss += pkts;
            return;
        }
        let dup = if self.rng_rx.chance(self.params.duplicate) {
            Some(pkt.clone())
        } else {
            None
        };
        let frame = &mut pkt.data;
        let body = frame.len().saturating_sub(trailer);
        if body > HEADER_LEN && self.rng_rx.chance(self.params.corrupt) {
            // Flip one bit past the Ethernet header so the switch still forwards it.
            let idx = HEADER_LEN + self.rng_rx.below((body - HEADER_LEN) as u64) as usize;
            let bit = self.rng_rx.below(8) as u32;
            frame[idx] ^= 1u8 << bit;
            self.counters.corrupted += 1;
        }
        self.counters.out_pkts += pkts;
        self.counters.out_bytes += bytes;
        emit(pkt);
        if let Some(d) = dup {
            self.counters.duplicated += pkts;
            self.counters.out_pkts += pkts;
            self.counters.out_bytes += bytes;
            emit(d);
        }
    }

    /// When this direction next needs `poll`; `None` when idle.
    ///
    /// The end of a serialization is visible only when the frame leaves the delay stage, so
    /// without jitter the next deadline is at the earliest `done + delay`: the frame's exact
    /// times are computed then ([`Pipeline::advance`]), and a link with a propagation delay
    /// needs one timer event per frame instead of two (half the wake-ups of a real-time
    /// engine). With jitter a frame may leave earlier, so the serialization end counts.
    pub fn poll_at(&self) -> Option<Instant> {
        let done = self.rate.done_at();
        let first_exit = if self.one_timer() {
            done.map(|t| t.add_nanos(self.params.delay_ns))
        } else {
            done
        };
        min_deadline(first_exit, self.delay.next_at())
    }

    /// When the serializer will have sent the frame on the wire and every frame queued
    /// behind it (None when it is idle, or the direction is down or unlimited). A frame that
    /// arrives before then starts at the same instant whenever it is offered before then:
    /// its place in the queue, not its arrival time, decides its departure.
    pub fn busy_until(&self) -> Option<Instant> {
        if !self.up || self.params.unlimited() {
            return None;
        }
        let done = self.rate.done_at()?;
        if self.params.trace.is_some() || self.params.schedule.is_some() {
            let mut cur = self.rate.cursor;
            return Some(
                self.queue
                    .iter_timed()
                    .fold(done, |t, (f, _)| self.done_of(&mut cur, t, f)),
            );
        }
        Some(
            done.add_nanos(
                self.ser_ns(self.queue.len_pkts() as u64, self.queue.len_bytes() as u64),
            ),
        )
    }

    /// Mean serialization time of the frames queued now (None: empty, down or unlimited):
    /// how densely this direction's departures follow each other.
    pub fn queued_frame_ns(&self) -> Option<u64> {
        let pkts = self.queue.len_pkts();
        if !self.up || self.params.unlimited() || pkts == 0 {
            return None;
        }
        if self.params.trace.is_some() {
            let b = self.queue.len_bytes() / pkts;
            return Some(serialization_ns(b, self.params.nominal_bps()));
        }
        Some(self.ser_ns(1, (self.queue.len_bytes() / pkts) as u64))
    }

    /// Whether one timer at [`Pipeline::poll_at`] can run both halves (with [`Pipeline::poll`]):
    /// without jitter and a tunnel's stamping, a frame's serialization end is computed
    /// exactly whenever it is looked at ([`Pipeline::advance`]: by the next offer, a change of
    /// parameters, or the frame's own exit at `done + delay`), so it needs no event of its
    /// own when both halves run in one place.
    pub fn one_timer(&self) -> bool {
        self.params.jitter_ns == 0
            && self.params.reorder == 0.0
            && self.params.schedule.is_none()
            && !self.stamped
    }

    /// As of `now`: the serializations finished, and the frames and bytes still queued. A
    /// direction run with [`Pipeline::one_timer`] moves frames on only when next looked at;
    /// this counts what would have been moved by `now`.
    pub fn settled_at(&self, now: Instant) -> (u64, u64, u64) {
        let (mut pkts, mut bytes) = (self.queue.len_pkts() as u64, self.queue.len_bytes() as u64);
        let done = self.settle(now, |f, _, _| {
            let (n, b) = f.wire_size();
            pkts -= n;
            bytes -= b;
        });
        (done, pkts, bytes)
    }

    /// The queueing-delay distribution as of `now`: [`Pipeline::sojourn`] and the wait of
    /// every queued frame that would have started by `now` ([`Pipeline::settled_at`]), so
    /// that it does not depend on when the direction was last looked at (one timer or a
    /// timer per half: on the partitioning).
    pub fn sojourn_at(&self, now: Instant) -> Cow<'_, Histogram> {
        let mut late = Vec::new();
        self.settle(now, |f, arrived, start| {
            late.push((Self::sojourn_samples(f), start.nanos_since(arrived)));
        });
        if late.is_empty() {
            return Cow::Borrowed(&self.sojourn);
        }
        let mut h = self.sojourn.clone();
        for (n, ns) in late {
            for _ in 0..n {
                h.record(ns);
            }
        }
        Cow::Owned(h)
    }

    /// Walk the serializations that [`Pipeline::advance`] would run up to `now` without
    /// running them: `started` gets each queued frame that would start, with its arrival and
    /// start times. Returns the serializations finished by `now`.
    fn settle(&self, now: Instant, mut started: impl FnMut(&Packet, Instant, Instant)) -> u64 {
        let mut done = self.serialized;
        let Some(mut t) = self.rate.done_at() else {
            return done;
        };
        let mut queued = self.queue.iter_timed();
        let mut cur = self.rate.cursor;
        while t <= now {
            done += 1;
            let Some((f, arrived)) = queued.next() else {
                break;
            };
            started(f, arrived, t);
            t = self.done_of(&mut cur, t, f);
        }
        done
    }

    /// When the sending half next needs [`Pipeline::poll_tx`] (end of a serialization).
    pub fn tx_at(&self) -> Option<Instant> {
        self.rate.done_at()
    }

    /// When the receiving half next needs [`Pipeline::poll_rx`] (an arrival).
    pub fn rx_at(&self) -> Option<Instant> {
        self.delay.next_at()
    }

    /// The smallest time a frame spends in flight (delay minus the jitter that can shorten
    /// it): the lookahead this direction gives a partition boundary. Normal jitter is
    /// unbounded, so it gives none.
    pub fn min_flight_ns(&self) -> u64 {
        let p = &self.params;
        let delay = p
            .schedule
            .as_ref()
            .and_then(|s| s.min_delay_ns())
            .unwrap_or(p.delay_ns);
        if self.stamped || p.reorder > 0.0 {
            0 // a frame leaves once serialized (the far engine holds it), or skips the delay
        } else if p.jitter_ns == 0 {
            delay
        } else if let Some(k) = p.jitter_dist.min_offset() {
            delay.saturating_sub((p.jitter_ns as f64 * k).ceil() as u64)
        } else {
            0
        }
    }

    /// Take every frame in flight, in arrival order (the sending half of a cut link).
    pub fn take_in_flight(&mut self) -> Vec<(Instant, Packet)> {
        self.delay.take_ordered()
    }

    /// Add frames in flight taken from this direction's sending half elsewhere (the receiving
    /// half of a cut link); `frames` in arrival order.
    pub fn put_in_flight(&mut self, frames: Vec<(Instant, Packet)>) {
        for (at, f) in frames {
            self.delay.push(f, at);
        }
    }

    /// Take this direction's moving state, leaving it empty here (the real-time engine
    /// moves the port that feeds it to another partition; [`Pipeline::adopt`] there). The
    /// sending half always goes (queue, the frame being serialized, its random stream); with
    /// `rx` the receiving half too (frames in flight, loss state, its random stream). Nothing
    /// is advanced: the new owner runs it from where it stands. Counters stay in the replica
    /// that counted them (merged statistics add them up).
    pub fn hand_over(&mut self, rx: bool, now: Instant) -> Handover {
        let limit = self.params.limit();
        let queue = std::mem::replace(&mut self.queue, Queue::new(self.params.queue, limit, now));
        Handover {
            queue,
            rate: std::mem::take(&mut self.rate),
            rng: std::mem::replace(&mut self.rng, Rng::new(0)),
            rx: rx.then(|| {
                (
                    std::mem::take(&mut self.delay),
                    std::mem::replace(&mut self.loss, Loss::new(&self.params.loss)),
                    std::mem::replace(&mut self.rng_rx, Rng::new(0)),
                )
            }),
        }
    }

    /// Take over the state [`Pipeline::hand_over`] took from another replica's copy. What
    /// was here of the receiving half stays when `h` brings none (frames already handed to
    /// this replica as the receiver of a cut link).
    pub fn adopt(&mut self, h: Handover) {
        self.queue = h.queue;
        self.rate = h.rate;
        self.rng = h.rng;
        if let Some((delay, loss, rng_rx)) = h.rx {
            let mut delay = delay;
            for (at, f) in self.delay.take_ordered() {
                delay.push(f, at);
            }
            self.delay = delay;
            self.loss = loss;
            self.rng_rx = rng_rx;
        }
    }

    /// Whether nothing is queued, being serialized or in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.len_pkts() == 0
            && self.rate.done_at().is_none()
            && self.delay.next_at().is_none()
    }

    /// Down drops everything queued, being serialized or in flight, and later arrivals.
    pub fn set_up(&mut self, up: bool, now: Instant) {
        if !up && self.up {
            // what finished serializing by now is in flight (and dropped as such)
            self.advance(now);
            let mut n = self.queue.drain().map(|p| p.wire_size().0).sum::<u64>()
                + self.delay.drain().map(|p| p.wire_size().0).sum::<u64>();
            if let Some(s) = self.rate.current.take() {
                n += s.frame.wire_size().0;
            }
            self.counters.drop_down += n;
            self.queue.mark_idle(now);
        }
        self.up = up;
    }

    /// The queueing-delay distribution of this direction.
    pub fn sojourn(&self) -> &Histogram {
        &self.sojourn
    }

    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        c.qlen_pkts = self.queue.len_pkts() as u64;
        c.qlen_bytes = self.queue.len_bytes() as u64;
        c.peak_qlen_pkts = self.queue.peak_pkts() as u64;
        c
    }

    /// [`Pipeline::counters`] with the queue as of `now` ([`Pipeline::settled_at`]).
    pub fn counters_at(&self, now: Instant) -> Counters {
        let mut c = self.counters();
        (_, c.qlen_pkts, c.qlen_bytes) = self.settled_at(now);
        c
    }
}

/// The same trace: the one set before (shared, not an equal one set again).
fn same_trace(a: &Option<Trace>, b: &Option<Trace>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            Arc::ptr_eq(&x.ms, &y.ms) && x.offset_ms == y.offset_ms && x.looped == y.looped
        }
        _ => false,
    }
}

/// The same schedule: the one set before (shared, not an equal one set again).
fn same_schedule(a: &Option<Schedule>, b: &Option<Schedule>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => Arc::ptr_eq(&x.t_ns, &y.t_ns) && x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(bandwidth_bps: u64, delay_ns: u64) -> LinkParams {
        LinkParams {
            bandwidth_bps,
            delay_ns,
            ..Default::default()
        }
    }

    #[test]
    fn sojourn_is_the_wait_before_serialization() {
        // 1000-byte frames at 8 Mbit/s: 1 ms each. Three arrive at once: they wait 0, 1, 2 ms.
        let mut p = Pipeline::new(params(8_000_000, 5_000_000), 1, Instant::ZERO);
        for _ in 0..3 {
            p.enqueue(vec![0u8; 1000], Instant::ZERO);
        }
        // The deadline is when the first frame leaves the delay stage (1 ms + 5 ms), not the
        // end of its serialization.
        assert_eq!(p.poll_at(), Some(Instant::from_millis(6)));
        let mut out = 0;
        p.poll(Instant::from_millis(20), |_| out += 1);
        assert_eq!(out, 3);
        let h = p.sojourn();
        assert_eq!(h.count(), 3);
        assert_eq!(h.max_ns(), 2_000_000);
        let p50 = h.quantile_ns(0.5);
        assert!((1_000_000..=1_250_000).contains(&p50), "{p50}");
        assert_eq!(h.quantile_ns(0.0), 0);
        // A frame that finds the link idle does not wait.
        p.enqueue(vec![0u8; 1000], Instant::from_millis(30));
        assert_eq!(p.sojourn().count(), 4);
        assert_eq!(p.sojourn().summary().buckets[0], (1.0, 2));
        // Unlimited: no queue, sojourn 0.
        let mut u = Pipeline::new(params(0, 0), 1, Instant::ZERO);
        u.enqueue(vec![0u8; 100], Instant::ZERO);
        assert_eq!(u.sojourn().summary().p99_us, 0.0);
    }

    #[test]
    fn sojourn_at_does_not_depend_on_when_the_direction_was_looked_at() {
        // 1000-byte frames at 8 Mbit/s (1 ms each), five at once, then one every 0.7 ms: one
        // copy is looked at only when a frame arrives (one timer), the other also at every
        // end of a serialization (a timer per half); as of any instant both count the same
        // waits.
        let arrivals: Vec<u64> = [0u64; 5]
            .into_iter()
            .chain((1..10).map(|k| k * 700_000))
            .collect();
        let mut lazy = Pipeline::new(params(8_000_000, 5_000_000), 1, Instant::ZERO);
        let mut eager = Pipeline::new(params(8_000_000, 5_000_000), 1, Instant::ZERO);
        let mut next = arrivals.iter().peekable();
        for t in (0..15_000u64).map(|us| Instant::from_nanos(us * 1000)) {
            while let Some(&&a) = next.peek() {
                if a > t.nanos() {
                    break;
                }
                lazy.enqueue(vec![0u8; 1000], Instant::from_nanos(a));
                eager.enqueue(vec![0u8; 1000], Instant::from_nanos(a));
                next.next();
            }
            if eager.tx_at().is_some_and(|d| d <= t) {
                eager.poll_tx(t);
            }
            assert_eq!(lazy.sojourn_at(t), eager.sojourn_at(t), "at {t:?}");
            assert_eq!(eager.sojourn_at(t).as_ref(), eager.sojourn(), "at {t:?}");
        }
        // the lazy one had frames waiting that it had not yet started
        assert_eq!(lazy.sojourn_at(Instant::from_millis(15)).count(), 14);
        assert!(lazy.sojourn().count() < 14);
    }

    #[test]
    fn with_jitter_the_serialization_end_is_a_deadline() {
        let mut p = Pipeline::new(
            LinkParams {
                jitter_ns: 1_000_000,
                ..params(8_000_000, 5_000_000)
            },
            1,
            Instant::ZERO,
        );
        p.enqueue(vec![0u8; 1000], Instant::ZERO);
        assert_eq!(p.poll_at(), Some(Instant::from_millis(1)));
    }

    /// Deliver `n` 100-byte frames sent 1 ms apart; returns (ordinal, arrival ns) in the
    /// order they left.
    fn run(p: &mut Pipeline, n: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for k in 0..n {
            let t = Instant::from_millis(k);
            p.poll(t, |f| {
                out.push((u64::from(f.data[20]) | u64::from(f.data[21]) << 8, t))
            });
            let mut f = vec![0u8; 100];
            f[20] = k as u8;
            f[21] = (k >> 8) as u8;
            p.enqueue(f, t);
        }
        let mut got = Vec::new();
        let mut t = n;
        while !p.is_idle() {
            let now = Instant::from_millis(t);
            p.poll(now, |f| {
                got.push(u64::from(f.data[20]) | u64::from(f.data[21]) << 8)
            });
            t += 1;
        }
        out.into_iter()
            .map(|(k, t)| (k, t.nanos()))
            .chain(got.into_iter().map(|k| (k, 0)))
            .collect()
    }

    #[test]
    fn reorder_with_gap_sends_every_gap_th_frame_at_once() {
        // 10 ms delay, frames 1 ms apart: a frame that skips the delay overtakes nine
        let mut p = Pipeline::new(
            LinkParams {
                reorder: 1.0,
                reorder_gap: 5,
                ..params(0, 10_000_000)
            },
            1,
            Instant::ZERO,
        );
        let order: Vec<u64> = run(&mut p, 40).into_iter().map(|(k, _)| k).collect();
        // frames 4, 9, 14, ... (every fifth) leave at once, the others 10 ms later
        let early: Vec<u64> = (0..40).filter(|k| k % 5 == 4).collect();
        assert_eq!(&order[..early.len().min(2)], &early[..2]);
        assert_eq!(p.counters().reordered, 8);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..40).collect::<Vec<_>>());
        assert_eq!(p.min_flight_ns(), 0);
        // a probability below 1: about that share of the frames, none without it
        let mut q = Pipeline::new(
            LinkParams {
                reorder: 0.25,
                ..params(0, 10_000_000)
            },
            7,
            Instant::ZERO,
        );
        run(&mut q, 4000);
        let r = q.counters().reordered as f64 / 4000.0;
        assert!((0.2..0.3).contains(&r), "{r}");
    }

    #[test]
    fn framing_counts_overhead_and_cells() {
        // 100-byte frames at 8 Mbit/s: 100 us plain; +8 bytes in 48-byte cells of 53:
        // 3 cells = 159 bytes = 159 us
        let mut p = Pipeline::new(
            LinkParams {
                framing: super::super::params::Framing {
                    overhead: 8,
                    cellsize: 48,
                    cell_overhead: 5,
                },
                ..params(8_000_000, 0)
            },
            1,
            Instant::ZERO,
        );
        p.enqueue(vec![0u8; 100], Instant::ZERO);
        p.enqueue(vec![0u8; 100], Instant::ZERO);
        assert_eq!(p.tx_at(), Some(Instant::from_nanos(159_000)));
        assert_eq!(p.busy_until(), Some(Instant::from_nanos(318_000)));
        let mut n = 0;
        p.poll(Instant::from_nanos(317_999), |_| n += 1);
        assert_eq!(n, 1);
        p.poll(Instant::from_nanos(318_000), |_| n += 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn a_trace_carries_its_opportunities_and_no_more() {
        use super::super::trace::Trace;
        use std::sync::Arc;
        // 2 opportunities at 1 ms, none at 2, 3 at 3 ms, 1 at 4: 6 per 4 ms, looped
        let trace = Trace {
            ms: Arc::new(vec![1, 1, 3, 3, 3, 4]),
            offset_ms: 0,
            looped: true,
        };
        let mut p = Pipeline::new(
            LinkParams {
                trace: Some(trace.clone()),
                queue: QueueParams {
                    limit: Some(10_000),
                    ..Default::default()
                },
                ..params(0, 0)
            },
            1,
            Instant::ZERO,
        );
        // saturate with 500-byte frames: three per opportunity
        for _ in 0..3000 {
            p.enqueue(vec![0u8; 500], Instant::ZERO);
        }
        let mut per_ms = vec![0u64; 41];
        for ms in 0..=40 {
            p.poll(Instant::from_millis(ms), |f| {
                per_ms[ms as usize] += f.len() as u64
            });
        }
        let want: Vec<u64> = (0..=40u64)
            .map(|ms| match ms % 4 {
                _ if ms == 0 => 0,
                1 => 3000,
                2 => 0,
                3 => 4500,
                _ => 1500,
            })
            .collect();
        assert_eq!(per_ms, want);
        // switched to a fixed rate: 500 bytes at 4 Mbit/s = 1 ms each
        p.set_params(params(4_000_000, 0), Instant::from_millis(40));
        let mut n = 0;
        p.poll(Instant::from_millis(50), |_| n += 1);
        assert_eq!(n, 10);
        // and to the trace again: it starts over at the instant it is set
        p.set_params(
            LinkParams {
                trace: Some(trace),
                ..params(0, 0)
            },
            Instant::from_millis(50),
        );
        let mut n = 0;
        p.poll(Instant::from_millis(51), |_| n += 1);
        assert_eq!(n, 1 + 6); // the frame in service, then two opportunities
    }

    #[test]
    fn a_trace_sent_again_starts_over_and_one_merged_in_goes_on() {
        use super::super::trace::Trace;
        use std::sync::Arc;
        let trace = || Trace {
            ms: Arc::new(vec![1, 1, 3, 3, 3, 4]),
            offset_ms: 0,
            looped: true,
        };
        let with = |t: Trace, limit: u32| LinkParams {
            trace: Some(t),
            queue: QueueParams {
                limit: Some(limit),
                ..Default::default()
            },
            ..params(0, 0)
        };
        let mut p = Pipeline::new(with(trace(), 10_000), 1, Instant::ZERO);
        for _ in 0..3000 {
            p.enqueue(vec![0u8; 500], Instant::ZERO);
        }
        let bytes = |p: &mut Pipeline, ms: u64| {
            let mut b = 0;
            p.poll(Instant::from_millis(ms), |f| b += f.len() as u64);
            b
        };
        bytes(&mut p, 42);
        // an equal trace sent again at 42 ms starts over: the frame in service, then its
        // 1 ms (two opportunities) at 43, not the first trace's 3 ms (three)
        p.set_params(with(trace(), 10_000), Instant::from_millis(42));
        assert_eq!(bytes(&mut p, 43), 500 + 3000);
        // another change keeps the trace in force (a patch merges it in): 3 ms at 45
        let same = p.params().trace.clone().unwrap();
        p.set_params(with(same, 9_000), Instant::from_millis(44));
        assert_eq!(bytes(&mut p, 45), 4500);
    }

    #[test]
    fn a_schedule_changes_delay_bandwidth_and_loss_at_its_times() {
        use super::super::schedule::Schedule;
        use std::sync::Arc;
        // from 0: 10 ms, 8 Mbit/s, no loss; from 50 ms: 30 ms, 4 Mbit/s, all lost after 100
        let sched = Schedule {
            t_ns: Arc::new(vec![0, 50_000_000, 100_000_000]),
            delay_ns: Some(Arc::new(vec![10_000_000, 30_000_000, 30_000_000])),
            bandwidth_bps: Some(Arc::new(vec![8_000_000, 4_000_000, 4_000_000])),
            loss: Some(Arc::new(vec![0.0, 0.0, 1.0])),
            linear: false,
            looped: false,
        };
        let start = Instant::from_millis(1000);
        let mut p = Pipeline::new(
            LinkParams {
                schedule: Some(sched),
                ..params(0, 0)
            },
            1,
            start,
        );
        let mut out = Vec::new();
        let sends = [0u64, 49, 60, 99];
        for ms in 0..=200 {
            let t = start.add_nanos(ms * 1_000_000);
            p.poll(t, |f| out.push((f.data[0], ms)));
            if let Some(k) = sends.iter().position(|&s| s == ms) {
                p.enqueue(vec![k as u8; 1000], t);
            }
        }
        // 1000 bytes: 1 ms at 8 Mbit/s, 2 ms at 4; the delay is the one in force when a
        // frame leaves the serializer (the one sent at 49 ms, at 50 ms: 30 ms); the frame
        // sent at 99 ms arrives at 131 ms, after the loss became 1 at 100 ms
        assert_eq!(out, vec![(0, 11), (1, 80), (2, 92)]);
        assert_eq!(p.counters().drop_loss, 1);
        assert_eq!(p.min_flight_ns(), 10_000_000);
        assert!(!p.one_timer());
    }
}
