//! Partitions of a parallel simulation, seen from one replica of the network.
//!
//! Every worker thread of `driver/parallel` holds a whole replica of the network (built by
//! the same requests) and runs only what its partition owns: the timers of the nodes
//! (simulated routers and hosts) placed on it, of their agents, and of the pipeline halves
//! on its side. A pipeline's sending half belongs to the node whose port feeds it, its
//! receiving half to the node it delivers to; a LAN and its members share one partition.
//! Frames in flight on a link between two partitions (a *cut* link) are moved at each
//! barrier from the sender's replica to the receiver's ([`Network::take_cut_flights`],
//! [`Network::put_flights`]). Counters of a pipeline are split between the two replicas of a
//! cut link and add up; routers, hosts and agents are reported by their owner only.
use std::collections::HashMap;

use super::{Network, PipeIdx, PortIdx};
use crate::model::packet::Packet;
use crate::model::pipeline::Handover;
use crate::time::Instant;

/// The partition this replica runs and where every node is placed (absent: partition 0).
#[derive(Debug, Clone, Default)]
pub struct Partition {
    pub me: u32,
    pub nodes: HashMap<String, u32>,
    /// Plain ports (TAPs in emulation) by port id, placed by the real-time driver (absent:
    /// partition 0). Their TAP is read by that partition's thread.
    pub ports: HashMap<String, u32>,
    /// Real time: a pipeline delivering to a plain port runs wholly (both halves) on the
    /// partition of its sending half, which writes the frame straight to the TAP (a TAP
    /// write needs no state of the port's own partition).
    pub direct_ports: bool,
}

/// A plain port as the real-time allocator sees it: its id, and the LAN it belongs to (all
/// ports of a LAN share a partition, with its switch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainPort {
    pub id: String,
    pub lan: Option<String>,
}

/// Whether the replica with `part` runs what belongs to partition `owner`.
pub(super) fn owns(part: &Option<Partition>, owner: u32) -> bool {
    part.as_ref().is_none_or(|p| p.me == owner)
}

/// A link as the partitioner sees it: its two nodes and the lookahead it gives when cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphLink {
    pub id: String,
    pub a: String,
    pub b: String,
    pub min_flight_ns: u64,
}

/// What the partitioner needs: nodes (with a weight: 1 + their agents), links and the
/// groups of nodes that must stay together (LAN members).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<(String, u64)>,
    pub links: Vec<GraphLink>,
    pub groups: Vec<Vec<String>>,
}

/// The moving state of the pipelines a port feeds, on its way to the port's new partition.
#[derive(Debug, Default)]
pub struct PortState(Vec<(PipeIdx, Handover)>);

impl PortState {
    /// How many pipelines it carries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Frames in flight taken from the sending half of a cut pipeline, in arrival order.
pub type Flights = Vec<(Instant, Packet)>;

impl Network {
    /// Run only partition `part.me` from now on (set before anything is applied).
    pub fn set_partition(&mut self, part: Partition) {
        self.part = Some(part);
        self.quiet_stale = true;
    }

    pub fn partition(&self) -> Option<&Partition> {
        self.part.as_ref()
    }

    /// Whether this replica reports node `id` (its router, host or their agents).
    pub(super) fn reports_node(&self, id: &str) -> bool {
        owns(&self.part, self.node_part(id))
    }

    /// Whether a partitioned replica reports link `l`: it runs a half of it, or counted
    /// frames on it before a half moved away. The others' counters of it are all zero, and
    /// leaving them out spares the merge (at 50 000 links, most of a sample's cost).
    pub(super) fn reports_link(&self, l: &super::Link) -> bool {
        let Some(part) = &self.part else {
            return true;
        };
        let pipes = [l.ab, l.ba]
            .into_iter()
            .chain(l.rules.iter().flat_map(|r| [r.1, r.2]));
        pipes.filter_map(|i| self.pipes.get(i)).any(|s| {
            let c = s.pipe.counters();
            s.tx_part == part.me || s.rx_part == part.me || c.in_pkts > 0 || c.out_pkts > 0
        })
    }

