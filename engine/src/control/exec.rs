//! Executes control requests against the engine state: the network, its TAPs and captures.
//!
//! Requests are all-or-nothing: everything is validated (and every TAP of an `apply` created)
//! before the network changes; on any error the state is as before and the reply names the
//! offending item.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::protocol::{
    merge_params, AgentAction, ApplyReq, CaptureSel, DirSpec, Request, PROTOCOL_VERSION,
};
use crate::io::tap::{check_ifname, Tap, MAX_FRAME};
use crate::model::network::{
    AgentKindSpec, AgentSpec, Dir, HostSpec, LanSpec, LinkSpec, MemberSpec, Network, Output,
    PipeIdx, PortIdx, RouterSpec, TopologySpec,
};
use crate::model::params::LinkParams;
use crate::model::sim::agent::{CbrSpec, OnOffDist, Pattern, MIN_SIZE};
use crate::model::sim::host::HostConfig;
use crate::model::sim::router::{Interface, Route};
use crate::model::sim::tcp::sender::{
    Cc, TcpSpec, DEFAULT_INITIAL_WINDOW, DEFAULT_MIN_RTO_NS, DEFAULT_MSS, DEFAULT_WINDOW,
};
use crate::model::sim::tcp::MAX_MSS;
use crate::pcap::{PcapWriter, DEFAULT_SNAPLEN};
use crate::time::Instant;
use crate::wire::ethernet::Address;
use crate::wire::ipv4;

type SharedPcap = Rc<RefCell<PcapWriter<BufWriter<File>>>>;

/// What the server must do besides sending the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Subscribe {
        interval_ns: u64,
        target: Option<String>,
    },
    Shutdown,
}

pub struct Engine {
    pub net: Network,
    pub out: Sinks,
    /// Ports created since the driver last looked (it registers their fds).
    pub new_ports: Vec<PortIdx>,
    /// Set by the real-time driver: reported in `stats` as `"realtime"` (with the network's
    /// lateness counters); None in virtual time, where the object is absent.
    pub realtime: Option<RealtimeState>,
}

/// Whether the real-time driver is behind its timers (see `driver/realtime.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RealtimeState {
    /// Since when the last polls ran events later than the threshold (None: keeping up).
    pub behind_since: Option<Instant>,
}

/// Where network output goes: TAPs and capture files.
pub struct Sinks {
    pub taps: HashMap<PortIdx, Tap>,
    captures: HashMap<PipeIdx, SharedPcap>,
    /// Unix time of engine instant 0, for capture timestamps.
    wall_offset_ns: u64,
    /// Frames a TAP refused (device queue full or interface down).
    pub tx_errors: u64,
    /// Recycled super-frame buffers (capacity [`MAX_FRAME`]) for the next TAP reads.
    pub pool: Vec<Vec<u8>>,
}

/// Buffers kept for reuse; enough for a full read batch.
const POOL_MAX: usize = 128;

impl Sinks {
    /// Deliver what the network produced: frames to TAPs, captured copies to pcap files.
    pub fn handle_output(&mut self, out: Output<'_>) {
        match out {
            Output::Frame { port, data, vnet } => {
                if let Some(t) = self.taps.get(&port) {
                    if !t.send(&vnet, &data) {
                        self.tx_errors += 1;
                    }
                }
                if data.capacity() >= MAX_FRAME && self.pool.len() < POOL_MAX {
                    self.pool.push(data);
                }
            }
            Output::Capture { pipe, at, data } => {
                let ts = self.wall_offset_ns.saturating_add(at.nanos());
                let failed = match self.captures.get(&pipe) {
                    Some(w) => w.borrow_mut().write(ts, data).err(),
                    None => None,
                };
                if let Some(e) = failed {
                    eprintln!("wanlab-engine: capture write failed, stopping it: {e}");
                    self.captures.remove(&pipe);
                }
            }
        }
    }
}

pub fn engine_version() -> String {
    format!("wanlab-engine {}", env!("CARGO_PKG_VERSION"))
}

