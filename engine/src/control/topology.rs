//! `apply` validated without the network: every value parsed and range-checked, and the
//! request consistent in itself (ids unique, each port claimed once). Pure, so the control
//! thread runs it off the frame path; what needs the network's state (is an id taken, is a
//! port attached) is checked by `control/check.rs` when the command runs.

use std::collections::{HashMap, HashSet};

use super::agents::build_agent;
use super::params::merge_params;
use super::protocol::{ApplyReq, PortReq};
use crate::io::tap::check_ifname;
use crate::model::network::{
    AgentKindSpec, HostSpec, LanSpec, LinkRuleSpec, LinkSpec, MemberSpec, PairSpec, PatchSpec,
    RouterSpec, RulePrefix, TopologySpec,
};
use crate::model::params::LinkParams;
use crate::model::sim::host::{self, Family, HostConfig};
use crate::model::sim::router::{self, Interface, Route, Route6};
use crate::wire::ethernet::Address;
use crate::wire::{ipv4, ipv6};

/// A validated `apply`: the TAPs to create and the topology to add.
#[derive(Debug, Clone, Default)]
pub struct ApplyCmd {
    /// TAP ports, in request order (`topo.ports` holds their ids).
    pub taps: Vec<PortReq>,
    pub topo: TopologySpec,
    /// Every port id and host id this request creates.
    pub new_ports: HashSet<String>,
    pub new_hosts: HashSet<String>,
}

/// Ids already used in this request, by namespace (ports; links, LANs and routers share one;
/// hosts; agents), and the owner of each port claimed by a link or LAN.
#[derive(Default)]
struct Seen {
    ports: HashSet<String>,
    nets: HashSet<String>,
    hosts: HashSet<String>,
    agents: HashSet<String>,
    sinks: HashSet<(String, bool, u16)>,
    claimed: HashMap<String, String>,
}

fn nonempty(id: &str, field: &str) -> Result<(), String> {
    if id.is_empty() {
        Err(format!("{field}: id must not be empty"))
    } else {
        Ok(())
    }
}

impl Seen {
    /// A port this request creates: named, and created once.
    fn new_port(&mut self, p: &str, field: &str) -> Result<(), String> {
        nonempty(p, field)?;
        if !self.ports.insert(p.to_string()) {
            return Err(format!(
                "{field}: port \"{p}\" already exists in this request"
            ));
        }
        Ok(())
    }

    /// A link, LAN or router id, unique among all three.
    fn new_net(&mut self, id: &str, field: &str) -> Result<(), String> {
        nonempty(id, field)?;
        if !self.nets.insert(id.to_string()) {
            return Err(format!(
                "{field}: id \"{id}\" already exists in this request (routers, links and lans share ids)"
            ));
        }
        Ok(())
    }

    /// A port attached by `by`: at most one attachment per port in the request.
    fn claim(&mut self, port: &str, by: &str) -> Result<(), String> {
        if let Some(other) = self.claimed.get(port) {
            return Err(format!("{by}: port \"{port}\" is also used by {other}"));
        }
        self.claimed.insert(port.to_string(), by.to_string());
        Ok(())
    }
}

