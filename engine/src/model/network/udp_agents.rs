//! UDP agents in the network (see `model/sim/agent`): sources' send timers (kind
//! [`TimerKind::Agent`]), start/stop and stats. Datagrams reach sinks through `delivery`.
use super::timers::TimerKind;
use super::{tcp_agents, Agent, AgentKind, Network};
use crate::model::packet::Packet;
use crate::model::sim::agent::AgentStats;
use crate::time::Instant;

impl Network {
    /// A source's send time: send its packet and schedule the next one.
    pub(super) fn fire_agent(&mut self, ai: usize, at: Instant, now: Instant) {
        if !self.claim_agent_timer(ai, at, now) {
            return;
        }
        let Some(a) = self.agents.get_mut(ai) else {
            return;
        };
        let h = a.host;
        let AgentKind::Cbr(c) = &mut a.kind else {
            return;
        };
        let Some(dep) = c.depart(at) else {
            self.reschedule_agent(ai);
            return;
        };
        let (dst, sport, dport) = (c.spec.dst, c.sport, c.spec.dport);
        self.reschedule_agent(ai);
        let Some(sh) = self.hosts.get_mut(h) else {
            return;
        };
        let port = sh.port;
        let mut frames = std::mem::take(&mut self.frames);
        let fill = |p: &mut [u8]| dep.write(p);
        let buf = self.spare.pop().unwrap_or_default();
        sh.host
            .send_udp_with(dst, (sport, dport), dep.len, fill, buf, &mut frames);
        for d in frames.drain(..) {
            self.receive_packet(port, Packet::plain(d), at);
        }
        self.frames = frames;
    }

    fn reschedule_agent(&mut self, ai: usize) {
        self.refresh_quiet();
        let Some(a) = self.agents.get_mut(ai) else {
            return;
        };
        let AgentKind::Cbr(c) = &a.kind else { return };
        let at = c.poll_at();
        if let Some(t) = at.filter(|_| at != a.scheduled) {
            a.scheduled = at;
            self.timers.push_as(a.lazy, t, TimerKind::Agent, ai);
        }
    }

    /// Start or stop a traffic source at `now`. Starting a running source or stopping a
    /// stopped one is a no-op; a restarted source continues its sequence numbers.
    pub fn agent_action(&mut self, id: &str, start: bool, now: Instant) -> Result<(), String> {
        let Some(ai) = self.agents.index_of(id) else {
            return Err(format!("agent: unknown agent \"{id}\""));
        };
        let Some(a) = self.agents.get_mut(ai) else {
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
        self.agents.by_id(id).map(Self::stats_of)
    }

    /// Whether this replica runs agent `id` (always, unless partitioned).
    pub fn runs_agent(&self, id: &str) -> bool {
        self.agents
            .by_id(id)
            .is_some_and(|a| super::owns(&self.part, a.part))
    }

    pub(super) fn stats_of(a: &Agent) -> AgentStats {
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
}
