//! The queue stage: frames waiting to start serialization (ns-2 `Queue/DropTail`, `Queue/RED`).
//!
//! As in ns-2 the frame being serialized is not in the queue and does not count toward the
//! limit. Every arrival passes through [`Queue::enqueue`], even one that finds the link idle
//! and starts serialization at once: RED must see it to keep its average right.
//!
//! RED follows ns-2's `red.cc` (Floyd & Jacobson 1993 with ns-2's `wait_` = true):
//! * the average is an EWMA with weight `q_weight`, updated on each arrival with the queue
//!   length before the arrival; after an idle period of `t` seconds the average first decays
//!   as if `m = ⌊ptc·t⌋` empty packets had arrived, `ptc = bandwidth / (8·mean_pktsize)`;
//! * below `thresh` nothing is dropped; between `thresh` and `maxthresh` the base probability
//!   rises linearly to `max_p = 1/linterm`; above `maxthresh` everything is dropped (or, when
//!   `gentle`, the probability rises linearly from `max_p` to 1 at `2·maxthresh`);
//! * the base probability is spread with the count of packets since the last drop
//!   (`p / (2 - count·p)`), and scaled by `size/mean_pktsize` in byte mode;
//! * in byte mode lengths, thresholds and limit are in bytes (`value × mean_pktsize`).
//!
//! An entry is a [`Packet`]: almost always one wire frame, but a TCP super-frame let through
//! whole (`pipeline.rs`) is one entry standing for its wire frames, and counts as them in
//! the limit, the length and the peak. Only a drop-tail queue takes such an entry, and only
//! when all its wire frames fit ([`Queue::fits`]).

use std::collections::VecDeque;

use super::packet::Packet;
use super::params::{QueueKind, QueueParams, RedParams};
use crate::rng::Rng;
use crate::time::Instant;

/// Why the queue refused a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueDrop {
    /// Limit reached (tail drop, also RED's hard limit).
    Full,
    /// RED early drop (probabilistic) or forced drop (average above the max threshold).
    Red,
}

#[derive(Debug, Clone)]
struct RedState {
    avg: f64,
    /// Packets since the last drop (ns-2 `count`).
    count: i64,
    /// ns-2 `old`: the average was above `thresh` at the previous arrival.
    old: bool,
}

#[derive(Debug)]
pub struct Queue {
    params: QueueParams,
    /// Limit in packets, resolved from the params and the link (auto default).
    limit_pkts: u32,
    /// Waiting entries with their arrival times (for the sojourn time).
    frames: VecDeque<(Packet, Instant)>,
    /// Wire frames and bytes of the waiting entries.
    pkts: usize,
    bytes: usize,
    peak_pkts: usize,
    red: RedState,
    idle_since: Option<Instant>,
}

impl Queue {
    pub fn new(params: QueueParams, limit_pkts: u32, now: Instant) -> Self {
        Queue {
            params,
            limit_pkts,
            frames: VecDeque::new(),
            pkts: 0,
            bytes: 0,
            peak_pkts: 0,
            red: RedState {
                avg: 0.0,
                count: -1,
                old: false,
            },
            idle_since: Some(now),
        }
    }

    /// Change parameters at run time. Queued frames are kept even if the new limit is lower
    /// (they drain; arrivals are refused until the queue is below the limit).
    pub fn reconfigure(&mut self, params: QueueParams, limit_pkts: u32) {
        self.params = params;
        self.limit_pkts = limit_pkts;
    }

