//! The one definition of loss for a UDP flow, used by `wanlab-gen`'s sink (real packets)
//! and by the engine's simulated sinks, so that `wanlab compare` compares like with like.
//!
//! A source numbers its datagrams 0, 1, 2, … . For the datagrams a sink has seen:
//!
//! * **expected** = highest sequence number received + 1, or the total the sender announced
//!   (wanlab-gen's FIN datagram) if that is larger;
//! * **received** = *distinct* sequence numbers received;
//! * **lost** = expected − received. A packet that arrives late (after a higher sequence
//!   number) is **reordered, not lost**: it counts as received and lowers `lost` again;
//!   packets after the last one received are not visible until a later one (or the FIN)
//!   arrives;
//! * **duplicate** = a sequence number received again; it is never counted twice;
//! * **reordered** = a distinct sequence number that arrives after a higher one.
//!
//! Memory is bounded: the tracker remembers which numbers it has seen only within
//! [`WINDOW`] of the highest one. A datagram further behind than that is counted as
//! **stale** (a very late packet and a duplicate cannot be told apart any more): it is not
//! counted as received, so it stays lost. An in-order stream uses one 64-bit word.
use std::collections::VecDeque;

/// How far behind the highest sequence number a datagram may arrive and still be told
/// apart from a duplicate (2²⁰ datagrams: 128 KiB of bitmap at most per flow).
pub const WINDOW: u64 = 1 << 20;
const WORDS: usize = (WINDOW / 64) as usize;

/// Sequence-number bookkeeping of one flow (see the crate docs for the definitions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqTracker {
    /// Every sequence number below `base` is settled; `base` is a multiple of 64.
    base: u64,
    /// Bit `i` of word `k`: sequence number `base + 64k + i` was received.
    bits: VecDeque<u64>,
    /// Below this, the window moved past numbers never received (stale, not duplicates).
    forgotten_below: u64,
    /// Distinct sequence numbers received.
    pub received: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Arrived more than [`WINDOW`] behind the highest sequence number.
    pub stale: u64,
    pub max_seq: Option<u64>,
    /// The number of datagrams the sender says it sent (wanlab-gen's FIN), if known.
    pub announced: Option<u64>,
}

impl SeqTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one datagram with sequence number `seq`.
    pub fn record(&mut self, seq: u64) {
        if seq < self.base {
            if seq < self.forgotten_below {
                self.stale += 1;
            } else {
                self.duplicates += 1; // every number in a dropped full word was received
            }
            return;
        }
        let word = ((seq - self.base) / 64) as usize;
        if word >= WORDS {
            self.slide_to(seq);
            return self.record(seq);
        }
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
        }
        let bit = 1u64 << ((seq - self.base) % 64);
        if self.bits[word] & bit != 0 {
            self.duplicates += 1;
            return;
        }
        self.bits[word] |= bit;
        self.received += 1;
        match self.max_seq {
            Some(m) if seq < m => self.reordered += 1,
            _ => self.max_seq = Some(seq),
        }
        while self.bits.len() > 1 && self.bits.front() == Some(&u64::MAX) {
            self.bits.pop_front();
            self.base += 64;
        }
    }

    /// Move the window so that `seq` falls into its last word, forgetting what falls out.
    fn slide_to(&mut self, seq: u64) {
        let new_base = (seq / 64 - (WORDS as u64 - 1)) * 64;
        let drop = (new_base - self.base) / 64;
        if drop >= self.bits.len() as u64 {
            self.bits.clear();
        } else {
            self.bits.drain(..drop as usize);
        }
        self.base = new_base;
        self.forgotten_below = new_base;
    }

    /// Datagrams the sender is known to have sent.
    pub fn expected(&self) -> u64 {
        let by_seq = self.max_seq.map_or(0, |m| m.saturating_add(1));
        by_seq.max(self.announced.unwrap_or(0))
    }

    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }

    /// lost / expected (0 when nothing is expected).
    pub fn loss_ratio(&self) -> f64 {
        match self.expected() {
            0 => 0.0,
            e => self.lost() as f64 / e as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> SeqTracker {
        let mut t = SeqTracker::new();
        for &s in seqs {
            t.record(s);
        }
        t
    }

    #[test]
    fn in_order_no_loss_one_word() {
        let t = run(&(0..100_000).collect::<Vec<_>>());
        assert_eq!(
            (t.received, t.lost(), t.reordered, t.duplicates),
            (100_000, 0, 0, 0)
        );
        assert!(t.bits.len() <= 1, "an in-order stream keeps one word");
    }

    #[test]
    fn reordered_is_not_lost() {
        // 2 and 1 swap, 6 arrives after 7: nothing lost, two reordered.
        let t = run(&[0, 2, 1, 3, 4, 5, 7, 6]);
        assert_eq!((t.expected(), t.received, t.lost()), (8, 8, 0));
        assert_eq!(t.reordered, 2);
        // Before the late packet arrives, it is (for now) missing.
        let t = run(&[0, 2]);
        assert_eq!((t.lost(), t.reordered), (1, 0));
    }

    #[test]
    fn duplicates_counted_once() {
        let t = run(&[0, 1, 1, 2, 0, 2, 2]);
        assert_eq!(
            (t.received, t.duplicates, t.lost(), t.reordered),
            (3, 4, 0, 0)
        );
        // A duplicate of an old, already compacted number is still a duplicate.
        let mut seqs: Vec<u64> = (0..200).collect();
        seqs.push(5);
        let t = run(&seqs);
        assert_eq!((t.received, t.duplicates, t.lost()), (200, 1, 0));
    }

    #[test]
    fn gaps_reorder_dups_and_announced_total() {
        // seen 0,1,2,3,5,6,7,9 → received 8, expected 10, lost 2 (4 and 8)
        let mut t = run(&[0, 1, 3, 2, 5, 5, 7, 6, 9]);
        assert_eq!(
            (t.received, t.duplicates, t.reordered, t.lost()),
            (8, 1, 2, 2)
        );
        t.announced = Some(12);
        assert_eq!(t.lost(), 4);
        assert!((t.loss_ratio() - 4.0 / 12.0).abs() < 1e-12);
        t.announced = Some(3);
        assert_eq!(
            t.expected(),
            10,
            "a smaller announced total does not shrink expected"
        );
    }

    #[test]
    fn lost_then_late_then_stale() {
        let mut t = run(&[0, 2]);
        assert_eq!(t.lost(), 1);
        t.record(1);
        assert_eq!((t.lost(), t.reordered), (0, 1));
        // Jump far ahead: 3 .. WINDOW+100 are missing; a late one within the window counts.
        let far = WINDOW + 100;
        t.record(far);
        assert_eq!(t.lost(), far - 3);
        t.record(far - 10);
        assert_eq!((t.lost(), t.reordered), (far - 4, 2));
        // 5 is now further than WINDOW behind the highest: stale, stays lost.
        t.record(5);
        assert_eq!((t.stale, t.lost(), t.duplicates), (1, far - 4, 0));
        assert!(t.bits.len() <= WORDS);
    }

    #[test]
    fn extreme_sequence_numbers_do_not_panic() {
        let t = run(&[u64::MAX, 0, u64::MAX - 1, u64::MAX, 1 << 63]);
        assert_eq!(t.expected(), u64::MAX, "saturates");
        assert_eq!((t.received, t.duplicates), (2, 1));
        assert_eq!(t.stale, 2);
    }
}
