//! The network: ports, point-to-point links and LANs, and the timer heap that drives them.
//!
//! Ports are where frames enter and leave (a TAP in emulation). A port is attached to at most
//! one link end or LAN membership; its *ingress* pipeline is the direction that carries its
//! frames away (link `ab` for port `a`, LAN member `to_lan`).
//!
//! Scheduling: each pipeline reports `poll_at()`; the network keeps one heap of timers
//! ordered by the total key (time, kind, source id, sequence), so the order of simultaneous
//! events never depends on hash order or on the driver, and an idle link costs nothing.
//! Timers are invalidated lazily: an entry is acted on only if it is still the pipeline's
//! scheduled deadline. Pipelines are polled at their event time, not at the driver's `now`,
//! so a frame crossing a LAN switch enters the next pipeline at its exact time.
//!
//! Indices of ports, links, LANs and pipelines are never reused while the engine runs, so a
//! stale timer or capture can never point at a different object.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use serde::Serialize;

use super::lan::{Forward, Lan, Member};
use super::packet::Packet;
use super::params::LinkParams;
use super::pipeline::Pipeline;
use super::sim::agent::{AgentStats, Cbr, CbrSpec, UdpSink};
use super::sim::host::{self, Host, HostConfig, HostCounters, Up, PROTO_TCP};
use super::sim::router::{self, Interface, Route, Router, RouterCounters};
use super::sim::tcp::sender::{TcpSender, TcpSpec};
use super::sim::tcp::sink::TcpSink;
use crate::rng::stream_seed;
use crate::stats::Counters;
use crate::time::Instant;
use crate::wire::ethernet::HEADER_LEN;
use crate::wire::vnet::VnetHdr;

mod tcp_agents;

pub type PortIdx = usize;
pub type PipeIdx = usize;

/// Event kinds in the total order; only pipeline deadlines exist today (simulated routers need
/// none: they answer at the instant a frame is delivered; traffic sources will add kinds).
const KIND_PIPELINE: u8 = 0;
/// A traffic source's next send time (after pipeline events at the same instant).
const KIND_AGENT: u8 = 1;
/// A TCP agent's timer (retransmission or delayed ACK), after sources at the same instant.
const KIND_TCP: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    kind: u8,
    source: u64,
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
enum Sink {
    Port(PortIdx),
    Lan { lan: usize, member: usize },
}

#[derive(Debug)]
struct PipeSlot {
    pipe: Pipeline,
    sink: Sink,
    capture: bool,
    scheduled: Option<Instant>,
}

#[derive(Debug)]
struct Port {
    id: String,
    ingress: Option<PipeIdx>,
    /// A simulated port: (router, interface index); frames delivered to it go to the router.
    sim: Option<(usize, usize)>,
    /// A simulated host's port: frames delivered to it go to that host.
    host: Option<usize>,
    /// Frames that arrived on an unattached port (or too short for an unattached port).
    unattached_drops: u64,
}

#[derive(Debug)]
struct Link {
    id: String,
    a: PortIdx,
    b: PortIdx,
    ab: PipeIdx,
    ba: PipeIdx,
    up: bool,
}

/// What `poll` hands the driver.
#[derive(Debug)]
pub enum Output<'a> {
    /// A frame to write to a port; `vnet` is its offload metadata (default for a plain wire
    /// frame; a super-frame or partial checksum only after crossing unlimited pipelines).
    Frame {
        port: PortIdx,
        data: Vec<u8>,
        vnet: VnetHdr,
    },
    /// A frame leaving a pipeline with capture enabled (emitted just before it is delivered).
    Capture {
        pipe: PipeIdx,
        at: Instant,
        data: &'a [u8],
    },
}

/// Topology additions, already validated by the control layer for value ranges.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    pub id: String,
    pub a: String,
    pub b: String,
    pub ab: LinkParams,
    pub ba: LinkParams,
}

#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub port: String,
    pub to_lan: LinkParams,
    pub from_lan: LinkParams,
}

#[derive(Debug, Clone)]
pub struct LanSpec {
    pub id: String,
    pub members: Vec<MemberSpec>,
}

/// A simulated router; each interface creates the simulated port `port`.
#[derive(Debug, Clone)]
pub struct RouterSpec {
    pub id: String,
    pub interfaces: Vec<(String, Interface)>,
    pub routes: Vec<Route>,
}

/// A simulated host; it creates the simulated port `port`.
#[derive(Debug, Clone)]
pub struct HostSpec {
    pub id: String,
    pub port: String,
    pub cfg: HostConfig,
}

#[derive(Debug, Clone)]
pub enum AgentKindSpec {
    Cbr(CbrSpec),
    Sink { port: u16 },
    Tcp(TcpSpec),
    TcpSink { port: u16, delayed_ack: bool },
}

/// A traffic agent on a (new or existing) simulated host.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub id: String,
    pub host: String,
    pub kind: AgentKindSpec,
}

#[derive(Debug, Clone, Default)]
pub struct TopologySpec {
    pub ports: Vec<String>,
    pub links: Vec<LinkSpec>,
    pub lans: Vec<LanSpec>,
    pub routers: Vec<RouterSpec>,
    pub hosts: Vec<HostSpec>,
    pub agents: Vec<AgentSpec>,
}

#[derive(Debug)]
struct SimHost {
    id: String,
    port: PortIdx,
    host: Host,
}

#[derive(Debug)]
enum AgentKind {
    Cbr(Cbr),
    Sink(UdpSink),
    Tcp(Box<TcpSender>),
    TcpSink(TcpSink),
}

#[derive(Debug)]
struct Agent {
    id: String,
    host: usize,
    kind: AgentKind,
    scheduled: Option<Instant>,
}

