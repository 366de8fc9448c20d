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
use crate::time::Instant;

/// The partition this replica runs and where every node is placed (absent: partition 0).
#[derive(Debug, Clone)]
pub struct Partition {
    pub me: u32,
    pub nodes: HashMap<String, u32>,
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

/// Frames in flight taken from the sending half of a cut pipeline, in arrival order.
pub type Flights = Vec<(Instant, Packet)>;

impl Network {
    /// Run only partition `part.me` from now on (set before anything is applied).
    pub fn set_partition(&mut self, part: Partition) {
        self.part = Some(part);
    }

    pub fn partition(&self) -> Option<&Partition> {
        self.part.as_ref()
    }

    /// Whether this replica reports node `id` (its router, host or their agents).
    pub(super) fn reports_node(&self, id: &str) -> bool {
        owns(&self.part, self.node_part(id))
    }

    pub(super) fn node_part(&self, id: &str) -> u32 {
        self.part
            .as_ref()
            .and_then(|p| p.nodes.get(id).copied())
            .unwrap_or(0)
    }

    /// The partition of the node behind a port (a port of no node: partition 0).
    pub(super) fn port_part(&self, port: PortIdx) -> u32 {
        let Some(p) = self.ports.get(port) else {
            return 0;
        };
        let node = match (p.sim, p.host) {
            (Some((r, _)), _) => self.routers.get(r).map(|r| r.id.as_str()),
            (None, Some(h)) => self.hosts.get(h).map(|h| h.id.as_str()),
            (None, None) => None,
        };
        node.map_or(0, |id| self.node_part(id))
    }

    /// The node (router or host id) behind a port.
    fn port_node(&self, port: PortIdx) -> Option<&str> {
        let p = self.ports.get(port)?;
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

    /// Take the frames in flight of every cut pipeline whose sending half runs here, each
    /// tagged with the partition that receives it; ordered by pipeline.
    pub fn take_cut_flights(&mut self) -> Vec<(u32, PipeIdx, Flights)> {
        let Some(me) = self.part.as_ref().map(|p| p.me) else {
            return Vec::new();
        };
        let cut: Vec<(PipeIdx, u32)> = self
            .cut_pipes()
            .filter(|(_, s)| s.tx_part == me)
            .map(|(i, s)| (i, s.rx_part))
            .collect();
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

    /// Add frames in flight to the receiving half of `pipe` (taken from its sender's replica).
    pub fn put_flights(&mut self, pipe: PipeIdx, flights: Flights) {
        if let Some(slot) = self.pipes.get_mut(pipe) {
            slot.pipe.put_in_flight(flights);
        }
        self.reschedule(pipe);
    }
}
