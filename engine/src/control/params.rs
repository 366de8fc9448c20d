//! Link parameters: validating a request's partial [`ParamsSpec`] and merging it into the
//! current [`LinkParams`] of a direction (pure; errors name the field path).

use super::protocol::{
    JitterDistSpec, LossSpec, ParamsSpec, QueueKindSpec, QueueSpec, ScheduleSpec,
};
use crate::model::params::{JitterDist, LinkParams, LossParams, QueueKind, RedParams};
use crate::model::schedule::{Schedule, MAX_POINTS};
use crate::model::trace::Trace;

/// Largest per-frame or per-cell overhead (bytes, either sign) and cell size.
pub const MAX_FRAMING_BYTES: i64 = 65_535;
/// Largest reorder gap (frames).
pub const MAX_REORDER_GAP: u64 = 1_000_000;

pub const MAX_BANDWIDTH_BPS: u64 = 100_000_000_000;
pub const MAX_DELAY_US: f64 = 10_000_000.0;
pub const MAX_LIMIT_PKTS: u64 = 1_000_000;
pub const MAX_ORDINALS: usize = 1_000_000;

fn check_prob(field: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{field}: probability must be in [0, 1], got {v}"))
    }
}

fn check_us(field: &str, v: f64) -> Result<u64, String> {
    if v.is_finite() && (0.0..=MAX_DELAY_US).contains(&v) {
        Ok((v * 1000.0).round() as u64)
    } else {
        Err(format!(
            "{field}: must be between 0 and {MAX_DELAY_US} µs (10 s), got {v}"
        ))
    }
}

