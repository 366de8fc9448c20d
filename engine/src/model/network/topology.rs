//! Adding and removing topology: ports, links, LANs, simulated routers, hosts and agents.
use std::collections::HashSet;

use super::{
    Agent, AgentKind, AgentKindSpec, Link, LinkRuleSpec, Network, Patch, PipeIdx, PipeSlot, Port,
    PortIdx, PortRule, SimHost, SimRouter, Sink, TopologySpec,
};
use crate::model::lan::{Lan, Member};
use crate::model::params::LinkParams;
use crate::model::pipeline::Pipeline;
use crate::model::sim::agent::{Cbr, UdpSink};
use crate::model::sim::host::{Host, PROTO_TCP, PROTO_UDP};
use crate::model::sim::router::Router;
use crate::model::sim::tcp::sender::TcpSender;
use crate::model::sim::tcp::sink::TcpSink;
use crate::rng::stream_seed;
use crate::time::Instant;

/// Source ports of agents are deterministic: 49152 + agent index (mod the dynamic range).
fn agent_sport(ai: usize) -> u16 {
    49152 + (ai % 16384) as u16
}

impl Network {
    /// A pipeline fed by port `from` (its sending half's partition) delivering to `sink`.
    fn new_pipe(
        &mut self,
        params: LinkParams,
        name: &str,
        (from, sink): (PortIdx, Sink),
        now: Instant,
    ) -> PipeIdx {
        // RNG streams are named after the objects so they do not depend on creation order.
        let seed = stream_seed(self.seed, name);
        let (tx_part, rx_part) = self.parts_of(from, sink);
        let mut pipe = Pipeline::new(params, seed, now);
        pipe.set_stamped(
            matches!(sink, Sink::Port(p) if self.ports.get(p).is_some_and(|p| p.tunnel)),
        );
        self.pipes.push(PipeSlot {
            pipe,
            sink,
            capture: false,
            scheduled_tx: None,
            scheduled_rx: None,
            tx_part,
            rx_part,
            from,
            lazy_rx: false,
        })
    }

    fn new_port(
        &mut self,
        id: String,
        sim: Option<(usize, usize)>,
        host: Option<usize>,
    ) -> PortIdx {
        self.ports.insert(
            id.clone(),
            Port {
                id,
                ingress: None,
                sim,
                host,
                patch: None,
                unattached_drops: 0,
                rules: Vec::new(),
                tunnel: false,
                clock_ahead_ns: 0,
            },
        )
    }

