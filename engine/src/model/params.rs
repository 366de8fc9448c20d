//! Resolved, validated parameters of one link direction (the model's view; the control
//! protocol's optional-field form lives in `control::protocol`).
//!
//! Units are explicit in the names. Queue sizes follow ns-2: `limit`, `thresh` and `maxthresh`
//! are counted in packets; with `in_bytes` the queue is measured in bytes and each of them is
//! multiplied by `mean_pktsize` (ns-2's `queue-in-bytes_` semantics).

/// Default ns-2 `mean_pktsize_` (bytes) for RED and DropTail.
pub const DEFAULT_MEAN_PKTSIZE: u32 = 500;
/// Default queue limit (packets) when the client gives none (ns-2 `Queue set limit_ 50`).
pub const DEFAULT_LIMIT_PKTS: u32 = 50;
/// Cap on the automatically raised default limit.
pub const AUTO_LIMIT_CAP_PKTS: u32 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedParams {
    /// `thresh_` (min threshold, packets).
    pub thresh: f64,
    /// `maxthresh_` (packets).
    pub maxthresh: f64,
    /// `q_weight_`: EWMA weight of the average queue size.
    pub q_weight: f64,
    /// `linterm_`: max_p = 1 / linterm.
    pub linterm: f64,
    /// `gentle_`: drop probability rises from max_p to 1 between maxthresh and 2*maxthresh.
    pub gentle: bool,
}

impl Default for RedParams {
    fn default() -> Self {
        // Classic ns-2 values (Floyd & Jacobson / ns-default.tcl before auto-configuration).
        RedParams {
            thresh: 5.0,
            maxthresh: 15.0,
            q_weight: 0.002,
            linterm: 10.0,
            gentle: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QueueKind {
    DropTail,
    Red(RedParams),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueParams {
    pub kind: QueueKind,
    /// Limit in packets; `None` = automatic default (see [`QueueParams::effective_limit`]).
    pub limit: Option<u32>,
    pub in_bytes: bool,
    pub mean_pktsize: u32,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            kind: QueueKind::DropTail,
            limit: None,
            in_bytes: false,
            mean_pktsize: DEFAULT_MEAN_PKTSIZE,
        }
    }
}

impl QueueParams {
    /// Limit in packets. Without an explicit limit: 50 packets, raised to the bandwidth-delay
    /// product in 1500-byte packets (bandwidth × 2 × delay, i.e. one round trip over a
    /// symmetric link) when that is larger, capped at 10 000.
    pub fn effective_limit(&self, bandwidth_bps: u64, delay_ns: u64) -> u32 {
        if let Some(l) = self.limit {
            return l;
        }
        let bdp_bits = u128::from(bandwidth_bps) * 2 * u128::from(delay_ns) / 1_000_000_000;
        let bdp_pkts = (bdp_bits / (1500 * 8)) as u64;
        (bdp_pkts.min(u64::from(AUTO_LIMIT_CAP_PKTS)) as u32).max(DEFAULT_LIMIT_PKTS)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitterDist {
    /// Uniform in [-jitter, +jitter].
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
}

#[derive(Clone, Debug, PartialEq)]
pub enum LossParams {
    None,
    Bernoulli {
        p: f64,
    },
    /// Gilbert–Elliott: `p` good→bad, `r` bad→good, loss probability 1-k in good, 1-h in bad.
    Gilbert {
        p: f64,
        r: f64,
        k: f64,
        h: f64,
    },
    /// Drop the packets with these 1-based ordinals (counted at the loss stage).
    Ordinals {
        drop: Vec<u64>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    /// Bits per second; 0 = unlimited (no serialization, no queueing delay).
    pub bandwidth_bps: u64,
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub jitter_dist: JitterDist,
    pub jitter_reorder: bool,
    pub queue: QueueParams,
    pub loss: LossParams,
    pub duplicate: f64,
    pub corrupt: f64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            bandwidth_bps: 0,
            delay_ns: 0,
            jitter_ns: 0,
            jitter_dist: JitterDist::Uniform,
            jitter_reorder: false,
            queue: QueueParams::default(),
            loss: LossParams::None,
            duplicate: 0.0,
            corrupt: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_limit() {
        let q = QueueParams::default();
        assert_eq!(q.effective_limit(0, 0), 50);
        assert_eq!(q.effective_limit(10_000_000, 10_000_000), 50); // 200 kbit = 16 pkts
                                                                   // 1 Gbit/s × 2 × 50 ms = 100 Mbit = 8333 packets
        assert_eq!(q.effective_limit(1_000_000_000, 50_000_000), 8333);
        assert_eq!(q.effective_limit(100_000_000_000, 1_000_000_000), 10_000);
        let q = QueueParams {
            limit: Some(7),
            ..q
        };
        assert_eq!(q.effective_limit(1_000_000_000, 50_000_000), 7);
    }
}