impl Engine {
    pub fn new(seed: u64, wall_offset_ns: u64) -> Self {
        Engine {
            net: Network::new(seed),
            out: Sinks {
                taps: HashMap::new(),
                captures: HashMap::new(),
                wall_offset_ns,
                tx_errors: 0,
                pool: Vec::new(),
            },
            new_ports: Vec::new(),
            realtime: None,
        }
    }

    /// Run the network up to `now` and deliver its output.
    pub fn poll(&mut self, now: Instant) {
        let Engine { net, out, .. } = self;
        net.poll(now, |o| out.handle_output(o));
    }

    pub fn execute(
        &mut self,
        req: Request,
        now: Instant,
    ) -> Result<(Map<String, Value>, Effect), String> {
        let mut body = Map::new();
        let mut effect = Effect::None;
        match req {
            Request::Hello => {
                body.insert("protocol".into(), json!(PROTOCOL_VERSION));
                body.insert("engine".into(), json!(engine_version()));
            }
            Request::Apply(a) => {
                let ports = self.apply(a, now)?;
                body.insert("ports".into(), Value::Object(ports));
            }
            Request::Remove(r) => {
                let gone = self
                    .net
                    .remove_with_routers(&r.links, &r.lans, &r.routers, &r.ports)?;
                for p in gone {
                    if let Some(t) = self.out.taps.remove(&p) {
                        t.release();
                    }
                }
                self.drop_dead_captures();
            }
            Request::Set(s) => {
                let dir = s.dir.map(Dir::from).unwrap_or(Dir::Both);
                let pipes = self.net.select(&s.target, s.member.as_deref(), dir)?;
                let mut merged = Vec::new();
                for &p in &pipes {
                    let base = self.net.pipe_params(p).cloned().unwrap_or_default();
                    merged.push((p, merge_params(&base, &s.params, "params")?));
                }
                for (p, params) in merged {
                    self.net.set_pipe_params(p, params, now);
                }
            }
            Request::Down(d) => self.set_up(&d.target, d.member.as_deref(), false, now)?,
            Request::Up(d) => self.set_up(&d.target, d.member.as_deref(), true, now)?,
            Request::Stats(s) => {
                body = self.stats(s.target.as_deref(), now)?;
            }
            Request::CaptureStart(c) => {
                let pipes = self
                    .net
                    .select(&c.target, c.member.as_deref(), c.dir.into())?;
                if let Some(p) = pipes.iter().find(|p| self.out.captures.contains_key(p)) {
                    return Err(format!("target: a capture is already running on pipeline {p} of \"{}\"; stop it first", c.target));
                }
                let file = File::create(&c.path)
                    .map_err(|e| format!("path: cannot create \"{}\": {e}", c.path))?;
                let w = PcapWriter::new(
                    BufWriter::new(file),
                    c.snaplen.unwrap_or(DEFAULT_SNAPLEN),
                    c.nanos.unwrap_or(false),
                )
                .map_err(|e| format!("path: cannot write \"{}\": {e}", c.path))?;
                let w = Rc::new(RefCell::new(w));
                for p in pipes {
                    self.out.captures.insert(p, w.clone());
                    self.net.set_capture(p, true);
                }
            }
            Request::CaptureStop(sel) => {
                for p in self.select_captures(&sel)? {
                    if let Some(w) = self.out.captures.remove(&p) {
                        let _ = w.borrow_mut().flush();
                    }
                    self.net.set_capture(p, false);
                }
            }
            Request::CaptureSnapshot(sel) => {
                for p in self.select_captures(&sel)? {
                    if let Some(w) = self.out.captures.get(&p) {
                        w.borrow_mut()
                            .flush()
                            .map_err(|e| format!("capture flush failed: {e}"))?;
                    }
                }
            }
            Request::Subscribe(s) => {
                if let Some(t) = &s.target {
                    self.net.stats(Some(t), now)?;
                }
                effect = Effect::Subscribe {
                    interval_ns: s.interval_ms.saturating_mul(1_000_000),
                    target: s.target,
                };
            }
            Request::Agent(a) => {
                self.net
                    .agent_action(&a.agent, a.action == AgentAction::Start, now)?;
            }
            Request::Trace(t) => {
                if !self.net.has_agent(&t.agent) {
                    return Err(format!("agent: unknown agent \"{}\"", t.agent));
                }
                let samples = if t.clear {
                    self.net.take_agent_trace(&t.agent)
                } else {
                    self.net.agent_trace(&t.agent).map(<[_]>::to_vec)
                };
                let samples =
                    samples.ok_or_else(|| format!("agent: \"{}\" is not a tcp agent", t.agent))?;
                body.insert(
                    "samples".into(),
                    serde_json::to_value(samples).map_err(|e| format!("internal: {e}"))?,
                );
            }
            Request::Shutdown => effect = Effect::Shutdown,
        }
        Ok((body, effect))
    }