    pub(super) fn node_part(&self, id: &str) -> u32 {
        self.part
            .as_ref()
            .and_then(|p| p.nodes.get(id).copied())
            .unwrap_or(0)
    }

    /// The partition of the node behind a port (a plain port: its own placement, default 0).
    pub(super) fn port_part(&self, port: PortIdx) -> u32 {
        let Some(p) = self.ports.get(port) else {
            return 0;
        };
        let node = match (p.sim, p.host) {
            _ if p.patch.is_some() => self.port_node(port),
            (Some((r, _)), _) => self.routers.get(r).map(|r| r.id.as_str()),
            (None, Some(h)) => self.hosts.get(h).map(|h| h.id.as_str()),
            (None, None) => {
                return self
                    .part
                    .as_ref()
                    .and_then(|x| x.ports.get(&p.id).copied())
                    .unwrap_or(0)
            }
        };
        node.map_or(0, |id| self.node_part(id))
    }

    /// Partitions of the sending and receiving halves of a pipeline fed by `from`.
    pub(super) fn parts_of(&self, from: PortIdx, sink: super::Sink) -> (u32, u32) {
        let tx = self.port_part(from);
        let rx = match sink {
            super::Sink::Port(p) if self.delivers_direct(p) => tx,
            super::Sink::Port(p) => self.port_part(p),
            // A LAN's switch and channels run with its members (all on one partition).
            super::Sink::Lan { .. } | super::Sink::Pair { .. } => tx,
        };
        (tx, rx)
    }

    /// Whether frames for plain port `p` are written by whoever carries them.
    fn delivers_direct(&self, p: PortIdx) -> bool {
        self.part.as_ref().is_some_and(|x| x.direct_ports)
            && self.ports.get(p).is_some_and(|p| p.plain())
    }

    /// Whether this replica reads port `p` (its TAP) and runs what its frames enter.
    pub fn owns_port(&self, p: PortIdx) -> bool {
        owns(&self.part, self.port_part(p))
    }

    /// Run partition `part.me` with this placement from now on: every pipeline half and
    /// agent takes the partition of its node or port. Meant for objects without frames in
    /// flight (the real-time driver calls it as an `apply` finishes, before the new TAPs are
    /// read); an object that moves keeps its counters in the replica it leaves (the merged
    /// statistics add them up).
    pub fn repartition(&mut self, part: Partition) {
        self.part = Some(part);
        self.quiet_stale = true;
        let pipes: Vec<(PipeIdx, u32, u32)> = self
            .pipes
            .iter_indexed()
            .map(|(i, s)| {
                let (t, r) = self.parts_of(s.from, s.sink);
                (i, t, r)
            })
            .collect();
        for (i, t, r) in pipes {
            if let Some(s) = self.pipes.get_mut(i) {
                s.tx_part = t;
                s.rx_part = r;
            }
        }
        let agents: Vec<(usize, u32)> = self
            .agents
            .iter_indexed()
            .map(|(i, a)| {
                let p = self.hosts.get(a.host).map_or(0, |h| self.node_part(&h.id));
                (i, p)
            })
            .collect();
        for (i, p) in agents {
            if let Some(a) = self.agents.get_mut(i) {
                a.part = p;
            }
        }
    }

    /// Simulated routers and hosts.
    pub fn node_count(&self) -> usize {
        self.routers.iter().count() + self.hosts.iter().count()
    }

    /// Plain ports, in creation order, with their LAN.
    pub fn plain_ports(&self) -> Vec<PlainPort> {
        let mut lan_of: HashMap<PortIdx, &str> = HashMap::new();
        for lan in self.lans.iter() {
            for m in &lan.members {
                lan_of.insert(m.port, lan.id.as_str());
            }
        }
        self.ports
            .iter_indexed()
            .filter(|(_, p)| p.plain())
            .map(|(i, p)| PlainPort {
                id: p.id.clone(),
                lan: lan_of.get(&i).map(|s| s.to_string()),
            })
            .collect()
    }

