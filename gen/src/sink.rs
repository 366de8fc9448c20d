//! Receiving side (`wanlab-gen sink`, and the reply half of `ping`).
//!
//! [`Receiver`] turns batches of datagrams into the report: sequence
//! accounting, delay statistics (one-way for `sink`, round trip for `ping`)
//! and throughput, both for the whole run and per `--interval`.

use crate::clock::now_ns;
use crate::json::{num_array, Obj};
use crate::net::Batch;
use crate::packet::{Header, Kind, FRAME_OVERHEAD, IP_OVERHEAD};
use crate::stats::{first_last_bps, DelayStats, Intervals, SeqTracker};
use std::net::UdpSocket;

pub struct Receiver {
    pub seq: SeqTracker,
    pub delay: DelayStats,
    pub intervals: Intervals,
    pub pkts: u64,
    pub bytes: u64,
    pub foreign: u64,
    pub first_ns: Option<u64>,
    pub first_bytes: u64,
    pub last_ns: u64,
    pub fin_ns: Option<u64>,
    pub started_ns: u64,
    /// Header bytes beyond IPv4's (20 over IPv6): counted in the frame and IP rates.
    pub extra: usize,
}

impl Receiver {
    pub fn new(interval_ns: u64) -> Receiver {
        Receiver {
            seq: SeqTracker::new(),
            delay: DelayStats::new(),
            intervals: Intervals::new(interval_ns),
            pkts: 0,
            bytes: 0,
            foreign: 0,
            first_ns: None,
            first_bytes: 0,
            last_ns: 0,
            fin_ns: None,
            started_ns: now_ns(),
            extra: 0,
        }
    }

    /// Account for the first `n` messages of `b`, received at `rx_ns`.
    pub fn on_batch(&mut self, b: &Batch, n: usize, rx_ns: u64) {
        let (mut p, mut by) = (0u64, 0u64);
        for i in 0..n {
            let m = b.msg(i);
            let len = b.msg_len(i) as u64;
            match Header::parse(m) {
                Some(h) if h.kind == Kind::Data => {
                    if self.first_ns.is_none() {
                        self.first_ns = Some(rx_ns);
                        self.first_bytes = len;
                    }
                    self.seq.record(h.seq);
                    self.delay.record_pair(h.tx_ns, rx_ns);
                    p += 1;
                    by += len;
                }
                Some(h) => {
                    self.seq.announced = Some(h.seq);
                    self.fin_ns.get_or_insert(rx_ns);
                }
                None => self.foreign += 1,
            }
        }
        if p > 0 {
            self.pkts += p;
            self.bytes += by;
            self.last_ns = rx_ns;
            self.intervals.record(rx_ns, p, by);
        }
    }

    /// Report; `delay_name` is "owd" (one-way) or "rtt".
    pub fn to_json(&self, mode: &str, delay_name: &str) -> String {
        let first = self.first_ns.unwrap_or(0);
        let span = self.last_ns.saturating_sub(first);
        let avg_size = if self.pkts == 0 {
            0.0
        } else {
            self.bytes as f64 / self.pkts as f64
        };
        let bps = first_last_bps(self.bytes, self.first_bytes, first, self.last_ns);
        let pps = if span == 0 {
            0.0
        } else {
            (self.pkts.saturating_sub(1)) as f64 * 1e9 / span as f64
        };
        let d = &self.delay;
        let us = |ns: f64| ns / 1e3;
        let has = d.n > 0;
        Obj::new()
            .str("mode", mode)
            .int("pkts", self.pkts)
            .int("bytes", self.bytes)
            .num("avg_size", avg_size)
            .int("unique", self.seq.received)
            .int("expected", self.seq.expected())
            .bool("fin_seen", self.seq.announced.is_some())
            .int("lost", self.seq.lost())
            .num("loss_ratio", self.seq.loss_ratio())
            .int("reordered", self.seq.reordered)
            .int("duplicates", self.seq.duplicates)
            .int("foreign", self.foreign)
            .num("span_s", span as f64 / 1e9)
            .num("pps", pps)
            .num("bps_payload", bps)
            .num(
                "bps_ip",
                pps * (avg_size + (IP_OVERHEAD + self.extra) as f64) * 8.0,
            )
            .num(
                "bps_frame",
                pps * (avg_size + (FRAME_OVERHEAD + self.extra) as f64) * 8.0,
            )
            .int(&format!("{delay_name}_n"), d.n)
            .opt_num(
                &format!("{delay_name}_min_us"),
                has.then(|| us(d.min_ns as f64)),
            )
            .opt_num(
                &format!("{delay_name}_avg_us"),
                has.then(|| us(d.mean_ns())),
            )
            .opt_num(
                &format!("{delay_name}_max_us"),
                has.then(|| us(d.max_ns as f64)),
            )
            .opt_num(
                &format!("{delay_name}_stdev_us"),
                has.then(|| us(d.stdev_ns())),
            )
            .opt_num(
                &format!("{delay_name}_p50_us"),
                d.percentile_ns(50.0).map(us),
            )
            .opt_num(
                &format!("{delay_name}_p99_us"),
                d.percentile_ns(99.0).map(us),
            )
            .int("clock_negative", d.negative)
            .num("interval_s", self.intervals.width_ns as f64 / 1e9)
            .raw(
                "interval_bps_frame",
                &num_array(&self.intervals.bps((FRAME_OVERHEAD + self.extra) as u64)),
            )
            .raw(
                "interval_pkts",
                &num_array(
                    &self
                        .intervals
                        .pkts
                        .iter()
                        .map(|&x| x as f64)
                        .collect::<Vec<_>>(),
                ),
            )
            .finish()
    }

