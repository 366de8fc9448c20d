//! Trace-driven capacity: Mahimahi's delivery opportunities.
//!
//! A trace is a list of millisecond timestamps, each an opportunity to deliver 1500 bytes;
//! several in one millisecond repeat it. Accounting is by bytes: a frame takes what is left
//! of the opportunities from the one at or after the instant it starts, and leaves at the
//! opportunity that carries its last byte; a frame starting at that same instant uses what
//! that opportunity has left, and an opportunity with nothing queued is lost. When the trace
//! ends it starts again shifted by its last timestamp (`looped`), or the direction carries
//! nothing more. Trace time 0 is `offset_ms` before the instant the trace was set.

use std::sync::Arc;

use crate::time::Instant;

/// Bytes one delivery opportunity carries.
pub const OPPORTUNITY_BYTES: u64 = 1500;
/// Most opportunities a trace may hold.
pub const MAX_OPPORTUNITIES: usize = 50_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times in ms, non-decreasing, the last one > 0.
    pub ms: Arc<Vec<u64>>,
    pub offset_ms: u64,
    pub looped: bool,
}

/// Where the next frame's bytes come from: opportunity `k` (counted over the loops from
/// the trace's start) with `used` of its bytes taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub k: u64,
    pub used: u64,
}

impl Trace {
    /// Check a trace's opportunities (the error says what is wrong, and where).
    pub fn check(ms: &[u64]) -> Result<(), String> {
        if ms.is_empty() {
            return Err("a trace needs at least one opportunity".into());
        }
        if ms.len() > MAX_OPPORTUNITIES {
            return Err(format!("at most {MAX_OPPORTUNITIES} opportunities"));
        }
        if let Some(i) = ms.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!(
                "opportunity {} at {} ms comes before the previous one at {} ms",
                i + 1,
                ms[i + 1],
                ms[i]
            ));
        }
        if *ms.last().unwrap_or(&0) == 0 {
            return Err(
                "the last opportunity must be after 0 ms (it is the trace's period)".into(),
            );
        }
        Ok(())
    }

    fn period(&self) -> u64 {
        *self.ms.last().unwrap_or(&1)
    }

    /// Trace time (ms) of opportunity `k`; None past the end of an unlooped trace.
    pub fn at_ms(&self, k: u64) -> Option<u64> {
        let n = self.ms.len() as u64;
        let (c, i) = (k / n, (k % n) as usize);
        if c > 0 && !self.looped {
            return None;
        }
        Some(self.ms[i] + c * self.period())
    }

    /// The first opportunity at or after trace time `t_ns` (ns).
    pub fn first_at_or_after(&self, t_ns: u64) -> u64 {
        let m = t_ns.div_ceil(1_000_000);
        let n = self.ms.len() as u64;
        let p = self.period();
        // cycle c holds times up to (c + 1) p: earlier cycles end before m
        let c = if self.looped {
            m.saturating_sub(1) / p
        } else {
            0
        };
        let within = m - c * p;
        let i = self.ms.partition_point(|&x| x < within) as u64;
        c * n + i
    }

    /// The instant the frame of `bytes` starting at `start` leaves (its last byte's
    /// opportunity), taking its bytes from `cur`; `origin` is trace time `offset_ms`. None:
    /// the trace ended before.
    pub fn serialize(
        &self,
        cur: &mut Cursor,
        origin: Instant,
        start: Instant,
        bytes: u64,
    ) -> Option<Instant> {
        let since = start.nanos_since(origin) + self.offset_ms * 1_000_000;
        let first = self.first_at_or_after(since);
        let (mut k, mut used) = if first > cur.k {
            (first, 0)
        } else {
            (cur.k, cur.used)
        };
        let mut need = bytes.max(1);
        loop {
            let at = self.at_ms(k)?;
            let avail = OPPORTUNITY_BYTES - used;
            if need <= avail {
                *cur = Cursor {
                    k,
                    used: used + need,
                };
                let off = (at - self.offset_ms.min(at)) * 1_000_000;
                return Some(origin.add_nanos(off).max(start));
            }
            need -= avail;
            k += 1;
            used = 0;
        }
    }

    /// Mean capacity in bit/s (for the queue's automatic limit and RED's idle time).
    pub fn mean_bps(&self) -> u64 {
        (self.ms.len() as u64 * OPPORTUNITY_BYTES * 8 * 1000 / self.period()).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(ms: &[u64], looped: bool) -> Trace {
        Trace {
            ms: Arc::new(ms.to_vec()),
            offset_ms: 0,
            looped,
        }
    }

    #[test]
    fn byte_level_accounting() {
        // one opportunity each ms: 12 Mbit/s
        let t = trace(&[1], true);
        let mut c = Cursor::default();
        let o = Instant::ZERO;
        // a 1500-byte frame at 0 leaves at the 1 ms opportunity
        assert_eq!(
            t.serialize(&mut c, o, o, 1500),
            Some(Instant::from_millis(1))
        );
        // two 700-byte frames queued behind it share the 2 ms opportunity; a third spills
        let t2 = Instant::from_millis(1);
        assert_eq!(
            t.serialize(&mut c, o, t2, 700),
            Some(Instant::from_millis(2))
        );
        let t3 = Instant::from_millis(2);
        assert_eq!(
            t.serialize(&mut c, o, t3, 700),
            Some(Instant::from_millis(2))
        );
        assert_eq!(
            t.serialize(&mut c, o, t3, 700),
            Some(Instant::from_millis(3))
        );
        // a frame that comes later does not get the unused part of a past opportunity
        let late = Instant::from_nanos(10_500_000);
        assert_eq!(
            t.serialize(&mut c, o, late, 100),
            Some(Instant::from_millis(11))
        );
        // 3000 bytes take two opportunities
        assert_eq!(
            t.serialize(&mut c, o, Instant::from_millis(20), 3000),
            Some(Instant::from_millis(21))
        );
        assert_eq!(c, Cursor { k: 20, used: 1500 });
    }

    #[test]
    fn loops_offsets_and_ends() {
        // opportunities at 5, 5 and 10 ms; period 10 ms
        let t = trace(&[5, 5, 10], true);
        let o = Instant::ZERO;
        let mut c = Cursor::default();
        let at: Vec<u64> = (0..6)
            .map(|_| t.serialize(&mut c, o, o, 1500).unwrap().nanos() / 1_000_000)
            .collect();
        assert_eq!(at, vec![5, 5, 10, 15, 15, 20]);
        assert_eq!(t.mean_bps(), 3 * 1500 * 8 * 100);
        // unlooped: three opportunities and then nothing
        let once = trace(&[5, 5, 10], false);
        let mut c = Cursor::default();
        let n = (0..5)
            .filter_map(|_| once.serialize(&mut c, o, o, 1500))
            .count();
        assert_eq!(n, 3);
        // an offset of 5 ms: the opportunities at 5 ms are at the start
        let off = Trace {
            offset_ms: 5,
            ..t.clone()
        };
        let mut c = Cursor::default();
        let o = Instant::from_millis(100);
        assert_eq!(off.serialize(&mut c, o, o, 1500), Some(o));
        assert_eq!(
            off.serialize(&mut c, o, o, 3000),
            Some(Instant::from_millis(105))
        );
    }

    #[test]
    fn check_names_the_problem() {
        assert!(Trace::check(&[]).is_err());
        assert!(Trace::check(&[0, 0]).unwrap_err().contains("after 0 ms"));
        assert!(Trace::check(&[1, 3, 2])
            .unwrap_err()
            .contains("opportunity 2 at 2 ms"));
        assert!(Trace::check(&[0, 1]).is_ok());
    }
}