    pub fn stats(&self, target: Option<&str>, now: Instant) -> Result<Map<String, Value>, String> {
        let s = self.net.stats(target, now)?;
        let mut m = match serde_json::to_value(s) {
            Ok(Value::Object(m)) => m,
            _ => return Err("internal: stats not serializable".into()),
        };
        if let (Some(rt), Some(l)) = (self.realtime, self.net.lateness()) {
            m.insert(
                "realtime".into(),
                json!({
                    "timer_events": self.net.events(),
                    "late_events": l.late_events,
                    "max_late_us": l.max_late_ns as f64 / 1000.0,
                    "threshold_us": l.threshold_ns as f64 / 1000.0,
                    "behind": rt.behind_since.is_some(),
                    "behind_since_ns": rt.behind_since.map(|t| t.nanos()),
                }),
            );
        }
        Ok(m)
    }

    fn set_up(
        &mut self,
        target: &str,
        member: Option<&str>,
        up: bool,
        now: Instant,
    ) -> Result<(), String> {
        let ports = self.net.set_up(target, member, up, now)?;
        for p in ports {
            if let Some(t) = self.out.taps.get(&p) {
                if let Err(e) = t.set_carrier(up) {
                    return Err(format!("target: link state changed but carrier of TAP \"{}\" could not be set: {e}", t.name()));
                }
            }
        }
        Ok(())
    }

    fn select_captures(&self, sel: &CaptureSel) -> Result<Vec<PipeIdx>, String> {
        match &sel.target {
            None => {
                if sel.member.is_some() || sel.dir.is_some() {
                    return Err("target: required when member or dir is given".into());
                }
                Ok(self.out.captures.keys().copied().collect())
            }
            Some(t) => {
                let dir = sel.dir.unwrap_or(DirSpec::Both).into();
                self.net.select(t, sel.member.as_deref(), dir)
            }
        }
    }

    fn drop_dead_captures(&mut self) {
        let dead: Vec<PipeIdx> = self
            .out
            .captures
            .keys()
            .copied()
            .filter(|p| !self.net.pipe_exists(*p))
            .collect();
        for p in dead {
            if let Some(w) = self.out.captures.remove(&p) {
                let _ = w.borrow_mut().flush();
            }
        }
    }

    /// Flush every capture (at exit).
    pub fn flush_captures(&mut self) {
        for w in self.out.captures.values() {
            let _ = w.borrow_mut().flush();
        }
    }