    /// Add a checked topology (the control layer checks it first, `control/check.rs`;
    /// unchecked input is still memory-safe but may leave a port attached twice).
    pub fn apply(&mut self, spec: TopologySpec, now: Instant) {
        self.quiet_stale = true;
        let tunnels: HashSet<String> = spec.tunnels.into_iter().collect();
        for p in spec.ports {
            let tunnel = tunnels.contains(&p);
            let i = self.new_port(p, None, None);
            if let Some(port) = self.ports.get_mut(i) {
                port.tunnel = tunnel;
            }
        }
        for r in spec.routers {
            let ri = self.routers.next_index();
            let mut ports = Vec::new();
            let mut ifs = Vec::new();
            for (j, (p, f)) in r.interfaces.into_iter().enumerate() {
                ports.push(self.new_port(p, Some((ri, j)), None));
                ifs.push(f);
            }
            let router = Router::new_dual(ifs, &r.routes, &r.routes6);
            self.routers.insert(
                r.id.clone(),
                SimRouter {
                    id: r.id,
                    ports,
                    router,
                },
            );
        }
        for x in spec.patches {
            let pi = self.patches.next_index();
            let [a, b] = x.ports.map(|p| self.new_port(p, None, None));
            for (p, other) in [(a, b), (b, a)] {
                if let Some(port) = self.ports.get_mut(p) {
                    port.patch = Some((pi, other));
                }
            }
            self.patches.insert(x.id.clone(), Patch { id: x.id });
        }
        for h in spec.hosts {
            let hi = self.hosts.next_index();
            let port = self.new_port(h.port, None, Some(hi));
            self.hosts.insert(
                h.id.clone(),
                SimHost {
                    id: h.id,
                    port,
                    host: Host::new(h.cfg),
                },
            );
        }
        for a in spec.agents {
            let Some(hi) = self.hosts.index_of(&a.host) else {
                continue;
            };
            let ai = self.agents.next_index();
            let part = self.node_part(&a.host);
            let kind = match a.kind {
                AgentKindSpec::Cbr(c) => AgentKind::Cbr(Cbr::new(
                    c,
                    agent_sport(ai),
                    stream_seed(self.seed, &format!("agent:{}", a.id)),
                )),
                AgentKindSpec::Sink { port } => AgentKind::Sink(UdpSink::new(port)),
                AgentKindSpec::Tcp(t) => {
                    AgentKind::Tcp(Box::new(TcpSender::new(t, agent_sport(ai))))
                }
                AgentKindSpec::TcpSink {
                    port,
                    acks,
                    sack,
                    rmem,
                } => {
                    let mut k = TcpSink::new(port, acks, sack);
                    k.rmem = rmem;
                    AgentKind::TcpSink(k)
                }
            };
            let local = match &kind {
                AgentKind::Sink(s) => Some((PROTO_UDP, s.port)),
                AgentKind::Tcp(t) => Some((PROTO_TCP, t.sport)),
                AgentKind::TcpSink(s) => Some((PROTO_TCP, s.port)),
                AgentKind::Cbr(_) => None,
            };
            if let Some((proto, port)) = local {
                self.bound.entry((hi, proto, port)).or_insert(ai);
            }
            self.agents.insert(
                a.id.clone(),
                Agent {
                    id: a.id,
                    host: hi,
                    kind,
                    scheduled: None,
                    part,
                    lazy: false,
                },
            );
        }
        for l in spec.links {
            let (Some(a), Some(b)) = (self.port_index(&l.a), self.port_index(&l.b)) else {
                continue;
            };
            let ab = self.new_pipe(l.ab, &format!("link:{}:ab", l.id), (a, Sink::Port(b)), now);
            let ba = self.new_pipe(l.ba, &format!("link:{}:ba", l.id), (b, Sink::Port(a)), now);
            self.set_ingress(a, Some(ab));
            self.set_ingress(b, Some(ba));
            self.links.insert(
                l.id.clone(),
                Link {
                    id: l.id,
                    a,
                    b,
                    ab,
                    ba,
                    up: true,
                    rules: Vec::new(),
                },
            );
        }
        for r in spec.link_rules {
            self.add_link_rule(r, now);
        }
        for lan in spec.lans {
            let li = self.lans.next_index();
            let mut members = Vec::new();
            for (mi, m) in lan.members.into_iter().enumerate() {
                let Some(port) = self.port_index(&m.port) else {
                    continue;
                };
                let to_lan = self.new_pipe(
                    m.to_lan,
                    &format!("lan:{}:{}:to_lan", lan.id, m.port),
                    (
                        port,
                        Sink::Lan {
                            lan: li,
                            member: mi,
                        },
                    ),
                    now,
                );
                let from_lan = self.new_pipe(
                    m.from_lan,
                    &format!("lan:{}:{}:from_lan", lan.id, m.port),
                    (port, Sink::Port(port)),
                    now,
                );
                self.set_ingress(port, Some(to_lan));
                members.push(Member {
                    port,
                    to_lan,
                    from_lan,
                    up: true,
                });
            }
            let n = members.len();
            let mut l = Lan::new(lan.id.clone(), members);
            for pr in lan.pairs {
                let (Some(a), Some(b)) = (l.members.get(pr.from), l.members.get(pr.to)) else {
                    continue;
                };
                if pr.from == pr.to || pr.from >= n || pr.to >= n {
                    continue;
                }
                let name = format!(
                    "lan:{}:{}>{}:pair",
                    lan.id,
                    self.port_id(a.port).unwrap_or("?"),
                    self.port_id(b.port).unwrap_or("?")
                );
                let sink = Sink::Pair { lan: li, to: pr.to };
                let pipe = self.new_pipe(pr.params, &name, (a.port, sink), now);
                l.set_pair(pr.from, pr.to, pipe);
            }
            self.lans.insert(lan.id, l);
        }
    }

