//! The loss stage: none, Bernoulli (optionally correlated), Gilbert–Elliott, netem's 4-state
//! Markov model, or drop by packet ordinal.
//!
//! Correlated Bernoulli: a frame repeats the previous frame's fate with probability `corr`,
//! otherwise it is lost with probability `p`; the loss rate stays `p` and the mean burst
//! length is 1 / ((1 - corr)(1 - p)).
//!
//! 4-state: the chain moves once per frame (1→3 `p13`, 1→4 `p14`, 2→3 `p23`, 3→1 `p31`,
//! 3→2 `p32`, 4→1 always, otherwise it stays); the frame is lost when the chain arrives in
//! state 3 (a loss within a burst) or 4 (an isolated loss). It starts in state 1.
//!
//! Gilbert–Elliott: a two-state Markov chain evaluated once per packet. The packet is lost
//! with probability `1-k` in the good state and `1-h` in the bad state; then the chain moves
//! good→bad with probability `p` and bad→good with probability `r`. It starts good.
//! Ordinals are 1-based and count packets reaching the loss stage since the loss model was
//! last set (so a run-time `set` of `{"kind":"ordinals","drop":[1]}` drops the next packet).

use std::collections::BTreeSet;

use super::params::LossParams;
use crate::rng::Rng;

#[derive(Debug, Clone)]
pub struct Loss {
    kind: Kind,
    /// Packets seen at this stage since the model was set.
    seen: u64,
}

#[derive(Debug, Clone)]
enum Kind {
    None,
    Bernoulli {
        p: f64,
        corr: f64,
        last: bool,
    },
    FourState {
        t: [f64; 5],
        state: u8,
    },
    Gilbert {
        p: f64,
        r: f64,
        k: f64,
        h: f64,
        bad: bool,
    },
    Ordinals {
        drop: BTreeSet<u64>,
    },
}

impl Loss {
    pub fn new(params: &LossParams) -> Self {
        let kind = match params {
            LossParams::None => Kind::None,
            LossParams::Bernoulli { p, corr } => Kind::Bernoulli {
                p: *p,
                corr: *corr,
                last: false,
            },
            LossParams::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => Kind::FourState {
                t: [*p13, *p31, *p32, *p23, *p14],
                state: 1,
            },
            LossParams::Gilbert { p, r, k, h } => Kind::Gilbert {
                p: *p,
                r: *r,
                k: *k,
                h: *h,
                bad: false,
            },
            LossParams::Ordinals { drop } => Kind::Ordinals {
                drop: drop.iter().copied().collect(),
            },
        };
        Loss { kind, seen: 0 }
    }

