//! Batch simulation (`wanlab-engine simulate SCENARIO.json`): a whole scenario in virtual
//! time, as fast as the CPU allows, with a deterministic JSON result.
//!
//! A scenario is the control protocol's requests with virtual times:
//! `{"seed", "until_ns", "sample_interval_ns"?, "sample_agents"?, "epoch_ns"?,
//! "requests":[{"at_ns", "cmd", ...}]}`.
//! Requests run through the same parser and executor as the socket ([`Engine::execute`]), so
//! their semantics are identical; only TAP ports, `subscribe` and `shutdown` are refused.
//!
//! Order at one virtual time T: first every network event with time ≤ T (including events
//! those create at ≤ T), then the requests with `at_ns` = T in file order, then the sample
//! at T (if T is a sample time). Events a request creates at T run before anything later.
//! The final `stats` are taken at `until_ns` after the same steps.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::parallel::{with_pool, Pool};
use super::partitioner::{place, Placement};
use crate::control::exec::{Effect, Engine};
use crate::control::protocol::{parse_request_value, Request};
use crate::io::capture_file::CaptureDir;
use crate::model::network::partition::Partition;
use crate::time::Instant;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub until_ns: u64,
    #[serde(default)]
    pub sample_interval_ns: Option<u64>,
    /// Only these agents in each sample (`{"t_ns", "agents": {...}}`): a full stats body
    /// per sample costs more than the simulation itself in big networks.
    #[serde(default)]
    pub sample_agents: Option<Vec<String>>,
    /// Unix time (ns) of virtual time 0 for capture timestamps (default 0: the epoch).
    #[serde(default)]
    pub epoch_ns: Option<u64>,
    #[serde(default)]
    pub requests: Vec<Value>,
}

fn default_seed() -> u64 {
    1
}

/// Largest number of samples (a guard against a tiny interval over a long run).
pub const MAX_SAMPLES: u64 = 10_000_000;

/// A run's outcome: the result document, the number of timer events and how it ran
/// (partitions, lookahead, synchronisation windows; none of them in the result).
pub struct Outcome {
    pub result: Value,
    pub events: u64,
    pub threads: u32,
    pub lookahead_ns: u64,
    pub windows: u64,
}

struct Timed {
    at_ns: u64,
    index: usize,
    cmd: String,
    id: Value,
    req: Request,
}

/// Parse and check the scenario's shape; every error names `requests[i]` and the field.
fn prepare(sc: &Scenario) -> Result<Vec<Timed>, String> {
    if let Some(i) = sc.sample_interval_ns {
        if i == 0 {
            return Err("sample_interval_ns: must be > 0".into());
        }
        if sc.until_ns / i > MAX_SAMPLES {
            return Err(format!(
                "sample_interval_ns: more than {MAX_SAMPLES} samples until until_ns"
            ));
        }
    }
    let mut out = Vec::new();
    for (i, v) in sc.requests.iter().enumerate() {
        let ctx = format!("requests[{i}]");
        let Value::Object(obj) = v else {
            return Err(format!("{ctx}: must be a JSON object"));
        };
        let mut obj = obj.clone();
        let at_ns = match obj.remove("at_ns") {
            Some(Value::Number(n)) => n.as_u64().ok_or(format!(
                "{ctx}.at_ns: must be a non-negative integer (ns), got {n}"
            ))?,
            Some(x) => {
                return Err(format!(
                    "{ctx}.at_ns: must be a non-negative integer (ns), got {x}"
                ))
            }
            None => return Err(format!("{ctx}.at_ns: missing")),
        };
        if at_ns > sc.until_ns {
            return Err(format!(
                "{ctx}.at_ns: {at_ns} is after until_ns {}",
                sc.until_ns
            ));
        }
        let cmd = obj
            .get("cmd")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (id, req) = parse_request_value(Value::Object(obj));
        let req = req.map_err(|e| format!("{ctx} ({cmd:?}): {e}"))?;
        match &req {
            Request::Apply(a) => {
                if let Some((j, p)) = a.ports.iter().enumerate().next() {
                    return Err(format!("{ctx} (\"apply\"): ports[{j}] (\"{}\").tap: TAP ports are not available in simulate mode (only simulated routers, hosts and their ports)", p.port));
                }
            }
            Request::Subscribe(_) => return Err(format!("{ctx}.cmd: \"subscribe\" is not available in simulate mode (use sample_interval_ns)")),
            Request::Shutdown => return Err(format!("{ctx}.cmd: \"shutdown\" is not available in simulate mode (the run ends at until_ns)")),
            _ => {}
        }
        out.push(Timed {
            at_ns,
            index: i,
            cmd,
            id,
            req,
        });
    }
    // File order for equal times (stable sort).
    out.sort_by_key(|t| t.at_ns);
    Ok(out)
}

