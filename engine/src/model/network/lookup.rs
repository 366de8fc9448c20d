//! Read-only questions the control layer asks before it changes the network (whether an id
//! is taken, a port attached, a sink port bound); the checks themselves live in
//! `control/check.rs` (validation of requests belongs to the control layer).

use super::{AgentKind, Network, PortIdx};
use crate::model::sim::host::{PROTO_TCP, PROTO_UDP};

impl Network {
    pub fn has_host(&self, id: &str) -> bool {
        self.hosts.contains_id(id)
    }

    /// Whether port `port` is attached to a link end or a LAN membership.
    pub fn port_attached(&self, port: PortIdx) -> bool {
        self.ports.get(port).is_some_and(|p| p.ingress.is_some())
    }

    /// Whether host `host` already has a sink on `port` (`tcp`: a `tcp_sink`, else a UDP
    /// `sink`). Every sink is in the delivery index unless an agent bound the same port
    /// first, so only that rare case scans the agents.
    pub fn host_has_sink(&self, host: &str, tcp: bool, port: u16) -> bool {
        let Some(hi) = self.hosts.index_of(host) else {
            return false;
        };
        let proto = if tcp { PROTO_TCP } else { PROTO_UDP };
        let is_sink = |k: &AgentKind| match k {
            AgentKind::Sink(s) => !tcp && s.port == port,
            AgentKind::TcpSink(s) => tcp && s.port == port,
            _ => false,
        };
        let Some(&ai) = self.bound.get(&(hi, proto, port)) else {
            return false;
        };
        if self.agents.get(ai).is_some_and(|a| is_sink(&a.kind)) {
            return true;
        }
        self.agents.iter().any(|a| a.host == hi && is_sink(&a.kind))
    }
}
