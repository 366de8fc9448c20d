//! Counters of links, LANs, simulated routers, hosts and agents, as the `stats` request
//! returns them (maps keyed by id, so the JSON is in a stable order).
use std::collections::BTreeMap;

use serde::Serialize;

use super::{Network, PipeIdx};
use crate::model::arena::Arena;
use crate::model::sim::agent::AgentStats;
use crate::model::sim::host::HostCounters;
use crate::model::sim::router::RouterCounters;
use crate::stats::{Counters, HistogramSummary};
use crate::time::Instant;

/// One direction: its counters, and the distribution of the queueing delay of its frames
/// (arrival to start of serialization), so a sender's bursts can be told from the engine's
/// own lateness (reported under `realtime`).
#[derive(Debug, Serialize, PartialEq)]
pub struct DirStats {
    #[serde(flatten)]
    pub counters: Counters,
    pub sojourn: HistogramSummary,
}

impl std::ops::Deref for DirStats {
    type Target = Counters;
    fn deref(&self) -> &Counters {
        &self.counters
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct LinkStats {
    pub ab: DirStats,
    pub ba: DirStats,
    pub up: bool,
    /// Per-destination rules' directions, by prefix (only on a link with rules).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, RuleStats>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct RuleStats {
    pub ab: DirStats,
    pub ba: DirStats,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MemberStats {
    pub to_lan: DirStats,
    pub from_lan: DirStats,
    /// This member's pair channels, by destination port (only on a LAN with pairs).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pairs: BTreeMap<String, DirStats>,
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

/// Every live value of `arena`, or only the one with id `target`: a targeted `stats` (the
/// simulation asks one per flow start and stop) looks its target up instead of scanning
/// every object of a large network.
fn selected<'a, T>(arena: &'a Arena<T>, target: Option<&str>) -> impl Iterator<Item = &'a T> {
    let (all, one) = match target {
        None => (Some(arena.iter()), None),
        Some(t) => (None, arena.by_id(t)),
    };
    all.into_iter().flatten().chain(one)
}

impl Network {
    /// Counters of a simulated router.
    pub fn router_counters(&self, id: &str) -> Option<RouterCounters> {
        self.routers.by_id(id).map(|r| r.router.counters)
    }

    /// Counters of a simulated host.
    pub fn host_counters(&self, id: &str) -> Option<HostCounters> {
        self.hosts.by_id(id).map(|h| h.host.counters)
    }

    fn counters(&self, pipe: PipeIdx, now: Instant) -> DirStats {
        match self.pipes.get(pipe) {
            Some(s) => DirStats {
                counters: s.pipe.counters_at(now),
                sojourn: s.pipe.sojourn_at(now).summary(),
            },
            None => DirStats {
                counters: Counters::default(),
                sojourn: Default::default(),
            },
        }
    }

    /// Lateness of timer events behind the `now` they ran at (real-time driver only).
    pub fn lateness_histogram(&self) -> Option<&crate::stats::Histogram> {
        self.lateness_hist.as_ref()
    }

    /// Counters of everything, or of one link, LAN, router, host or agent.
    pub fn stats(&self, target: Option<&str>, now: Instant) -> Result<StatsBody, String> {
        if let Some(t) = target {
            if !self.has_link(t)
                && !self.has_lan(t)
                && !self.has_router(t)
                && !self.hosts.contains_id(t)
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
        // A partitioned replica reports only the nodes and agents it runs.
        for h in selected(&self.hosts, target).filter(|h| self.reports_node(&h.id)) {
            body.hosts.insert(h.id.clone(), h.host.counters);
        }
        for a in selected(&self.agents, target).filter(|a| super::owns(&self.part, a.part)) {
            body.agents.insert(a.id.clone(), Self::stats_of(a));
        }
        for r in selected(&self.routers, target).filter(|r| self.reports_node(&r.id)) {
            body.routers.insert(r.id.clone(), r.router.counters);
        }
        for l in selected(&self.links, target).filter(|l| self.reports_link(l)) {
            body.links.insert(
                l.id.clone(),
                LinkStats {
                    ab: self.counters(l.ab, now),
                    ba: self.counters(l.ba, now),
                    up: l.up,
                    rules: l
                        .rules
                        .iter()
                        .map(|(dst, ab, ba)| {
                            let (ab, ba) = (self.counters(*ab, now), self.counters(*ba, now));
                            (dst.clone(), RuleStats { ab, ba })
                        })
                        .collect(),
                },
            );
        }
        for lan in selected(&self.lans, target) {
            let mut ms = BTreeMap::new();
            let port_of = |i: usize| {
                lan.members
                    .get(i)
                    .and_then(|m| self.port_id(m.port))
                    .unwrap_or("?")
                    .to_string()
            };
            for (i, m) in lan.members.iter().enumerate() {
                let pairs = lan
                    .pairs()
                    .filter(|&(from, _, _)| from == i)
                    .map(|(_, to, pipe)| (port_of(to), self.counters(pipe, now)))
                    .collect();
                ms.insert(
                    port_of(i),
                    MemberStats {
                        to_lan: self.counters(m.to_lan, now),
                        from_lan: self.counters(m.from_lan, now),
                        pairs,
                    },
                );
            }
            body.lans.insert(lan.id.clone(), ms);
        }
        Ok(body)
    }
}