/// Validate an `apply` request's values and its consistency, without the network.
pub fn build_apply(a: ApplyReq) -> Result<ApplyCmd, String> {
    let mut seen = Seen::default();
    let mut topo = TopologySpec::default();
    let mut taps = HashSet::new();
    for (i, p) in a.ports.iter().enumerate() {
        let ctx = format!("ports[{i}] (\"{}\")", p.port);
        seen.new_port(&p.port, &format!("{ctx}.port"))?;
        check_ifname(&p.tap).map_err(|e| format!("{ctx}.{e}"))?;
        if !taps.insert((p.tap.as_str(), p.netns.as_deref())) {
            return Err(format!("{ctx}.tap: \"{}\" appears twice", p.tap));
        }
        topo.ports.push(p.port.clone());
        if p.tunnel {
            topo.tunnels.push(p.port.clone());
        }
    }
    for (i, r) in a.routers.iter().enumerate() {
        topo.routers.push(build_router(i, r, &mut seen)?);
    }
    for (i, x) in a.patches.iter().enumerate() {
        let ctx = format!("patches[{i}] (\"{}\")", x.patch);
        seen.new_net(&x.patch, &format!("{ctx}.patch"))?;
        for (j, port) in x.ports.iter().enumerate() {
            seen.new_port(port, &format!("{ctx}.ports[{j}]"))?;
        }
        topo.patches.push(PatchSpec {
            id: x.patch.clone(),
            ports: x.ports.clone(),
        });
    }
    for (i, h) in a.hosts.iter().enumerate() {
        topo.hosts.push(build_host(i, h, &mut seen)?);
    }
    for (i, g) in a.agents.iter().enumerate() {
        let ctx = format!("agents[{i}] (\"{}\")", g.id());
        let spec = build_agent(g).map_err(|e| format!("{ctx}.{e}"))?;
        nonempty(&spec.id, &format!("{ctx}.agent"))?;
        if !seen.agents.insert(spec.id.clone()) {
            return Err(format!(
                "{ctx}.agent: id \"{}\" already exists in this request",
                spec.id
            ));
        }
        if let Some((tcp, port)) = sink_port(&spec.kind) {
            if !seen.sinks.insert((spec.host.clone(), tcp, port)) {
                let what = if tcp { "tcp_sink" } else { "sink" };
                return Err(format!(
                    "{ctx}.port: host \"{}\" already has a {what} on port {port}",
                    spec.host
                ));
            }
        }
        topo.agents.push(spec);
    }
    let d = LinkParams::default();
    for (i, l) in a.links.iter().enumerate() {
        let ctx = format!("links[{i}] (\"{}\")", l.link);
        seen.new_net(&l.link, &format!("{ctx}.link"))?;
        if l.a == l.b {
            return Err(format!("{ctx}: a and b are the same port \"{}\"", l.a));
        }
        let by = format!("link \"{}\"", l.link);
        seen.claim(&l.a, &by).map_err(|e| format!("{ctx}.a: {e}"))?;
        seen.claim(&l.b, &by).map_err(|e| format!("{ctx}.b: {e}"))?;
        topo.links.push(LinkSpec {
            id: l.link.clone(),
            a: l.a.clone(),
            b: l.b.clone(),
            ab: merge_params(&d, &l.ab, &format!("{ctx}.ab"))?,
            ba: merge_params(&d, &l.ba, &format!("{ctx}.ba"))?,
        });
        let mut prefixes = HashSet::new();
        for (j, r) in l.rules.iter().enumerate() {
            let rctx = format!("{ctx}.rules[{j}]");
            let prefix = RulePrefix::parse(&r.dst).map_err(|e| format!("{rctx}.dst: {e}"))?;
            if !prefixes.insert(prefix.matcher()) {
                return Err(format!("{rctx}.dst: \"{}\" is given twice", r.dst));
            }
            topo.link_rules.push(LinkRuleSpec {
                link: l.link.clone(),
                prefix,
                ab: merge_params(&d, &r.ab, &format!("{rctx}.ab"))?,
                ba: merge_params(&d, &r.ba, &format!("{rctx}.ba"))?,
            });
        }
    }
    for (i, lan) in a.lans.iter().enumerate() {
        let ctx = format!("lans[{i}] (\"{}\")", lan.lan);
        seen.new_net(&lan.lan, &format!("{ctx}.lan"))?;
        let by = format!("lan \"{}\"", lan.lan);
        let mut members = Vec::new();
        let mut listed = HashSet::new();
        for (j, m) in lan.members.iter().enumerate() {
            let mctx = format!("{ctx}.members[{j}] (\"{}\")", m.port);
            if !listed.insert(m.port.as_str()) {
                return Err(format!("{mctx}: port listed twice"));
            }
            seen.claim(&m.port, &by)
                .map_err(|e| format!("{mctx}: {e}"))?;
            members.push(MemberSpec {
                port: m.port.clone(),
                to_lan: merge_params(&d, &m.to_lan, &format!("{mctx}.to_lan"))?,
                from_lan: merge_params(&d, &m.from_lan, &format!("{mctx}.from_lan"))?,
            });
        }
        let pairs = build_pairs(&ctx, lan, &d)?;
        topo.lans.push(LanSpec {
            id: lan.lan.clone(),
            members,
            pairs,
        });
    }
    Ok(ApplyCmd {
        taps: a.ports,
        topo,
        new_ports: seen.ports,
        new_hosts: seen.hosts,
    })
}

/// A LAN's pair channels: both ends members, distinct, each ordered pair at most once.
fn build_pairs(
    ctx: &str,
    lan: &super::protocol::LanReq,
    d: &LinkParams,
) -> Result<Vec<PairSpec>, String> {
    let index: HashMap<&str, usize> = lan
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.port.as_str(), i))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(lan.pairs.len());
    for (k, p) in lan.pairs.iter().enumerate() {
        let pctx = format!("{ctx}.pairs[{k}] (\"{}\" -> \"{}\")", p.from, p.to);
        let member = |port: &str, field: &str| {
            index.get(port).copied().ok_or_else(|| {
                format!("{pctx}.{field}: port \"{port}\" is not a member of this lan")
            })
        };
        let (from, to) = (member(&p.from, "from")?, member(&p.to, "to")?);
        if from == to {
            return Err(format!("{pctx}: from and to are the same port"));
        }
        if !seen.insert((from, to)) {
            return Err(format!("{pctx}: this ordered pair is listed twice"));
        }
        out.push(PairSpec {
            from,
            to,
            params: merge_params(d, &p.params, &format!("{pctx}.params"))?,
        });
    }
    Ok(out)
}

/// The (is TCP, port) a sink agent binds, if it is a sink.
pub fn sink_port(k: &AgentKindSpec) -> Option<(bool, u16)> {
    match k {
        AgentKindSpec::Sink { port } => Some((false, *port)),
        AgentKindSpec::TcpSink { port, .. } => Some((true, *port)),
        _ => None,
    }
}

/// [`build_apply`]'s topology alone (tests and tools that build a network directly).
pub fn build_topology(a: &ApplyReq) -> Result<TopologySpec, String> {
    build_apply(a.clone()).map(|c| c.topo)
}

