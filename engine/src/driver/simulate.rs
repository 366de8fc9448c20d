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

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::parallel::with_pool;
use super::partitioner::{place, Placement};
use super::remote::{self, Remote, Role};
use super::replicas::Replicas;
use crate::control::exec::{Effect, Engine};
use crate::control::merge::merge_body;
use crate::control::protocol::{parse_request_value, Request};
use crate::io::capture_file::CaptureDir;
use crate::model::network::partition::{Graph, Partition};
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
    /// Node id → engine process (rank), for a run over several (`--rank`); absent: the
    /// engine's partitioner cuts the topology. Threads ignore it.
    #[serde(default)]
    pub partition: Option<BTreeMap<String, u32>>,
    /// Threads of each engine process of a run over several, in rank order (absent: one
    /// each): each process cuts its part of the topology into that many partitions as
    /// `--threads` does. In the scenario, not on the command line, because every process
    /// must know every other's partitions (the peers check the scenario's digest).
    #[serde(default)]
    pub rank_threads: Option<Vec<u32>>,
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
    /// Partitions (one thread each) of the whole run, over every engine process.
    pub threads: u32,
    /// Engine processes (1 unless `--rank`) and this process's own partitions.
    pub engines: u32,
    pub threads_here: u32,
    /// Windows between this process's threads (a run over several processes; else 0).
    pub local_windows: u64,
    pub lookahead_ns: u64,
    pub windows: u64,
    /// Wall time spent waiting for the other engine processes to connect (not running).
    pub connect_s: f64,
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
            Request::MovePort(_) => return Err(format!("{ctx}.cmd: \"move_port\" is not available in simulate mode (ports move only in real time)")),
            Request::TunnelClock(_) => return Err(format!("{ctx}.cmd: \"tunnel_clock\" is not available in simulate mode (tunnels are real time)")),
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
fn add_extras(pool: &mut impl Replicas, result: &mut Map<String, Value>) -> Result<(), String> {
    let mut traces = Map::new();
    let all = pool.each(|e| {
        e.net
            .tcp_traces()
            .into_iter()
            .map(|(id, s)| {
                (
                    id.to_string(),
                    serde_json::to_value(s).unwrap_or(Value::Null),
                )
            })
            .collect::<Vec<_>>()
    })?;
    for (id, v) in all.into_iter().flatten() {
        traces.insert(id, v);
    }
    result.insert("traces".into(), Value::Object(traces));
    Ok(())
}

/// One `stats` body from every replica's: link and LAN counters add up; routers, hosts and
/// agents appear only in the replica that runs them.
fn merged_stats(
    pool: &mut impl Replicas,
    target: Option<&str>,
    now: Instant,
) -> Result<Map<String, Value>, String> {
    let mut out: Option<Map<String, Value>> = None;
    for m in pool.each(|e| e.stats(target, now))? {
        let m = m?;
        match &mut out {
            None => out = Some(m),
            Some(acc) => {
                merge_body(acc, m);
            }
        }
    }
    Ok(out.unwrap_or_default())
}

/// Run one request in every replica; the reply is the merged stats, the trace of the
/// replica that runs the agent, or (identical everywhere) the first replica's.
fn execute_all(
    pool: &mut impl Replicas,
    req: &Request,
    now: Instant,
) -> Result<Map<String, Value>, String> {
    let bodies = pool.each(|e| {
        e.execute(req.clone(), now).map(|(body, effect)| {
            debug_assert_eq!(effect, Effect::None);
            body
        })
    })?;
    let mut bodies = bodies.into_iter().collect::<Result<Vec<_>, String>>()?;
    match req {
        Request::Stats(s) if pool.count() > 1 => merged_stats(pool, s.target.as_deref(), now),
        Request::Trace(t) => {
            let owner = pool
                .each(|e| e.net.runs_agent(&t.agent))?
                .iter()
                .position(|&b| b)
                .unwrap_or(0);
            Ok(bodies.swap_remove(owner.min(bodies.len().saturating_sub(1))))
        }
        _ => Ok(bodies.swap_remove(0)),
    }
}

/// The partitions for `threads` worker threads: the topology of every `apply` in the
/// scenario (run on a probe engine) is cut by `partitioner::place`. One partition when
/// `threads` is 1, when the scenario captures (captures are written by one thread) or when
/// the probe cannot build the topology.
fn plan(sc: &Scenario, requests: &[Timed], threads: u32) -> Placement {
    let probe_graph = || graph_of(sc, requests).ok();
    match probe_graph().filter(|_| threads > 1) {
        Some(g) => place(&g, threads),
        None => place(&Default::default(), 1),
    }
}

