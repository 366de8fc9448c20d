//! Paced batched sender (`wanlab-gen send`).
//!
//! Packets are paced against absolute deadlines (see [`crate::pacer`]); each
//! wake-up sends every packet that is due (up to `--batch`) with one
//! sendmmsg call, stamping them with the current CLOCK_MONOTONIC time. When
//! the kernel pushes back (ENOBUFS/EAGAIN) the same packets are retried, so
//! sequence numbers stay dense and sink-side gaps mean real loss.

use crate::clock::{now_ns, sleep_until, tighten_timer_slack};
use crate::json::Obj;
use crate::net::{Batch, SendResult};
use crate::pacer::Pacer;
use crate::packet::{self, Header, Kind, FRAME_OVERHEAD, HEADER_LEN, IP_OVERHEAD};
use crate::pattern::{Pattern, RandomPacer};
use std::net::UdpSocket;

/// What a sending run should do.
#[derive(Clone, Debug)]
pub struct SendCfg {
    pub size: usize,
    /// Header bytes beyond IPv4's (20 over IPv6): counted in the frame and IP rates.
    pub extra: usize,
    /// Pace as pps_num/pps_den packets per second; pps_num == 0: unpaced (--max).
    pub pps_num: u128,
    pub pps_den: u128,
    pub duration_ns: Option<u64>,
    pub count: Option<u64>,
    pub batch: usize,
    pub fin_copies: u32,
    /// Random departures (Poisson, on/off) around the rate instead of a constant rate,
    /// with the seed of their draws.
    pub pattern: Option<(Pattern, u64)>,
}

/// Deadlines: constant-rate or random.
enum Timing {
    Paced(Pacer),
    Random(RandomPacer),
}

