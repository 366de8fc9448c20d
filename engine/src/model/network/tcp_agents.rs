//! TCP agents in the network (see `model/sim/tcp`): segment delivery to the agent bound to
//! (host, destination port), their timers (kind [`TimerKind::Tcp`]), start/stop and stats.
use std::collections::BTreeMap;

use super::timers::TimerKind;
use super::{AgentKind, Network};
use crate::model::packet::Packet;
use crate::model::sim::agent::AgentStats;
use crate::model::sim::host::PROTO_TCP;
use crate::model::sim::ip::Addr;
use crate::model::sim::tcp::{Segment, TcpSample, TxSeg};
use crate::time::Instant;

impl Network {
    /// A TCP sender's trace (`None` if `id` is not a TCP sender).
    pub fn agent_trace(&self, id: &str) -> Option<&[TcpSample]> {
        match &self.agents.by_id(id)?.kind {
            AgentKind::Tcp(t) => Some(t.trace()),
            _ => None,
        }
    }

    /// Every TCP sender's trace, by agent id (of a partitioned replica: the ones it runs).
    pub fn tcp_traces(&self) -> BTreeMap<&str, &[TcpSample]> {
        self.agents
            .iter()
            .filter(|a| super::owns(&self.part, a.part))
            .filter_map(|a| match &a.kind {
                AgentKind::Tcp(t) => Some((a.id.as_str(), t.trace())),
                _ => None,
            })
            .collect()
    }

    /// Take (and clear) a TCP sender's trace.
    pub fn take_agent_trace(&mut self, id: &str) -> Option<Vec<TcpSample>> {
        match &mut self.agents.by_id_mut(id)?.kind {
            AgentKind::Tcp(t) => Some(t.take_trace()),
            _ => None,
        }
    }

    /// A TCP segment for host `h`: to the sender whose source port or the sink whose port is
    /// the destination port (none: `dropped_other`).
    pub(super) fn tcp_receive(&mut self, h: usize, seg: Segment, at: Instant) {
        let found = self.bound.get(&(h, PROTO_TCP, seg.dport)).copied();
        let Some(ai) = found else {
            if let Some(sh) = self.hosts.get_mut(h) {
                sh.host.counters.dropped_other += 1;
            }
            return;
        };
        let mut out = Vec::new();
        if let Some(a) = self.agents.get_mut(ai) {
            match &mut a.kind {
                AgentKind::Tcp(t) => {
                    let mut segs = Vec::new();
                    t.receive(&seg, at, &mut segs);
                    out.extend(segs.into_iter().map(|s| (t.spec.dst, t.spec.dport, s)));
                }
                AgentKind::TcpSink(s) => s.receive(&seg, at, &mut out),
                _ => {}
            }
        }
        self.tcp_send(ai, out, at);
        self.reschedule_tcp(ai);
    }

    fn tcp_send(&mut self, ai: usize, segs: Vec<(Addr, u16, TxSeg)>, at: Instant) {
        if segs.is_empty() {
            return;
        }
        let Some(a) = self.agents.get(ai) else {
            return;
        };
        let sport = match &a.kind {
            AgentKind::Tcp(t) => t.sport,
            AgentKind::TcpSink(s) => s.port,
            _ => return,
        };
        let Some(sh) = self.hosts.get_mut(a.host) else {
            return;
        };
        let port = sh.port;
        let mut frames = Vec::new();
        for (dst, dport, s) in segs {
            frames.extend(sh.host.send_tcp(dst, sport, dport, &s));
        }
        for f in frames {
            self.receive_packet(port, Packet::plain(f), at);
        }
    }

    pub(super) fn fire_tcp(&mut self, ai: usize, at: Instant, now: Instant) {
        if !self.claim_agent_timer(ai, at, now) {
            return;
        }
        let Some(a) = self.agents.get_mut(ai) else {
            return;
        };
        let mut out = Vec::new();
        match &mut a.kind {
            AgentKind::Tcp(t) => {
                let mut segs = Vec::new();
                t.on_timer(at, &mut segs);
                out.extend(segs.into_iter().map(|s| (t.spec.dst, t.spec.dport, s)));
            }
            AgentKind::TcpSink(s) => s.on_timer(at, &mut out),
            _ => return,
        }
        self.tcp_send(ai, out, at);
        self.reschedule_tcp(ai);
    }

    fn reschedule_tcp(&mut self, ai: usize) {
        self.refresh_quiet();
        let Some(a) = self.agents.get_mut(ai) else {
            return;
        };
        let at = match &a.kind {
            AgentKind::Tcp(t) => t.poll_at(),
            AgentKind::TcpSink(s) => s.poll_at(),
            _ => return,
        };
        if at != a.scheduled {
            a.scheduled = at;
            if let Some(at) = at {
                self.timers.push_as(a.lazy, at, TimerKind::Tcp, ai);
            }
        }
    }

    pub(super) fn tcp_action(
        &mut self,
        ai: usize,
        start: bool,
        now: Instant,
    ) -> Result<(), String> {
        let Some(a) = self.agents.get_mut(ai) else {
            return Err("agent: unknown agent".into());
        };
        let mut out = Vec::new();
        match &mut a.kind {
            AgentKind::Tcp(t) => {
                if start {
                    let mut segs = Vec::new();
                    t.start(now, &mut segs);
                    out.extend(segs.into_iter().map(|s| (t.spec.dst, t.spec.dport, s)));
                } else {
                    t.stop();
                }
            }
            _ => {
                return Err(format!(
                    "agent: \"{}\" is a tcp_sink; only sources start and stop",
                    a.id
                ))
            }
        }
        self.tcp_send(ai, out, now);
        self.reschedule_tcp(ai);
        Ok(())
    }
}

/// Stats of a TCP agent (`kind` is `Tcp` or `TcpSink`).
pub(super) fn stats(kind: &AgentKind) -> AgentStats {
    match kind {
        AgentKind::Tcp(t) => AgentStats::Tcp {
            state: t.state(),
            cc: t.spec.cc,
            sent_pkts: t.sent_pkts,
            sent_bytes: t.sent_bytes,
            retransmits: t.retransmits,
            timeouts: t.timeouts,
            fast_retransmits: t.fast_retransmits,
            acked_bytes: t.acked_bytes,
            cwnd: t.cwnd(),
            ssthresh: t.ssthresh(),
            srtt_us: t.srtt_us(),
            min_rtt_us: t.min_rtt_us(),
            rto_us: t.rto_us(),
        },
        AgentKind::TcpSink(s) => AgentStats::TcpSink {
            port: s.port,
            pkts: s.pkts,
            bytes: s.bytes,
            dup_pkts: s.dup_pkts,
            ooo_pkts: s.ooo_pkts,
            acks: s.acks_sent,
        },
        _ => unreachable!("tcp_agents::stats of a non-TCP agent"),
    }
}
