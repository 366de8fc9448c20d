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

#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<Timer>>,
    /// Lazy entries; merged with `heap` by the total key, so the order of events is the
    /// same as with one heap.
    lazy: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

impl TimerQueue {
    fn entry(&mut self, at: Instant, kind: TimerKind, source: usize) -> Reverse<Timer> {
        self.seq += 1;
        Reverse(Timer {
            at,
            kind,
            source,
            seq: self.seq,
        })
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
            (Some(a), Some(b)) => Some(a.0.min(b.0)),
            (a, b) => a.or(b).map(|t| t.0),
        }
    }

    pub fn pop(&mut self) -> Option<Timer> {
        let lazy_first = match (self.heap.peek(), self.lazy.peek()) {
            (Some(a), Some(b)) => b.0 < a.0,
            (None, Some(_)) => true,
            _ => false,
        };
        if lazy_first {
            self.lazy.pop().map(|t| t.0)
        } else {
            self.heap.pop().map(|t| t.0)
        }
    }

    /// When a real-time driver must run the queue next: the earliest plain entry, or the
    /// earliest lazy one plus its grace.
    pub fn wake_at(&self) -> Option<Instant> {
        let lazy = self.lazy.peek().map(|t| t.0.at.add_nanos(LAZY_GRACE_NS));
        match (self.heap.peek().map(|t| t.0.at), lazy) {
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