    fn apply(&mut self, a: ApplyReq, now: Instant) -> Result<Map<String, Value>, String> {
        let spec = build_topology(&a)?;
        self.net.check_apply(&spec)?;
        let existing: HashSet<(&str, Option<&str>)> = self
            .out
            .taps
            .values()
            .map(|t| (t.name(), t.netns()))
            .collect();
        for (i, p) in a.ports.iter().enumerate() {
            if existing.contains(&(p.tap.as_str(), p.netns.as_deref())) {
                return Err(format!(
                    "ports[{i}] (\"{}\"): TAP \"{}\" is already used by another port",
                    p.port, p.tap
                ));
            }
        }
        // Create every TAP before touching the network; on failure the created ones are
        // dropped (closed, hence deleted) and nothing is added.
        let mut created = Vec::new();
        for (i, p) in a.ports.iter().enumerate() {
            match Tap::create_in(&p.tap, p.netns.as_deref()) {
                Ok(t) => created.push(t),
                Err(e) => {
                    return Err(format!(
                        "ports[{i}] (\"{}\"): cannot create TAP \"{}\": {e}",
                        p.port, p.tap
                    ))
                }
            }
        }
        self.net.apply(spec, now);
        let mut reply = Map::new();
        for (p, tap) in a.ports.iter().zip(created) {
            let Some(idx) = self.net.port_index(&p.port) else {
                continue;
            };
            reply.insert(
                p.port.clone(),
                json!({"tap": tap.name(), "ifindex": tap.ifindex()}),
            );
            self.out.taps.insert(idx, tap);
            self.new_ports.push(idx);
        }
        Ok(reply)
    }
}

/// Longest mean ON/OFF time: one hour.
const MAX_ONOFF_US: f64 = 3_600_000_000.0;

/// The departure pattern of a source of kind `k` ("cbr", "poisson" or "onoff").
fn build_pattern(k: &str, g: &super::protocol::AgentReq) -> Result<Pattern, String> {
    if k != "onoff" {
        for (set, f) in [
            (g.on_us.is_some(), "on_us"),
            (g.off_us.is_some(), "off_us"),
            (g.dist.is_some(), "dist"),
            (g.shape.is_some(), "shape"),
        ] {
            if set {
                return Err(format!("{f}: only for kind \"onoff\""));
            }
        }
        return Ok(if k == "poisson" {
            Pattern::Poisson
        } else {
            Pattern::Cbr
        });
    }
    let us = |f: &str, v: Option<f64>, min: f64| -> Result<f64, String> {
        let v = v.ok_or(format!("{f}: required for kind \"onoff\" (mean, µs)"))?;
        if v.is_finite() && v >= min && v <= MAX_ONOFF_US {
            Ok(v * 1000.0)
        } else {
            Err(format!(
                "{f}: must be in [{min}, {MAX_ONOFF_US}] µs, got {v}"
            ))
        }
    };
    let on_ns = us("on_us", g.on_us, 0.001)?;
    let off_ns = us("off_us", g.off_us, 0.0)?;
    let dist = match g.dist.as_deref().unwrap_or("exponential") {
        "exponential" => {
            if g.shape.is_some() {
                return Err("shape: only for dist \"pareto\"".into());
            }
            OnOffDist::Exponential
        }
        "pareto" => {
            let shape = g.shape.unwrap_or(1.5);
            if !(shape.is_finite() && shape > 1.0 && shape <= 100.0) {
                return Err(format!("shape: must be > 1 and <= 100, got {shape}"));
            }
            OnOffDist::Pareto { shape }
        }
        d => {
            return Err(format!(
                "dist: unknown distribution \"{d}\"; supported: \"exponential\", \"pareto\""
            ))
        }
    };
    Ok(Pattern::OnOff {
        on_ns,
        off_ns,
        dist,
    })
}

