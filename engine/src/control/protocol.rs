//! Control protocol, version 1: request types, parsing and validation.
//!
//! A request is one JSON object per line: `{"id": <any>, "cmd": "<name>", ...args}`. Every
//! argument object rejects unknown fields (a typo is an error naming the field, never silently
//! ignored), and every error names the offending field or object. Parsing never panics.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::network::Dir;

pub const PROTOCOL_VERSION: u32 = 1;

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
    /// Probability that a jitter draw repeats the previous one.
    pub jitter_corr: Option<f64>,
    pub queue: Option<QueueSpec>,
    pub loss: Option<LossSpec>,
    pub duplicate: Option<f64>,
    pub corrupt: Option<f64>,
    /// Probability that a frame (every `reorder_gap`-th) skips the delay.
    pub reorder: Option<f64>,
    pub reorder_gap: Option<u64>,
    /// Serialization framing: bytes added per frame, cell size and bytes added per cell.
    pub overhead: Option<i64>,
    pub cellsize: Option<u64>,
    pub cell_overhead: Option<i64>,
    /// Extension: a capacity trace in place of the bandwidth (empty `ms`: none; a
    /// `bandwidth_bps` without one ends it).
    pub trace: Option<TraceSpec>,
    /// Extension: delay, bandwidth and loss following a time series (empty `t_ns`: none).
    pub schedule: Option<ScheduleSpec>,
}

/// Points at `t_ns` after the schedule is set, and the columns' values there.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    pub t_ns: Vec<u64>,
    pub delay_us: Option<Vec<f64>>,
    pub bandwidth_bps: Option<Vec<u64>>,
    pub loss: Option<Vec<f64>>,
    #[serde(default)]
    pub linear: bool,
    #[serde(default, rename = "loop")]
    pub looped: bool,
}

/// Mahimahi delivery opportunities (ms), started `offset_ms` into the trace.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    pub ms: Vec<u64>,
    #[serde(default)]
    pub offset_ms: u64,
    #[serde(default = "yes", rename = "loop")]
    pub looped: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum JitterDistSpec {
    Uniform,
    Normal,
    Pareto,
    Paretonormal,
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
    Bernoulli {
        p: f64,
        #[serde(default)]
        corr: f64,
    },
    Gilbert {
        p: f64,
        r: f64,
        k: f64,
        h: f64,
    },
    /// netem's 4-state model (`loss state p13 p31 p32 p23 p14`).
    State {
        p13: f64,
        p31: f64,
        p32: f64,
        p23: f64,
        p14: f64,
    },
    Ordinals {
        drop: Vec<u64>,
    },
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
    /// The TAP is a tunnel to another engine (a cluster's cut link): frames written to it
    /// carry their due time, frames read from it are held until theirs (`wire/stamp`).
    #[serde(default)]
    pub tunnel: bool,
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
    /// Per-destination rules: an IPv4 frame whose destination is in `dst` crosses the
    /// rule's own pipeline in its direction instead of the link's (longest prefix wins).
    #[serde(default)]
    pub rules: Vec<RuleReq>,
}

/// One per-destination rule of a link (hitbox's point-to-point mode by address).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleReq {
    pub dst: String,
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
    /// Per-pair channels (a latency-matrix LAN): unicast from `from` to `to` crosses its own
    /// pipeline between the switch and `to`'s `from_lan`; pairs not listed have none.
    #[serde(default)]
    pub pairs: Vec<PairReq>,
}

/// One ordered pair's channel on a LAN (both ports are members of it).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairReq {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub params: ParamsSpec,
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
    pub patches: Vec<PatchReq>,
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
    /// `"a.b.c.d/len"` (none: an IPv6-only host).
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
    /// `"addr/len"`, IPv6.
    #[serde(default)]
    pub ip6: Option<String>,
    #[serde(default)]
    pub gateway6: Option<String>,
}

