//! Control protocol, version 1: request types, parsing and validation.
//!
//! A request is one JSON object per line: `{"id": <any>, "cmd": "<name>", ...args}`. Every
//! argument object rejects unknown fields (a typo is an error naming the field, never silently
//! ignored), and every error names the offending field or object. Parsing never panics.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::network::Dir;
use crate::model::params::{JitterDist, LinkParams, LossParams, QueueKind, RedParams};

pub const PROTOCOL_VERSION: u32 = 1;
pub const MAX_BANDWIDTH_BPS: u64 = 100_000_000_000;
pub const MAX_DELAY_US: f64 = 10_000_000.0;
pub const MAX_LIMIT_PKTS: u64 = 1_000_000;
pub const MAX_ORDINALS: usize = 1_000_000;

// ---------------------------------------------------------------- link parameters

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParamsSpec {
    pub bandwidth_bps: Option<u64>,
    pub delay_us: Option<f64>,
    pub jitter_us: Option<f64>,
    /// Extension: "uniform" (default, ±jitter) or "normal" (jitter = standard deviation).
    pub jitter_dist: Option<JitterDistSpec>,
    pub jitter_reorder: Option<bool>,
    pub queue: Option<QueueSpec>,
    pub loss: Option<LossSpec>,
    pub duplicate: Option<f64>,
    pub corrupt: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum JitterDistSpec {
    Uniform,
    Normal,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum QueueKindSpec {
    Droptail,
    Red,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    pub kind: Option<QueueKindSpec>,
    pub limit: Option<u64>,
    pub in_bytes: Option<bool>,
    pub thresh: Option<f64>,
    pub maxthresh: Option<f64>,
    pub q_weight: Option<f64>,
    pub linterm: Option<f64>,
    pub gentle: Option<bool>,
    pub mean_pktsize: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum LossSpec {
    None,
    Bernoulli { p: f64 },
    Gilbert { p: f64, r: f64, k: f64, h: f64 },
    Ordinals { drop: Vec<u64> },
}

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
        };
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
    if let Some(l) = &patch.loss {
        let f = |n: &str, v: f64| check_prob(&format!("{ctx}.loss.{n}"), v);
        p.loss = match l {
            LossSpec::None => LossParams::None,
            LossSpec::Bernoulli { p } => LossParams::Bernoulli { p: f("p", *p)? },
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

// ---------------------------------------------------------------- requests

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortReq {
    pub port: String,
    pub tap: String,
    /// Create the TAP inside this network namespace (path such as `/run/netns/NAME`).
    #[serde(default)]
    pub netns: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkReq {
    pub link: String,
    pub a: String,
    pub b: String,
    #[serde(default)]
    pub ab: ParamsSpec,
    #[serde(default)]
    pub ba: ParamsSpec,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemberReq {
    pub port: String,
    #[serde(default)]
    pub to_lan: ParamsSpec,
    #[serde(default)]
    pub from_lan: ParamsSpec,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LanReq {
    pub lan: String,
    pub members: Vec<MemberReq>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApplyReq {
    #[serde(default)]
    pub ports: Vec<PortReq>,
    #[serde(default)]
    pub links: Vec<LinkReq>,
    #[serde(default)]
    pub lans: Vec<LanReq>,
    #[serde(default)]
    pub routers: Vec<RouterReq>,
    #[serde(default)]
    pub hosts: Vec<HostReq>,
    #[serde(default)]
    pub agents: Vec<AgentReq>,
}

/// A simulated host (see `model/sim/host.rs`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostReq {
    pub host: String,
    pub port: String,
    pub mac: String,
    /// `"a.b.c.d/len"`.
    pub ip: String,
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A traffic agent on a simulated host (see `model/sim/agent.rs`); which fields are allowed
/// depends on `kind` and is checked by `build_topology`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentReq {
    pub agent: String,
    pub host: String,
    pub kind: String,
    /// cbr: `"a.b.c.d:port"`.
    #[serde(default)]
    pub dst: Option<String>,
    /// cbr: UDP payload bytes.
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub rate_bps: Option<u64>,
    #[serde(default)]
    pub interval_us: Option<u64>,
    /// sink: UDP port.
    #[serde(default)]
    pub port: Option<u64>,
    /// onoff: mean ON (burst) and OFF (idle) times in µs.
    #[serde(default)]
    pub on_us: Option<f64>,
    #[serde(default)]
    pub off_us: Option<f64>,
    /// onoff: `"exponential"` (default) or `"pareto"`.
    #[serde(default)]
    pub dist: Option<String>,
    /// onoff pareto: shape > 1 (default 1.5, as ns-2).
    #[serde(default)]
    pub shape: Option<f64>,
    /// tcp: congestion control, `"newreno"` (default), `"reno"`, `"tahoe"`, `"cubic"`.
    #[serde(default)]
    pub cc: Option<String>,
    /// tcp: payload bytes per segment.
    #[serde(default)]
    pub mss: Option<u64>,
    /// tcp: maximum cwnd in segments.
    #[serde(default)]
    pub window: Option<u64>,
    /// tcp: initial cwnd in segments.
    #[serde(default)]
    pub initial_window: Option<u64>,
    #[serde(default)]
    pub min_rto_us: Option<u64>,
    /// tcp: total payload bytes (absent: infinite).
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(default)]
    pub trace_interval_us: Option<u64>,
    /// tcp_sink.
    #[serde(default)]
    pub delayed_ack: Option<bool>,
}

/// `trace`: a TCP sender's samples.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceReq {
    pub agent: String,
    /// Clear the samples after returning them.
    #[serde(default)]
    pub clear: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AgentAction {
    Start,
    Stop,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentCmdReq {
    pub agent: String,
    pub action: AgentAction,
}

/// A simulated router (see `model/sim/router.rs`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouterReq {
    pub router: String,
    pub interfaces: Vec<RouterIfaceReq>,
    #[serde(default)]
    pub routes: Vec<RouteReq>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouterIfaceReq {
    pub port: String,
    pub mac: String,
    /// `"a.b.c.d/len"`.
    pub ip: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteReq {
    /// `"a.b.c.d/len"`.
    pub dst: String,
    pub via: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RemoveReq {
    #[serde(default)]
    pub links: Vec<String>,
    #[serde(default)]
    pub lans: Vec<String>,
    #[serde(default)]
    pub ports: Vec<String>,
    #[serde(default)]
    pub routers: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DirSpec {
    Ab,
    Ba,
    ToLan,
    FromLan,
    Both,
}

impl From<DirSpec> for Dir {
    fn from(d: DirSpec) -> Dir {
        match d {
            DirSpec::Ab => Dir::Ab,
            DirSpec::Ba => Dir::Ba,
            DirSpec::ToLan => Dir::ToLan,
            DirSpec::FromLan => Dir::FromLan,
            DirSpec::Both => Dir::Both,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetReq {
    pub target: String,
    pub member: Option<String>,
    /// Default "both".
    pub dir: Option<DirSpec>,
    pub params: ParamsSpec,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpDownReq {
    pub target: String,
    pub member: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StatsReq {
    pub target: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CaptureStartReq {
    pub target: String,
    pub member: Option<String>,
    pub dir: DirSpec,
    pub path: String,
    pub snaplen: Option<u32>,
    /// Extension: nanosecond timestamps (default false: microseconds, readable by everything).
    pub nanos: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CaptureSel {
    pub target: Option<String>,
    pub member: Option<String>,
    pub dir: Option<DirSpec>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubscribeReq {
    pub interval_ms: u64,
    /// Extension: restrict pushed stats to one link or LAN.
    pub target: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Hello,
    Apply(ApplyReq),
    Remove(RemoveReq),
    Set(SetReq),
    Down(UpDownReq),
    Up(UpDownReq),
    Stats(StatsReq),
    CaptureStart(CaptureStartReq),
    CaptureStop(CaptureSel),
    CaptureSnapshot(CaptureSel),
    Subscribe(SubscribeReq),
    Agent(AgentCmdReq),
    Trace(TraceReq),
    Shutdown,
}

pub const COMMANDS: &[&str] = &[
    "hello",
    "apply",
    "remove",
    "set",
    "down",
    "up",
    "stats",
    "capture_start",
    "capture_stop",
    "capture_snapshot",
    "subscribe",
    "agent",
    "trace",
    "shutdown",
];

fn args<T: serde::de::DeserializeOwned>(cmd: &str, v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            format!("{cmd}: {}", e.inner())
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

/// Parse one request line. Returns the request id (JSON null if absent or unreadable) and
/// the request or an error message.
pub fn parse_request(line: &str) -> (Value, Result<Request, String>) {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return (Value::Null, Err(format!("bad JSON: {e}"))),
    };
    parse_request_value(v)
}

/// [`parse_request`] of an already parsed JSON value (used by `simulate` scenarios).
pub fn parse_request_value(v: Value) -> (Value, Result<Request, String>) {
    let Value::Object(mut obj) = v else {
        return (Value::Null, Err("request must be a JSON object".into()));
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    let cmd = match obj.remove("cmd") {
        Some(Value::String(s)) => s,
        Some(_) => return (id, Err("cmd: must be a string".into())),
        None => return (id, Err("cmd: missing".into())),
    };
    let rest = Value::Object(obj);
    let r = match cmd.as_str() {
        "hello" => args::<Empty>(&cmd, rest).map(|_| Request::Hello),
        "apply" => args(&cmd, rest).map(Request::Apply),
        "remove" => args(&cmd, rest).map(Request::Remove),
        "set" => args(&cmd, rest).map(Request::Set),
        "down" => args(&cmd, rest).map(Request::Down),
        "up" => args(&cmd, rest).map(Request::Up),
        "stats" => args(&cmd, rest).map(Request::Stats),
        "capture_start" => args(&cmd, rest).map(Request::CaptureStart),
        "capture_stop" => args(&cmd, rest).map(Request::CaptureStop),
        "capture_snapshot" => args(&cmd, rest).map(Request::CaptureSnapshot),
        "subscribe" => args::<SubscribeReq>(&cmd, rest).and_then(|s| {
            if s.interval_ms < 10 {
                Err(format!("interval_ms: must be >= 10, got {}", s.interval_ms))
            } else {
                Ok(Request::Subscribe(s))
            }
        }),
        "agent" => args(&cmd, rest).map(Request::Agent),
        "trace" => args(&cmd, rest).map(Request::Trace),
        "shutdown" => args::<Empty>(&cmd, rest).map(|_| Request::Shutdown),
        other => Err(format!(
            "cmd: unknown command \"{other}\"; supported commands are {}",
            COMMANDS.join(", ")
        )),
    };
    (id, r)
}

/// `{"id":…, "ok":true, …body}` as one line (no trailing newline).
pub fn ok_reply(id: Value, body: Map<String, Value>) -> String {
    let mut m = Map::new();
    m.insert("id".into(), id);
    m.insert("ok".into(), Value::Bool(true));
    m.extend(body);
    Value::Object(m).to_string()
}

pub fn err_reply(id: Value, error: &str) -> String {
    let mut m = Map::new();
    m.insert("id".into(), id);
    m.insert("ok".into(), Value::Bool(false));
    m.insert("error".into(), Value::String(error.to_string()));
    Value::Object(m).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: &str) -> String {
        parse_request(line).1.unwrap_err()
    }

    #[test]
    fn parses_apply() {
        let (id, r) = parse_request(
            r#"{"id":7,"cmd":"apply","ports":[{"port":"p1","tap":"t1"},{"port":"p2","tap":"t2"}],
               "links":[{"link":"l","a":"p1","b":"p2","ab":{"bandwidth_bps":1000000,"delay_us":10000.5,
               "queue":{"kind":"red","limit":60,"thresh":5,"maxthresh":15},"loss":{"kind":"bernoulli","p":0.01}}}]}"#,
        );
        assert_eq!(id, Value::from(7));
        let Ok(Request::Apply(a)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(a.links[0].ab.delay_us, Some(10000.5));
        assert_eq!(a.links[0].ba, ParamsSpec::default());
        let p = merge_params(&LinkParams::default(), &a.links[0].ab, "links[0].ab").unwrap();
        assert_eq!(p.delay_ns, 10_000_500);
        assert!(matches!(p.queue.kind, QueueKind::Red(_)));
    }

    #[test]
    fn errors_name_the_field() {
        assert!(
            err(r#"{"cmd":"apply","links":[{"link":"l","a":"x","b":"y","ab":{"delay":5}}]}"#)
                .contains("delay")
        );
        assert!(err(r#"{"cmd":"apply","links":[{"link":"l","a":"x","b":"y","ab":{"bandwidth_bps":"fast"}}]}"#).contains("links[0].ab.bandwidth_bps"));
        assert!(err(r#"{"cmd":"frobnicate"}"#).contains("unknown command"));
        assert!(err(r#"{"cmd":"hello","x":1}"#).contains("x"));
        assert!(err(r#"{"id":1,"cmd":"apply""#).contains("bad JSON"));
        assert!(err(r#"[1,2]"#).contains("object"));
        assert!(err(r#"{"cmd":"subscribe","interval_ms":5}"#).contains("interval_ms"));
        assert!(err(r#"{"cmd":"set","target":"l","dir":"sideways","params":{}}"#).contains("dir"));
        assert!(err(
            r#"{"cmd":"set","target":"l","params":{"loss":{"kind":"bernoulli","p":0.1,"q":2}}}"#
        )
        .contains("q"));
        assert!(
            err(r#"{"cmd":"set","target":"l","params":{"loss":{"kind":"zipf"}}}"#).contains("zipf")
        );
    }

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
