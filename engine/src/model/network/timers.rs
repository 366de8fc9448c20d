//! The network's timer queue: one heap ordered by the total key (time, kind, source,
//! sequence), so simultaneous events run in an order that depends neither on hash order
//! nor on the driver. Entries are invalidated lazily: the owner acts on an entry only if it
//! is still the object's scheduled deadline.
//!
//! *Lazy* entries (see [`TimerQueue::push_lazy`]) run in the same total order, but a
//! real-time driver need not wake for them before their deadline plus [`LAZY_GRACE_NS`]
//! ([`TimerQueue::wake_at`]): they produce nothing outside the model and are computed at
//! their own event time whenever they run, so running them a little late costs no fidelity
//! and saves a wake-up (the end of a serialization on a link with a propagation delay).
//!
//! Each of the two is a [`Wheel`]: a timing wheel of 65.5 µs slots over about a second, with
//! a small heap for the entries of the earliest slot and one for those beyond the wheel. A
//! large simulation keeps a timer per traffic source and per busy link half (75 000 at
//! 100 000 simulated nodes): one heap of them all cost a fifth of the engine's time in
//! cache misses of its `pop`; the wheel sorts only the entries of one slot. Any exact
//! priority queue pops the same sequence (keys are unique), so results do not change.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::Instant;

/// What a timer belongs to; at the same instant kinds run in this declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    /// A pipeline's sending half: end of a serialization (source = pipeline index).
    PipeTx,
    /// A pipeline's receiving half: a frame leaves the delay stage (source = pipeline index).
    /// Simulated routers and hosts need no timer: they answer at the instant of delivery.
    PipeRx,
    /// A UDP traffic source's next send time (source = agent index).
    Agent,
    /// A TCP agent's retransmission or delayed-ACK timer (source = agent index).
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timer {
    pub at: Instant,
    pub kind: TimerKind,
    pub source: usize,
    seq: u64,
}

/// How long after its deadline a lazy entry may run (a real-time driver wakes for it then
/// at the latest).
pub const LAZY_GRACE_NS: u64 = 500_000;

/// When an entry set for `at` is due, for the lateness statistics: a lazy one at the end of
/// its grace.
pub fn due_at(at: Instant, lazy: bool) -> Instant {
    if lazy {
        at.add_nanos(LAZY_GRACE_NS)
    } else {
        at
    }
}

#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: Wheel,
    /// Lazy entries; merged with `heap` by the total key, so the order of events is the
    /// same as with one queue.
    lazy: Wheel,
    seq: u64,
}

/// log2 of a wheel slot's width in ns (65.5 µs).
const SLOT_SHIFT: u32 = 16;
/// Slots of a wheel (a power of two): 2^14 slots of 65.5 µs cover 1.07 s, more than a CBR
/// source's period or a link's delay in most experiments.
const SLOTS: u64 = 1 << 14;

fn slot_of(t: &Timer) -> u64 {
    t.at.nanos() >> SLOT_SHIFT
}

/// An exact priority queue of timers by their total key, cheap when there are many: the
/// entries of slots up to `cur` in a heap (`ready`; each is earlier than every other
/// entry), those of the next [`SLOTS`] − 1 slots unsorted in their slot's bucket, the rest
/// in a heap (`far`). Invariant: `ready` is empty only when the whole wheel is.
#[derive(Debug, Default)]
struct Wheel {
    ready: BinaryHeap<Reverse<Timer>>,
    /// Slot s (cur < s < cur + SLOTS) at index s % SLOTS; allocated at first use.
    buckets: Vec<Vec<Timer>>,
    /// Bit i: `buckets[i]` is not empty.
    occupied: Vec<u64>,
    /// Entries in `buckets`.
    in_buckets: usize,
    far: BinaryHeap<Reverse<Timer>>,
    cur: u64,
}