/// Per-agent data added to the result besides replies, samples and stats: "traces", every
/// TCP sender's samples, [t_ns, cwnd, ssthresh, srtt_us, acked_bytes, retransmits] as the
/// `trace` command returns them (each from the replica that runs the agent).
fn add_extras(pool: &mut Pool<'_>, result: &mut Map<String, Value>) {
    let mut traces = Map::new();
    for i in 0..pool.len() {
        pool.with_engine(i, |e| {
            for (id, s) in e.net.tcp_traces() {
                traces.insert(
                    id.to_string(),
                    serde_json::to_value(s).unwrap_or(Value::Null),
                );
            }
        });
    }
    result.insert("traces".into(), Value::Object(traces));
}

/// Add `b` into `a`: numbers add up, objects merge key by key, an empty list takes the other
/// replica's (a distribution's buckets are recorded by the one replica that runs the half
/// of the pipeline it measures, so its quantiles add to zeros and its buckets replace an
/// empty list), anything else stays `a`'s. Counters of a pipeline are split between the
/// replicas of its two halves.
fn add_values(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) if x.is_empty() => x.clone_from(y),
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(x) => add_values(x, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let sum = match (x.as_u64(), y.as_u64()) {
                (Some(p), Some(q)) => json!(p.saturating_add(q)),
                _ => json!(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
            };
            *x = match sum {
                Value::Number(n) => n,
                _ => x.clone(),
            };
        }
        _ => {}
    }
}

/// One `stats` body from every replica's: link and LAN counters add up; routers, hosts and
/// agents appear only in the replica that runs them.
fn merged_stats(
    pool: &mut Pool<'_>,
    target: Option<&str>,
    now: Instant,
) -> Result<Map<String, Value>, String> {
    let mut out: Option<Map<String, Value>> = None;
    for i in 0..pool.len() {
        let m = pool.with_engine(i, |e| e.stats(target, now))?;
        match &mut out {
            None => out = Some(m),
            Some(acc) => {
                for (k, v) in m {
                    match k.as_str() {
                        "now_ns" => {}
                        _ => match acc.get_mut(&k) {
                            Some(x) => add_values(x, &v),
                            None => {
                                acc.insert(k, v);
                            }
                        },
                    }
                }
            }
        }
    }
    Ok(out.unwrap_or_default())
}

/// Run one request in every replica; the reply is the merged stats, the trace of the
/// replica that runs the agent, or (identical everywhere) the first replica's.
fn execute_all(
    pool: &mut Pool<'_>,
    req: &Request,
    now: Instant,
) -> Result<Map<String, Value>, String> {
    let mut bodies = Vec::with_capacity(pool.len());
    for i in 0..pool.len() {
        let (body, effect) = pool.with_engine(i, |e| e.execute(req.clone(), now))?;
        debug_assert_eq!(effect, Effect::None);
        bodies.push(body);
    }
    match req {
        Request::Stats(s) if pool.len() > 1 => merged_stats(pool, s.target.as_deref(), now),
        Request::Trace(t) => {
            let owner = (0..pool.len())
                .find(|&i| pool.with_engine(i, |e| e.net.runs_agent(&t.agent)))
                .unwrap_or(0);
            Ok(bodies.swap_remove(owner))
        }
        _ => Ok(bodies.swap_remove(0)),
    }
}