/// Validate an `apply` request's values and turn it into a model topology.
pub fn build_topology(a: &ApplyReq) -> Result<TopologySpec, String> {
    let mut spec = TopologySpec::default();
    let mut taps = HashSet::new();
    for (i, p) in a.ports.iter().enumerate() {
        check_ifname(&p.tap).map_err(|e| format!("ports[{i}] (\"{}\").{e}", p.port))?;
        if !taps.insert((p.tap.as_str(), p.netns.as_deref())) {
            return Err(format!(
                "ports[{i}] (\"{}\").tap: \"{}\" appears twice",
                p.port, p.tap
            ));
        }
        spec.ports.push(p.port.clone());
    }
    let d = LinkParams::default();
    for (i, l) in a.links.iter().enumerate() {
        let ctx = format!("links[{i}] (\"{}\")", l.link);
        spec.links.push(LinkSpec {
            id: l.link.clone(),
            a: l.a.clone(),
            b: l.b.clone(),
            ab: merge_params(&d, &l.ab, &format!("{ctx}.ab"))?,
            ba: merge_params(&d, &l.ba, &format!("{ctx}.ba"))?,
        });
    }
    for (i, lan) in a.lans.iter().enumerate() {
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        for (j, m) in lan.members.iter().enumerate() {
            let ctx = format!("lans[{i}] (\"{}\").members[{j}] (\"{}\")", lan.lan, m.port);
            if !seen.insert(m.port.as_str()) {
                return Err(format!("{ctx}: port listed twice"));
            }
            members.push(MemberSpec {
                port: m.port.clone(),
                to_lan: merge_params(&d, &m.to_lan, &format!("{ctx}.to_lan"))?,
                from_lan: merge_params(&d, &m.from_lan, &format!("{ctx}.from_lan"))?,
            });
        }
        spec.lans.push(LanSpec {
            id: lan.lan.clone(),
            members,
        });
    }
    for (i, r) in a.routers.iter().enumerate() {
        let ctx = format!("routers[{i}] (\"{}\")", r.router);
        let mut interfaces = Vec::new();
        for (j, f) in r.interfaces.iter().enumerate() {
            let mac = parse_mac(&f.mac).map_err(|e| format!("{ctx}.interfaces[{j}].mac: {e}"))?;
            let (ip, prefix) =
                ipv4::parse_cidr(&f.ip).map_err(|e| format!("{ctx}.interfaces[{j}].ip: {e}"))?;
            interfaces.push((f.port.clone(), Interface { mac, ip, prefix }));
        }
        let mut routes = Vec::new();
        for (j, rt) in r.routes.iter().enumerate() {
            let (dst, prefix) =
                ipv4::parse_cidr(&rt.dst).map_err(|e| format!("{ctx}.routes[{j}].dst: {e}"))?;
            let via =
                ipv4::parse_addr(&rt.via).map_err(|e| format!("{ctx}.routes[{j}].via: {e}"))?;
            routes.push(Route { dst, prefix, via });
        }
        spec.routers.push(RouterSpec {
            id: r.router.clone(),
            interfaces,
            routes,
        });
    }
    for (i, h) in a.hosts.iter().enumerate() {
        let ctx = format!("hosts[{i}] (\"{}\")", h.host);
        let mac = parse_mac(&h.mac).map_err(|e| format!("{ctx}.mac: {e}"))?;
        let (ip, prefix) = ipv4::parse_cidr(&h.ip).map_err(|e| format!("{ctx}.ip: {e}"))?;
        let gateway = h
            .gateway
            .as_deref()
            .map(ipv4::parse_addr)
            .transpose()
            .map_err(|e| format!("{ctx}.gateway: {e}"))?;
        spec.hosts.push(HostSpec {
            id: h.host.clone(),
            port: h.port.clone(),
            cfg: HostConfig {
                mac,
                ip,
                prefix,
                gateway,
            },
        });
    }
    for (i, g) in a.agents.iter().enumerate() {
        spec.agents
            .push(build_agent(g).map_err(|e| format!("agents[{i}] (\"{}\").{e}", g.agent))?);
    }
    Ok(spec)
}

/// Parse `"02:00:00:00:00:01"` (hex, `:`-separated).
pub fn parse_mac(s: &str) -> Result<Address, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!(
            "expected 6 hex bytes separated by ':', got \"{s}\""
        ));
    }
    for (b, p) in m.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(format!(
                "expected 6 hex bytes separated by ':', got \"{s}\""
            ));
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("bad hex byte \"{p}\" in \"{s}\""))?;
    }
    Ok(Address(m))
}