/// Merge a partial spec into `base` and validate the result. `ctx` prefixes error messages
/// (e.g. `links[0].ab`). Unspecified fields keep `base`'s values.
pub fn merge_params(
    base: &LinkParams,
    patch: &ParamsSpec,
    ctx: &str,
) -> Result<LinkParams, String> {
    let mut p = base.clone();
    if let Some(b) = patch.bandwidth_bps {
        if b > MAX_BANDWIDTH_BPS {
            return Err(format!(
                "{ctx}.bandwidth_bps: at most {MAX_BANDWIDTH_BPS} (100 Gbit/s), got {b}"
            ));
        }
        p.bandwidth_bps = b;
        // a fixed rate ends a trace (unless the same patch brings one)
        p.trace = None;
    }
    if let Some(d) = patch.delay_us {
        p.delay_ns = check_us(&format!("{ctx}.delay_us"), d)?;
    }
    if let Some(j) = patch.jitter_us {
        p.jitter_ns = check_us(&format!("{ctx}.jitter_us"), j)?;
    }
    if let Some(d) = patch.jitter_dist {
        p.jitter_dist = match d {
            JitterDistSpec::Uniform => JitterDist::Uniform,
            JitterDistSpec::Normal => JitterDist::Normal,
            JitterDistSpec::Pareto => JitterDist::Pareto,
            JitterDistSpec::Paretonormal => JitterDist::ParetoNormal,
        };
    }
    if let Some(c) = patch.jitter_corr {
        p.jitter_corr = check_prob(&format!("{ctx}.jitter_corr"), c)?;
    }
    if let Some(r) = patch.reorder {
        p.reorder = check_prob(&format!("{ctx}.reorder"), r)?;
    }
    if let Some(g) = patch.reorder_gap {
        if g == 0 || g > MAX_REORDER_GAP {
            return Err(format!(
                "{ctx}.reorder_gap: must be 1..={MAX_REORDER_GAP} frames, got {g}"
            ));
        }
        p.reorder_gap = g as u32;
    }
    let bytes = |n: &str, v: i64, min: i64| -> Result<i32, String> {
        if (min..=MAX_FRAMING_BYTES).contains(&v) {
            Ok(v as i32)
        } else {
            Err(format!(
                "{ctx}.{n}: must be {min}..={MAX_FRAMING_BYTES} bytes, got {v}"
            ))
        }
    };
    if let Some(o) = patch.overhead {
        p.framing.overhead = bytes("overhead", o, -MAX_FRAMING_BYTES)?;
    }
    if let Some(c) = patch.cellsize {
        p.framing.cellsize = bytes("cellsize", c.min(i64::MAX as u64) as i64, 0)? as u32;
    }
    if let Some(o) = patch.cell_overhead {
        p.framing.cell_overhead = bytes("cell_overhead", o, -MAX_FRAMING_BYTES)?;
    }
    if p.framing.cellsize > 0
        && i64::from(p.framing.cellsize) + i64::from(p.framing.cell_overhead) < 1
    {
        return Err(format!(
            "{ctx}.cell_overhead: a cell must keep at least one byte (cellsize {} + cell_overhead {})",
            p.framing.cellsize, p.framing.cell_overhead
        ));
    }
    if let Some(r) = patch.jitter_reorder {
        p.jitter_reorder = r;
    }
    if let Some(d) = patch.duplicate {
        p.duplicate = check_prob(&format!("{ctx}.duplicate"), d)?;
    }
    if let Some(c) = patch.corrupt {
        p.corrupt = check_prob(&format!("{ctx}.corrupt"), c)?;
    }
    if let Some(t) = &patch.trace {
        p.trace = if t.ms.is_empty() {
            None
        } else {
            Trace::check(&t.ms).map_err(|e| format!("{ctx}.trace: {e}"))?;
            Some(Trace {
                ms: std::sync::Arc::new(t.ms.clone()),
                offset_ms: t.offset_ms,
                looped: t.looped,
            })
        };
    }
    if let Some(sc) = &patch.schedule {
        p.schedule = schedule(sc, &format!("{ctx}.schedule"))?;
    }
    if let Some(l) = &patch.loss {
        let f = |n: &str, v: f64| check_prob(&format!("{ctx}.loss.{n}"), v);
        p.loss = match l {
            LossSpec::None => LossParams::None,
            LossSpec::Bernoulli { p, corr } => LossParams::Bernoulli {
                p: f("p", *p)?,
                corr: f("corr", *corr)?,
            },
            LossSpec::State {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                let (p13, p31, p32, p23, p14) = (
                    f("p13", *p13)?,
                    f("p31", *p31)?,
                    f("p32", *p32)?,
                    f("p23", *p23)?,
                    f("p14", *p14)?,
                );
                if p13 + p14 > 1.0 || p31 + p32 > 1.0 {
                    return Err(format!(
                        "{ctx}.loss: p13 + p14 and p31 + p32 must each be at most 1"
                    ));
                }
                LossParams::FourState {
                    p13,
                    p31,
                    p32,
                    p23,
                    p14,
                }
            }
            LossSpec::Gilbert { p, r, k, h } => LossParams::Gilbert {
                p: f("p", *p)?,
                r: f("r", *r)?,
                k: f("k", *k)?,
                h: f("h", *h)?,
            },
            LossSpec::Ordinals { drop } => {
                if drop.len() > MAX_ORDINALS {
                    return Err(format!("{ctx}.loss.drop: at most {MAX_ORDINALS} ordinals"));
                }
                if let Some(i) = drop.iter().position(|&o| o == 0) {
                    return Err(format!("{ctx}.loss.drop[{i}]: ordinals are 1-based, got 0"));
                }
                LossParams::Ordinals { drop: drop.clone() }
            }
        };
    }
    if let Some(q) = &patch.queue {
        merge_queue(&mut p, q, ctx)?;
    }
    // Cross-field checks on the merged result (a `set` may change the limit under RED).
    if let QueueKind::Red(r) = p.queue.kind {
        let limit = p.queue.effective_limit(p.bandwidth_bps, p.delay_ns);
        if !(r.thresh < r.maxthresh && r.maxthresh <= f64::from(limit)) {
            return Err(format!(
                "{ctx}.queue: RED needs thresh < maxthresh <= limit, got thresh {} maxthresh {} limit {limit}",
                r.thresh, r.maxthresh
            ));
        }
    }
    Ok(p)
}

/// A schedule from its request form, checked (None: no schedule).
fn schedule(sc: &ScheduleSpec, ctx: &str) -> Result<Option<Schedule>, String> {
    use std::sync::Arc;
    let n = sc.t_ns.len();
    if n == 0 {
        return Ok(None);
    }
    if n > MAX_POINTS {
        return Err(format!("{ctx}: at most {MAX_POINTS} points"));
    }
    if let Some(i) = sc.t_ns.windows(2).position(|w| w[1] < w[0]) {
        return Err(format!("{ctx}.t_ns[{}]: times must not decrease", i + 1));
    }
    let len = |name: &str, l: usize| -> Result<(), String> {
        if l == n {
            Ok(())
        } else {
            Err(format!("{ctx}.{name}: {l} values for {n} times"))
        }
    };
    let delay = match &sc.delay_us {
        None => None,
        Some(d) => {
            len("delay_us", d.len())?;
            let v = d
                .iter()
                .enumerate()
                .map(|(i, &x)| check_us(&format!("{ctx}.delay_us[{i}]"), x))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Arc::new(v))
        }
    };
    let bw = match &sc.bandwidth_bps {
        None => None,
        Some(b) => {
            len("bandwidth_bps", b.len())?;
            if let Some(i) = b.iter().position(|&x| x == 0 || x > MAX_BANDWIDTH_BPS) {
                return Err(format!(
                    "{ctx}.bandwidth_bps[{i}]: must be 1..={MAX_BANDWIDTH_BPS}, got {}",
                    b[i]
                ));
            }
            Some(Arc::new(b.clone()))
        }
    };
    let loss = match &sc.loss {
        None => None,
        Some(l) => {
            len("loss", l.len())?;
            for (i, &x) in l.iter().enumerate() {
                check_prob(&format!("{ctx}.loss[{i}]"), x)?;
            }
            Some(Arc::new(l.clone()))
        }
    };
    if delay.is_none() && bw.is_none() && loss.is_none() {
        return Err(format!("{ctx}: needs delay_us, bandwidth_bps or loss"));
    }
    Ok(Some(Schedule {
        t_ns: Arc::new(sc.t_ns.clone()),
        delay_ns: delay,
        bandwidth_bps: bw,
        loss,
        linear: sc.linear,
        looped: sc.looped,
    }))
}

