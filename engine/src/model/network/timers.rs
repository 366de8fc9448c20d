//! The network's timer queue: one heap ordered by the total key (time, kind, source,
//! sequence), so simultaneous events run in an order that depends neither on hash order
//! nor on the driver. Entries are invalidated lazily: the owner acts on an entry only if it
//! is still the object's scheduled deadline.
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

#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

impl TimerQueue {
    pub fn push(&mut self, at: Instant, kind: TimerKind, source: usize) {
        self.seq += 1;
        self.heap.push(Reverse(Timer {
            at,
            kind,
            source,
            seq: self.seq,
        }));
    }

    /// The earliest entry (possibly stale).
    pub fn peek(&self) -> Option<Timer> {
        self.heap.peek().map(|t| t.0)
    }

    pub fn pop(&mut self) -> Option<Timer> {
        self.heap.pop().map(|t| t.0)
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
}
