//! How soon an event at a simulated node can show outside the model, and which timers a
//! real-time driver may therefore run late.
//!
//! A simulated router or host sends what an event makes at the event's own time, into its
//! links; a frame reaches a plain port (a TAP or a tunnel: the only place the outside sees)
//! at the earliest after the sum of the propagation delays on its way. A node's *quiet
//! time* is the smallest such sum over every path to a plain port (a LAN counts as a plain
//! port: conservative). Where it is at least [`LAZY_MIN_FLIGHT_NS`], the node's timers
//! (its traffic sources', its TCP agents', and the deliveries into it) are lazy
//! ([`super::timers::TimerQueue::push_lazy`]): a real-time driver need not wake for them
//! before [`super::timers::LAZY_GRACE_NS`] after their deadline, and running one that late
//! changes nothing anyone can see, because each is computed at its own event time and what
//! it sends leaves the model later still. A large simulated region far from the emulated
//! nodes then costs a few wake-ups per millisecond instead of one per packet.
//!
//! The same recomputation (whenever the topology, a delay or the placement changed) keeps the
//! other lists the hot paths take from the topology: the pipelines plain ports feed, and the
//! cut pipelines this replica sends on.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::{Network, PortIdx, Sink, LAZY_MIN_FLIGHT_NS};

impl Network {
    /// Recompute every simulated node's quiet time, and from it which deliveries and
    /// agents' timers are lazy; list the pipelines plain ports feed and the cut ones this
    /// replica sends on.
    fn compute_quiet(&mut self) {
        self.quiet_stale = false;
        // Nodes: each simulated router and host, by the ports it sends from.
        let mut node_of: HashMap<PortIdx, usize> = HashMap::new();
        let mut n = 0;
        for (_, r) in self.routers.iter_indexed() {
            for &p in &r.ports {
                node_of.insert(p, n);
            }
            n += 1;
        }
        for (_, h) in self.hosts.iter_indexed() {
            node_of.insert(h.port, n);
            n += 1;
        }
        // Edges reversed (from the receiving node back to the sender), and each node's
        // nearest way out in one hop.
        let mut dist = vec![u64::MAX; n];
        let mut rev: Vec<Vec<(usize, u64)>> = vec![Vec::new(); n];
        for (pi, port) in self.ports.iter_indexed() {
            let Some(&u) = node_of.get(&pi) else {
                continue;
            };
            let fed = port
                .ingress
                .into_iter()
                .chain(port.rules.iter().map(|r| r.pipe));
            for pipe in fed {
                let Some(slot) = self.pipes.get(pipe) else {
                    continue;
                };
                let w = slot.pipe.min_flight_ns();
                match slot.sink {
                    Sink::Port(q) if node_of.contains_key(&q) => rev[node_of[&q]].push((u, w)),
                    _ => dist[u] = dist[u].min(w),
                }
            }
        }
        // Dijkstra from the ways out.
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = dist
            .iter()
            .enumerate()
            .filter(|(_, d)| **d < u64::MAX)
            .map(|(v, d)| Reverse((*d, v)))
            .collect();
        while let Some(Reverse((d, v))) = heap.pop() {
            if d > dist[v] {
                continue;
            }
            for &(u, w) in &rev[v] {
                let du = d.saturating_add(w);
                if du < dist[u] {
                    dist[u] = du;
                    heap.push(Reverse((du, u)));
                }
            }
        }
        let quiet = |p: PortIdx| node_of.get(&p).map_or(0, |&v| dist[v]);
        for s in self.pipes.iter_mut() {
            s.lazy_rx = matches!(s.sink, Sink::Port(q) if quiet(q) >= LAZY_MIN_FLIGHT_NS);
        }
        let hosts = &self.hosts;
        for a in self.agents.iter_mut() {
            let port = hosts.get(a.host).map(|h| h.port);
            a.lazy = port.is_some_and(|p| quiet(p) >= LAZY_MIN_FLIGHT_NS);
        }
        self.plain_fed = self
            .pipes
            .iter_indexed()
            .filter(|(_, s)| self.ports.get(s.from).is_some_and(|p| p.plain()))
            .map(|(i, _)| i)
            .collect();
        let me = self.part.as_ref().map(|p| p.me);
        self.cut_out = self
            .pipes
            .iter_indexed()
            .filter(|(_, s)| s.tx_part != s.rx_part && Some(s.tx_part) == me)
            .map(|(i, s)| (i, s.rx_part))
            .collect();
    }

    /// Recompute what this module derives if the topology, a delay or the placement
    /// changed since.
    pub(super) fn refresh_quiet(&mut self) {
        if self.quiet_stale {
            self.compute_quiet();
        }
    }
}
