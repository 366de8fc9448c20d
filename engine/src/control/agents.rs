//! Traffic agents: an `apply`'s [`AgentReq`] (one variant per kind, so a field of another
//! kind never gets here) checked for values and turned into the model's [`AgentSpec`].
//! Pure; errors name the field (`dst: …`), the caller prefixes `agents[i] ("id")`.

use super::protocol::{AgentReq, OnOffDistSpec, OnOffReq, SinkReq, TcpReq, TcpSinkReq};
use crate::model::network::{AgentKindSpec, AgentSpec};
use crate::model::sim::agent::{CbrSpec, OnOffDist, Pattern, MIN_SIZE};
use crate::model::sim::ip::{self, IpAddr};
use crate::model::sim::tcp::sender::{
    Cc, TcpSpec, DEFAULT_INITIAL_WINDOW, DEFAULT_MIN_RTO_NS, DEFAULT_MSS, DEFAULT_WINDOW,
};
use crate::model::sim::tcp::sink::{Acks, Rmem, DELACK_NS};
use crate::model::sim::tcp::MAX_MSS;

/// Longest mean ON/OFF time: one hour.
const MAX_ONOFF_US: f64 = 3_600_000_000.0;

/// Largest UDP payload: a datagram in one unfragmented 65535-byte IPv4 packet.
const MAX_UDP_SIZE: u64 = 65535 - 20 - 8;

/// The model's agent for a request.
pub fn build_agent(g: &AgentReq) -> Result<AgentSpec, String> {
    let kind = match g {
        AgentReq::Cbr(s) => udp_source(&s.dst, s.size, s.rate_bps, s.interval_us, Pattern::Cbr)?,
        AgentReq::Poisson(s) => {
            udp_source(&s.dst, s.size, s.rate_bps, s.interval_us, Pattern::Poisson)?
        }
        AgentReq::OnOff(s) => {
            udp_source(&s.dst, s.size, s.rate_bps, s.interval_us, onoff_pattern(s)?)?
        }
        AgentReq::Sink(s) => sink(s)?,
        AgentReq::Tcp(t) => AgentKindSpec::Tcp(tcp(t)?),
        AgentReq::TcpSink(s) => tcp_sink(s)?,
    };
    Ok(AgentSpec {
        id: g.id().to_string(),
        host: g.host().to_string(),
        kind,
    })
}

/// `"a.b.c.d:port"` or `"[ipv6]:port"` to a unicast address and a port 1..=65535.
fn parse_dst(dst: &str) -> Result<(IpAddr, u16), String> {
    let (ip, dport) = ip::parse_socket(dst).map_err(|e| format!("dst: {e}"))?;
    if ip.is_special() {
        return Err(format!("dst: must be a unicast address, got \"{dst}\""));
    }
    Ok((ip, dport))
}

fn port(p: u64) -> Result<u16, String> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port: must be 1..=65535, got {p}"))
}

/// The period of a UDP source as a fraction of ns: from its rate or its interval.
fn period(
    size: u64,
    rate_bps: Option<u64>,
    interval_us: Option<u64>,
) -> Result<(u128, u128), String> {
    let (num, den) = match (rate_bps, interval_us) {
        (Some(_), Some(_)) => {
            return Err("rate_bps: give either rate_bps or interval_us, not both".into())
        }
        (None, None) => return Err("rate_bps: one of rate_bps or interval_us is required".into()),
        (Some(r), None) => {
            if !(1..=100_000_000_000).contains(&r) {
                return Err(format!("rate_bps: must be 1..=100000000000, got {r}"));
            }
            (u128::from(size) * 8 * 1_000_000_000, u128::from(r))
        }
        (None, Some(us)) => {
            if !(1..=3_600_000_000).contains(&us) {
                return Err(format!("interval_us: must be 1..=3600000000, got {us}"));
            }
            (u128::from(us) * 1000, 1)
        }
    };
    if num / den == 0 {
        return Err("rate_bps: interval below 1 ns".into());
    }
    Ok((num, den))
}

fn udp_source(
    dst: &str,
    size: u64,
    rate_bps: Option<u64>,
    interval_us: Option<u64>,
    pattern: Pattern,
) -> Result<AgentKindSpec, String> {
    let (ip, dport) = parse_dst(dst)?;
    if !(MIN_SIZE as u64..=MAX_UDP_SIZE).contains(&size) {
        return Err(format!("size: must be {MIN_SIZE}..={MAX_UDP_SIZE} (sequence number + timestamp fit in 16 bytes), got {size}"));
    }
    let (period_num, period_den) = period(size, rate_bps, interval_us)?;
    Ok(AgentKindSpec::Cbr(CbrSpec {
        dst: ip,
        dport,
        size: size as usize,
        period_num,
        period_den,
        pattern,
    }))
}