    /// Decide whether the next packet is lost.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        self.seen += 1;
        match &mut self.kind {
            Kind::None => false,
            Kind::Bernoulli { p, corr, last } => {
                // no draw for the correlation when there is none: the uncorrelated stream
                // is the one it always was
                let lost = if *corr > 0.0 && rng.chance(*corr) {
                    *last
                } else {
                    rng.chance(*p)
                };
                *last = lost;
                lost
            }
            Kind::FourState { t, state } => {
                let [p13, p31, p32, p23, p14] = *t;
                let u = rng.next_f64();
                *state = match *state {
                    1 if u < p13 => 3,
                    1 if u < p13 + p14 => 4,
                    1 => 1,
                    2 if u < p23 => 3,
                    2 => 2,
                    3 if u < p31 => 1,
                    3 if u < p31 + p32 => 2,
                    3 => 3,
                    _ => 1,
                };
                *state >= 3
            }
            Kind::Gilbert { p, r, k, h, bad } => {
                let lost = if *bad {
                    rng.chance(1.0 - *h)
                } else {
                    rng.chance(1.0 - *k)
                };
                *bad = if *bad {
                    !rng.chance(*r)
                } else {
                    rng.chance(*p)
                };
                lost
            }
            Kind::Ordinals { drop } => drop.contains(&self.seen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_exact() {
        let mut rng = Rng::new(1);
        let mut l = Loss::new(&LossParams::Ordinals {
            drop: vec![1, 3, 10],
        });
        let lost: Vec<u64> = (1..=12).filter(|_| l.lose(&mut rng)).collect::<Vec<_>>();
        assert_eq!(lost, vec![1, 3, 10]);
    }

    /// Bernoulli(0.1) over 100 000 packets: within ±5 standard deviations of the mean.
    #[test]
    fn bernoulli_binomial_bounds() {
        let mut rng = Rng::new(5);
        let mut l = Loss::new(&LossParams::Bernoulli { p: 0.1, corr: 0.0 });
        let n = 100_000.0;
        let lost = (0..100_000).filter(|_| l.lose(&mut rng)).count() as f64;
        let sd = (n * 0.1 * 0.9f64).sqrt();
        assert!((lost - n * 0.1).abs() < 5.0 * sd, "{lost}");
    }

    /// Gilbert–Elliott: stationary loss = πG(1-k) + πB(1-h), πB = p/(p+r); bursts in bad state.
    #[test]
    fn gilbert_elliott_rate_and_bursts() {
        let (p, r, k, h) = (0.01, 0.3, 1.0, 0.2);
        let mut rng = Rng::new(11);
        let mut l = Loss::new(&LossParams::Gilbert { p, r, k, h });
        let n = 200_000;
        let seq: Vec<bool> = (0..n).map(|_| l.lose(&mut rng)).collect();
        let rate = seq.iter().filter(|x| **x).count() as f64 / n as f64;
        let pib = p / (p + r);
        let expect = pib * (1.0 - h);
        assert!(
            (rate - expect).abs() < 0.1 * expect,
            "rate {rate} expect {expect}"
        );
        // Conditional loss after a loss is far above the average: losses come in bursts.
        let pairs = seq.windows(2).filter(|w| w[0]).count() as f64;
        let both = seq.windows(2).filter(|w| w[0] && w[1]).count() as f64;
        assert!(both / pairs > 3.0 * rate, "burstiness {}", both / pairs);
    }

    /// Correlated Bernoulli keeps its rate and lengthens bursts to 1 / ((1-c)(1-p)).
    #[test]
    fn correlated_bernoulli_rate_and_bursts() {
        let (p, c) = (0.05, 0.5);
        let mut rng = Rng::new(3);
        let mut l = Loss::new(&LossParams::Bernoulli { p, corr: c });
        let n = 400_000;
        let seq: Vec<bool> = (0..n).map(|_| l.lose(&mut rng)).collect();
        let rate = seq.iter().filter(|x| **x).count() as f64 / n as f64;
        assert!((rate - p).abs() < 0.1 * p, "rate {rate}");
        let bursts = seq.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean = seq.iter().filter(|x| **x).count() as f64 / bursts;
        let expect = 1.0 / ((1.0 - c) * (1.0 - p));
        assert!(
            (mean - expect).abs() < 0.1 * expect,
            "burst {mean} expect {expect}"
        );
    }

    /// 4-state: with only p13 and p31 (p23 = 1, p32 = p14 = 0) losses come in runs that end
    /// with probability p31; the stationary loss rate is p13 / (p13 + p31).
    #[test]
    fn four_state_rate_and_isolated_losses() {
        let mut rng = Rng::new(9);
        let (p13, p31) = (0.02, 0.4);
        let mut l = Loss::new(&LossParams::FourState {
            p13,
            p31,
            p32: 0.0,
            p23: 1.0,
            p14: 0.0,
        });
        let n = 400_000;
        let lost = (0..n).filter(|_| l.lose(&mut rng)).count() as f64 / n as f64;
        let expect = p13 / (p13 + p31);
        assert!((lost - expect).abs() < 0.1 * expect, "{lost} {expect}");
        // only isolated losses (state 4): each is followed by a reception
        let mut l = Loss::new(&LossParams::FourState {
            p13: 0.0,
            p31: 1.0,
            p32: 0.0,
            p23: 1.0,
            p14: 0.1,
        });
        let seq: Vec<bool> = (0..100_000).map(|_| l.lose(&mut rng)).collect();
        assert!(seq.windows(2).all(|w| !(w[0] && w[1])));
        let rate = seq.iter().filter(|x| **x).count() as f64 / 1e5;
        // 1 -> 4 -> 1: one loss per 1/0.1 + 1 frames
        assert!((rate - 1.0 / 11.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn none_never() {
        let mut rng = Rng::new(1);
        let mut l = Loss::new(&LossParams::None);
        assert!((0..1000).all(|_| !l.lose(&mut rng)));
    }
}
