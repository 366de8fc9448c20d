//! Absolute-deadline pacing.
//!
//! Packet `i` is due at `start + i * 1e9 / rate` nanoseconds, computed exactly
//! in integer arithmetic from the start time, so the average rate is exact no
//! matter how late individual wake-ups are (late packets are sent in the next
//! batch; nothing accumulates as drift).

/// Pacing rate expressed as a rational number of packets per second
/// (`num / den` pps), so bit rates that are not whole packet rates stay exact.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    start_ns: u64,
    /// packets per second numerator / denominator; num == 0 means unpaced.
    num: u128,
    den: u128,
}

impl Pacer {
    /// `pps_num / pps_den` packets per second; a zero numerator disables pacing.
    pub fn new(start_ns: u64, pps_num: u128, pps_den: u128) -> Pacer {
        Pacer {
            start_ns,
            num: pps_num,
            den: pps_den.max(1),
        }
    }

    /// Pacer for a bit rate where each packet costs `bits_per_pkt` bits.
    pub fn for_bitrate(start_ns: u64, bps: u64, bits_per_pkt: u64) -> Pacer {
        Pacer::new(start_ns, bps as u128, bits_per_pkt.max(1) as u128)
    }

    pub fn unpaced(&self) -> bool {
        self.num == 0
    }

    /// Absolute deadline of packet `i`.
    pub fn deadline(&self, i: u64) -> u64 {
        if self.num == 0 {
            return self.start_ns;
        }
        // ceil, so that deadline(i) is the first ns at which packet i is due
        let off = (i as u128 * 1_000_000_000u128 * self.den).div_ceil(self.num);
        self.start_ns
            .saturating_add(off.min(u64::MAX as u128) as u64)
    }

    /// Number of packets that are due at `now` (index of the first packet not yet due).
    pub fn due_count(&self, now: u64) -> u64 {
        if self.num == 0 {
            return u64::MAX;
        }
        if now < self.start_ns {
            return 0;
        }
        let el = (now - self.start_ns) as u128;
        // largest i with i*1e9*den/num <= el  -> i = floor(el*num/(1e9*den)) + 1
        let i = (el * self.num) / (1_000_000_000u128 * self.den) + 1;
        i.min(u64::MAX as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn deadlines_exact() {
        let p = Pacer::new(1000, 1000, 1); // 1000 pps
        assert_eq!(p.deadline(0), 1000);
        assert_eq!(p.deadline(1), 1000 + 1_000_000);
        assert_eq!(p.deadline(1000), 1000 + 1_000_000_000);
        assert_eq!(p.due_count(999), 0);
        assert_eq!(p.due_count(1000), 1);
        assert_eq!(p.due_count(1000 + 999_999), 1);
        assert_eq!(p.due_count(1000 + 1_000_000), 2);
    }
    #[test]
    fn bitrate_average_exact() {
        // 56 kbit/s of 106-byte frames = 66.037.. pps; after 1e6 packets the
        // deadline must match the exact rational value within 1 ns.
        let p = Pacer::for_bitrate(0, 56_000, 106 * 8);
        let d = p.deadline(1_000_000);
        let exact = 1_000_000f64 * 106.0 * 8.0 / 56_000.0 * 1e9;
        assert!((d as f64 - exact).abs() < 2.0, "{} vs {}", d, exact);
        // due_count is consistent with deadline
        for i in [1u64, 17, 999, 123_456] {
            assert_eq!(p.due_count(p.deadline(i)), i + 1);
            assert_eq!(p.due_count(p.deadline(i) - 1), i);
        }
    }
    #[test]
    fn unpaced() {
        let p = Pacer::new(5, 0, 1);
        assert!(p.unpaced());
        assert_eq!(p.due_count(0), u64::MAX);
    }
}
