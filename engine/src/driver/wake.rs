//! When the real-time loop may sleep, and for how long: the measured wake-up latency of a
//! timer sleep, and which ports answer the frames written to them.
//!
//! * [`Oversleep`] tracks the median of how late a timer sleep ends (scheduler wake-up, idle
//!   exit; 20-50 µs on a small VM, the more the longer it slept: its vCPU halts to the host). The loop arms its timer that much before a deadline and
//!   spins only the rest, so a deadline costs a few µs of polling instead of a fixed spin
//!   window, and the lateness of an event is the spread of wake-ups above the median. Its
//!   step doubles while the samples stay on one side of it, so it settles within about a
//!   dozen wake-ups (a ping at 1/s makes two a second; the fixed 0.4 µs step it had took minutes
//!   to move 40 µs), and falls back to the fine step once they straddle it.
//! * [`SpinBudget`] bounds the share of wall time spent polling toward deadlines. Where
//!   deadlines are sparse (a ping, a few flows) the budget always suffices and every frame
//!   leaves on time to a few µs; where they are dense (many busy links: one every few tens of
//!   µs) polling toward each would mean polling all the time, so once the budget is spent the
//!   loop sleeps until the deadline itself and a frame leaves one wake-up latency late
//!   (~20 µs here, well inside the delay goal), and several deadlines share one wake-up.
//! * [`Replies`] remembers, per port, whether frames written to it are answered within the
//!   linger window (an echo, a TCP receiver's ACK). The loop keeps polling after a write only
//!   to such a port, so a ping-pong is caught without a sleep/wake-up cycle while a one-way
//!   stream (a sink that never answers) lets the engine sleep.

use std::collections::HashMap;

use crate::time::Instant;

/// A running estimate of the median lateness of timer wake-ups.
#[derive(Debug, Clone, Copy)]
pub struct Oversleep {
    est_ns: u64,
    samples: u64,
    /// The current step, and whether the last sample lay above the estimate.
    step_ns: u64,
    last_above: Option<bool>,
}

impl Oversleep {
    /// Share of wake-ups (in 1/100) that end past the estimate. Half of the wake-ups end
    /// before their deadline and spin the rest (a few µs: the distribution is tight below its
    /// median); half end after it, mostly by a few µs.
    const Q: u64 = 50;
    /// Finest step of the stochastic quantile update.
    const STEP_NS: u64 = 400;
    /// Largest step (the sixth sample in a row on one side). Larger learns faster but
    /// makes the estimate noisier where it has settled (a simulated wake-up latency of
    /// median 22 µs: 12 samples to learn 40 µs, ±3.6 µs; with 3.2 µs, 26 samples, ±2.6 µs;
    /// with the fine step alone, 190 samples, ±1.1 µs).
    const MAX_STEP_NS: u64 = 12_800;
    /// Never assume more than this (a stalled host would otherwise make every sleep a spin).
    pub const MAX_NS: u64 = 200_000;
    /// Starting estimate, typical of a virtual machine.
    const INITIAL_NS: u64 = 20_000;

    pub fn new() -> Self {
        Oversleep {
            est_ns: Self::INITIAL_NS,
            samples: 0,
            step_ns: Self::STEP_NS,
            last_above: None,
        }
    }

    /// The current estimate: how long before a deadline to arm the timer.
    pub fn estimate_ns(&self) -> u64 {
        self.est_ns
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// A timer armed for `armed` was seen to expire at `woke`.
    pub fn record(&mut self, armed: Instant, woke: Instant) {
        let late = woke.nanos_since(armed);
        self.samples += 1;
        // Stochastic quantile: up by step·Q on a sample above, down by step·(1−Q) below,
        // which settles where a share Q of samples lies above. The step doubles with each
        // sample on the same side as the last (the estimate is far off: a wrong start, or a
        // host that changed) and is the finest again on the first one across.
        let above = late > self.est_ns;
        self.step_ns = match self.last_above {
            Some(a) if a == above => (self.step_ns * 2).min(Self::MAX_STEP_NS),
            _ => Self::STEP_NS,
        };
        self.last_above = Some(above);
        // (never past the sample: a grown step would overshoot and swing back)
        let step = self
            .step_ns
            .min(late.abs_diff(self.est_ns).max(Self::STEP_NS));
        if above {
            self.est_ns = (self.est_ns + step * (100 - Self::Q) / 100).min(Self::MAX_NS);
        } else {
            self.est_ns = self.est_ns.saturating_sub(step * Self::Q / 100);
        }
    }
}

impl Default for Oversleep {
    fn default() -> Self {
        Self::new()
    }
}

/// A token bucket of polling time: it fills at `share` of wall time up to `cap`.
#[derive(Debug, Clone, Copy)]
pub struct SpinBudget {
    tokens_ns: u64,
    last: Instant,
    /// Parts per million of wall time.
    share_ppm: u64,
    cap_ns: u64,
    /// Polling time spent toward deadlines (reported in `stats`).
    pub spent_ns: u64,
}

impl SpinBudget {
    pub fn new(share_ppm: u64, cap_ns: u64) -> Self {
        SpinBudget {
            tokens_ns: cap_ns,
            last: Instant::ZERO,
            share_ppm,
            cap_ns,
            spent_ns: 0,
        }
    }