impl Wheel {
    fn push(&mut self, t: Timer) {
        let s = slot_of(&t);
        if self.ready.is_empty() {
            // Empty: the wheel starts at this entry's slot.
            self.cur = s;
        }
        if s <= self.cur {
            self.ready.push(Reverse(t));
        } else if s - self.cur < SLOTS {
            self.put_in_bucket(s, t);
        } else {
            self.far.push(Reverse(t));
        }
    }

    fn put_in_bucket(&mut self, s: u64, t: Timer) {
        if self.buckets.is_empty() {
            self.buckets.resize_with(SLOTS as usize, Vec::new);
            self.occupied = vec![0; (SLOTS / 64) as usize];
        }
        let i = (s % SLOTS) as usize;
        self.buckets[i].push(t);
        self.occupied[i / 64] |= 1 << (i % 64);
        self.in_buckets += 1;
    }

    fn peek(&self) -> Option<&Timer> {
        self.ready.peek().map(|t| &t.0)
    }

    fn pop(&mut self) -> Option<Timer> {
        let t = self.ready.pop()?.0;
        if self.ready.is_empty() {
            self.refill();
        }
        Some(t)
    }

    /// `ready` ran empty: move on to the next slot with entries.
    fn refill(&mut self) {
        let next = if self.in_buckets > 0 {
            self.next_occupied()
        } else if let Some(f) = self.far.peek() {
            slot_of(&f.0)
        } else {
            return;
        };
        self.cur = next;
        let i = (next % SLOTS) as usize;
        if self.in_buckets > 0 && self.occupied[i / 64] & (1 << (i % 64)) != 0 {
            self.occupied[i / 64] &= !(1 << (i % 64));
            let entries = std::mem::take(&mut self.buckets[i]);
            self.in_buckets -= entries.len();
            // Heapify the slot's entries; the emptied heap's storage becomes the bucket's.
            let old = std::mem::replace(&mut self.ready, BinaryHeap::from(entries_rev(entries)));
            self.buckets[i] = old.into_vec().into_iter().map(|r| r.0).collect();
        }
        // Far entries the wheel now covers.
        while let Some(f) = self.far.peek() {
            let s = slot_of(&f.0);
            if s - self.cur >= SLOTS {
                break;
            }
            let Some(Reverse(t)) = self.far.pop() else {
                break;
            };
            if s == self.cur {
                self.ready.push(Reverse(t));
            } else {
                self.put_in_bucket(s, t);
            }
        }
    }

    /// The first slot after `cur` whose bucket has entries (there is one).
    fn next_occupied(&self) -> u64 {
        let start = (self.cur + 1) % SLOTS;
        let words = self.occupied.len();
        let (w0, b0) = ((start / 64) as usize, start % 64);
        for k in 0..=words {
            let w = (w0 + k) % words;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= u64::MAX << b0;
            }
            if bits != 0 {
                let i = (w * 64) as u64 + u64::from(bits.trailing_zeros());
                return self.cur + 1 + (i + SLOTS - start) % SLOTS;
            }
        }
        unreachable!("in_buckets > 0 but no bucket is occupied")
    }
}

/// A bucket's entries as heap elements (the same memory: `Reverse` is transparent).
fn entries_rev(v: Vec<Timer>) -> Vec<Reverse<Timer>> {
    v.into_iter().map(Reverse).collect()
}

impl TimerQueue {
    fn entry(&mut self, at: Instant, kind: TimerKind, source: usize) -> Timer {
        self.seq += 1;
        Timer {
            at,
            kind,
            source,
            seq: self.seq,
        }
    }

    pub fn push(&mut self, at: Instant, kind: TimerKind, source: usize) {
        let e = self.entry(at, kind, source);
        self.heap.push(e);
    }

    /// An entry that a real-time driver need not wake for before `at` + [`LAZY_GRACE_NS`].
    pub fn push_lazy(&mut self, at: Instant, kind: TimerKind, source: usize) {
        let e = self.entry(at, kind, source);
        self.lazy.push(e);
    }

