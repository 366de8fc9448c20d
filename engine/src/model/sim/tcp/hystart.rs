//! HyStart as Linux's CUBIC (`tcp_cubic.c`, kernel 6.1, `hystart_detect` = ACK train +
//! delay): ends slow start (ssthresh = cwnd) before the queue overflows. Times in
//! microseconds, as Linux.
//!
//! * `delay_min`: the least RTT sample CUBIC has seen (the RTT of the newest segment each
//!   ACK covers), reset by a retransmission timeout; samples within 1 s after the start of
//!   a congestion-avoidance epoch are ignored.
//! * A round starts when snd_una passes the highest sequence sent at the previous round's
//!   start (also checked in slow-start growth, whatever the window).
//! * Only while in slow start, not yet found, and cwnd ≥ [`LOW_WINDOW`]:
//!   - ACK train: each ACK within [`ACK_DELTA_US`] of the previous one extends the train
//!     (a later one breaks it for the round); slow start ends once the train lasts more
//!     than (delay_min + ack_delay) / 2 (Linux halves it when not pacing, the case here),
//!     ack_delay = min(1 ms, 4 · 64 KiB / pacing rate);
//!   - delay: the least sample of the round so far, checked from the round's
//!     ([`MIN_SAMPLES`] + 1)th sample on, exceeds delay_min + clamp(delay_min / 8, 4 ms,
//!     16 ms).

/// hystart_low_window.
pub const LOW_WINDOW: f64 = 16.0;
/// hystart_ack_delta_us.
pub const ACK_DELTA_US: u64 = 2000;
/// HYSTART_MIN_SAMPLES.
pub const MIN_SAMPLES: u32 = 8;
const DELAY_MIN_US: u64 = 4000;
const DELAY_MAX_US: u64 = 16_000;
/// GSO_MAX_SIZE: the most a sender's segmentation offload hands down at once.
const GSO_MAX_SIZE: u64 = 65_536;

#[derive(Debug, Default, Clone)]
pub struct HyStart {
    /// Slow start was ended by HyStart (no further checks until a timeout resets it).
    pub found: bool,
    /// 0 before the first sample.
    pub delay_min_us: u64,
    end_seq: u64,
    round_start_us: u64,
    last_ack_us: u64,
    curr_rtt_us: u64,
    sample_cnt: u32,
}

/// Linux's `hystart_ack_delay`: the pacing rate (bytes/s; 0 = unknown) gives the time a
/// few offload bursts take, at most 1 ms.
pub fn ack_delay_us(pacing_rate: f64) -> u64 {
    if pacing_rate <= 0.0 {
        return 0;
    }
    ((GSO_MAX_SIZE * 4) as f64 * 1e6 / pacing_rate).min(1000.0) as u64
}

impl HyStart {
    /// A new state at `now_us` (connection start or timeout): the round is the data up to
    /// `snd_nxt`.
    pub fn new(now_us: u64, snd_nxt: u64) -> Self {
        let mut h = HyStart::default();
        h.reset_round(now_us, snd_nxt);
        h
    }

    fn reset_round(&mut self, now_us: u64, snd_nxt: u64) {
        self.round_start_us = now_us;
        self.last_ack_us = now_us;
        self.end_seq = snd_nxt;
        self.curr_rtt_us = u64::MAX;
        self.sample_cnt = 0;
    }

    /// Slow-start growth on an ACK up to `ack` (`cubictcp_cong_avoid`): a new round once
    /// the ACK passes the round's end.
    pub fn slow_start_ack(&mut self, now_us: u64, ack: u64, snd_nxt: u64) {
        if ack > self.end_seq {
            self.reset_round(now_us, snd_nxt);
        }
    }