    /// Cut pipelines whose sending half runs here (their frames in flight go to another
    /// partition), ordered by index.
    pub fn cut_from_here(&self) -> Vec<PipeIdx> {
        let me = self.part.as_ref().map_or(0, |p| p.me);
        self.cut_pipes()
            .filter(|(_, s)| s.tx_part == me)
            .map(|(i, _)| i)
            .collect()
    }

    /// Take the frames in flight of `pipes` (from [`Network::cut_from_here`]), each tagged
    /// with the partition that receives it, into `out`.
    pub fn take_flights(&mut self, pipes: &[PipeIdx], out: &mut Vec<(u32, PipeIdx, Flights)>) {
        for &i in pipes {
            let Some(slot) = self.pipes.get_mut(i) else {
                continue;
            };
            if slot.tx_part == slot.rx_part || slot.pipe.rx_at().is_none() {
                continue;
            }
            let f = slot.pipe.take_in_flight();
            slot.scheduled_rx = None;
            out.push((slot.rx_part, i, f));
        }
    }

    /// The node (router or host id) behind a port.
    fn port_node(&self, port: PortIdx) -> Option<&str> {
        let p = self.ports.get(port)?;
        if let Some((x, _)) = p.patch {
            return self.patches.get(x).map(|x| x.id.as_str());
        }
        match (p.sim, p.host) {
            (Some((r, _)), _) => self.routers.get(r).map(|r| r.id.as_str()),
            (None, Some(h)) => self.hosts.get(h).map(|h| h.id.as_str()),
            (None, None) => None,
        }
    }

    /// The topology as the partitioner sees it.
    pub fn graph(&self) -> Graph {
        let mut g = Graph::default();
        let mut weight: HashMap<&str, u64> = HashMap::new();
        for r in self.routers.iter() {
            weight.insert(&r.id, 1);
        }
        for h in self.hosts.iter() {
            weight.insert(&h.id, 1);
        }
        // a patch is a node of the LANs it joins: they stay on one partition with it
        for x in self.patches.iter() {
            weight.insert(&x.id, 1);
        }
        for a in self.agents.iter() {
            if let Some(h) = self.hosts.get(a.host) {
                *weight.entry(&h.id).or_insert(1) += 1;
            }
        }
        let mut nodes: Vec<(String, u64)> = weight
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        nodes.sort();
        g.nodes = nodes;
        for l in self.links.iter() {
            let (Some(a), Some(b)) = (self.port_node(l.a), self.port_node(l.b)) else {
                continue;
            };
            let flight = |p: PipeIdx| self.pipes.get(p).map_or(0, |s| s.pipe.min_flight_ns());
            g.links.push(GraphLink {
                id: l.id.clone(),
                a: a.to_string(),
                b: b.to_string(),
                min_flight_ns: flight(l.ab).min(flight(l.ba)),
            });
        }
        for lan in self.lans.iter() {
            let members: Vec<String> = lan
                .members
                .iter()
                .filter_map(|m| self.port_node(m.port).map(str::to_string))
                .collect();
            g.groups.push(members);
        }
        g
    }

    /// Pipelines whose halves are on different partitions.
    fn cut_pipes(&self) -> impl Iterator<Item = (PipeIdx, &super::PipeSlot)> + '_ {
        self.pipes
            .iter_indexed()
            .filter(|(_, s)| s.tx_part != s.rx_part)
    }

    /// The lookahead of the current topology: the smallest time a frame spends in flight on
    /// a cut pipeline (None: nothing is cut).
    pub fn lookahead_ns(&self) -> Option<u64> {
        self.cut_pipes().map(|(_, s)| s.pipe.min_flight_ns()).min()
    }

    /// The smallest time a frame spends in flight on a cut pipeline whose partitions
    /// (sending half, receiving half) `pick` accepts (None: no such pipeline).
    pub fn lookahead_where(&self, pick: impl Fn(u32, u32) -> bool) -> Option<u64> {
        self.cut_pipes()
            .filter(|(_, s)| pick(s.tx_part, s.rx_part))
            .map(|(_, s)| s.pipe.min_flight_ns())
            .min()
    }

