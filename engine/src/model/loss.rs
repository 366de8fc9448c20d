//! The loss stage: none, Bernoulli, Gilbert–Elliott, or drop by packet ordinal.
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
            LossParams::Bernoulli { p } => Kind::Bernoulli { p: *p },
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
            Kind::Bernoulli { p } => rng.chance(*p),
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
        let mut l = Loss::new(&LossParams::Bernoulli { p: 0.1 });
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

    #[test]
    fn none_never() {
        let mut rng = Rng::new(1);
        let mut l = Loss::new(&LossParams::None);
        assert!((0..1000).all(|_| !l.lose(&mut rng)));
    }
}