/// A traffic agent on a simulated host (see `model/sim/agent.rs`), one variant per `kind`;
/// each variant takes only its own fields (see [`parse_agent`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AgentReq {
    Cbr(UdpSourceReq),
    Poisson(UdpSourceReq),
    OnOff(OnOffReq),
    Sink(SinkReq),
    Tcp(TcpReq),
    TcpSink(TcpSinkReq),
}

/// The `kind` names, in the order of [`AgentReq`]'s variants.
pub const AGENT_KINDS: &[&str] = &["cbr", "poisson", "onoff", "sink", "tcp", "tcp_sink"];

impl AgentReq {
    pub fn id(&self) -> &str {
        match self {
            AgentReq::Cbr(a) | AgentReq::Poisson(a) => &a.agent,
            AgentReq::OnOff(a) => &a.agent,
            AgentReq::Sink(a) => &a.agent,
            AgentReq::Tcp(a) => &a.agent,
            AgentReq::TcpSink(a) => &a.agent,
        }
    }
    pub fn host(&self) -> &str {
        match self {
            AgentReq::Cbr(a) | AgentReq::Poisson(a) => &a.host,
            AgentReq::OnOff(a) => &a.host,
            AgentReq::Sink(a) => &a.host,
            AgentReq::Tcp(a) => &a.host,
            AgentReq::TcpSink(a) => &a.host,
        }
    }
}

/// Kinds `cbr` (fixed interval) and `poisson` (exponential gaps, same mean rate).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UdpSourceReq {
    pub agent: String,
    pub host: String,
    /// `"a.b.c.d:port"`.
    pub dst: String,
    /// UDP payload bytes.
    pub size: u64,
    /// Exactly one of `rate_bps` and `interval_us`.
    #[serde(default)]
    pub rate_bps: Option<u64>,
    #[serde(default)]
    pub interval_us: Option<u64>,
}

/// Kind `onoff`: a UDP source sending at its rate during ON periods.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OnOffReq {
    pub agent: String,
    pub host: String,
    pub dst: String,
    pub size: u64,
    #[serde(default)]
    pub rate_bps: Option<u64>,
    #[serde(default)]
    pub interval_us: Option<u64>,
    /// Mean ON (burst) and OFF (idle) times in µs.
    pub on_us: f64,
    pub off_us: f64,
    /// `"exponential"` (default) or `"pareto"`.
    #[serde(default)]
    pub dist: Option<OnOffDistSpec>,
    /// Pareto shape > 1 (default 1.5, as ns-2); only with `dist: "pareto"`.
    #[serde(default)]
    pub shape: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnOffDistSpec {
    Exponential,
    Pareto,
}

/// Kind `sink`: counts UDP packets to `port`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SinkReq {
    pub agent: String,
    pub host: String,
    pub port: u64,
}

/// Kind `tcp`: a TCP sender with an FTP application.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TcpReq {
    pub agent: String,
    pub host: String,
    pub dst: String,
    /// Congestion control, `"newreno"` (default), `"reno"`, `"tahoe"`, `"cubic"`.
    #[serde(default)]
    pub cc: Option<String>,
    /// Payload bytes per segment.
    #[serde(default)]
    pub mss: Option<u64>,
    /// Maximum cwnd in segments.
    #[serde(default)]
    pub window: Option<u64>,
    /// Initial cwnd in segments.
    #[serde(default)]
    pub initial_window: Option<u64>,
    #[serde(default)]
    pub min_rto_us: Option<u64>,
    /// Total payload bytes (absent: infinite).
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(default)]
    pub trace_interval_us: Option<u64>,
    /// Ask for SACK in the SYN (default true, as Linux).
    #[serde(default)]
    pub sack: Option<bool>,
    /// Segments sent per ACK at most (ns-2 `maxburst_`; absent or 0: no limit).
    #[serde(default)]
    pub max_burst: Option<u64>,
    /// RTT measurement granularity (ns-2 `tcpTick_`; absent or 0: exact).
    #[serde(default)]
    pub tcp_tick_us: Option<u64>,
}