    /// Take the frames in flight of every cut pipeline whose sending half runs here, each
    /// tagged with the partition that receives it; ordered by pipeline.
    pub fn take_cut_flights(&mut self) -> Vec<(u32, PipeIdx, Flights)> {
        if self.part.is_none() {
            return Vec::new();
        }
        // (listed when the topology or placement last changed: a scan of every pipeline per
        // synchronisation window cost more than the window at 20 000 links)
        self.refresh_quiet();
        let cut = self.cut_out.clone();
        let mut out = Vec::new();
        for (i, to) in cut {
            let Some(slot) = self.pipes.get_mut(i) else {
                continue;
            };
            if slot.pipe.rx_at().is_none() {
                continue;
            }
            let f = slot.pipe.take_in_flight();
            slot.scheduled_rx = None;
            out.push((to, i, f));
        }
        out
    }

    /// Frames that entered each plain port this replica reads, since it was created (the
    /// offers to the pipelines it feeds whose sending half runs here).
    pub fn port_frames(&self) -> Vec<(String, u64)> {
        let me = self.part.as_ref().map_or(0, |p| p.me);
        let mut by_port: HashMap<PortIdx, u64> = HashMap::new();
        let mut count = |s: &super::PipeSlot| {
            if s.tx_part == me {
                *by_port.entry(s.from).or_insert(0) += s.pipe.counters().in_pkts;
            }
        };
        // (the few pipelines plain ports feed, unless the topology changed since they were
        // listed: then all)
        if self.quiet_stale {
            self.pipes.iter().for_each(&mut count);
        } else {
            self.plain_fed
                .iter()
                .filter_map(|&i| self.pipes.get(i))
                .for_each(&mut count);
        }
        self.ports
            .iter_indexed()
            .filter(|(i, p)| p.plain() && self.owns_port(*i))
            .map(|(i, p)| (p.id.clone(), by_port.get(&i).copied().unwrap_or(0)))
            .collect()
    }

    /// Move plain port `port` away from this replica's partition: take the placement
    /// `part` (where the port is on another partition) and the moving state of every
    /// pipeline it feeds whose sending half ran here, the receiving half with it where that
    /// moves too (a link delivering to another plain port runs wholly with its sender). The
    /// caller has stopped reading the port's TAP; [`Network::adopt_port`] on the new owner
    /// takes the state over. Real time only: a virtual-time run never moves a port.
    pub fn hand_over_port(&mut self, port: PortIdx, part: Partition, now: Instant) -> PortState {
        let me = self.part.as_ref().map_or(0, |p| p.me);
        let before: Vec<(PipeIdx, u32, u32)> = self
            .pipes
            .iter_indexed()
            .filter(|(_, s)| s.from == port)
            .map(|(i, s)| (i, s.tx_part, s.rx_part))
            .collect();
        self.repartition(part);
        let mut out = Vec::new();
        for (i, tx, rx) in before {
            let Some(slot) = self.pipes.get_mut(i) else {
                continue;
            };
            if tx != me || slot.tx_part == me {
                continue;
            }
            let with_rx = rx == me && slot.rx_part != me;
            out.push((i, slot.pipe.hand_over(with_rx, now)));
            // Timers queued here for it are stale from now on.
            slot.scheduled_tx = None;
            if with_rx {
                slot.scheduled_rx = None;
            }
        }
        PortState(out)
    }

    /// Take placement `part` and the moving state of a port's pipelines handed over by its
    /// previous partition ([`Network::hand_over_port`]), and schedule them here.
    pub fn adopt_port(&mut self, state: PortState, part: Partition) {
        self.repartition(part);
        for (i, h) in state.0 {
            if let Some(slot) = self.pipes.get_mut(i) {
                slot.pipe.adopt(h);
                slot.scheduled_tx = None;
                slot.scheduled_rx = None;
            }
            self.reschedule(i);
        }
    }

    /// Add frames in flight to the receiving half of `pipe` (taken from its sender's replica).
    pub fn put_flights(&mut self, pipe: PipeIdx, flights: Flights) {
        if let Some(slot) = self.pipes.get_mut(pipe) {
            slot.pipe.put_in_flight(flights);
        }
        self.reschedule(pipe);
    }
}