/// The topology of every `apply` in the scenario (run on a probe engine); an error when
/// the scenario captures (captures are written by one engine) or an apply fails.
fn graph_of(sc: &Scenario, requests: &[Timed]) -> Result<Graph, String> {
    let mut probe = Engine::new(sc.seed, 0);
    for r in requests {
        match &r.req {
            Request::Apply(_) => {
                probe
                    .execute(r.req.clone(), Instant::from_nanos(r.at_ns))
                    .map_err(|e| format!("requests[{}] (\"apply\"): {e}", r.index))?;
            }
            Request::CaptureStart(_) => {
                return Err(format!("requests[{}] (\"capture_start\"): a run with captures (trace events) runs in one engine process", r.index))
            }
            _ => {}
        }
    }
    Ok(probe.net.graph())
}

/// The topology of `sc` as the partitioner sees it (for tests and tools).
pub fn probe_graph(sc: &Scenario) -> Result<Graph, String> {
    graph_of(sc, &prepare(sc)?)
}

/// The partitions of a run over several engine processes: process r runs partitions
/// `first[r]..first[r + 1]`, one thread each.
struct RankPlan {
    /// Node → partition over the whole run; `lookahead_ns`: the smallest delay of any cut
    /// link.
    placement: Placement,
    first: Vec<u32>,
    /// The smallest delay of a link cut between two processes (u64::MAX: none).
    between_ns: u64,
    /// Per process: the smallest delay of a link cut between two of its own partitions.
    within_ns: Vec<u64>,
}

impl RankPlan {
    /// Partition → process.
    fn rank_of(&self) -> Vec<u32> {
        self.first
            .windows(2)
            .enumerate()
            .flat_map(|(r, w)| (w[0]..w[1]).map(move |_| r as u32))
            .collect()
    }
}

/// Node → process: the scenario's `partition` (every node placed, a LAN on one process,
/// no cut link without delay), else the engine's partitioner, which must find `ranks`
/// parts.
fn place_ranks(sc: &Scenario, g: &Graph, ranks: u32) -> Result<HashMap<String, u32>, String> {
    let Some(map) = &sc.partition else {
        let p = place(g, ranks);
        if p.parts != ranks {
            return Err(format!("the topology cannot be cut into {ranks} partitions with lookahead (LANs and links without delay are never cut; it gives {}): use fewer engines", p.parts));
        }
        return Ok(p.nodes);
    };
    let mut nodes = HashMap::new();
    for (n, _) in &g.nodes {
        // An endpoint host `<node>-ep` goes with its node.
        let p = map
            .get(n)
            .or_else(|| n.strip_suffix("-ep").and_then(|b| map.get(b)))
            .copied()
            .ok_or(format!("partition: node {n:?} is not placed"))?;
        if p >= ranks {
            return Err(format!(
                "partition.{n}: {p} is not below the number of engines ({ranks})"
            ));
        }
        nodes.insert(n.clone(), p);
    }
    for group in &g.groups {
        let parts: Vec<(&String, u32)> = group
            .iter()
            .filter_map(|n| Some((n, *nodes.get(n)?)))
            .collect();
        if let Some(w) = parts.windows(2).find(|w| w[0].1 != w[1].1) {
            return Err(format!("partition: the LAN of {} and {} spans partitions {} and {}: a LAN stays on one machine", w[0].0, w[1].0, w[0].1, w[1].1));
        }
    }
    for l in &g.links {
        let (Some(&pa), Some(&pb)) = (nodes.get(&l.a), nodes.get(&l.b)) else {
            continue;
        };
        if pa != pb && l.min_flight_ns == 0 {
            return Err(format!("partition: link {} between {} (partition {pa}) and {} (partition {pb}) has no delay, so it gives no lookahead: keep its two nodes on one machine or give it a delay", l.id, l.a, l.b));
        }
    }
    Ok(nodes)
}