    pub fn human(&self, delay_name: &str) -> String {
        let first = self.first_ns.unwrap_or(0);
        let bps = first_last_bps(self.bytes, self.first_bytes, first, self.last_ns);
        format!(
            "received {} pkts ({} B), lost {} of {} ({:.4}%), reordered {}, dup {}; {} min/avg/max/stdev = {:.1}/{:.1}/{:.1}/{:.1} us; {:.3} Mbit/s payload",
            self.pkts,
            self.bytes,
            self.seq.lost(),
            self.seq.expected(),
            self.seq.loss_ratio() * 100.0,
            self.seq.reordered,
            self.seq.duplicates,
            delay_name,
            if self.delay.n > 0 { self.delay.min_ns as f64 / 1e3 } else { 0.0 },
            self.delay.mean_ns() / 1e3,
            self.delay.max_ns as f64 / 1e3,
            self.delay.stdev_ns() / 1e3,
            bps / 1e6
        )
    }
}

/// When a receive loop stops.
#[derive(Clone, Copy, Debug)]
pub struct StopRule {
    pub duration_ns: Option<u64>,
    /// Stop after this long without data (the clock starts at launch, so a
    /// sink that never hears anything also exits).
    pub idle_ns: Option<u64>,
    /// Stop this long after the first FIN arrived.
    pub fin_grace_ns: Option<u64>,
}

/// Receive on `sock` until the stop rule fires.
pub fn run(
    sock: &UdpSocket,
    rule: StopRule,
    batch: usize,
    interval_ns: u64,
) -> Result<Receiver, String> {
    let mut b = Batch::new(batch, 65536);
    let mut r = Receiver::new(interval_ns);
    let start = r.started_ns;
    let mut last_activity = start;
    loop {
        let n = b.recv(sock).map_err(|e| format!("receive failed: {e}"))?;
        let now = now_ns();
        if n > 0 {
            r.on_batch(&b, n, now);
            last_activity = now;
        }
        if crate::stop::requested() {
            break;
        }
        if let Some(d) = rule.duration_ns {
            if now >= start + d {
                break;
            }
        }
        if let Some(i) = rule.idle_ns {
            if now >= last_activity + i {
                break;
            }
        }
        if let (Some(g), Some(f)) = (rule.fin_grace_ns, r.fin_ns) {
            if now >= f + g {
                break;
            }
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Batch;

    fn pkt(kind: Kind, seq: u64, tx: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        Header {
            kind,
            seq,
            tx_ns: tx,
        }
        .write(&mut v);
        v
    }

    #[test]
    fn receiver_accounts_batch() {
        let mut r = Receiver::new(1_000_000_000);
        let b = Batch::from_msgs(&[
            pkt(Kind::Data, 0, 1_000, 100),
            pkt(Kind::Data, 2, 2_000, 100),
            pkt(Kind::Data, 1, 3_000, 100),
            pkt(Kind::Data, 1, 3_000, 100),
            vec![9u8; 30],
        ]);
        r.on_batch(&b, 5, 11_000);
        let b2 = Batch::from_msgs(&[
            pkt(Kind::Data, 4, 1_011_000, 100),
            pkt(Kind::Fin, 6, 0, 100),
        ]);
        r.on_batch(&b2, 2, 1_011_000 + 1_000_000_000);
        assert_eq!(r.pkts, 5);
        assert_eq!(r.foreign, 1);
        assert_eq!(r.seq.duplicates, 1);
        assert_eq!(r.seq.reordered, 1);
        assert_eq!(r.seq.expected(), 6);
        assert_eq!(r.seq.lost(), 2); // 3 and 5
        assert_eq!(r.delay.min_ns, 8_000);
        assert_eq!(r.delay.max_ns, 1_000_000_000);
        assert_eq!(r.intervals.pkts, vec![4, 1]);
        let j = r.to_json("sink", "owd");
        assert!(j.contains("\"lost\":2"), "{j}");
        assert!(j.contains("\"fin_seen\":true"), "{j}");
        // 4 packets after the first: 400 bytes over 1.001 s
        assert!(j.contains("\"bps_payload\":3196.80"), "{j}");
    }
}