/// Kind `tcp_sink`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TcpSinkReq {
    pub agent: String,
    pub host: String,
    pub port: u64,
    /// ns-2 `DelAck` (the same as `acks: "delayed"`).
    #[serde(default)]
    pub delayed_ack: Option<bool>,
    /// When to ACK: `each` segment (default), `delayed` (ns-2 `DelAck`) or `linux`.
    #[serde(default)]
    pub acks: Option<String>,
    /// The delayed-ACK interval of `acks: "delayed"` (ns-2 `interval_`; default 40 ms).
    #[serde(default)]
    pub delack_us: Option<u64>,
    /// Permit SACK (default true, as Linux).
    #[serde(default)]
    pub sack: Option<bool>,
    /// The receiving host's sysctl `net.ipv4.tcp_rmem` (min, default, max bytes) for
    /// `acks: "linux"` (default Linux's 4096 131072 6291456).
    #[serde(default)]
    pub rmem: Option<Vec<u64>>,
}

/// The name inside the first pair of backticks of a serde message ("unknown field `x`, …").
fn quoted_name(msg: &str) -> Option<&str> {
    let (_, rest) = msg.split_once('`')?;
    Some(rest.split_once('`')?.0)
}

impl<'de> Deserialize<'de> for AgentReq {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_agent(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Parse an agent by its `kind`: a field another kind takes, a missing or a mistyped field
/// is an error naming the field. The message continues the path of the agent
/// (` ("id").field: …`, so that [`args`] reports `agents[i] ("id").field: …`).
pub fn parse_agent(v: Value) -> Result<AgentReq, String> {
    let Value::Object(mut m) = v else {
        return Err(": must be an object".into());
    };
    let id = m.get("agent").and_then(Value::as_str).unwrap_or("");
    let ctx = format!(" (\"{id}\")");
    let kind = match m.remove("kind") {
        Some(Value::String(k)) => k,
        Some(_) => return Err(format!("{ctx}.kind: must be a string")),
        None => return Err(format!("{ctx}.kind: missing")),
    };
    let v = Value::Object(m);
    fn by_kind<T: serde::de::DeserializeOwned>(
        ctx: &str,
        kind: &str,
        v: Value,
    ) -> Result<T, String> {
        serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
            let path = e.path().to_string();
            let msg = e.inner().to_string();
            match (path.as_str(), quoted_name(&msg)) {
                (_, Some(f)) if msg.starts_with("unknown field") => {
                    format!("{ctx}.{f}: not valid for kind \"{kind}\"")
                }
                (_, Some(f)) if msg.starts_with("missing field") => {
                    format!("{ctx}.{f}: required for kind \"{kind}\"")
                }
                ("." | "", _) => format!("{ctx}: {msg}"),
                (p, _) => format!("{ctx}.{p}: {msg}"),
            }
        })
    }
    match kind.as_str() {
        "cbr" => by_kind(&ctx, &kind, v).map(AgentReq::Cbr),
        "poisson" => by_kind(&ctx, &kind, v).map(AgentReq::Poisson),
        "onoff" => by_kind(&ctx, &kind, v).map(AgentReq::OnOff),
        "sink" => by_kind(&ctx, &kind, v).map(AgentReq::Sink),
        "tcp" => by_kind(&ctx, &kind, v).map(AgentReq::Tcp),
        "tcp_sink" => by_kind(&ctx, &kind, v).map(AgentReq::TcpSink),
        k => Err(format!(
            "{ctx}.kind: unknown agent kind \"{k}\"; supported: {}",
            AGENT_KINDS.join(", ")
        )),
    }
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

/// A patch: two new simulated ports joined back to back (a frame delivered to one enters
/// the other's ingress at the same instant), e.g. a trunk between two LANs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PatchReq {
    pub patch: String,
    pub ports: [String; 2],
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
    /// `"a.b.c.d/len"` (none: an IPv6-only interface).
    #[serde(default)]
    pub ip: Option<String>,
    /// `"addr/len"`, IPv6.
    #[serde(default)]
    pub ip6: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteReq {
    /// `"a.b.c.d/len"`, or an IPv6 prefix with an IPv6 `via`.
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
    /// Extension: with `member`, the per-pair channel from `member` to this member's port
    /// (a latency matrix's cell); `dir` is then ignored.
    pub to: Option<String>,
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

/// `move_port`: move a TAP port to another partition (real time, `--threads` ≥ 2).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MovePortReq {
    pub port: String,
    pub partition: u32,
}

/// `tunnel_clock`: how far the clock of the engine across a tunnel port is ahead of this
/// one's (ns; negative: behind), so a due time it stamped is read on this clock.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TunnelClockReq {
    pub port: String,
    pub offset_ns: i64,
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
    Set(Box<SetReq>),
    Down(UpDownReq),
    Up(UpDownReq),
    Stats(StatsReq),
    CaptureStart(CaptureStartReq),
    CaptureStop(CaptureSel),
    CaptureSnapshot(CaptureSel),
    Subscribe(SubscribeReq),
    Agent(AgentCmdReq),
    Trace(TraceReq),
    MovePort(MovePortReq),
    TunnelClock(TunnelClockReq),
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
    "move_port",
    "tunnel_clock",
    "shutdown",
];