/// The partitions for `threads` worker threads: the topology of every `apply` in the
/// scenario (run on a probe engine) is cut by `partitioner::place`. One partition when
/// `threads` is 1, when the scenario captures (captures are written by one thread) or when
/// the probe cannot build the topology.
fn plan(sc: &Scenario, requests: &[Timed], threads: u32) -> Placement {
    let probe_graph = || {
        let mut probe = Engine::new(sc.seed, 0);
        for r in requests {
            match &r.req {
                Request::Apply(_) => {
                    probe
                        .execute(r.req.clone(), Instant::from_nanos(r.at_ns))
                        .ok()?;
                }
                Request::CaptureStart(_) => return None,
                _ => {}
            }
        }
        Some(probe.net.graph())
    };
    match probe_graph().filter(|_| threads > 1) {
        Some(g) => place(&g, threads),
        None => place(&Default::default(), 1),
    }
}

/// Run a scenario on up to `threads` threads; captures may be written inside `capture_dir`
/// only (None: refused). Errors name the failing request (`requests[i] ...: field:
/// message`). The result does not depend on `threads`.
pub fn simulate(
    sc: &Scenario,
    capture_dir: Option<&std::path::Path>,
    threads: u32,
) -> Result<Outcome, String> {
    let requests = prepare(sc)?;
    let placement = plan(sc, &requests, threads);
    let mut engines = Vec::new();
    for me in 0..placement.parts {
        let mut engine = Engine::new(sc.seed, sc.epoch_ns.unwrap_or(0));
        if placement.parts > 1 {
            engine.net.set_partition(Partition {
                me,
                nodes: placement.nodes.clone(),
            });
        }
        if let Some(d) = capture_dir.filter(|_| placement.parts == 1) {
            engine.capture_dir = Some(
                CaptureDir::open(d)
                    .map_err(|e| format!("capture directory {}: {e}", d.display()))?,
            );
        }
        engines.push(engine);
    }
    let (r, _) = with_pool(engines, placement.lookahead_ns, |pool| {
        run_scenario(sc, requests, pool)
    });
    let (result, events, windows) = r?;
    Ok(Outcome {
        result,
        events,
        threads: placement.parts,
        lookahead_ns: placement.lookahead_ns,
        windows,
    })
}