/// Largest CBR payload: a UDP datagram in one IPv4 packet without fragmentation of a
/// 65535-byte packet.
const MAX_CBR_SIZE: u64 = 65535 - 20 - 8;

/// The first field given that only a `tcp` sender takes, if any.
fn tcp_sender_field(g: &super::protocol::AgentReq) -> Option<&'static str> {
    [
        (g.cc.is_some(), "cc"),
        (g.mss.is_some(), "mss"),
        (g.window.is_some(), "window"),
        (g.initial_window.is_some(), "initial_window"),
        (g.min_rto_us.is_some(), "min_rto_us"),
        (g.bytes.is_some(), "bytes"),
        (g.trace_interval_us.is_some(), "trace_interval_us"),
    ]
    .into_iter()
    .find_map(|(set, f)| set.then_some(f))
}

/// TCP-only fields on another kind are an error.
fn reject_tcp_fields(g: &super::protocol::AgentReq) -> Result<(), String> {
    if let Some(f) = tcp_sender_field(g) {
        return Err(format!("{f}: only for kind \"tcp\""));
    }
    if g.delayed_ack.is_some() {
        return Err("delayed_ack: only for kind \"tcp_sink\"".into());
    }
    Ok(())
}

fn parse_dst(dst: &str) -> Result<(ipv4::Addr, u16), String> {
    let (ip, port) = dst
        .rsplit_once(':')
        .ok_or_else(|| format!("dst: expected \"a.b.c.d:port\", got \"{dst}\""))?;
    let ip = ipv4::parse_addr(ip).map_err(|e| format!("dst: {e}"))?;
    if ipv4::is_special(ip) {
        return Err(format!("dst: must be a unicast address, got \"{dst}\""));
    }
    let dport: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("dst: port must be 1..=65535, got \"{port}\""))?;
    Ok((ip, dport))
}

/// Kinds `tcp` and `tcp_sink` (see `model/sim/tcp`).
fn build_tcp_agent(g: &super::protocol::AgentReq) -> Result<AgentSpec, String> {
    for (set, f) in [
        (g.size.is_some(), "size"),
        (g.rate_bps.is_some(), "rate_bps"),
        (g.interval_us.is_some(), "interval_us"),
    ] {
        if set {
            return Err(format!("{f}: only for kind \"cbr\""));
        }
    }
    let range = |v: Option<u64>, f: &str, lo: u64, hi: u64, def: u64| -> Result<u64, String> {
        match v {
            None => Ok(def),
            Some(x) if (lo..=hi).contains(&x) => Ok(x),
            Some(x) => Err(format!("{f}: must be {lo}..={hi}, got {x}")),
        }
    };
    let kind = if g.kind == "tcp" {
        if g.port.is_some() {
            return Err("port: only for kind \"sink\" and \"tcp_sink\"".into());
        }
        if g.delayed_ack.is_some() {
            return Err("delayed_ack: only for kind \"tcp_sink\"".into());
        }
        let dst = g
            .dst
            .as_deref()
            .ok_or("dst: required for kind \"tcp\" (\"a.b.c.d:port\")")?;
        let (dst, dport) = parse_dst(dst)?;
        let cc = match g.cc.as_deref() {
            None => Cc::NewReno,
            Some(c) => Cc::parse(c).ok_or_else(|| {
                format!(
                    "cc: unknown congestion control \"{c}\"; supported: {}",
                    Cc::NAMES.join(", ")
                )
            })?,
        };
        let mss = range(g.mss, "mss", 1, MAX_MSS as u64, DEFAULT_MSS as u64)?;
        let window = range(g.window, "window", 1, 1 << 30, u64::from(DEFAULT_WINDOW))?;
        let initial_window = range(
            g.initial_window,
            "initial_window",
            1,
            1 << 30,
            u64::from(DEFAULT_INITIAL_WINDOW),
        )?;
        let min_rto_us = range(
            g.min_rto_us,
            "min_rto_us",
            1,
            60_000_000,
            DEFAULT_MIN_RTO_NS / 1000,
        )?;
        let trace_us = range(
            g.trace_interval_us,
            "trace_interval_us",
            0,
            3_600_000_000,
            0,
        )?;
        AgentKindSpec::Tcp(TcpSpec {
            dst,
            dport,
            cc,
            mss: mss as usize,
            window: window as u32,
            initial_window: initial_window as u32,
            min_rto_ns: min_rto_us * 1000,
            bytes: g.bytes,
            trace_interval_ns: trace_us * 1000,
        })
    } else {
        if let Some(f) = g
            .dst
            .as_ref()
            .map(|_| "dst")
            .or_else(|| tcp_sender_field(g))
        {
            return Err(format!("{f}: only for kind \"tcp\""));
        }
        let port = g.port.ok_or("port: required for kind \"tcp_sink\"")?;
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("port: must be 1..=65535, got {port}"))?;
        AgentKindSpec::TcpSink {
            port,
            delayed_ack: g.delayed_ack.unwrap_or(false),
        }
    };
    Ok(AgentSpec {
        id: g.agent.clone(),
        host: g.host.clone(),
        kind,
    })
}