fn args<T: serde::de::DeserializeOwned>(cmd: &str, v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        if inner.starts_with(" (\"") || inner.starts_with(": ") {
            // An agent's message continues its path (see `parse_agent`).
            format!("{path}{inner}")
        } else if path == "." || path.is_empty() {
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
        "set" => args(&cmd, rest).map(|s| Request::Set(Box::new(s))),
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
        "move_port" => args(&cmd, rest).map(Request::MovePort),
        "tunnel_clock" => args(&cmd, rest).map(Request::TunnelClock),
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
    use crate::control::params::merge_params;
    use crate::model::params::{LinkParams, QueueKind};

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
    fn agents_parse_by_kind_and_name_the_field() {
        let apply =
            |agent: &str| parse_request(&format!(r#"{{"cmd":"apply","agents":[{agent}]}}"#)).1;
        let Ok(Request::Apply(a)) = apply(r#"{"agent":"s","host":"h","kind":"sink","port":9}"#)
        else {
            panic!()
        };
        assert!(matches!(&a.agents[0], AgentReq::Sink(s) if s.port == 9));
        let e = |agent: &str| apply(agent).unwrap_err();
        assert_eq!(
            e(r#"{"agent":"s","host":"h","kind":"sink","port":9,"size":3}"#),
            "agents[0] (\"s\").size: not valid for kind \"sink\""
        );
        assert_eq!(
            e(r#"{"agent":"s","host":"h","kind":"sink"}"#),
            "agents[0] (\"s\").port: required for kind \"sink\""
        );
        assert!(e(r#"{"agent":"s","host":"h","kind":"sink","port":"x"}"#)
            .starts_with("agents[0] (\"s\").port: invalid type"));
        assert!(
            e(r#"{"agent":"s","host":"h","kind":"quic"}"#).contains(".kind: unknown agent kind")
        );
        assert!(e(r#"{"agent":"s","host":"h"}"#).contains("kind: missing"));
        assert_eq!(e(r#"7"#), "agents[0]: must be an object");
        assert!(e(r#"{"agent":"o","host":"h","kind":"onoff","dst":"10.0.0.1:9","size":20,"rate_bps":1,"on_us":1,"off_us":1,"dist":"zipf"}"#)
            .starts_with("agents[0] (\"o\").dist: unknown variant"));
    }
}