/// The partitions of a run over `ranks` engine processes: the nodes placed on processes
/// ([`place_ranks`]), then each process's part cut by the engine's partitioner into as
/// many partitions as its `rank_threads` (as `--threads` cuts a whole topology).
fn plan_ranks(sc: &Scenario, requests: &[Timed], ranks: u32) -> Result<RankPlan, String> {
    let threads = match &sc.rank_threads {
        None => vec![1; ranks as usize],
        Some(t) if t.len() != ranks as usize => {
            return Err(format!(
                "rank_threads: {} values for {ranks} engines (one per engine, in rank order)",
                t.len()
            ))
        }
        Some(t) => {
            if let Some((i, n)) = t.iter().enumerate().find(|(_, n)| !(1..=1024).contains(*n)) {
                return Err(format!("rank_threads[{i}]: {n} is not from 1 to 1024"));
            }
            t.clone()
        }
    };
    let g = graph_of(sc, requests)?;
    let rank_of_node = place_ranks(sc, &g, ranks)?;
    let mut nodes = HashMap::new();
    let mut first = vec![0u32];
    let mut weights = Vec::new();
    let mut within_ns = Vec::new();
    for (r, &t) in threads.iter().enumerate() {
        let mine = |n: &String| rank_of_node.get(n) == Some(&(r as u32));
        let part = Graph {
            nodes: g.nodes.iter().filter(|(n, _)| mine(n)).cloned().collect(),
            links: g
                .links
                .iter()
                .filter(|l| mine(&l.a) && mine(&l.b))
                .cloned()
                .collect(),
            groups: g
                .groups
                .iter()
                .filter(|grp| grp.first().is_some_and(mine))
                .cloned()
                .collect(),
        };
        let p = place(&part, t);
        let base = first[r];
        for (n, _) in &part.nodes {
            nodes.insert(n.clone(), base + p.nodes.get(n).copied().unwrap_or(0));
        }
        first.push(base + p.parts);
        weights.extend(p.weights);
        within_ns.push(if p.parts > 1 {
            p.lookahead_ns
        } else {
            u64::MAX
        });
    }
    let mut lookahead = u64::MAX;
    let mut between_ns = u64::MAX;
    for l in &g.links {
        let (Some(&pa), Some(&pb)) = (nodes.get(&l.a), nodes.get(&l.b)) else {
            continue;
        };
        if pa != pb {
            lookahead = lookahead.min(l.min_flight_ns);
        }
        if rank_of_node.get(&l.a) != rank_of_node.get(&l.b) {
            between_ns = between_ns.min(l.min_flight_ns);
        }
    }
    let parts = *first.last().unwrap_or(&1);
    Ok(RankPlan {
        placement: Placement {
            nodes,
            parts,
            lookahead_ns: lookahead,
            weights,
        },
        first,
        between_ns,
        within_ns,
    })
}

/// This process's part of a run over `role.ranks` engine processes (see `driver/remote`),
/// on as many threads as the scenario's `rank_threads` gives it: every process gets an
/// outcome; the coordinator's (rank 0) holds the result, the same as [`simulate`]'s for
/// the scenario. `digest` identifies the scenario to the peers.
pub fn simulate_remote(sc: &Scenario, role: &Role, digest: u64) -> Result<Outcome, String> {
    let requests = prepare(sc)?;
    let plan = plan_ranks(sc, &requests, role.ranks)?;
    let r = role.rank as usize;
    let (first, end) = (plan.first[r], plan.first[r + 1]);
    let engines: Vec<Engine> = (first..end)
        .map(|me| {
            let mut engine = Engine::new(sc.seed, sc.epoch_ns.unwrap_or(0));
            engine.net.set_partition(Partition {
                me,
                nodes: plan.placement.nodes.clone(),
                ..Default::default()
            });
            engine
        })
        .collect();
    let t0 = std::time::Instant::now();
    let peers = remote::connect(role, digest)?;
    let connect_s = t0.elapsed().as_secs_f64();
    let (run, _) = with_pool(engines, first, plan.within_ns[r], |pool| {
        let mut replicas = Remote::new(pool, peers, plan.rank_of(), role.rank, plan.between_ns);
        let out = run_scenario(sc, requests, &mut replicas);
        (out, replicas.is_coordinator(), replicas.local_windows())
    });
    let (out, coordinator, local_windows) = run;
    let (result, events, windows) = out?;
    Ok(Outcome {
        result: if coordinator { result } else { Value::Null },
        events,
        threads: plan.placement.parts,
        engines: role.ranks,
        threads_here: end - first,
        local_windows,
        lookahead_ns: plan.between_ns,
        windows,
        connect_s,
    })
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
                ..Default::default()
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
    let (r, _) = with_pool(engines, 0, placement.lookahead_ns, |pool| {
        run_scenario(sc, requests, pool)
    });
    let (result, events, windows) = r?;
    Ok(Outcome {
        result,
        events,
        threads: placement.parts,
        engines: 1,
        threads_here: placement.parts,
        local_windows: 0,
        lookahead_ns: placement.lookahead_ns,
        windows,
        connect_s: 0.0,
    })
}