impl Timing {
    fn unpaced(&self) -> bool {
        matches!(self, Timing::Paced(p) if p.unpaced())
    }
    fn deadline(&mut self, i: u64) -> u64 {
        match self {
            Timing::Paced(p) => p.deadline(i),
            Timing::Random(r) => r.deadline(i),
        }
    }
    fn due_count(&mut self, now: u64) -> u64 {
        match self {
            Timing::Paced(p) => p.due_count(now),
            Timing::Random(r) => r.due_count(now),
        }
    }
    fn sent(&mut self, seq: u64) {
        if let Timing::Random(r) = self {
            r.forget_below(seq);
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SendReport {
    pub sent: u64,
    pub elapsed_ns: u64,
    pub busy: u64,
    pub max_late_ns: u64,
    pub sum_late_ns: u128,
    pub batches: u64,
    pub size: usize,
    pub extra: usize,
    pub target_pps: f64,
}

impl SendReport {
    pub fn pps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.sent as f64 * 1e9 / self.elapsed_ns as f64
        }
    }
    pub fn to_json(&self) -> String {
        let pps = self.pps();
        Obj::new()
            .str("mode", "send")
            .int("sent_pkts", self.sent)
            .int("payload_bytes", self.sent * self.size as u64)
            .int("size", self.size as u64)
            .num("duration_s", self.elapsed_ns as f64 / 1e9)
            .num("pps", pps)
            .num("target_pps", self.target_pps)
            .num("bps_payload", pps * self.size as f64 * 8.0)
            .num(
                "bps_ip",
                pps * (self.size + IP_OVERHEAD + self.extra) as f64 * 8.0,
            )
            .num(
                "bps_frame",
                pps * (self.size + FRAME_OVERHEAD + self.extra) as f64 * 8.0,
            )
            .int("busy_retries", self.busy)
            .int("batches", self.batches)
            .num("late_max_us", self.max_late_ns as f64 / 1e3)
            .num(
                "late_avg_us",
                if self.batches == 0 {
                    0.0
                } else {
                    self.sum_late_ns as f64 / self.batches as f64 / 1e3
                },
            )
            .finish()
    }
}

/// Run the sender on a connected socket until count/duration is reached.
pub fn run(sock: &UdpSocket, cfg: &SendCfg) -> Result<SendReport, String> {
    if cfg.size < HEADER_LEN {
        return Err(format!(
            "--size must be at least {HEADER_LEN} bytes (the generator header)"
        ));
    }
    if cfg.size > 65507 {
        return Err("--size must be at most 65507 bytes".into());
    }
    tighten_timer_slack();
    let mut b = Batch::new(cfg.batch, cfg.size);
    for i in 0..b.len() {
        Header {
            kind: Kind::Data,
            seq: 0,
            tx_ns: 0,
        }
        .write(b.slot_mut(i));
    }
    let start = now_ns() + 100_000;
    let mut pacer = match cfg.pattern {
        Some((p, seed)) if cfg.pps_num > 0 => {
            Timing::Random(RandomPacer::new(start, cfg.pps_num, cfg.pps_den, p, seed))
        }
        _ => Timing::Paced(Pacer::new(start, cfg.pps_num, cfg.pps_den)),
    };
    let end = cfg.duration_ns.map(|d| start + d);
    // Total packets: the count, and/or every packet whose deadline precedes the end
    // (random departures are not drawn ahead: the end stops them)
    let mut limit = cfg.count.unwrap_or(u64::MAX);
    if let (Some(e), Timing::Paced(p)) = (end, &pacer) {
        if !p.unpaced() {
            limit = limit.min(p.due_count(e - 1));
        }
    }
    let mut rep = SendReport {
        size: cfg.size,
        extra: cfg.extra,
        target_pps: cfg.pps_num as f64 / cfg.pps_den.max(1) as f64,
        ..Default::default()
    };
    let mut seq = 0u64;
    sleep_until(start);
    while seq < limit && !crate::stop::requested() {
        let now = now_ns();
        if let Some(e) = end {
            if now >= e {
                break;
            }
        }
        let due = pacer.due_count(now).min(limit);
        if due <= seq {
            let mut d = pacer.deadline(seq);
            if let Some(e) = end {
                d = d.min(e);
            }
            sleep_until(d);
            continue;
        }
        let n = ((due - seq) as usize).min(b.len());
        if !pacer.unpaced() {
            let late = now.saturating_sub(pacer.deadline(seq));
            rep.max_late_ns = rep.max_late_ns.max(late);
            rep.sum_late_ns += late as u128;
        }
        for i in 0..n {
            let s = b.slot_mut(i);
            packet::set_seq(s, seq + i as u64);
            packet::set_tx_ns(s, now);
        }
        match b
            .send(sock, n, cfg.size)
            .map_err(|e| format!("send failed: {e}"))?
        {
            SendResult::Sent(k) => {
                seq += k as u64;
                rep.batches += 1;
                pacer.sent(seq);
            }
            SendResult::Busy(_) => {
                rep.busy += 1;
                sleep_until(now_ns() + 20_000);
            }
        }
    }
    rep.sent = seq;
    if let (Some(e), false, false) = (end, pacer.unpaced(), crate::stop::requested()) {
        // A timed paced run lasts its full duration even if the last packet
        // was due earlier, so sent/elapsed is the configured rate.
        sleep_until(e);
    }
    rep.elapsed_ns = now_ns().saturating_sub(start);
    send_fin(sock, cfg, seq, &mut b);
    Ok(rep)
}

/// Send `fin_copies` FIN datagrams announcing the total, 2 ms apart.
fn send_fin(sock: &UdpSocket, cfg: &SendCfg, total: u64, b: &mut Batch) {
    for _ in 0..cfg.fin_copies {
        Header {
            kind: Kind::Fin,
            seq: total,
            tx_ns: now_ns(),
        }
        .write(b.slot_mut(0));
        let _ = b.send(sock, 1, cfg.size);
        sleep_until(now_ns() + 2_000_000);
    }
    Header {
        kind: Kind::Data,
        seq: 0,
        tx_ns: 0,
    }
    .write(b.slot_mut(0));
}