fn merge_queue(p: &mut LinkParams, q: &QueueSpec, ctx: &str) -> Result<(), String> {
    let qp = &mut p.queue;
    match q.kind {
        Some(QueueKindSpec::Droptail) => qp.kind = QueueKind::DropTail,
        // Switching to RED starts from the ns-2 defaults; RED stays RED with its values.
        Some(QueueKindSpec::Red) if !matches!(qp.kind, QueueKind::Red(_)) => {
            qp.kind = QueueKind::Red(RedParams::default())
        }
        Some(QueueKindSpec::Red) | None => {}
    }
    if let Some(l) = q.limit {
        if l == 0 || l > MAX_LIMIT_PKTS {
            return Err(format!(
                "{ctx}.queue.limit: must be 1..={MAX_LIMIT_PKTS} packets, got {l}"
            ));
        }
        qp.limit = Some(l as u32);
    }
    if let Some(b) = q.in_bytes {
        qp.in_bytes = b;
    }
    if let Some(m) = q.mean_pktsize {
        if m == 0 || m > 65_535 {
            return Err(format!(
                "{ctx}.queue.mean_pktsize: must be 1..=65535 bytes, got {m}"
            ));
        }
        qp.mean_pktsize = m as u32;
    }
    let red_fields = [
        ("thresh", q.thresh.is_some()),
        ("maxthresh", q.maxthresh.is_some()),
        ("q_weight", q.q_weight.is_some()),
        ("linterm", q.linterm.is_some()),
        ("gentle", q.gentle.is_some()),
    ];
    match &mut qp.kind {
        QueueKind::DropTail => {
            if let Some((name, _)) = red_fields.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "{ctx}.queue.{name}: only valid for kind \"red\" (queue is droptail)"
                ));
            }
        }
        QueueKind::Red(r) => {
            let num =
                |n: &str, v: Option<f64>, min: f64, max: f64, cur: f64| -> Result<f64, String> {
                    match v {
                        None => Ok(cur),
                        Some(x) if x.is_finite() && x >= min && x <= max => Ok(x),
                        Some(x) => Err(format!(
                            "{ctx}.queue.{n}: must be in [{min}, {max}], got {x}"
                        )),
                    }
                };
            r.thresh = num("thresh", q.thresh, 0.0, MAX_LIMIT_PKTS as f64, r.thresh)?;
            r.maxthresh = num(
                "maxthresh",
                q.maxthresh,
                0.0,
                MAX_LIMIT_PKTS as f64,
                r.maxthresh,
            )?;
            r.linterm = num("linterm", q.linterm, 1.0, 1e12, r.linterm)?;
            r.q_weight = num("q_weight", q.q_weight, 0.0, 1.0, r.q_weight)?;
            if r.q_weight <= 0.0 {
                return Err(format!("{ctx}.queue.q_weight: must be > 0"));
            }
            if let Some(g) = q.gentle {
                r.gentle = g;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_ranges() {
        let d = LinkParams::default();
        let m = |s: &str| merge_params(&d, &serde_json::from_str::<ParamsSpec>(s).unwrap(), "p");
        assert!(m(r#"{"bandwidth_bps":100000000001}"#)
            .unwrap_err()
            .contains("p.bandwidth_bps"));
        assert!(m(r#"{"delay_us":10000001}"#)
            .unwrap_err()
            .contains("p.delay_us"));
        assert!(m(r#"{"delay_us":-1}"#).unwrap_err().contains("p.delay_us"));
        assert!(m(r#"{"duplicate":1.5}"#)
            .unwrap_err()
            .contains("p.duplicate"));
        assert!(
            m(r#"{"loss":{"kind":"gilbert","p":0.1,"r":2,"k":1,"h":0}}"#)
                .unwrap_err()
                .contains("p.loss.r")
        );
        assert!(m(r#"{"loss":{"kind":"ordinals","drop":[3,0]}}"#)
            .unwrap_err()
            .contains("p.loss.drop[1]"));
        assert!(m(r#"{"queue":{"kind":"red","thresh":20,"maxthresh":15}}"#)
            .unwrap_err()
            .contains("thresh < maxthresh"));
        assert!(m(r#"{"queue":{"kind":"red","limit":10}}"#)
            .unwrap_err()
            .contains("limit 10"));
        assert!(m(r#"{"queue":{"thresh":2}}"#)
            .unwrap_err()
            .contains("p.queue.thresh"));
        assert!(m(r#"{"queue":{"limit":0}}"#)
            .unwrap_err()
            .contains("p.queue.limit"));
        assert!(m(r#"{"queue":{"kind":"red","q_weight":0}}"#)
            .unwrap_err()
            .contains("q_weight"));
        assert!(m(r#"{"queue":{"kind":"red","linterm":0.5}}"#)
            .unwrap_err()
            .contains("linterm"));
        assert!(m(r#"{"delay_us":0.001,"jitter_us":3,"jitter_dist":"normal"}"#).is_ok());
        assert!(m(r#"{"jitter_corr":1.5}"#)
            .unwrap_err()
            .contains("p.jitter_corr"));
        assert!(m(r#"{"reorder_gap":0}"#)
            .unwrap_err()
            .contains("p.reorder_gap"));
        assert!(m(r#"{"overhead":70000}"#)
            .unwrap_err()
            .contains("p.overhead"));
        assert!(m(r#"{"cellsize":48,"cell_overhead":-48}"#)
            .unwrap_err()
            .contains("p.cell_overhead"));
        assert!(m(r#"{"loss":{"kind":"bernoulli","p":0.1,"corr":2}}"#)
            .unwrap_err()
            .contains("p.loss.corr"));
        assert!(
            m(r#"{"loss":{"kind":"state","p13":0.6,"p31":0.5,"p32":0,"p23":1,"p14":0.6}}"#)
                .unwrap_err()
                .contains("p13 + p14")
        );
        let ok = m(
            r#"{"jitter_us":5,"jitter_dist":"paretonormal","jitter_corr":0.25,
            "reorder":0.25,"reorder_gap":5,"overhead":-4,"cellsize":53,"cell_overhead":-5,
            "loss":{"kind":"state","p13":0.1,"p31":0.5,"p32":0.1,"p23":0.9,"p14":0.01}}"#,
        )
        .unwrap();
        assert_eq!(ok.jitter_dist, JitterDist::ParetoNormal);
        assert!(m(r#"{"trace":{"ms":[3,1]}}"#)
            .unwrap_err()
            .contains("p.trace: opportunity 1"));
        let t = m(r#"{"trace":{"ms":[0,1],"offset_ms":5,"loop":false}}"#).unwrap();
        assert_eq!(
            t.trace.as_ref().map(|t| (t.offset_ms, t.looped)),
            Some((5, false))
        );
        let back = merge_params(
            &t,
            &serde_json::from_str(r#"{"trace":{"ms":[]}}"#).unwrap(),
            "p",
        );
        assert_eq!(back.unwrap().trace, None);
        assert_eq!(
            (ok.reorder_gap, ok.framing.cellsize, ok.framing.overhead),
            (5, 53, -4)
        );
        assert!(matches!(ok.loss, LossParams::FourState { p14, .. } if p14 == 0.01));
    }

    #[test]
    fn merge_keeps_unspecified() {
        let d = LinkParams::default();
        let a = merge_params(
            &d,
            &serde_json::from_str(
                r#"{"bandwidth_bps":5,"delay_us":7,"queue":{"kind":"red","limit":100}}"#,
            )
            .unwrap(),
            "p",
        )
        .unwrap();
        let b = merge_params(
            &a,
            &serde_json::from_str(r#"{"delay_us":9,"queue":{"gentle":true}}"#).unwrap(),
            "p",
        )
        .unwrap();
        assert_eq!(b.bandwidth_bps, 5);
        assert_eq!(b.delay_ns, 9000);
        assert_eq!(b.queue.limit, Some(100));
        assert!(matches!(
            b.queue.kind,
            QueueKind::Red(RedParams { gentle: true, .. })
        ));
    }
}
