//! CUBIC window growth (RFC 9438), in segments and seconds.
//!
//! Congestion avoidance follows W_cubic(t) = C·(t − K)³ + W_max with C = 0.4, where t is the
//! time since the current congestion-avoidance epoch began (the first ACK in congestion
//! avoidance after a reduction) and K = ∛((W_max − cwnd_epoch)/C). Each ACK moves cwnd
//! towards target = W_cubic(t + RTT) clamped to [cwnd, 1.5·cwnd] (RTT = the smoothed RTT),
//! by (target − cwnd)/cwnd per acknowledged segment. In the Reno-friendly region
//! (W_cubic(t) < W_est) cwnd = W_est, where W_est grows by α·acked/cwnd with
//! α = 3(1 − β)/(1 + β), and α = 1 once W_est ≥ W_max. A reduction multiplies cwnd by
//! β = 0.7; with fast convergence, W_max is lowered to cwnd·(1 + β)/2 when a loss happens
//! below the previous W_max. HyStart is [`super::hystart`].
use crate::time::Instant;

pub const C: f64 = 0.4;
pub const BETA: f64 = 0.7;

#[derive(Debug, Clone, Default)]
pub struct Cubic {
    /// Window before the last reduction (segments; 0 before the first one).
    pub w_max: f64,
    k: f64,
    origin: f64,
    epoch: Option<Instant>,
    w_est: f64,
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

    /// A new ACK for `acked` segments in congestion avoidance at `now`; returns the new cwnd.
    pub fn on_ack(&mut self, cwnd: f64, acked: f64, now: Instant, rtt_s: f64) -> f64 {
        let epoch = match self.epoch {
            Some(e) => e,
            None => {
                self.epoch = Some(now);
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
        let t = now.nanos_since(epoch) as f64 / 1e9;
        let alpha = if self.w_est >= self.w_max {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        self.w_est += alpha * acked / cwnd;
        let w = |t: f64| C * (t - self.k).powi(3) + self.origin;
        if w(t) < self.w_est {
            return self.w_est.max(cwnd);
        }
        let target = w(t + rtt_s).clamp(cwnd, 1.5 * cwnd);
        cwnd + (target - cwnd) / cwnd * acked
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
}