fn onoff_pattern(s: &OnOffReq) -> Result<Pattern, String> {
    let us = |f: &str, v: f64, min: f64| -> Result<f64, String> {
        if v.is_finite() && v >= min && v <= MAX_ONOFF_US {
            Ok(v * 1000.0)
        } else {
            Err(format!(
                "{f}: must be in [{min}, {MAX_ONOFF_US}] µs, got {v}"
            ))
        }
    };
    let on_ns = us("on_us", s.on_us, 0.001)?;
    let off_ns = us("off_us", s.off_us, 0.0)?;
    let dist = match s.dist.unwrap_or(OnOffDistSpec::Exponential) {
        OnOffDistSpec::Exponential => {
            if s.shape.is_some() {
                return Err("shape: only for dist \"pareto\"".into());
            }
            OnOffDist::Exponential
        }
        OnOffDistSpec::Pareto => {
            let shape = s.shape.unwrap_or(1.5);
            if !(shape.is_finite() && shape > 1.0 && shape <= 100.0) {
                return Err(format!("shape: must be > 1 and <= 100, got {shape}"));
            }
            OnOffDist::Pareto { shape }
        }
    };
    Ok(Pattern::OnOff {
        on_ns,
        off_ns,
        dist,
    })
}

fn sink(s: &SinkReq) -> Result<AgentKindSpec, String> {
    Ok(AgentKindSpec::Sink {
        port: port(s.port)?,
    })
}

/// The largest `tcp_rmem` value Linux accepts (INT_MAX).
const RMEM_LIMIT: u64 = i32::MAX as u64;

fn tcp_sink(s: &TcpSinkReq) -> Result<AgentKindSpec, String> {
    let delayed = s.delayed_ack.unwrap_or(false);
    let acks = match (s.acks.as_deref(), delayed) {
        (None, false) | (Some("each"), false) => Acks::Each,
        (None, true) | (Some("delayed"), _) => Acks::Delayed(
            in_range(s.delack_us, "delack_us", 1, 60_000_000, DELACK_NS / 1000)? * 1000,
        ),
        (Some("linux"), false) => Acks::Linux,
        (Some(a @ ("each" | "linux")), true) => {
            return Err(format!("acks: {a:?} contradicts delayed_ack: true"))
        }
        (Some(a), _) => return Err(format!("acks: must be each, delayed or linux, got {a:?}")),
    };
    if s.delack_us.is_some() && !matches!(acks, Acks::Delayed(_)) {
        return Err("delack_us: only with acks \"delayed\"".into());
    }
    let rmem = match s.rmem.as_deref() {
        None => Rmem::default(),
        Some(_) if acks != Acks::Linux => return Err("rmem: only with acks \"linux\"".into()),
        Some(&[min, default, max]) if 1 <= min && min <= default && default <= max && max <= RMEM_LIMIT => {
            Rmem { default, max }
        }
        Some(v) => {
            return Err(format!(
                "rmem: must be [min, default, max] with 1 <= min <= default <= max <= {RMEM_LIMIT}, got {v:?}"
            ))
        }
    };
    Ok(AgentKindSpec::TcpSink {
        port: port(s.port)?,
        acks,
        sack: s.sack.unwrap_or(true),
        rmem,
    })
}

/// `v` within `lo..=hi`, or `def` when absent.
fn in_range(v: Option<u64>, f: &str, lo: u64, hi: u64, def: u64) -> Result<u64, String> {
    match v {
        None => Ok(def),
        Some(x) if (lo..=hi).contains(&x) => Ok(x),
        Some(x) => Err(format!("{f}: must be {lo}..={hi}, got {x}")),
    }
}

fn tcp(t: &TcpReq) -> Result<TcpSpec, String> {
    let (dst, dport) = parse_dst(&t.dst)?;
    let cc = match t.cc.as_deref() {
        None => Cc::NewReno,
        Some(c) => Cc::parse(c).ok_or_else(|| {
            format!(
                "cc: unknown congestion control \"{c}\"; supported: {}",
                Cc::NAMES.join(", ")
            )
        })?,
    };
    let mss = in_range(t.mss, "mss", 1, MAX_MSS as u64, DEFAULT_MSS as u64)?;
    let window = in_range(t.window, "window", 1, 1 << 30, u64::from(DEFAULT_WINDOW))?;
    let initial_window = in_range(
        t.initial_window,
        "initial_window",
        1,
        1 << 30,
        u64::from(DEFAULT_INITIAL_WINDOW),
    )?;
    let min_rto_us = in_range(
        t.min_rto_us,
        "min_rto_us",
        1,
        60_000_000,
        DEFAULT_MIN_RTO_NS / 1000,
    )?;
    let trace_us = in_range(
        t.trace_interval_us,
        "trace_interval_us",
        0,
        3_600_000_000,
        0,
    )?;
    Ok(TcpSpec {
        dst,
        dport,
        cc,
        mss: mss as usize,
        window: window as u32,
        initial_window: initial_window as u32,
        min_rto_ns: min_rto_us * 1000,
        bytes: t.bytes,
        trace_interval_ns: trace_us * 1000,
        sack: t.sack.unwrap_or(true),
        max_burst: in_range(t.max_burst, "max_burst", 0, 1 << 20, 0)? as u32,
        tcp_tick_ns: in_range(t.tcp_tick_us, "tcp_tick_us", 0, 1_000_000, 0)? * 1000,
    })
}