#[derive(Debug)]
struct SimRouter {
    id: String,
    ports: Vec<PortIdx>,
    router: Router,
}

/// Which directions a `set`, `capture` or `down` addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Ab,
    Ba,
    ToLan,
    FromLan,
    Both,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct LinkStats {
    pub ab: Counters,
    pub ba: Counters,
    pub up: bool,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MemberStats {
    pub to_lan: Counters,
    pub from_lan: Counters,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct StatsBody {
    pub now_ns: u64,
    pub links: BTreeMap<String, LinkStats>,
    pub lans: BTreeMap<String, BTreeMap<String, MemberStats>>,
    pub routers: BTreeMap<String, RouterCounters>,
    pub hosts: BTreeMap<String, HostCounters>,
    pub agents: BTreeMap<String, AgentStats>,
}

#[derive(Debug)]
pub struct Network {
    seed: u64,
    ports: Vec<Option<Port>>,
    links: Vec<Option<Link>>,
    lans: Vec<Option<Lan>>,
    pipes: Vec<Option<PipeSlot>>,
    port_ids: HashMap<String, PortIdx>,
    link_ids: HashMap<String, usize>,
    lan_ids: HashMap<String, usize>,
    routers: Vec<Option<SimRouter>>,
    router_ids: HashMap<String, usize>,
    hosts: Vec<Option<SimHost>>,
    host_ids: HashMap<String, usize>,
    agents: Vec<Option<Agent>>,
    agent_ids: HashMap<String, usize>,
    /// (host, IP protocol, local port) → the agent that receives there (UDP sinks, TCP sinks
    /// and senders; the first one created wins), so delivery costs no scan of all agents.
    bound: HashMap<(usize, u8, u16), usize>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    scratch: Vec<Packet>,
    /// Timer events acted on (stale heap entries not counted).
    events: u64,
    /// Lateness of timer events behind the `now` they were polled at (real-time driver only).
    lateness: Option<Lateness>,
    /// At most this many events per `poll` call (None: all that are due).
    poll_limit: Option<u64>,
}

/// How late timer events ran: lateness = the `now` passed to [`Network::poll`] − deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    pub threshold_ns: u64,
    /// Events with lateness > threshold.
    pub late_events: u64,
    pub max_late_ns: u64,
    /// Largest lateness in the last `poll` call (0 if nothing ran).
    pub last_poll_max_ns: u64,
}

impl Network {
    pub fn new(seed: u64) -> Self {
        Network {
            seed,
            ports: Vec::new(),
            links: Vec::new(),
            lans: Vec::new(),
            pipes: Vec::new(),
            port_ids: HashMap::new(),
            link_ids: HashMap::new(),
            lan_ids: HashMap::new(),
            routers: Vec::new(),
            router_ids: HashMap::new(),
            hosts: Vec::new(),
            host_ids: HashMap::new(),
            agents: Vec::new(),
            agent_ids: HashMap::new(),
            bound: HashMap::new(),
            timers: BinaryHeap::new(),
            seq: 0,
            scratch: Vec::new(),
            events: 0,
            lateness: None,
            poll_limit: None,
        }
    }

    /// Timer events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Measure lateness of timer events against the `now` of each poll (real-time driver).
    pub fn track_lateness(&mut self, threshold_ns: u64) {
        self.lateness = Some(Lateness {
            threshold_ns,
            ..Default::default()
        });
    }

    pub fn lateness(&self) -> Option<Lateness> {
        self.lateness
    }

    /// Process at most `max` events per [`Network::poll`] call, so a driver that fell
    /// behind still gets to service its I/O between batches (None: no limit).
    pub fn set_poll_limit(&mut self, max: Option<u64>) {
        self.poll_limit = max;
    }

    fn count_event(&mut self, at: Instant, now: Instant) {
        self.events += 1;
        if let Some(l) = self.lateness.as_mut() {
            let late = now.nanos().saturating_sub(at.nanos());
            if late > l.threshold_ns {
                l.late_events += 1;
            }
            l.max_late_ns = l.max_late_ns.max(late);
            l.last_poll_max_ns = l.last_poll_max_ns.max(late);
        }
    }

    pub fn port_index(&self, id: &str) -> Option<PortIdx> {
        self.port_ids.get(id).copied()
    }

    pub fn port_id(&self, port: PortIdx) -> Option<&str> {
        self.ports.get(port)?.as_ref().map(|p| p.id.as_str())
    }

    pub fn has_link(&self, id: &str) -> bool {
        self.link_ids.contains_key(id)
    }
    pub fn has_lan(&self, id: &str) -> bool {
        self.lan_ids.contains_key(id)
    }
    pub fn has_router(&self, id: &str) -> bool {
        self.router_ids.contains_key(id)
    }

    /// Counters of a simulated router.
    pub fn router_counters(&self, id: &str) -> Option<RouterCounters> {
        let &i = self.router_ids.get(id)?;
        self.routers[i].as_ref().map(|r| r.router.counters)
    }

    /// The simulated router behind a port, if it is a simulated port: (router id, interface).
    pub fn sim_port(&self, port: PortIdx) -> Option<(&str, usize)> {
        let (r, i) = self.ports.get(port)?.as_ref()?.sim?;
        Some((self.routers.get(r)?.as_ref()?.id.as_str(), i))
    }

    /// Check that `spec` can be added as a whole: new ids are unique, references resolve to
    /// existing or new ports, and no port gets two attachments.
    pub fn check_apply(&self, spec: &TopologySpec) -> Result<(), String> {
        let mut new_ports = HashMap::new();
        for p in &spec.ports {
            if p.is_empty() {
                return Err("ports: port id must not be empty".into());
            }
            if self.port_ids.contains_key(p) || new_ports.insert(p.as_str(), ()).is_some() {
                return Err(format!("ports: port \"{p}\" already exists"));
            }
        }
        let mut seen_routers = HashMap::new();
        for (i, r) in spec.routers.iter().enumerate() {
            let by = format!("routers[{i}] (\"{}\")", r.id);
            if r.id.is_empty() {
                return Err(format!("{by}.router: id must not be empty"));
            }
            let clash = self.router_ids.contains_key(&r.id)
                || self.link_ids.contains_key(&r.id)
                || self.lan_ids.contains_key(&r.id)
                || spec.links.iter().any(|l| l.id == r.id)
                || spec.lans.iter().any(|l| l.id == r.id);
            if clash || seen_routers.insert(r.id.as_str(), ()).is_some() {
                return Err(format!(
                    "{by}.router: id already exists (routers, links and lans share ids)"
                ));
            }
            for (j, (p, _)) in r.interfaces.iter().enumerate() {
                if p.is_empty() {
                    return Err(format!(
                        "{by}.interfaces[{j}].port: port id must not be empty"
                    ));
                }
                if self.port_ids.contains_key(p) || new_ports.insert(p.as_str(), ()).is_some() {
                    return Err(format!(
                        "{by}.interfaces[{j}].port: port \"{p}\" already exists"
                    ));
                }
            }
            let ifs: Vec<Interface> = r.interfaces.iter().map(|(_, f)| f.clone()).collect();
            router::validate(&ifs, &r.routes).map_err(|e| format!("{by}.{e}"))?;
        }
        let mut seen_hosts = HashMap::new();
        for (i, h) in spec.hosts.iter().enumerate() {
            let by = format!("hosts[{i}] (\"{}\")", h.id);
            if h.id.is_empty() {
                return Err(format!("{by}.host: id must not be empty"));
            }
            if self.host_ids.contains_key(&h.id) || seen_hosts.insert(h.id.as_str(), ()).is_some() {
                return Err(format!("{by}.host: id already exists"));
            }
            if h.port.is_empty() {
                return Err(format!("{by}.port: port id must not be empty"));
            }
            if self.port_ids.contains_key(&h.port)
                || new_ports.insert(h.port.as_str(), ()).is_some()
            {
                return Err(format!("{by}.port: port \"{}\" already exists", h.port));
            }
            host::validate(&h.cfg).map_err(|e| format!("{by}.{e}"))?;
        }
        let mut seen_agents = HashMap::new();
        let mut sink_ports: HashMap<(String, u16), ()> = HashMap::new();
        for a in self.agents.iter().flatten() {
            if let AgentKind::Sink(s) = &a.kind {
                let h = self.hosts[a.host]
                    .as_ref()
                    .map(|h| h.id.clone())
                    .unwrap_or_default();
                sink_ports.insert((h, s.port), ());
            }
        }
        for (i, a) in spec.agents.iter().enumerate() {
            let by = format!("agents[{i}] (\"{}\")", a.id);
            if a.id.is_empty() {
                return Err(format!("{by}.agent: id must not be empty"));
            }
            if self.agent_ids.contains_key(&a.id) || seen_agents.insert(a.id.as_str(), ()).is_some()
            {
                return Err(format!("{by}.agent: id already exists"));
            }
            if !self.host_ids.contains_key(&a.host) && !seen_hosts.contains_key(a.host.as_str()) {
                return Err(format!("{by}.host: unknown host \"{}\"", a.host));
            }
            if let AgentKindSpec::Sink { port } = a.kind {
                if sink_ports.insert((a.host.clone(), port), ()).is_some() {
                    return Err(format!(
                        "{by}.port: host \"{}\" already has a sink on port {port}",
                        a.host
                    ));
                }
            }
        }
        self.check_tcp_sinks(spec)?;
        let mut used: HashMap<&str, String> = HashMap::new();
        let claim =
            |port: &str, by: String, used: &mut HashMap<&str, String>| -> Result<(), String> {
                match self.port_ids.get(port) {
                    Some(&i) => {
                        if self.ports[i].as_ref().is_some_and(|p| p.ingress.is_some()) {
                            return Err(format!("{by}: port \"{port}\" is already attached"));
                        }
                    }
                    None if new_ports.contains_key(port) => {}
                    None => return Err(format!("{by}: unknown port \"{port}\"")),
                }
                if let Some(other) = used.get(port) {
                    return Err(format!("{by}: port \"{port}\" is also used by {other}"));
                }
                Ok(())
            };
        let mut seen_links = HashMap::new();
        for l in &spec.links {
            let by = format!("link \"{}\"", l.id);
            if l.id.is_empty() {
                return Err("links: link id must not be empty".into());
            }
            if self.link_ids.contains_key(&l.id)
                || self.lan_ids.contains_key(&l.id)
                || self.router_ids.contains_key(&l.id)
                || seen_links.insert(l.id.as_str(), ()).is_some()
            {
                return Err(format!("{by}: id already exists"));
            }
            if l.a == l.b {
                return Err(format!("{by}: a and b are the same port \"{}\"", l.a));
            }
            claim(&l.a, by.clone(), &mut used)?;
            used.insert(l.a.as_str(), by.clone());
            claim(&l.b, by.clone(), &mut used)?;
            used.insert(l.b.as_str(), by);
        }
        for lan in &spec.lans {
            let by = format!("lan \"{}\"", lan.id);
            if lan.id.is_empty() {
                return Err("lans: lan id must not be empty".into());
            }
            if self.lan_ids.contains_key(&lan.id)
                || self.link_ids.contains_key(&lan.id)
                || self.router_ids.contains_key(&lan.id)
                || seen_links.insert(lan.id.as_str(), ()).is_some()
            {
                return Err(format!("{by}: id already exists"));
            }
            for m in &lan.members {
                claim(&m.port, by.clone(), &mut used)?;
                used.insert(m.port.as_str(), by.clone());
            }
        }
        Ok(())
    }

    fn new_pipe(&mut self, params: LinkParams, name: &str, sink: Sink, now: Instant) -> PipeIdx {
        let seed = stream_seed(self.seed, name);
        self.pipes.push(Some(PipeSlot {
            pipe: Pipeline::new(params, seed, now),
            sink,
            capture: false,
            scheduled: None,
        }));
        self.pipes.len() - 1
    }

    /// Add a checked topology (call [`Network::check_apply`] first; unchecked input is
    /// still memory-safe but may leave a port attached twice).
    pub fn apply(&mut self, spec: TopologySpec, now: Instant) {
        for p in spec.ports {
            self.ports.push(Some(Port {
                id: p.clone(),
                ingress: None,
                sim: None,
                host: None,
                unattached_drops: 0,
            }));
            self.port_ids.insert(p, self.ports.len() - 1);
        }
        for r in spec.routers {
            let ri = self.routers.len();
            let mut ports = Vec::new();
            let mut ifs = Vec::new();
            for (j, (p, f)) in r.interfaces.into_iter().enumerate() {
                self.ports.push(Some(Port {
                    id: p.clone(),
                    ingress: None,
                    sim: Some((ri, j)),
                    host: None,
                    unattached_drops: 0,
                }));
                self.port_ids.insert(p, self.ports.len() - 1);
                ports.push(self.ports.len() - 1);
                ifs.push(f);
            }
            let router = Router::new(ifs, &r.routes);
            self.routers.push(Some(SimRouter {
                id: r.id.clone(),
                ports,
                router,
            }));
            self.router_ids.insert(r.id, ri);
        }
        for h in spec.hosts {
            let hi = self.hosts.len();
            self.ports.push(Some(Port {
                id: h.port.clone(),
                ingress: None,
                sim: None,
                host: Some(hi),
                unattached_drops: 0,
            }));
            let port = self.ports.len() - 1;
            self.port_ids.insert(h.port, port);
            self.hosts.push(Some(SimHost {
                id: h.id.clone(),
                port,
                host: Host::new(h.cfg),
            }));
            self.host_ids.insert(h.id, hi);
        }
        for a in spec.agents {
            let Some(&hi) = self.host_ids.get(&a.host) else {
                continue;
            };
            let ai = self.agents.len();
            let kind = match a.kind {
                // Source ports are deterministic: 49152 + agent index (mod the dynamic range).
                AgentKindSpec::Cbr(c) => AgentKind::Cbr(Cbr::new(
                    c,
                    49152 + (ai % 16384) as u16,
                    stream_seed(self.seed, &format!("agent:{}", a.id)),
                )),
                AgentKindSpec::Sink { port } => AgentKind::Sink(UdpSink::new(port)),
                AgentKindSpec::Tcp(t) => {
                    AgentKind::Tcp(Box::new(TcpSender::new(t, 49152 + (ai % 16384) as u16)))
                }
                AgentKindSpec::TcpSink { port, delayed_ack } => {
                    AgentKind::TcpSink(TcpSink::new(port, delayed_ack))
                }
            };
            let local = match &kind {
                AgentKind::Sink(s) => Some((host::PROTO_UDP, s.port)),
                AgentKind::Tcp(t) => Some((PROTO_TCP, t.sport)),
                AgentKind::TcpSink(s) => Some((PROTO_TCP, s.port)),
                AgentKind::Cbr(_) => None,
            };
            if let Some((proto, port)) = local {
                self.bound.entry((hi, proto, port)).or_insert(ai);
            }
            self.agents.push(Some(Agent {
                id: a.id.clone(),
                host: hi,
                kind,
                scheduled: None,
            }));
            self.agent_ids.insert(a.id, ai);
        }
        for l in spec.links {
            let (Some(a), Some(b)) = (self.port_index(&l.a), self.port_index(&l.b)) else {
                continue;
            };
            // RNG streams are named after the objects so they do not depend on creation order.
            let ab = self.new_pipe(l.ab, &format!("link:{}:ab", l.id), Sink::Port(b), now);
            let ba = self.new_pipe(l.ba, &format!("link:{}:ba", l.id), Sink::Port(a), now);
            self.set_ingress(a, ab);
            self.set_ingress(b, ba);
            self.links.push(Some(Link {
                id: l.id.clone(),
                a,
                b,
                ab,
                ba,
                up: true,
            }));
            self.link_ids.insert(l.id, self.links.len() - 1);
        }
        for lan in spec.lans {
            let li = self.lans.len();
            let mut members = Vec::new();
            for (mi, m) in lan.members.into_iter().enumerate() {
                let Some(port) = self.port_index(&m.port) else {
                    continue;
                };
                let to_lan = self.new_pipe(
                    m.to_lan,
                    &format!("lan:{}:{}:to_lan", lan.id, m.port),
                    Sink::Lan {
                        lan: li,
                        member: mi,
                    },
                    now,
                );
                let from_lan = self.new_pipe(
                    m.from_lan,
                    &format!("lan:{}:{}:from_lan", lan.id, m.port),
                    Sink::Port(port),
                    now,
                );
                self.set_ingress(port, to_lan);
                members.push(Member {
                    port,
                    to_lan,
                    from_lan,
                    up: true,
                });
            }
            self.lans.push(Some(Lan::new(lan.id.clone(), members)));
            self.lan_ids.insert(lan.id, li);
        }
    }

    fn set_ingress(&mut self, port: PortIdx, pipe: PipeIdx) {
        if let Some(Some(p)) = self.ports.get_mut(port) {
            p.ingress = Some(pipe);
        }
    }

    /// Remove links, LANs and ports (in that order) as a whole; ports must not remain
    /// attached to a link or LAN that is not removed too. Returns the removed port indices.
    pub fn remove(
        &mut self,
        links: &[String],
        lans: &[String],
        ports: &[String],
    ) -> Result<Vec<PortIdx>, String> {
        self.remove_with_routers(links, lans, &[], ports)
    }

    /// [`Network::remove`] plus simulated routers (with their simulated ports, which must
    /// not remain attached either).
    pub fn remove_with_routers(
        &mut self,
        links: &[String],
        lans: &[String],
        routers: &[String],
        ports: &[String],
    ) -> Result<Vec<PortIdx>, String> {
        for l in links {
            if !self.link_ids.contains_key(l) {
                return Err(format!("links: unknown link \"{l}\""));
            }
        }
        for l in lans {
            if !self.lan_ids.contains_key(l) {
                return Err(format!("lans: unknown lan \"{l}\""));
            }
        }
        let mut freed = std::collections::HashSet::new();
        for l in links {
            let link = self.links[self.link_ids[l]]
                .as_ref()
                .expect("id map points at live link");
            freed.insert(link.a);
            freed.insert(link.b);
        }
        for l in lans {
            let lan = self.lans[self.lan_ids[l]]
                .as_ref()
                .expect("id map points at live lan");
            freed.extend(lan.members.iter().map(|m| m.port));
        }
        let mut router_idx = Vec::new();
        for r in routers {
            let Some(&ri) = self.router_ids.get(r) else {
                return Err(format!("routers: unknown router \"{r}\""));
            };
            if router_idx.contains(&ri) {
                return Err(format!("routers: router \"{r}\" listed twice"));
            }
            let sr = self.routers[ri]
                .as_ref()
                .ok_or("routers: router vanished")?;
            for &i in &sr.ports {
                let attached = self.ports[i].as_ref().is_some_and(|x| x.ingress.is_some());
                if attached && !freed.contains(&i) {
                    let name = self.port_id(i).unwrap_or("?");
                    return Err(format!("routers: port \"{name}\" of router \"{r}\" is still attached to a link or lan; remove that too"));
                }
            }
            router_idx.push(ri);
        }
        let mut port_idx = Vec::new();
        for p in ports {
            let Some(&i) = self.port_ids.get(p) else {
                return Err(format!("ports: unknown port \"{p}\""));
            };
            if self.ports[i].as_ref().is_some_and(|x| x.sim.is_some()) {
                return Err(format!(
                    "ports: port \"{p}\" belongs to a simulated router; remove the router"
                ));
            }
            if self.ports[i].as_ref().is_some_and(|x| x.host.is_some()) {
                return Err(format!(
                    "ports: port \"{p}\" belongs to a simulated host (hosts cannot be removed yet)"
                ));
            }
            let attached = self.ports[i].as_ref().is_some_and(|x| x.ingress.is_some());
            if attached && !freed.contains(&i) {
                return Err(format!(
                    "ports: port \"{p}\" is still attached to a link or lan; remove that too"
                ));
            }
            port_idx.push(i);
        }
        for l in links {
            if let Some(i) = self.link_ids.remove(l) {
                if let Some(link) = self.links[i].take() {
                    self.pipes[link.ab] = None;
                    self.pipes[link.ba] = None;
                    self.clear_ingress(link.a);
                    self.clear_ingress(link.b);
                }
            }
        }
        for l in lans {
            if let Some(i) = self.lan_ids.remove(l) {
                if let Some(lan) = self.lans[i].take() {
                    for m in lan.members {
                        self.pipes[m.to_lan] = None;
                        self.pipes[m.from_lan] = None;
                        self.clear_ingress(m.port);
                    }
                }
            }
        }
        for (p, &i) in ports.iter().zip(&port_idx) {
            self.port_ids.remove(p);
            self.ports[i] = None;
        }
        for (r, ri) in routers.iter().zip(router_idx) {
            self.router_ids.remove(r);
            if let Some(sr) = self.routers[ri].take() {
                for i in sr.ports {
                    if let Some(Some(p)) = self.ports.get(i) {
                        self.port_ids.remove(&p.id);
                    }
                    self.ports[i] = None;
                }
            }
        }
        Ok(port_idx)
    }

    fn clear_ingress(&mut self, port: PortIdx) {
        if let Some(Some(p)) = self.ports.get_mut(port) {
            p.ingress = None;
        }
    }

    /// A plain wire frame arrived on `port` at `now`.
    pub fn receive(&mut self, port: PortIdx, frame: Vec<u8>, now: Instant) {
        self.receive_packet(port, Packet::plain(frame), now);
    }

    /// A frame with offload metadata arrived on `port` at `now`.
    pub fn receive_packet(&mut self, port: PortIdx, frame: Packet, now: Instant) {
        let Some(Some(p)) = self.ports.get_mut(port) else {
            return;
        };
        let Some(pipe) = p.ingress else {
            p.unattached_drops += 1;
            return;
        };
        let Some(Some(slot)) = self.pipes.get_mut(pipe) else {
            return;
        };
        if frame.len() < HEADER_LEN {
            slot.pipe.count_malformed(frame.len());
            return;
        }
        slot.pipe.enqueue_packet(frame, now);
        self.reschedule(pipe);
    }

    fn reschedule(&mut self, pipe: PipeIdx) {
        let Some(Some(slot)) = self.pipes.get_mut(pipe) else {
            return;
        };
        let at = slot.pipe.poll_at();
        if at.is_some() && at != slot.scheduled {
            slot.scheduled = at;
            self.seq += 1;
            self.timers.push(Reverse(Timer {
                at: at.unwrap_or_default(),
                kind: KIND_PIPELINE,
                source: pipe as u64,
                seq: self.seq,
            }));
        }
    }

    /// Next deadline (possibly a stale one, which only costs an early wake-up).
    pub fn poll_at(&self) -> Option<Instant> {
        self.timers.peek().map(|t| t.0.at)
    }

    /// Run every event due by `now`, in total order, handing outputs to `emit`.
    pub fn poll(&mut self, now: Instant, mut emit: impl FnMut(Output<'_>)) {
        if let Some(l) = self.lateness.as_mut() {
            l.last_poll_max_ns = 0;
        }
        let stop_at = self.poll_limit.map(|n| self.events.saturating_add(n));
        while let Some(Reverse(t)) = self.timers.peek().copied() {
            if t.at > now || stop_at.is_some_and(|s| self.events >= s) {
                break;
            }
            self.timers.pop();
            if t.kind == KIND_AGENT {
                if self
                    .agents
                    .get(t.source as usize)
                    .and_then(|a| a.as_ref())
                    .is_some_and(|a| a.scheduled == Some(t.at))
                {
                    self.count_event(t.at, now);
                }
                self.fire_agent(t.source as usize, t.at);
                continue;
            }
            if t.kind == KIND_TCP {
                self.fire_tcp(t.source as usize, t.at, now);
                continue;
            }
            let pipe = t.source as usize;
            let Some(Some(slot)) = self.pipes.get_mut(pipe) else {
                continue;
            };
            if slot.scheduled != Some(t.at) {
                continue; // stale entry
            }
            slot.scheduled = None;
            self.count_event(t.at, now);
            let Some(Some(slot)) = self.pipes.get_mut(pipe) else {
                continue;
            };
            let mut out = std::mem::take(&mut self.scratch);
            slot.pipe.poll(t.at, |f| out.push(f));
            let (sink, capture) = (slot.sink, slot.capture);
            self.reschedule(pipe);
            for f in out.drain(..) {
                if capture && f.vnet.is_offloaded() {
                    // A capture sees wire frames: segment (and checksum) what would otherwise
                    // cross whole, and forward those frames instead.
                    for w in f.into_wire().unwrap_or_default() {
                        emit(Output::Capture {
                            pipe,
                            at: t.at,
                            data: &w,
                        });
                        self.forward(sink, Packet::plain(w), t.at, &mut emit);
                    }
                    continue;
                }
                if capture {
                    emit(Output::Capture {
                        pipe,
                        at: t.at,
                        data: &f.data,
                    });
                }
                self.forward(sink, f, t.at, &mut emit);
            }
            self.scratch = out;
        }
    }

    fn forward(&mut self, sink: Sink, f: Packet, at: Instant, emit: &mut impl FnMut(Output<'_>)) {
        match sink {
            Sink::Port(port) => {
                let p = self.ports.get(port).and_then(|p| p.as_ref());
                match (p.and_then(|p| p.sim), p.and_then(|p| p.host)) {
                    (Some((r, iface)), _) => self.route(r, iface, f, at),
                    (None, Some(h)) => self.host_receive(h, f, at),
                    (None, None) => emit(Output::Frame {
                        port,
                        data: f.data,
                        vnet: f.vnet,
                    }),
                }
            }
            Sink::Lan { lan, member } => self.switch(lan, member, f, at),
        }
    }

    /// Hand a frame to a simulated router and enqueue what it sends at the same instant.
    fn route(&mut self, r: usize, iface: usize, f: Packet, at: Instant) {
        let Some(Some(sr)) = self.routers.get_mut(r) else {
            return;
        };
        let Ok(frames) = f.into_wire() else {
            sr.router.counters.dropped_other += 1;
            return;
        };
        let mut out = Vec::new();
        for w in frames {
            out.extend(
                sr.router
                    .receive(iface, &w)
                    .into_iter()
                    .filter_map(|(i, d)| sr.ports.get(i).map(|&p| (p, d))),
            );
        }
        for (port, d) in out {
            self.receive_packet(port, Packet::plain(d), at);
        }
    }

    /// Hand a frame to a simulated host: its answers are enqueued at the same instant, a UDP
    /// datagram goes to the sink bound to its port (or is counted as dropped), a TCP segment
    /// to the TCP agent bound to its port (see `tcp_agents`).
    fn host_receive(&mut self, h: usize, f: Packet, at: Instant) {
        let Some(Some(sh)) = self.hosts.get_mut(h) else {
            return;
        };
        let Ok(frames) = f.into_wire() else {
            sh.host.counters.dropped_other += 1;
            return;
        };
        let port = sh.port;
        let mut out = Vec::new();
        let mut dgrams = Vec::new();
        let mut segs = Vec::new();
        for w in frames {
            let (o, d) = sh.host.receive_any(&w);
            out.extend(o);
            match d {
                Some(Up::Udp(d)) => dgrams.push(d),
                Some(Up::Tcp(s)) => segs.push(s),
                None => {}
            }
        }
        for d in dgrams {
            let ai = self.bound.get(&(h, host::PROTO_UDP, d.dport)).copied();
            let sink = ai
                .and_then(|ai| self.agents.get_mut(ai)?.as_mut())
                .and_then(|a| match &mut a.kind {
                    AgentKind::Sink(s) => Some(s),
                    _ => None,
                });
            match sink {
                Some(s) => s.receive(&d.payload, at),
                None => {
                    if let Some(Some(sh)) = self.hosts.get_mut(h) {
                        sh.host.counters.dropped_other += 1;
                    }
                }
            }
        }
        for d in out {
            self.receive_packet(port, Packet::plain(d), at);
        }
        for s in segs {
            self.tcp_receive(h, s, at);
        }
    }

    /// A source's send time: send its packet and schedule the next one.
    fn fire_agent(&mut self, ai: usize, at: Instant) {
        let Some(Some(a)) = self.agents.get_mut(ai) else {
            return;
        };
        if a.scheduled != Some(at) {
            return; // stale
        }
        a.scheduled = None;
        let h = a.host;
        let AgentKind::Cbr(c) = &mut a.kind else {
            return;
        };
        let Some(payload) = c.poll(at) else {
            self.reschedule_agent(ai);
            return;
        };
        let (dst, sport, dport) = (c.spec.dst, c.sport, c.spec.dport);
        self.reschedule_agent(ai);
        let Some(Some(sh)) = self.hosts.get_mut(h) else {
            return;
        };
        let port = sh.port;
        for d in sh.host.send_udp(dst, sport, dport, &payload) {
            self.receive_packet(port, Packet::plain(d), at);
        }
    }

    fn reschedule_agent(&mut self, ai: usize) {
        let Some(Some(a)) = self.agents.get_mut(ai) else {
            return;
        };
        let AgentKind::Cbr(c) = &a.kind else { return };
        let at = c.poll_at();
        if at.is_some() && at != a.scheduled {
            a.scheduled = at;
            self.seq += 1;
            self.timers.push(Reverse(Timer {
                at: at.unwrap_or_default(),
                kind: KIND_AGENT,
                source: ai as u64,
                seq: self.seq,
            }));
        }
    }

    pub fn has_agent(&self, id: &str) -> bool {
        self.agent_ids.contains_key(id)
    }

    /// Start or stop a traffic source at `now`. Starting a running source or stopping a
    /// stopped one is a no-op; a restarted source continues its sequence numbers.
    pub fn agent_action(&mut self, id: &str, start: bool, now: Instant) -> Result<(), String> {
        let Some(&ai) = self.agent_ids.get(id) else {
            return Err(format!("agent: unknown agent \"{id}\""));
        };
        let Some(Some(a)) = self.agents.get_mut(ai) else {
            return Err(format!("agent: unknown agent \"{id}\""));
        };
        if matches!(a.kind, AgentKind::Tcp(_) | AgentKind::TcpSink(_)) {
            return self.tcp_action(ai, start, now);
        }
        let AgentKind::Cbr(c) = &mut a.kind else {
            return Err(format!(
                "agent: \"{id}\" is a sink; only sources start and stop"
            ));
        };
        if start {
            c.start(now);
        } else {
            c.stop();
            a.scheduled = None;
        }
        self.reschedule_agent(ai);
        Ok(())
    }

    /// Stats of one agent.
    pub fn agent_stats(&self, id: &str) -> Option<AgentStats> {
        let a = self.agents.get(*self.agent_ids.get(id)?)?.as_ref()?;
        Some(Self::stats_of(a))
    }

    fn stats_of(a: &Agent) -> AgentStats {
        match &a.kind {
            AgentKind::Cbr(c) => AgentStats::Cbr {
                running: c.running(),
                sent_pkts: c.sent_pkts,
                sent_bytes: c.sent_bytes,
            },
            AgentKind::Sink(s) => s.stats(),
            AgentKind::Tcp(_) | AgentKind::TcpSink(_) => tcp_agents::stats(&a.kind),
        }
    }

    /// Counters of a simulated host.
    pub fn host_counters(&self, id: &str) -> Option<HostCounters> {
        self.hosts
            .get(*self.host_ids.get(id)?)?
            .as_ref()
            .map(|h| h.host.counters)
    }

    fn switch(&mut self, lan: usize, from: usize, frame: Packet, at: Instant) {
        let Some(Some(l)) = self.lans.get_mut(lan) else {
            return;
        };
        let targets: Vec<PipeIdx> = match l.switch(from, &frame.data) {
            Forward::Filter => return,
            Forward::To(m) => l.members.get(m).map(|m| m.from_lan).into_iter().collect(),
            Forward::Flood => l
                .members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != from)
                .map(|(_, m)| m.from_lan)
                .collect(),
        };
        let last = targets.len().saturating_sub(1);
        let mut frame = Some(frame);
        for (i, pipe) in targets.into_iter().enumerate() {
            // Move the frame into the last target, clone for the others.
            let Some(f) = (if i == last {
                frame.take()
            } else {
                frame.clone()
            }) else {
                continue;
            };
            if let Some(Some(slot)) = self.pipes.get_mut(pipe) {
                slot.pipe.enqueue_packet(f, at);
                self.reschedule(pipe);
            }
        }
    }

    /// The pipelines addressed by a target (link or LAN id), optional LAN member and dir.
    pub fn select(
        &self,
        target: &str,
        member: Option<&str>,
        dir: Dir,
    ) -> Result<Vec<PipeIdx>, String> {
        if let Some(&li) = self.link_ids.get(target) {
            let l = self.links[li].as_ref().ok_or("target: link vanished")?;
            if member.is_some() {
                return Err(format!("member: target \"{target}\" is a link, not a lan"));
            }
            return match dir {
                Dir::Ab => Ok(vec![l.ab]),
                Dir::Ba => Ok(vec![l.ba]),
                Dir::Both => Ok(vec![l.ab, l.ba]),
                _ => Err(format!(
                    "dir: link \"{target}\" has directions \"ab\", \"ba\", \"both\""
                )),
            };
        }
        if let Some(&li) = self.lan_ids.get(target) {
            let lan = self.lans[li].as_ref().ok_or("target: lan vanished")?;
            let members: Vec<&Member> = match member {
                None => lan.members.iter().collect(),
                Some(m) => {
                    let pi = self.port_index(m);
                    let found: Vec<&Member> =
                        lan.members.iter().filter(|x| Some(x.port) == pi).collect();
                    if found.is_empty() {
                        return Err(format!(
                            "member: port \"{m}\" is not a member of lan \"{target}\""
                        ));
                    }
                    found
                }
            };
            let mut out = Vec::new();
            for m in members {
                match dir {
                    Dir::ToLan => out.push(m.to_lan),
                    Dir::FromLan => out.push(m.from_lan),
                    Dir::Both => out.extend([m.to_lan, m.from_lan]),
                    _ => return Err(format!(
                        "dir: lan \"{target}\" has directions \"to_lan\", \"from_lan\", \"both\""
                    )),
                }
            }
            return Ok(out);
        }
        Err(format!("target: no link or lan \"{target}\""))
    }

    pub fn pipe_params(&self, pipe: PipeIdx) -> Option<&LinkParams> {
        self.pipes.get(pipe)?.as_ref().map(|s| s.pipe.params())
    }

    pub fn set_pipe_params(&mut self, pipe: PipeIdx, params: LinkParams, now: Instant) {
        if let Some(Some(slot)) = self.pipes.get_mut(pipe) {
            slot.pipe.set_params(params, now);
        }
        self.reschedule(pipe);
    }

    pub fn set_capture(&mut self, pipe: PipeIdx, on: bool) {
        if let Some(Some(slot)) = self.pipes.get_mut(pipe) {
            slot.capture = on;
        }
    }

    pub fn pipe_exists(&self, pipe: PipeIdx) -> bool {
        matches!(self.pipes.get(pipe), Some(Some(_)))
    }

    /// Bring a link, a whole LAN or one LAN member down or up. Returns the ports whose
    /// carrier follows (the link's two ends, or the affected members' ports).
    pub fn set_up(
        &mut self,
        target: &str,
        member: Option<&str>,
        up: bool,
        now: Instant,
    ) -> Result<Vec<PortIdx>, String> {
        let pipes = self.select(target, member, Dir::Both)?;
        let mut ports = Vec::new();
        if let Some(&li) = self.link_ids.get(target) {
            if let Some(l) = self.links[li].as_mut() {
                l.up = up;
                ports.extend([l.a, l.b]);
            }
        } else if let Some(&li) = self.lan_ids.get(target) {
            let pi = member.and_then(|m| self.port_index(m));
            if let Some(lan) = self.lans[li].as_mut() {
                for m in lan
                    .members
                    .iter_mut()
                    .filter(|m| member.is_none() || Some(m.port) == pi)
                {
                    m.up = up;
                    ports.push(m.port);
                }
            }
        }
        for p in pipes {
            if let Some(Some(slot)) = self.pipes.get_mut(p) {
                slot.pipe.set_up(up, now);
            }
            self.reschedule(p);
        }
        Ok(ports)
    }

    fn counters(&self, pipe: PipeIdx) -> Counters {
        self.pipes
            .get(pipe)
            .and_then(|s| s.as_ref())
            .map(|s| s.pipe.counters())
            .unwrap_or_default()
    }

    /// Counters of everything, or of one link or LAN.
    pub fn stats(&self, target: Option<&str>, now: Instant) -> Result<StatsBody, String> {
        if let Some(t) = target {
            if !self.has_link(t)
                && !self.has_lan(t)
                && !self.has_router(t)
                && !self.host_ids.contains_key(t)
                && !self.has_agent(t)
            {
                return Err(format!(
                    "target: no link, lan, router, host or agent \"{t}\""
                ));
            }
        }
        let mut body = StatsBody {
            now_ns: now.nanos(),
            links: BTreeMap::new(),
            lans: BTreeMap::new(),
            routers: BTreeMap::new(),
            hosts: BTreeMap::new(),
            agents: BTreeMap::new(),
        };
        for h in self
            .hosts
            .iter()
            .flatten()
            .filter(|h| target.is_none_or(|t| t == h.id))
        {
            body.hosts.insert(h.id.clone(), h.host.counters);
        }
        for a in self
            .agents
            .iter()
            .flatten()
            .filter(|a| target.is_none_or(|t| t == a.id))
        {
            body.agents.insert(a.id.clone(), Self::stats_of(a));
        }
        for r in self
            .routers
            .iter()
            .flatten()
            .filter(|r| target.is_none_or(|t| t == r.id))
        {
            body.routers.insert(r.id.clone(), r.router.counters);
        }
        for l in self
            .links
            .iter()
            .flatten()
            .filter(|l| target.is_none_or(|t| t == l.id))
        {
            body.links.insert(
                l.id.clone(),
                LinkStats {
                    ab: self.counters(l.ab),
                    ba: self.counters(l.ba),
                    up: l.up,
                },
            );
        }
        for lan in self
            .lans
            .iter()
            .flatten()
            .filter(|l| target.is_none_or(|t| t == l.id))
        {
            let mut ms = BTreeMap::new();
            for m in &lan.members {
                let name = self.port_id(m.port).unwrap_or("?").to_string();
                ms.insert(
                    name,
                    MemberStats {
                        to_lan: self.counters(m.to_lan),
                        from_lan: self.counters(m.from_lan),
                    },
                );
            }
            body.lans.insert(lan.id.clone(), ms);
        }
        Ok(body)
    }
}