fn build_router(
    i: usize,
    r: &super::protocol::RouterReq,
    seen: &mut Seen,
) -> Result<RouterSpec, String> {
    let ctx = format!("routers[{i}] (\"{}\")", r.router);
    seen.new_net(&r.router, &format!("{ctx}.router"))?;
    let mut interfaces = Vec::new();
    for (j, f) in r.interfaces.iter().enumerate() {
        let fctx = format!("{ctx}.interfaces[{j}]");
        seen.new_port(&f.port, &format!("{fctx}.port"))?;
        let mac = parse_mac(&f.mac).map_err(|e| format!("{fctx}.mac: {e}"))?;
        let (ip, prefix) = match &f.ip {
            Some(ip) => ipv4::parse_cidr(ip).map_err(|e| format!("{fctx}.ip: {e}"))?,
            None => ([0; 4], 0),
        };
        if ip != [0; 4] && prefix == 0 {
            return Err(format!("{fctx}.ip: the prefix length must be 1..=32"));
        }
        let ip6 = f
            .ip6
            .as_deref()
            .map(ipv6::parse_cidr)
            .transpose()
            .map_err(|e| format!("{fctx}.ip6: {e}"))?;
        interfaces.push((
            f.port.clone(),
            Interface {
                mac,
                ip,
                prefix,
                ip6,
            },
        ));
    }
    let (mut routes, mut routes6) = (Vec::new(), Vec::new());
    for (j, rt) in r.routes.iter().enumerate() {
        let field = |f: &str, e: String| format!("{ctx}.routes[{j}].{f}: {e}");
        if rt.dst.contains(':') {
            let (dst, prefix) = ipv6::parse_cidr(&rt.dst).map_err(|e| field("dst", e))?;
            let via = ipv6::parse_addr(&rt.via).map_err(|e| field("via", e))?;
            routes6.push(Route6 { dst, prefix, via });
        } else {
            let (dst, prefix) = ipv4::parse_cidr(&rt.dst).map_err(|e| field("dst", e))?;
            let via = ipv4::parse_addr(&rt.via).map_err(|e| field("via", e))?;
            routes.push(Route { dst, prefix, via });
        }
    }
    let ifs: Vec<Interface> = interfaces.iter().map(|(_, f)| f.clone()).collect();
    router::validate_dual(&ifs, &routes, &routes6).map_err(|e| format!("{ctx}.{e}"))?;
    Ok(RouterSpec {
        id: r.router.clone(),
        interfaces,
        routes,
        routes6,
    })
}

fn build_host(i: usize, h: &super::protocol::HostReq, seen: &mut Seen) -> Result<HostSpec, String> {
    let ctx = format!("hosts[{i}] (\"{}\")", h.host);
    nonempty(&h.host, &format!("{ctx}.host"))?;
    if !seen.hosts.insert(h.host.clone()) {
        return Err(format!(
            "{ctx}.host: id \"{}\" already exists in this request",
            h.host
        ));
    }
    seen.new_port(&h.port, &format!("{ctx}.port"))?;
    let mac = parse_mac(&h.mac).map_err(|e| format!("{ctx}.mac: {e}"))?;
    let v4 = match &h.ip {
        Some(ip) => {
            let (ip, prefix) = ipv4::parse_cidr(ip).map_err(|e| format!("{ctx}.ip: {e}"))?;
            let gateway = h
                .gateway
                .as_deref()
                .map(ipv4::parse_addr)
                .transpose()
                .map_err(|e| format!("{ctx}.gateway: {e}"))?;
            Some(Family {
                ip,
                prefix,
                gateway,
            })
        }
        None if h.gateway.is_some() => {
            return Err(format!("{ctx}.gateway: an IPv4 gateway needs an IPv4 ip"))
        }
        None => None,
    };
    let v6 = match &h.ip6 {
        Some(ip) => {
            let (ip, prefix) = ipv6::parse_cidr(ip).map_err(|e| format!("{ctx}.ip6: {e}"))?;
            let gateway = h
                .gateway6
                .as_deref()
                .map(ipv6::parse_addr)
                .transpose()
                .map_err(|e| format!("{ctx}.gateway6: {e}"))?;
            Some(Family {
                ip,
                prefix,
                gateway,
            })
        }
        None if h.gateway6.is_some() => {
            return Err(format!("{ctx}.gateway6: an IPv6 gateway needs an ip6"))
        }
        None => None,
    };
    let cfg = HostConfig { mac, v4, v6 };
    host::validate(&cfg).map_err(|e| format!("{ctx}.{e}"))?;
    Ok(HostSpec {
        id: h.host.clone(),
        port: h.port.clone(),
        cfg,
    })
}

/// Parse `"02:00:00:00:00:01"` (hex, `:`-separated).
pub fn parse_mac(s: &str) -> Result<Address, String> {
    let bad = || format!("expected 6 hex bytes separated by ':', got \"{s}\"");
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("bad hex byte \"{p}\" in \"{s}\""))?;
    }
    Ok(Address(m))
}