    /// Whether polling `ns` toward a deadline is affordable at `now`.
    pub fn allows(&mut self, now: Instant, ns: u64) -> bool {
        let dt = now.nanos_since(self.last);
        self.last = now;
        let refill = (dt as u128 * self.share_ppm as u128 / 1_000_000) as u64;
        self.tokens_ns = self.tokens_ns.saturating_add(refill).min(self.cap_ns);
        ns <= self.tokens_ns
    }

    /// `ns` of polling toward a deadline were spent.
    pub fn spend(&mut self, ns: u64) {
        self.tokens_ns = self.tokens_ns.saturating_sub(ns);
        self.spent_ns = self.spent_ns.saturating_add(ns);
    }
}

/// Per-port memory of whether writes are answered (a 2-bit saturating score, as a branch
/// predictor: two unanswered windows in a row turn lingering off for that port, answers turn
/// it back on).
/// Port indices are never reused while the engine runs (see `model/arena.rs`), so a removed
/// port's entry is only a few idle bytes.
#[derive(Debug, Default)]
pub struct Replies {
    ports: HashMap<usize, PortReply>,
    /// Ports with an open window, and the end of it.
    open: Vec<(usize, Instant)>,
    /// Windows that saw an answer / expired without one (reported in `stats`).
    pub hits: u64,
    pub misses: u64,
}

#[derive(Debug, Clone, Copy)]
struct PortReply {
    score: u8,
    window_end: Option<Instant>,
}

impl Replies {
    const START: u8 = 3;
    const MAX: u8 = 3;
    const LINGER_FROM: u8 = 2;

    /// A frame was written to `port` at `now`: open (or extend) its answer window.
    pub fn written(&mut self, port: usize, now: Instant, linger_ns: u64) {
        if linger_ns == 0 {
            return;
        }
        let end = now.add_nanos(linger_ns);
        let p = self.ports.entry(port).or_insert(PortReply {
            score: Self::START,
            window_end: None,
        });
        if p.window_end.is_none() {
            self.open.push((port, end));
        } else if let Some(o) = self.open.iter_mut().find(|o| o.0 == port) {
            o.1 = end;
        }
        p.window_end = Some(end);
    }

    /// A frame was read from `port`: an answer if its window is open.
    pub fn read(&mut self, port: usize) {
        let Some(p) = self.ports.get_mut(&port) else {
            return;
        };
        if p.window_end.take().is_some() {
            p.score = (p.score + 1).min(Self::MAX);
            self.hits += 1;
            self.open.retain(|o| o.0 != port);
        }
    }

    /// Close windows that ended by `now` without an answer; true while a window of a port
    /// that usually answers is still open (the loop should keep polling).
    pub fn waiting(&mut self, now: Instant) -> bool {
        let mut any = false;
        let ports = &mut self.ports;
        let misses = &mut self.misses;
        self.open.retain(|&(port, end)| {
            let Some(p) = ports.get_mut(&port) else {
                return false;
            };
            if end <= now {
                p.window_end = None;
                p.score = p.score.saturating_sub(1);
                *misses += 1;
                return false;
            }
            any |= p.score >= Self::LINGER_FROM;
            true
        });
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversleep_settles_near_the_low_quantile() {
        // Wake-ups late by 10 to 49 µs, in a pseudo-random order: the estimate ends near
        // the median.
        let mut o = Oversleep::new();
        let mut x = 1u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            o.record(Instant::ZERO, Instant::from_micros(10 + (x >> 33) % 40));
        }
        let e = o.estimate_ns();
        assert!((22_000..=38_000).contains(&e), "estimate {e}");
        // A host that stalls does not push the estimate past the cap.
        for _ in 0..10_000 {
            o.record(Instant::ZERO, Instant::from_millis(50));
        }
        assert_eq!(o.estimate_ns(), Oversleep::MAX_NS);
        // Punctual wake-ups bring it down to 0, never below.
        for _ in 0..10_000 {
            o.record(Instant::ZERO, Instant::ZERO);
        }
        assert_eq!(o.estimate_ns(), 0);
    }