fn build_agent(g: &super::protocol::AgentReq) -> Result<AgentSpec, String> {
    let kind = match g.kind.as_str() {
        k @ ("cbr" | "poisson" | "onoff") => {
            if g.port.is_some() {
                return Err("port: only for kind \"sink\"".into());
            }
            let dst = g.dst.as_deref().ok_or(format!("dst: required for kind \"{k}\" (\"a.b.c.d:port\")"))?;
            let (ip, port) = dst.rsplit_once(':').ok_or_else(|| format!("dst: expected \"a.b.c.d:port\", got \"{dst}\""))?;
            let ip = ipv4::parse_addr(ip).map_err(|e| format!("dst: {e}"))?;
            if ipv4::is_special(ip) {
                return Err(format!("dst: must be a unicast address, got \"{dst}\""));
            }
            let dport: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| format!("dst: port must be 1..=65535, got \"{port}\""))?;
            let size = g.size.ok_or(format!("size: required for kind \"{k}\" (UDP payload bytes)"))?;
            if !(MIN_SIZE as u64..=MAX_CBR_SIZE).contains(&size) {
                return Err(format!("size: must be {MIN_SIZE}..={MAX_CBR_SIZE} (sequence number + timestamp fit in 16 bytes), got {size}"));
            }
            let (num, den) = match (g.rate_bps, g.interval_us) {
                (Some(_), Some(_)) => return Err("rate_bps: give either rate_bps or interval_us, not both".into()),
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
            let pattern = build_pattern(k, g)?;
            AgentKindSpec::Cbr(CbrSpec { dst: ip, dport, size: size as usize, period_num: num, period_den: den, pattern })
        }
        "sink" => {
            let onoff = [(g.on_us.is_some(), "on_us"), (g.off_us.is_some(), "off_us"), (g.dist.is_some(), "dist"), (g.shape.is_some(), "shape")];
            for (set, f) in [(g.dst.is_some(), "dst"), (g.size.is_some(), "size"), (g.rate_bps.is_some(), "rate_bps"), (g.interval_us.is_some(), "interval_us")].into_iter().chain(onoff) {
                if set {
                    return Err(format!("{f}: not valid for kind \"sink\""));
                }
            }
            let port = g.port.ok_or("port: required for kind \"sink\"")?;
            let port = u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| format!("port: must be 1..=65535, got {port}"))?;
            AgentKindSpec::Sink { port }
        }
        "tcp" | "tcp_sink" => return build_tcp_agent(g),
        k => return Err(format!("kind: unknown agent kind \"{k}\"; supported: \"cbr\", \"poisson\", \"onoff\", \"sink\", \"tcp\", \"tcp_sink\"")),
    };
    reject_tcp_fields(g)?;
    Ok(AgentSpec {
        id: g.agent.clone(),
        host: g.host.clone(),
        kind,
    })
}