fn run_scenario(
    sc: &Scenario,
    requests: Vec<Timed>,
    pool: &mut Pool<'_>,
) -> Result<(Value, u64, u64), String> {
    let mut replies = Vec::new();
    let mut samples = Vec::new();
    let mut next_sample = sc.sample_interval_ns;
    let mut reqs = requests.into_iter().peekable();
    loop {
        // The next point in time with work besides network events.
        let t_req = reqs.peek().map(|r| r.at_ns);
        let t_sample = next_sample.filter(|&s| s <= sc.until_ns);
        let t = match (t_req, t_sample) {
            (None, None) => break,
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
        };
        let now = Instant::from_nanos(t);
        pool.advance_to(now);
        let mut changed = false;
        while let Some(r) = reqs.next_if(|r| r.at_ns == t) {
            let body = execute_all(pool, &r.req, now).map_err(|e| {
                format!(
                    "requests[{}] ({:?}, at_ns {}): {e}",
                    r.index, r.cmd, r.at_ns
                )
            })?;
            changed = true;
            let mut m = Map::new();
            m.insert("at_ns".into(), json!(t));
            m.insert("cmd".into(), json!(r.cmd));
            if !r.id.is_null() {
                m.insert("id".into(), r.id);
            }
            m.insert("ok".into(), json!(true));
            m.extend(body);
            replies.push(Value::Object(m));
        }
        if changed && pool.len() > 1 {
            // A request may have changed a delay on a cut link: the lookahead follows.
            match pool.with_engine(0, |e| e.net.lookahead_ns()) {
                Some(0) => return Err(format!("at_ns {t}: a link between partitions now has no minimum delay (no lookahead); run with --threads 1")),
                Some(l) => pool.lookahead_ns = l,
                None => pool.lookahead_ns = u64::MAX,
            }
        }
        if t_sample == Some(t) {
            let mut m = Map::new();
            m.insert("t_ns".into(), json!(t));
            match &sc.sample_agents {
                None => m.extend(merged_stats(pool, None, now)?),
                Some(ids) => {
                    let mut agents = Map::new();
                    for id in ids {
                        for i in 0..pool.len() {
                            let v = pool.with_engine(i, |e| {
                                e.net
                                    .runs_agent(id)
                                    .then(|| e.net.agent_stats(id))
                                    .flatten()
                                    .and_then(|s| serde_json::to_value(s).ok())
                            });
                            if let Some(v) = v {
                                agents.insert(id.clone(), v);
                            }
                        }
                    }
                    m.insert("agents".into(), Value::Object(agents));
                }
            }
            samples.push(Value::Object(m));
            next_sample = sc.sample_interval_ns.and_then(|i| t.checked_add(i));
        }
    }
    let end = Instant::from_nanos(sc.until_ns);
    pool.advance_to(end);
    let mut events = 0;
    for i in 0..pool.len() {
        events += pool.with_engine(i, |e| {
            e.flush_captures();
            e.net.events()
        });
    }
    let mut result = Map::new();
    result.insert("seed".into(), json!(sc.seed));
    result.insert("until_ns".into(), json!(sc.until_ns));
    result.insert("events".into(), json!(events));
    result.insert("replies".into(), Value::Array(replies));
    result.insert("samples".into(), Value::Array(samples));
    result.insert(
        "stats".into(),
        Value::Object(merged_stats(pool, None, end)?),
    );
    add_extras(pool, &mut result);
    Ok((Value::Object(result), events, pool.windows))
}

/// Read, run and write: the `simulate` subcommand. Returns the process exit code.
pub fn main(scenario: &std::path::Path, out: Option<&std::path::Path>, threads: u32) -> u8 {
    let fail = |msg: String| {
        eprintln!("wanlab-engine simulate: {msg}");
        1
    };
    let text = match std::fs::read_to_string(scenario) {
        Ok(t) => t,
        Err(e) => return fail(format!("{}: {e}", scenario.display())),
    };
    let sc: Scenario =
        match serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)) {
            Ok(s) => s,
            Err(e) => {
                let path = e.path().to_string();
                return fail(if path == "." {
                    format!("{}: {}", scenario.display(), e.inner())
                } else {
                    format!("{}: {path}: {}", scenario.display(), e.inner())
                });
            }
        };
    let wall = std::time::Instant::now();
    // Captures stay inside the scenario's folder (the experiment's output folder).
    let folder = match scenario.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let outcome = match simulate(&sc, Some(folder), threads) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let secs = wall.elapsed().as_secs_f64();
    // serde_json's Map keeps keys sorted, and no value depends on the wall clock, so the
    // same scenario gives the same bytes.
    let mut text = outcome.result.to_string();
    text.push('\n');
    let written = match out {
        Some(p) => std::fs::write(p, text).map_err(|e| format!("--out {}: {e}", p.display())),
        None => {
            use std::io::Write;
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|e| format!("stdout: {e}"))
        }
    };
    if let Err(e) = written {
        return fail(e);
    }
    eprintln!(
        "wanlab-engine simulate: {} events in {:.3} s wall time ({:.0} events/s), {:.3} s virtual time, {} thread(s), lookahead {} ns, {} windows",
        outcome.events,
        secs,
        outcome.events as f64 / secs.max(1e-9),
        sc.until_ns as f64 / 1e9,
        outcome.threads,
        outcome.lookahead_ns,
        outcome.windows
    );
    0
}