    #[test]
    fn oversleep_learns_within_a_few_wakeups() {
        // Wake-ups 60 µs late against the 20 µs start: within 2 µs after a dozen samples
        // (a ping at 1/s times two wake-ups a second), where a fixed 0.4 µs step took 200.
        let mut o = Oversleep::new();
        let mut n = 0;
        while o.estimate_ns().abs_diff(60_000) > 2_000 {
            o.record(Instant::ZERO, Instant::from_micros(60));
            n += 1;
            assert!(n <= 12, "estimate {} after {n}", o.estimate_ns());
        }
        // It stays there, stepping finely around the samples.
        for _ in 0..100 {
            o.record(Instant::ZERO, Instant::from_micros(60));
            assert!(
                o.estimate_ns().abs_diff(60_000) <= 2_000,
                "{}",
                o.estimate_ns()
            );
        }
        // One stalled wake-up moves it by a fine step only.
        o.record(Instant::ZERO, Instant::from_millis(5));
        assert!(
            o.estimate_ns().abs_diff(60_000) <= 2_000,
            "{}",
            o.estimate_ns()
        );
        // And back down to 25 µs as quickly.
        let mut n = 0;
        while o.estimate_ns().abs_diff(25_000) > 2_000 {
            o.record(Instant::ZERO, Instant::from_micros(25));
            n += 1;
            assert!(n <= 12, "estimate {} after {n}", o.estimate_ns());
        }
    }

    #[test]
    fn spin_budget_refills_at_its_share_and_caps() {
        let us = Instant::from_micros;
        // 5 % of wall time, at most 1 ms banked.
        let mut b = SpinBudget::new(50_000, 1_000_000);
        assert!(b.allows(us(0), 1_000_000));
        b.spend(1_000_000);
        assert!(!b.allows(us(0), 1));
        // 100 µs later: 5 µs earned.
        assert!(b.allows(us(100), 5_000));
        assert!(!b.allows(us(100), 5_001));
        b.spend(5_000);
        // A long idle stretch banks no more than the cap.
        assert!(b.allows(us(10_000_000), 1_000_000));
        assert!(!b.allows(us(10_000_000), 1_000_001));
        assert_eq!(b.spent_ns, 1_005_000);
        // Spending more than is left never underflows.
        b.spend(u64::MAX);
        assert!(!b.allows(us(10_000_000), 1));
    }

    #[test]
    fn replies_linger_only_for_ports_that_answer() {
        let us = Instant::from_micros;
        let mut r = Replies::default();
        // First write to a port: optimistic, linger.
        r.written(1, us(0), 100_000);
        assert!(r.waiting(us(10)));
        // The answer comes: the window closes, nothing to wait for.
        r.read(1);
        assert!(!r.waiting(us(20)));
        assert_eq!((r.hits, r.misses), (1, 0));
        // A sink never answers: after two missed windows the port is not waited for.
        for i in 0..2u64 {
            r.written(2, us(1000 * i), 100_000);
            assert!(r.waiting(us(1000 * i + 1)));
            assert!(!r.waiting(us(1000 * i + 200)));
        }
        r.written(2, us(5000), 100_000);
        assert!(!r.waiting(us(5001)));
        // Answers bring it back (the port is still written to; it answers twice).
        r.read(2);
        r.written(2, us(6000), 100_000);
        r.read(2);
        r.written(2, us(7000), 100_000);
        assert!(r.waiting(us(7001)));
        // Reads from a port never written to are harmless.
        r.read(99);
        r.read(2);
        assert!(!r.waiting(us(7002)));
        // linger 0: never waits.
        r.written(3, us(8000), 0);
        assert!(!r.waiting(us(8000)));
    }
}