fn run_scenario(
    sc: &Scenario,
    requests: Vec<Timed>,
    pool: &mut impl Replicas,
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
        pool.advance_to(now)?;
        let mut changed = false;
        while let Some(r) = reqs.next_if(|r| r.at_ns == t) {
            let body = execute_all(pool, &r.req, now).map_err(|e| {
                format!(
                    "requests[{}] ({:?}, at_ns {}): {e}",
                    r.index, r.cmd, r.at_ns
                )
            })?;
            // only these can change a delay (agents, stats, traces and captures cannot)
            changed |= matches!(
                r.req,
                Request::Apply(_)
                    | Request::Remove(_)
                    | Request::Set(_)
                    | Request::Down(_)
                    | Request::Up(_)
                    | Request::MovePort(_)
            );
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
        if changed && pool.count() > 1 {
            // A request may have changed a delay on a cut link: the lookahead follows.
            pool.topology_changed()
                .map_err(|e| format!("at_ns {t}: {e}"))?;
        }
        if t_sample == Some(t) {
            let mut m = Map::new();
            m.insert("t_ns".into(), json!(t));
            match &sc.sample_agents {
                None => m.extend(merged_stats(pool, None, now)?),
                Some(ids) => {
                    let mut agents = Map::new();
                    // One value per agent from each replica (None where it does not run).
                    let all = pool.each(|e| {
                        ids.iter()
                            .map(|id| {
                                e.net
                                    .runs_agent(id)
                                    .then(|| e.net.agent_stats(id))
                                    .flatten()
                                    .and_then(|s| serde_json::to_value(s).ok())
                            })
                            .collect::<Vec<_>>()
                    })?;
                    for (k, id) in ids.iter().enumerate() {
                        for vals in &all {
                            if let Some(Some(v)) = vals.get(k) {
                                agents.insert(id.clone(), v.clone());
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
    pool.advance_to(end)?;
    let events: u64 = pool
        .each(|e| {
            e.flush_captures();
            e.net.events(end)
        })?
        .into_iter()
        .sum();
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
    add_extras(pool, &mut result)?;
    Ok((Value::Object(result), events, pool.windows()))
}

/// Read, run and write: the `simulate` subcommand. Returns the process exit code. With
/// `role`, this process is one engine of a run over several (`--rank`); only the
/// coordinator (rank 0) writes the result.
pub fn main(
    scenario: &std::path::Path,
    out: Option<&std::path::Path>,
    threads: u32,
    role: Option<&Role>,
) -> u8 {
    let fail = |msg: String| {
        eprintln!("wanlab-engine simulate: {msg}");
        1
    };
    if role.is_some() && threads != 1 {
        return fail("--threads does not go with --rank: the threads of each engine of a run over several are the scenario's rank_threads".into());
    }
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
    let outcome = match role {
        None => simulate(&sc, Some(folder), threads),
        Some(r) => simulate_remote(&sc, r, remote::digest(text.as_bytes())),
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    // The run's own time: without waiting for the other engines to connect.
    let run_secs = || (secs_of(wall) - outcome.connect_s).max(0.0);
    let line = || {
        let how = if role.is_some() {
            format!(
                "{} engine(s) with {} thread(s), lookahead {} ns, {} windows; this engine: {} thread(s), {} windows between them, {:.3} s waiting for the other engines to connect",
                outcome.engines,
                outcome.threads,
                outcome.lookahead_ns,
                outcome.windows,
                outcome.threads_here,
                outcome.local_windows,
                outcome.connect_s
            )
        } else {
            format!(
                "{} thread(s), lookahead {} ns, {} windows",
                outcome.threads, outcome.lookahead_ns, outcome.windows
            )
        };
        eprintln!(
            "wanlab-engine simulate: {} events in {:.3} s wall time ({:.0} events/s), {:.3} s virtual time, {how}",
            outcome.events,
            run_secs(),
            outcome.events as f64 / run_secs().max(1e-9),
            sc.until_ns as f64 / 1e9,
        )
    };
    if outcome.result.is_null() {
        // A worker engine of a run over several: the coordinator writes the result.
        line();
        return 0;
    }
    let secs = secs_of(wall);
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
    let _ = secs;
    line();
    0
}

fn secs_of(wall: std::time::Instant) -> f64 {
    wall.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    //! Runs over several engine processes (`remote`), as threads of this test.
    use std::net::TcpListener;
    use std::time::Duration;

    use super::remote::{connect, digest, Peers};
    use super::*;

    const THREE_SITES: &str = include_str!("testdata/three_sites.json");

    fn scenario() -> Scenario {
        serde_json::from_str(THREE_SITES).unwrap()
    }

    /// Run the scenario as `ranks` engines (threads of this test, each with its own engine
    /// and real TCP connections on loopback, as separate processes would), engine r on
    /// `threads[r]` threads, and return the coordinator's result.
    fn run_remote(threads: &[u32]) -> String {
        let ranks = threads.len() as u32;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let d = digest(THREE_SITES.as_bytes());
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let role = Role {
                    rank,
                    ranks,
                    addr: addr.clone(),
                    connect_timeout: Duration::from_secs(60),
                };
                let mut sc = scenario();
                sc.rank_threads = Some(threads.to_vec());
                std::thread::spawn(move || simulate_remote(&sc, &role, d))
            })
            .collect();
        let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut first = None;
        for (rank, o) in outs.into_iter().enumerate() {
            let o = o.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            assert_eq!(o.engines, ranks);
            assert_eq!(o.threads_here, threads[rank], "rank {rank}");
            assert_eq!(o.threads, threads.iter().sum::<u32>());
            assert!(o.windows > 1);
            // Threads of one engine synchronise among themselves, more often than the
            // engines do over TCP (their cut links are shorter).
            if threads[rank] > 1 {
                assert!(o.local_windows > o.windows, "rank {rank}");
            }
            if rank == 0 {
                first = Some(o.result.to_string());
            }
        }
        first.unwrap()
    }

    #[test]
    fn two_and_three_engines_on_loopback_give_the_bytes_of_one() {
        let one = simulate(&scenario(), None, 1).unwrap();
        assert_eq!(one.threads, 1);
        let one = one.result.to_string();
        assert!(one.contains("\"drop_queue\""));
        assert_eq!(run_remote(&[1, 1]), one);
        assert_eq!(run_remote(&[1, 1, 1]), one);
    }

    #[test]
    fn engines_on_several_threads_give_the_bytes_of_one() {
        let one = simulate(&scenario(), None, 1).unwrap().result.to_string();
        assert_eq!(run_remote(&[2, 2]), one);
        assert_eq!(run_remote(&[2, 1]), one);
        assert_eq!(run_remote(&[1, 3]), one);
        assert_eq!(run_remote(&[2, 2, 2]), one);
    }

    #[test]
    fn a_zero_delay_cut_is_refused_by_name() {
        let mut sc = scenario();
        // h(0,0) is node n1 on link n1-n0 (1 ms): put its two ends apart and remove the
        // delay from the apply request.
        let mut text = serde_json::to_string(&sc.requests).unwrap();
        text = text.replace("\"delay_us\":1000.0", "\"delay_us\":0.0");
        sc.requests = serde_json::from_str(&text).unwrap();
        let g = probe_graph(&sc).unwrap();
        let zero = g.links.iter().find(|l| l.min_flight_ns == 0).unwrap();
        let mut part = std::collections::BTreeMap::new();
        for (n, _) in &g.nodes {
            part.insert(n.clone(), 0);
        }
        part.insert(zero.b.clone(), 1);
        sc.partition = Some(part);
        let role = Role {
            rank: 1,
            ranks: 2,
            addr: "127.0.0.1:1".into(),
            connect_timeout: Duration::from_secs(1),
        };
        let e = simulate_remote(&sc, &role, 0).err().unwrap();
        assert!(e.contains("no lookahead"), "{e}");
        assert!(e.contains(&zero.id), "{e}");
    }

    #[test]
    fn a_peer_that_goes_away_ends_the_run_with_an_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let d = digest(THREE_SITES.as_bytes());
        let hub = Role {
            rank: 0,
            ranks: 2,
            addr: addr.clone(),
            connect_timeout: Duration::from_secs(60),
        };
        let h = std::thread::spawn(move || simulate_remote(&scenario(), &hub, d));
        // A worker that says hello and then exits.
        let worker = Role {
            rank: 1,
            ranks: 2,
            addr,
            connect_timeout: Duration::from_secs(60),
        };
        match connect(&worker, d).unwrap() {
            Peers::Worker(s) => drop(s),
            Peers::Hub(_) => unreachable!(),
        }
        let e = h.join().unwrap().err().unwrap();
        assert!(e.contains("receiving from a peer engine"), "{e}");
    }

    #[test]
    fn a_missing_coordinator_is_named() {
        let role = Role {
            rank: 1,
            ranks: 2,
            addr: "127.0.0.1:1".into(),
            connect_timeout: Duration::from_millis(300),
        };
        let e = simulate_remote(&scenario(), &role, 0).err().unwrap();
        assert!(e.contains("did not answer"), "{e}");
    }
}