    /// An ACK with an RTT sample (`cubictcp_acked`). `active`: in slow start with cwnd ≥
    /// [`LOW_WINDOW`]. Returns true when slow start should end now.
    pub fn acked(
        &mut self,
        now_us: u64,
        rtt_us: u64,
        snd_una: u64,
        snd_nxt: u64,
        active: bool,
        ack_delay_us: u64,
    ) -> bool {
        let delay = rtt_us.max(1);
        if self.delay_min_us == 0 || delay < self.delay_min_us {
            self.delay_min_us = delay;
        }
        if self.found || !active {
            return false;
        }
        if snd_una > self.end_seq {
            self.reset_round(now_us, snd_nxt);
        }
        if now_us.saturating_sub(self.last_ack_us) <= ACK_DELTA_US {
            self.last_ack_us = now_us;
            let threshold = (self.delay_min_us + ack_delay_us) >> 1;
            if now_us.saturating_sub(self.round_start_us) > threshold {
                self.found = true;
            }
        }
        self.curr_rtt_us = self.curr_rtt_us.min(delay);
        if self.sample_cnt < MIN_SAMPLES {
            self.sample_cnt += 1;
        } else {
            let eta = (self.delay_min_us >> 3).clamp(DELAY_MIN_US, DELAY_MAX_US);
            if self.curr_rtt_us > self.delay_min_us + eta {
                self.found = true;
            }
        }
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one round of ACKs `gap_us` apart with the given RTTs; returns the index of
    /// the ACK that ended slow start, if any.
    fn round(
        h: &mut HyStart,
        t: &mut u64,
        una: &mut u64,
        gap_us: u64,
        rtts: &[u64],
    ) -> Option<usize> {
        // the data sent when the round starts ends with this round's last ACK
        let nxt = *una + rtts.len() as u64;
        for (i, &r) in rtts.iter().enumerate() {
            *t += gap_us;
            *una += 1;
            if h.acked(*t, r, *una, nxt, true, 1000) {
                return Some(i);
            }
            h.slow_start_ack(*t, *una, nxt);
        }
        None
    }

    #[test]
    fn delay_exit_uses_the_least_sample_of_the_whole_round() {
        let mut h = HyStart::new(0, 0);
        let (mut t, mut una) = (0, 0);
        // delay_min 40 ms: threshold 45 ms; ACKs 3 ms apart (no ACK train)
        assert_eq!(round(&mut h, &mut t, &mut una, 3000, &[40_000; 4]), None);
        // 8 samples above the threshold, then a 9th still above it: exit on the 9th
        let high = [46_000; 12];
        assert_eq!(round(&mut h, &mut t, &mut una, 3000, &high), Some(8));
        assert!(h.found);
        // a round whose samples drop back below the threshold after the 8th never exits
        let mut h = HyStart::new(0, 0);
        let (mut t, mut una) = (0, 0);
        round(&mut h, &mut t, &mut una, 3000, &[40_000; 4]);
        let mut rtts = vec![50_000; 8];
        rtts.extend([44_000; 8]);
        assert_eq!(round(&mut h, &mut t, &mut una, 3000, &rtts), None);
        // exactly at the threshold is not above it
        let mut h = HyStart::new(0, 0);
        let (mut t, mut una) = (0, 0);
        round(&mut h, &mut t, &mut una, 3000, &[40_000; 4]);
        assert_eq!(round(&mut h, &mut t, &mut una, 3000, &[45_000; 12]), None);
    }

    #[test]
    fn ack_train_exit_after_half_the_min_rtt_plus_ack_delay() {
        let mut h = HyStart::new(0, 0);
        let (mut t, mut una) = (0, 0);
        round(&mut h, &mut t, &mut una, 3000, &[40_000; 2]);
        // threshold (40 ms + 1 ms) / 2 = 20.5 ms: ACKs 1 ms apart from the round's start
        // (the round starts at the first ACK past the previous round) pass it at the 22nd (21 ms)
        let got = round(&mut h, &mut t, &mut una, 1000, &[40_000; 40]);
        assert_eq!(got, Some(21));
        // ACKs 2.4 ms apart (one per two segments at 10 Mbit/s) never form a train
        let mut h = HyStart::new(0, 0);
        let (mut t, mut una) = (0, 0);
        round(&mut h, &mut t, &mut una, 3000, &[40_000; 2]);
        assert_eq!(round(&mut h, &mut t, &mut una, 2400, &[40_000; 40]), None);
    }

    #[test]
    fn inactive_below_the_low_window_but_delay_min_follows() {
        let mut h = HyStart::new(0, 0);
        assert!(!h.acked(100, 30_000, 1, 10, false, 0));
        assert!(!h.acked(200, 20_000, 2, 10, false, 0));
        assert_eq!(h.delay_min_us, 20_000);
        assert_eq!(ack_delay_us(0.0), 0);
        assert_eq!(ack_delay_us(1e6), 1000);
        assert_eq!(ack_delay_us(4.0 * 65_536.0 * 1e4), 100);
    }
}
