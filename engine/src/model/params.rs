//! Resolved, validated parameters of one link direction (the model's view; the control
//! protocol's optional-field form lives in `control::protocol`).
//!
//! Units are explicit in the names. Queue sizes follow ns-2: `limit`, `thresh` and `maxthresh`
//! are counted in packets; with `in_bytes` the queue is measured in bytes and each of them is
//! multiplied by `mean_pktsize` (ns-2's `queue-in-bytes_` semantics).

use super::schedule::Schedule;
use super::trace::Trace;

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
    /// Pareto of shape 3, shifted and scaled to mean 0 and standard deviation `jitter`
    /// (never below -0.58 `jitter`; a long tail of late frames).
    Pareto,
    /// 3/4 Pareto + 1/4 normal (netem's paretonormal), scaled to standard deviation `jitter`.
    ParetoNormal,
}

impl JitterDist {
    /// How far below the mean a sample can fall, in standard deviations (None: unbounded).
    pub fn min_offset(self) -> Option<f64> {
        match self {
            JitterDist::Uniform => Some(1.0),
            JitterDist::Pareto => Some(PARETO_MIN),
            JitterDist::Normal | JitterDist::ParetoNormal => None,
        }
    }
}

/// Shape of the Pareto jitter distribution (netem's tables use the same).
pub const PARETO_SHAPE: f64 = 3.0;
/// How far below its mean the standardised Pareto reaches: (mean - 1) / sd for shape 3
/// and scale 1.
pub const PARETO_MIN: f64 = 0.577_350_269_189_625_8; // (1.5 - 1) / sqrt(3/4) = 1/sqrt(3)

#[derive(Clone, Debug, PartialEq)]
pub enum LossParams {
    None,
    /// Each frame lost with probability `p`; with `corr` > 0 a frame repeats the previous
    /// frame's fate with probability `corr` (bursts, the rate stays `p`).
    Bernoulli {
        p: f64,
        corr: f64,
    },
    /// netem's 4-state Markov model (Salsano et al.): 1 gap, 2 burst reception, 3 burst
    /// loss, 4 isolated loss; a frame is lost when the chain enters state 3 or 4.
    FourState {
        p13: f64,
        p31: f64,
        p32: f64,
        p23: f64,
        p14: f64,
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
    /// Probability that a jitter draw repeats the previous one (correlated delays).
    pub jitter_corr: f64,
    pub queue: QueueParams,
    pub loss: LossParams,
    pub duplicate: f64,
    pub corrupt: f64,
    /// Probability that a frame skips the delay stage (netem's reorder), applied to every
    /// `reorder_gap`-th frame (1: any frame).
    pub reorder: f64,
    pub reorder_gap: u32,
    /// Serialization framing (netem's `rate ... packetoverhead cellsize celloverhead`).
    pub framing: Framing,
    /// A capacity trace in place of `bandwidth_bps` (model/trace.rs).
    pub trace: Option<Trace>,
    /// Delay, bandwidth and loss following a time series (model/schedule.rs).
    pub schedule: Option<Schedule>,
}

impl LinkParams {
    /// Whether frames cross without serialization (no bandwidth, no trace).
    pub fn unlimited(&self) -> bool {
        self.bandwidth_bps == 0
            && self.trace.is_none()
            && self
                .schedule
                .as_ref()
                .is_none_or(|s| s.bandwidth_bps.is_none())
    }

    /// The rate the queue sizes itself by: the bandwidth, a trace's mean capacity or a
    /// schedule's largest bandwidth.
    pub fn nominal_bps(&self) -> u64 {
        if let Some(t) = &self.trace {
            return t.mean_bps();
        }
        self.schedule
            .as_ref()
            .and_then(Schedule::max_bandwidth_bps)
            .unwrap_or(self.bandwidth_bps)
    }

    /// The queue's limit in packets ([`QueueParams::effective_limit`] at the nominal rate).
    pub fn limit(&self) -> u32 {
        self.queue
            .effective_limit(self.nominal_bps(), self.delay_ns)
    }
}

/// Bytes the serializer counts for a frame: its length plus `overhead`, then, with a
/// `cellsize`, whole cells of `cellsize + cell_overhead` bytes each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Framing {
    pub overhead: i32,
    pub cellsize: u32,
    pub cell_overhead: i32,
}

impl Framing {
    pub fn is_plain(&self) -> bool {
        *self == Framing::default()
    }

    /// Serialized bytes of one frame of `len` bytes (never below 1).
    pub fn wire_len(&self, len: u64) -> u64 {
        let mut l = (len as i64 + i64::from(self.overhead)).max(1);
        if self.cellsize > 0 {
            let cells = (l as u64).div_ceil(u64::from(self.cellsize)) as i64;
            l = (cells * (i64::from(self.cellsize) + i64::from(self.cell_overhead))).max(1);
        }
        l as u64
    }
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            bandwidth_bps: 0,
            delay_ns: 0,
            jitter_ns: 0,
            jitter_dist: JitterDist::Uniform,
            jitter_reorder: false,
            jitter_corr: 0.0,
            queue: QueueParams::default(),
            loss: LossParams::None,
            duplicate: 0.0,
            corrupt: 0.0,
            reorder: 0.0,
            reorder_gap: 1,
            framing: Framing::default(),
            trace: None,
            schedule: None,
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

    #[test]
    fn framing_lengths() {
        assert_eq!(Framing::default().wire_len(1000), 1000);
        let f = Framing {
            overhead: 20,
            ..Default::default()
        };
        assert_eq!(f.wire_len(1000), 1020);
        // ATM: 48-byte payload per 53-byte cell; 100 bytes + 8 = 108 -> 3 cells = 159 bytes
        let atm = Framing {
            overhead: 8,
            cellsize: 48,
            cell_overhead: 5,
        };
        assert_eq!(atm.wire_len(100), 159);
        let neg = Framing {
            overhead: -2000,
            ..Default::default()
        };
        assert_eq!(neg.wire_len(100), 1);
    }
}