    pub fn len_pkts(&self) -> usize {
        self.pkts
    }
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }
    pub fn peak_pkts(&self) -> usize {
        self.peak_pkts
    }
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    /// Current RED average (packets or bytes), for tests and statistics.
    pub fn red_avg(&self) -> f64 {
        self.red.avg
    }

    fn unit(&self) -> f64 {
        if self.params.in_bytes {
            f64::from(self.params.mean_pktsize)
        } else {
            1.0
        }
    }

    fn current_len(&self) -> f64 {
        if self.params.in_bytes {
            self.bytes as f64
        } else {
            self.pkts as f64
        }
    }

    fn over_limit(&self, pkts: usize, size: usize) -> bool {
        if self.params.in_bytes {
            let limit = u64::from(self.limit_pkts) * u64::from(self.params.mean_pktsize);
            (self.bytes + size) as u64 > limit
        } else {
            (self.pkts + pkts) as u64 > u64::from(self.limit_pkts)
        }
    }

    /// Whether a drop-tail queue would take `pkts` wire frames of `bytes` in all now.
    pub fn fits(&self, pkts: u64, bytes: u64) -> bool {
        self.params.kind == QueueKind::DropTail && !self.over_limit(pkts as usize, bytes as usize)
    }

    /// The link finished its last transmission and found the queue empty: RED starts
    /// counting idle time from here.
    pub fn mark_idle(&mut self, now: Instant) {
        if self.frames.is_empty() && self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// The link started serializing a frame.
    pub fn mark_busy(&mut self) {
        self.idle_since = None;
    }

    /// Offer a wire frame. `bandwidth_bps` is used by RED for the idle-time decay
    /// (0 = unlimited).
    pub fn enqueue(
        &mut self,
        frame: Vec<u8>,
        now: Instant,
        bandwidth_bps: u64,
        rng: &mut Rng,
    ) -> Result<(), (Vec<u8>, QueueDrop)> {
        self.enqueue_packet(Packet::plain(frame), now, bandwidth_bps, rng)
            .map_err(|(p, why)| (p.data, why))
    }

    /// Offer an entry: a wire frame, or a super-frame standing for its wire frames (see the
    /// module docs).
    pub fn enqueue_packet(
        &mut self,
        pkt: Packet,
        now: Instant,
        bandwidth_bps: u64,
        rng: &mut Rng,
    ) -> Result<(), (Packet, QueueDrop)> {
        let (pkts, size) = pkt.wire_size();
        let (pkts, size) = (pkts as usize, size as usize);
        if let QueueKind::Red(red) = self.params.kind {
            if self.red_drops(&red, size, now, bandwidth_bps, rng) {
                return Err((pkt, QueueDrop::Red));
            }
        }
        if self.over_limit(pkts, size) {
            return Err((pkt, QueueDrop::Full));
        }
        self.pkts += pkts;
        self.bytes += size;
        self.frames.push_back((pkt, now));
        self.peak_pkts = self.peak_pkts.max(self.pkts);
        Ok(())
    }

    pub fn dequeue(&mut self) -> Option<Packet> {
        self.dequeue_timed().map(|(f, _)| f)
    }

    /// The head entry and when it arrived.
    pub fn dequeue_timed(&mut self) -> Option<(Packet, Instant)> {
        let (f, at) = self.frames.pop_front()?;
        let (pkts, size) = f.wire_size();
        self.pkts -= pkts as usize;
        self.bytes -= size as usize;
        Some((f, at))
    }

    /// The queued entries, head first.
    pub fn iter(&self) -> impl Iterator<Item = &Packet> + '_ {
        self.frames.iter().map(|(f, _)| f)
    }

    /// The queued entries with their arrival times, head first.
    pub fn iter_timed(&self) -> impl Iterator<Item = (&Packet, Instant)> + '_ {
        self.frames.iter().map(|(f, at)| (f, *at))
    }

    /// Remove every queued entry (link down); returns them for counting.
    pub fn drain(&mut self) -> impl Iterator<Item = Packet> + '_ {
        self.pkts = 0;
        self.bytes = 0;
        self.frames.drain(..).map(|(f, _)| f)
    }

    /// RED average update and early/forced drop decision for an arriving frame.
    fn red_drops(
        &mut self,
        red: &RedParams,
        size: usize,
        now: Instant,
        bandwidth_bps: u64,
        rng: &mut Rng,
    ) -> bool {
        let w = red.q_weight;
        // Idle decay: m = ptc * idle seconds "empty arrivals" (ns-2 estimator(.., m+1, ..)).
        let mut m = 0.0;
        if let Some(since) = self.idle_since.take() {
            if bandwidth_bps > 0 {
                let ptc = bandwidth_bps as f64 / (8.0 * f64::from(self.params.mean_pktsize));
                m = (ptc * now.nanos_since(since) as f64 * 1e-9).floor();
            }
        }
        let qlen = self.current_len();
        self.red.avg = self.red.avg * (1.0 - w).powf(m + 1.0) + w * qlen;

        let unit = self.unit();
        let th_min = red.thresh * unit;
        let th_max = red.maxthresh * unit;
        let max_p = 1.0 / red.linterm;
        let avg = self.red.avg;
        // ns-2 also requires more than one unit queued before dropping.
        if avg >= th_min && qlen > 1.0 {
            let forced = if red.gentle {
                avg >= 2.0 * th_max
            } else {
                avg >= th_max
            };
            if forced {
                self.red.count = 0;
                return true;
            }
            if !self.red.old {
                // Just crossed thresh from below: start counting, do not drop this one.
                self.red.count = 1;
                self.red.old = true;
                return false;
            }
            self.red.count += 1;
            let mut p = if avg < th_max {
                max_p * (avg - th_min) / (th_max - th_min)
            } else {
                // gentle region
                max_p + (1.0 - max_p) * (avg - th_max) / th_max
            };
            if self.params.in_bytes {
                p = p * size as f64 / f64::from(self.params.mean_pktsize);
            }
            // ns-2 modify_p with wait_ = true: uniform spacing of drops.
            let cp = self.red.count as f64 * p;
            p = if cp < 1.0 {
                0.0
            } else if cp < 2.0 {
                p / (2.0 - cp)
            } else {
                1.0
            };
            if rng.chance(p.min(1.0)) {
                self.red.count = 0;
                return true;
            }
            false
        } else {
            self.red.count = -1;
            self.red.old = false;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kind: QueueKind, limit: u32, in_bytes: bool) -> Queue {
        let p = QueueParams {
            kind,
            limit: Some(limit),
            in_bytes,
            mean_pktsize: 500,
        };
        Queue::new(p, limit, Instant::ZERO)
    }

    #[test]
    fn droptail_packets() {
        let mut rng = Rng::new(1);
        let mut q = q(QueueKind::DropTail, 3, false);
        for i in 0..5 {
            let r = q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng);
            assert_eq!(r.is_ok(), i < 3, "frame {i}");
        }
        assert_eq!(q.len_pkts(), 3);
        assert_eq!(q.len_bytes(), 300);
        q.dequeue();
        assert!(q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng).is_ok());
    }

    #[test]
    fn droptail_bytes() {
        // limit 3 × mean_pktsize 500 = 1500 bytes
        let mut rng = Rng::new(1);
        let mut q = q(QueueKind::DropTail, 3, true);
        assert!(q.enqueue(vec![0; 1000], Instant::ZERO, 0, &mut rng).is_ok());
        assert!(q.enqueue(vec![0; 600], Instant::ZERO, 0, &mut rng).is_err());
        assert!(q.enqueue(vec![0; 500], Instant::ZERO, 0, &mut rng).is_ok());
        assert!(q.enqueue(vec![0; 1], Instant::ZERO, 0, &mut rng).is_err());
        assert_eq!(q.len_bytes(), 1500);
    }

    #[test]
    fn lower_limit_keeps_queued() {
        let mut rng = Rng::new(1);
        let mut q = q(QueueKind::DropTail, 5, false);
        for _ in 0..5 {
            q.enqueue(vec![0; 10], Instant::ZERO, 0, &mut rng).unwrap();
        }
        let p = q.params;
        q.reconfigure(p, 2);
        assert_eq!(q.len_pkts(), 5);
        assert!(q.enqueue(vec![0; 10], Instant::ZERO, 0, &mut rng).is_err());
    }

    fn red(gentle: bool) -> QueueKind {
        QueueKind::Red(RedParams {
            thresh: 5.0,
            maxthresh: 15.0,
            q_weight: 0.2,
            linterm: 10.0,
            gentle,
        })
    }

    /// Fill without dequeuing: the average climbs; nothing is dropped while avg < thresh,
    /// everything is dropped once avg ≥ maxthresh (non-gentle).
    #[test]
    fn red_thresholds_deterministic() {
        let mut rng = Rng::new(42);
        let mut q = q(red(false), 1000, false);
        let mut first_drop = None;
        for i in 0..200 {
            let before = q.red_avg();
            match q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng) {
                Ok(()) => assert!(
                    q.red_avg() < 15.0 || before < 15.0,
                    "accepted above maxthresh at {i}"
                ),
                Err((_, d)) => {
                    assert_eq!(d, QueueDrop::Red);
                    assert!(q.red_avg() >= 5.0, "dropped below thresh at {i}");
                    first_drop.get_or_insert(i);
                }
            }
        }
        assert!(first_drop.is_some());
        // Once avg ≥ maxthresh every arrival is a forced drop.
        assert!(q.red_avg() >= 15.0);
        for _ in 0..10 {
            assert!(q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng).is_err());
        }
    }

    /// Gentle RED between maxthresh and 2*maxthresh drops some, not all.
    #[test]
    fn gentle_red_partial_above_maxthresh() {
        let mut rng = Rng::new(3);
        let mut q = q(red(true), 1000, false);
        // Hold the queue at 20 packets (between 15 and 30): avg converges to ~20.
        let mut drops = 0;
        let mut total = 0;
        for _ in 0..4000 {
            let r = q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng);
            total += 1;
            if r.is_err() {
                drops += 1;
            }
            while q.len_pkts() > 20 {
                q.dequeue();
            }
        }
        let avg = q.red_avg();
        assert!(avg > 15.0 && avg < 30.0, "avg {avg}");
        // base p at avg 20: 0.1 + 0.9 * 5/15 = 0.4; count spreading raises the effective rate.
        let rate = drops as f64 / total as f64;
        assert!(rate > 0.2 && rate < 0.8, "rate {rate}");
    }

    /// In the linear region the long-run drop rate matches RED's p_b spread by count
    /// (≈ 2·p_b/(1+p_b) with wait_): statistical check with a fixed seed.
    #[test]
    fn red_linear_region_rate() {
        let mut rng = Rng::new(9);
        let mut q = q(red(false), 1000, false);
        let (mut drops, mut total) = (0u32, 0u32);
        for _ in 0..20_000 {
            if q.enqueue(vec![0; 100], Instant::ZERO, 0, &mut rng).is_err() {
                drops += 1;
            }
            total += 1;
            while q.len_pkts() > 10 {
                q.dequeue();
            }
        }
        // avg ≈ 10 → p_b = 0.1 * 5/10 = 0.05; with wait_ expected ≈ 1/(1/p_b + 1/2·…) ~ 0.05..0.1
        let rate = f64::from(drops) / f64::from(total);
        assert!((0.03..0.12).contains(&rate), "rate {rate}");
    }

    #[test]
    fn red_idle_decay() {
        let mut rng = Rng::new(1);
        let mut q = q(red(false), 1000, false);
        for _ in 0..8 {
            let _ = q.enqueue(vec![0; 100], Instant::ZERO, 1_000_000, &mut rng);
        }
        while q.dequeue().is_some() {}
        let before = q.red_avg();
        assert!(before > 1.0);
        q.mark_idle(Instant::ZERO);
        // 1 s idle at 1 Mbit/s, 500-byte packets: m = 250 → avg × 0.8^251 ≈ 0.
        let _ = q.enqueue(
            vec![0; 100],
            Instant::from_millis(1000),
            1_000_000,
            &mut rng,
        );
        assert!(q.red_avg() < 1e-6, "{}", q.red_avg());
    }
}