    /// The earliest entry (possibly stale).
    pub fn peek(&self) -> Option<Timer> {
        match (self.heap.peek(), self.lazy.peek()) {
            (Some(a), Some(b)) => Some(*a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    pub fn pop(&mut self) -> Option<Timer> {
        let lazy_first = match (self.heap.peek(), self.lazy.peek()) {
            (Some(a), Some(b)) => b < a,
            (None, Some(_)) => true,
            _ => false,
        };
        if lazy_first {
            self.lazy.pop()
        } else {
            self.heap.pop()
        }
    }

    /// [`TimerQueue::push_lazy`] if `lazy`, else [`TimerQueue::push`].
    pub fn push_as(&mut self, lazy: bool, at: Instant, kind: TimerKind, source: usize) {
        if lazy {
            self.push_lazy(at, kind, source);
        } else {
            self.push(at, kind, source);
        }
    }

    /// The next entry due by `until` for a real-time driver: plain entries first, then lazy
    /// ones while `lazy_ok` (the flag says which it is). Running a plain entry before lazy
    /// ones due earlier is safe only because lazy entries act on nodes whose effects reach
    /// every plain port, and every plain entry's node, later than their grace (`quiet`).
    pub fn pop_due_plain_first(&mut self, until: Instant, lazy_ok: bool) -> Option<(Timer, bool)> {
        if self.heap.peek().is_some_and(|t| t.at <= until) {
            return self.heap.pop().map(|t| (t, false));
        }
        if lazy_ok && self.lazy.peek().is_some_and(|t| t.at <= until) {
            return self.lazy.pop().map(|t| (t, true));
        }
        None
    }

    /// Whether a lazy entry is due by `now` (a real-time driver that ran its share of them
    /// goes on without sleeping).
    pub fn lazy_due(&self, now: Instant) -> bool {
        self.lazy.peek().is_some_and(|t| t.at <= now)
    }

    /// How far a real-time driver is behind with lazy entries at `now`: how long ago the
    /// earliest one's grace ran out (0 if it has not).
    pub fn lazy_lag_ns(&self, now: Instant) -> u64 {
        self.lazy.peek().map_or(0, |t| {
            now.nanos()
                .saturating_sub(t.at.nanos().saturating_add(LAZY_GRACE_NS))
        })
    }

    /// When a real-time driver must run the queue next: the earliest plain entry, or the
    /// earliest lazy one plus its grace.
    pub fn wake_at(&self) -> Option<Instant> {
        let lazy = self.lazy.peek().map(|t| t.at.add_nanos(LAZY_GRACE_NS));
        match (self.heap.peek().map(|t| t.at), lazy) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_order_time_kind_source_sequence() {
        let t = Instant::from_nanos;
        let mut q = TimerQueue::default();
        q.push(t(5), TimerKind::Tcp, 0);
        q.push(t(5), TimerKind::PipeRx, 9);
        q.push(t(5), TimerKind::Agent, 1);
        q.push(t(5), TimerKind::PipeRx, 2);
        q.push(t(1), TimerKind::Tcp, 7);
        q.push(t(5), TimerKind::PipeRx, 2);
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|x| (x.at.nanos(), x.kind, x.source, x.seq))
            .collect();
        assert_eq!(
            order,
            vec![
                (1, TimerKind::Tcp, 7, 5),
                (5, TimerKind::PipeRx, 2, 4),
                (5, TimerKind::PipeRx, 2, 6),
                (5, TimerKind::PipeRx, 9, 2),
                (5, TimerKind::Agent, 1, 3),
                (5, TimerKind::Tcp, 0, 1),
            ]
        );
    }

    #[test]
    fn the_wheel_pops_what_a_heap_pops() {
        // Dense and sparse times, ties, entries far beyond the wheel and before its current
        // slot (a real-time driver may schedule in the past), pushes between pops.
        let mut rng = crate::rng::Rng::new(7);
        for spread in [1u64 << 10, 1 << 20, 1 << 28, 1 << 34] {
            let mut wheel = Wheel::default();
            let mut heap = BinaryHeap::new();
            let mut now = 0u64;
            let mut seq = 0;
            for round in 0..20_000 {
                for _ in 0..rng.below(4) {
                    seq += 1;
                    let at = if rng.chance(0.05) {
                        now.saturating_sub(rng.below(1 << 18))
                    } else {
                        now + rng.below(spread) * (rng.below(3) + 1) / 2
                    };
                    let t = Timer {
                        at: Instant::from_nanos(at),
                        kind: TimerKind::PipeRx,
                        source: rng.below(5) as usize,
                        seq,
                    };
                    wheel.push(t);
                    heap.push(Reverse(t));
                }
                let pops = if round % 1000 == 999 {
                    1000
                } else {
                    rng.below(4)
                };
                for _ in 0..pops {
                    assert_eq!(wheel.peek().copied(), heap.peek().map(|t| t.0));
                    let (a, b) = (wheel.pop(), heap.pop().map(|t| t.0));
                    assert_eq!(a, b, "spread {spread}, round {round}");
                    if let Some(t) = a {
                        now = now.max(t.at.nanos());
                    }
                }
            }
            while let Some(t) = heap.pop() {
                assert_eq!(wheel.pop(), Some(t.0));
            }
            assert_eq!(wheel.pop(), None);
        }
    }

    #[test]
    fn a_real_time_driver_runs_plain_entries_before_lazy_ones_due_earlier() {
        let t = Instant::from_nanos;
        let mut q = TimerQueue::default();
        q.push_lazy(t(1), TimerKind::Agent, 0);
        q.push_lazy(t(2), TimerKind::Agent, 1);
        q.push(t(3), TimerKind::PipeRx, 2);
        q.push(t(9), TimerKind::PipeRx, 3);
        let mut pop = |until, lazy_ok| {
            q.pop_due_plain_first(t(until), lazy_ok)
                .map(|(x, lazy)| (x.source, lazy))
        };
        assert_eq!(pop(5, true), Some((2, false)));
        assert_eq!(pop(5, false), None, "lazy ones wait when not allowed");
        assert_eq!(pop(5, true), Some((0, true)));
        assert_eq!(pop(5, true), Some((1, true)));
        assert_eq!(pop(5, true), None, "nothing else is due");
        assert_eq!(pop(9, false), Some((3, false)));
    }

    #[test]
    fn lazy_entries_keep_the_total_order_and_defer_the_wake_up() {
        let t = Instant::from_nanos;
        let mut all = TimerQueue::default();
        let mut split = TimerQueue::default();
        for (i, at) in [7u64, 3, 3, 9, 1, 3, 12].into_iter().enumerate() {
            let kind = if i % 2 == 0 {
                TimerKind::PipeTx
            } else {
                TimerKind::PipeRx
            };
            all.push(t(at), kind, i);
            if kind == TimerKind::PipeTx {
                split.push_lazy(t(at), kind, i);
            } else {
                split.push(t(at), kind, i);
            }
        }
        // Only lazy entries first: the wake-up waits for their grace.
        assert_eq!(split.peek().map(|x| x.at), Some(t(1)));
        assert_eq!(split.wake_at(), Some(t(1 + LAZY_GRACE_NS).min(t(3))));
        let a: Vec<_> = std::iter::from_fn(|| all.pop()).collect();
        let b: Vec<_> = std::iter::from_fn(|| split.pop()).collect();
        assert_eq!(a, b);
        assert_eq!(split.wake_at(), None);
        let mut lazy_only = TimerQueue::default();
        lazy_only.push_lazy(t(5), TimerKind::PipeTx, 0);
        assert_eq!(lazy_only.wake_at(), Some(t(5 + LAZY_GRACE_NS)));
    }
}