    /// A per-destination rule on an existing link: two pipelines, and each end's port
    /// sends frames to the prefix into its direction's one (longest prefix first).
    fn add_link_rule(&mut self, r: LinkRuleSpec, now: Instant) {
        let Some((a, b)) = self.links.by_id(&r.link).map(|l| (l.a, l.b)) else {
            return;
        };
        let label = r.prefix.label();
        let ab = self.new_pipe(
            r.ab,
            &format!("link:{}:{label}:ab", r.link),
            (a, Sink::Port(b)),
            now,
        );
        let ba = self.new_pipe(
            r.ba,
            &format!("link:{}:{label}:ba", r.link),
            (b, Sink::Port(a)),
            now,
        );
        let (ethertype, net, mask) = r.prefix.matcher();
        for (port, pipe) in [(a, ab), (b, ba)] {
            if let Some(p) = self.ports.get_mut(port) {
                p.rules.push(PortRule {
                    ethertype,
                    net,
                    mask,
                    pipe,
                });
                p.rules
                    .sort_by_key(|x| std::cmp::Reverse(x.mask.count_ones()));
            }
        }
        if let Some(l) = self.links.by_id_mut(&r.link) {
            l.rules.push((label, ab, ba));
        }
    }

    fn set_ingress(&mut self, port: PortIdx, pipe: Option<PipeIdx>) {
        if let Some(p) = self.ports.get_mut(port) {
            p.ingress = pipe;
        }
    }

    fn attached(&self, port: PortIdx) -> bool {
        self.ports.get(port).is_some_and(|p| p.ingress.is_some())
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
        self.quiet_stale = true;
        let mut freed = HashSet::new();
        for l in links {
            let link = self
                .links
                .by_id(l)
                .ok_or_else(|| format!("links: unknown link \"{l}\""))?;
            freed.insert(link.a);
            freed.insert(link.b);
        }
        for l in lans {
            let lan = self
                .lans
                .by_id(l)
                .ok_or_else(|| format!("lans: unknown lan \"{l}\""))?;
            freed.extend(lan.members.iter().map(|m| m.port));
        }
        let mut router_idx = Vec::new();
        for r in routers {
            let Some(ri) = self.routers.index_of(r) else {
                return Err(format!("routers: unknown router \"{r}\""));
            };
            if router_idx.contains(&ri) {
                return Err(format!("routers: router \"{r}\" listed twice"));
            }
            let sr = self.routers.get(ri).ok_or("routers: router vanished")?;
            for &i in &sr.ports {
                if self.attached(i) && !freed.contains(&i) {
                    let name = self.port_id(i).unwrap_or("?");
                    return Err(format!("routers: port \"{name}\" of router \"{r}\" is still attached to a link or lan; remove that too"));
                }
            }
            router_idx.push(ri);
        }
        let mut port_idx = Vec::new();
        for p in ports {
            let Some(i) = self.ports.index_of(p) else {
                return Err(format!("ports: unknown port \"{p}\""));
            };
            let port = self.ports.get(i);
            if port.is_some_and(|x| x.sim.is_some()) {
                return Err(format!(
                    "ports: port \"{p}\" belongs to a simulated router; remove the router"
                ));
            }
            if port.is_some_and(|x| x.patch.is_some()) {
                return Err(format!(
                    "ports: port \"{p}\" belongs to a patch (patches cannot be removed yet)"
                ));
            }
            if port.is_some_and(|x| x.host.is_some()) {
                return Err(format!(
                    "ports: port \"{p}\" belongs to a simulated host (hosts cannot be removed yet)"
                ));
            }
            if self.attached(i) && !freed.contains(&i) {
                return Err(format!(
                    "ports: port \"{p}\" is still attached to a link or lan; remove that too"
                ));
            }
            port_idx.push(i);
        }
        for l in links {
            if let Some(link) = self.links.remove_id(l) {
                self.pipes.remove(link.ab);
                self.pipes.remove(link.ba);
                for &(_, ab, ba) in &link.rules {
                    self.pipes.remove(ab);
                    self.pipes.remove(ba);
                }
                for end in [link.a, link.b] {
                    if let Some(p) = self.ports.get_mut(end) {
                        p.rules.clear();
                    }
                }
                self.set_ingress(link.a, None);
                self.set_ingress(link.b, None);
            }
        }
        for l in lans {
            if let Some(lan) = self.lans.remove_id(l) {
                for (_, _, pipe) in lan.pairs() {
                    self.pipes.remove(pipe);
                }
                for m in lan.members {
                    self.pipes.remove(m.to_lan);
                    self.pipes.remove(m.from_lan);
                    self.set_ingress(m.port, None);
                }
            }
        }
        for &i in &port_idx {
            self.ports.remove(i);
        }
        for ri in router_idx {
            if let Some(sr) = self.routers.remove(ri) {
                for i in sr.ports {
                    self.ports.remove(i);
                }
            }
        }
        Ok(port_idx)
    }
}
