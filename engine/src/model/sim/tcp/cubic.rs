//! CUBIC window growth as Linux's `tcp_cubic.c` (`bictcp_update`), in segments and seconds.
//!
//! Congestion avoidance follows W_cubic(t) = C·(t − K)³ + W_max with C = 0.4, where t is the
//! time since the current congestion-avoidance epoch began (the first ACK in congestion
//! avoidance after a reduction) and K = ∛((W_max − cwnd_epoch)/C) (0 when cwnd_epoch ≥
//! W_max, the curve then starting at cwnd_epoch). Each ACK for `acked` segments adds
//! acked/cnt to cwnd, where cnt = cwnd/(target − cwnd) and target = W_cubic(t + delay_min)
//! (Linux looks ahead by the least RTT seen), so cwnd reaches the target within a round
//! trip; cnt is at least 2 (at most 1.5·cwnd per round trip) and 100·cwnd when the target
//! is not above cwnd. Before the first loss (W_max = 0, e.g. after HyStart ended slow
//! start) cnt is at most 20: cwnd grows by at least 5 % per round trip. The Reno-friendly
//! estimate W_est starts at cwnd_epoch and grows by one segment per cwnd·15/8 acknowledged
//! segments (Linux's integer α = 3(1 − β)/(1 + β)); while it is above cwnd, cnt is at most
//! cwnd/(W_est − cwnd). A reduction multiplies cwnd by β = 0.7; with fast convergence,
//! W_max is lowered to cwnd·(1 + β)/2 when a loss happens below the previous W_max.
//! HyStart is [`super::hystart`].
use crate::time::Instant;

pub const C: f64 = 0.4;
pub const BETA: f64 = 0.7;
/// Linux's `beta_scale` (8·(1024 + 717)/3/(1024 − 717) in integers): W_est grows by one
/// segment per cwnd·15/8 acknowledged segments.
const BETA_SCALE: f64 = 15.0;
/// The largest cnt before the first loss (`ca->cnt = 20`: 5 % per round trip).
const CNT_NO_WMAX: f64 = 20.0;

#[derive(Debug, Clone, Default)]
pub struct Cubic {
    /// Window before the last reduction (segments; 0 before the first one).
    pub w_max: f64,
    k: f64,
    origin: f64,
    epoch: Option<Instant>,
    /// Reno-friendly window (`tcp_cwnd`) and the segments acknowledged towards its next
    /// increase (`ack_cnt`).
    w_est: f64,
    ack_cnt: f64,
}

impl Cubic {
    /// A congestion event with window `cwnd`: returns the new ssthresh (≥ 2 segments) and
    /// ends the current epoch.
    pub fn on_loss(&mut self, cwnd: f64) -> f64 {
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.epoch = None;
        (cwnd * BETA).max(2.0)
    }

    /// When the current congestion-avoidance epoch began (`None` outside one).
    pub fn epoch(&self) -> Option<Instant> {
        self.epoch
    }

    /// The curve W_cubic of the current epoch at `t` seconds into it.
    pub fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.origin
    }

    /// A new ACK for `acked` segments in congestion avoidance at `now`, `delay_min_s` the
    /// least RTT seen; returns the new cwnd.
    pub fn on_ack(&mut self, cwnd: f64, acked: f64, now: Instant, delay_min_s: f64) -> f64 {
        self.ack_cnt += acked;
        let epoch = match self.epoch {
            Some(e) => e,
            None => {
                self.epoch = Some(now);
                self.ack_cnt = acked;
                self.w_est = cwnd;
                if cwnd < self.w_max {
                    self.k = ((self.w_max - cwnd) / C).cbrt();
                    self.origin = self.w_max;
                } else {
                    self.k = 0.0;
                    self.origin = cwnd;
                }
                now
            }
        };
        let t = now.nanos_since(epoch) as f64 / 1e9 + delay_min_s;
        let target = self.w_cubic(t);
        let mut cnt = if target > cwnd {
            cwnd / (target - cwnd)
        } else {
            100.0 * cwnd
        };
        if self.w_max == 0.0 {
            cnt = cnt.min(CNT_NO_WMAX);
        }
        // Reno-friendly region (tcp_friendliness)
        let per = (cwnd.floor() * BETA_SCALE / 8.0).max(1.0);
        while self.ack_cnt > per {
            self.ack_cnt -= per;
            self.w_est += 1.0;
        }
        if self.w_est > cwnd {
            cnt = cnt.min(cwnd / (self.w_est - cwnd));
        }
        cwnd + acked / cnt.max(2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_and_plateau() {
        let mut c = Cubic::default();
        assert_eq!(c.on_loss(100.0), 70.0);
        assert_eq!(c.w_max, 100.0);
        // Fast convergence: a loss below W_max lowers W_max further.
        assert_eq!(c.on_loss(80.0), 56.0);
        assert_eq!(c.w_max, 80.0 * 0.85);
        // Starting at 70 below W_max 100: K = ∛(30/0.4); at t = K the curve is at W_max.
        let mut c = Cubic {
            w_max: 100.0,
            ..Default::default()
        };
        let t0 = Instant::ZERO;
        let mut w = c.on_ack(70.0, 1.0, t0, 0.0);
        assert!(w > 70.0 && w < 71.0);
        let k = (30.0f64 / 0.4).cbrt();
        let at = Instant::from_nanos((k * 1e9) as u64);
        for _ in 0..2000 {
            w = c.on_ack(w, 1.0, at, 0.0);
        }
        assert!((w - 100.0).abs() < 1e-3, "{w}");
        // The Reno-friendly estimate (α = 3·0.3/1.7 per RTT) takes over later.
        for _ in 0..6000 {
            w = c.on_ack(w, 1.0, at, 0.0);
        }
        assert!(w > 100.0, "{w}");
    }

    #[test]
    fn before_the_first_loss_at_least_five_percent_per_round_trip() {
        // W_max = 0 (HyStart ended slow start, no loss yet): the curve from cwnd 60 is flat
        // at first, but cnt is at most 20, so one round trip (60 ACKs) adds 3 segments
        let mut c = Cubic::default();
        let mut w = 60.0;
        for _ in 0..60 {
            w = c.on_ack(w, 1.0, Instant::ZERO, 0.04);
        }
        assert!((w - 63.0).abs() < 0.1, "{w}");
        // after a loss the curve alone: at its plateau, growth is far slower
        let mut c = Cubic::default();
        c.on_loss(60.0);
        let k = (18.0f64 / C).cbrt();
        let mut w = 60.0;
        c.on_ack(42.0, 1.0, Instant::ZERO, 0.0);
        for _ in 0..60 {
            w = c.on_ack(w, 1.0, Instant::from_nanos((k * 1e9) as u64), 0.0);
        }
        assert!(w - 60.0 < 0.5, "{w}");
    }
}
