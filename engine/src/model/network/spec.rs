//! What [`super::Network::apply`] takes: topology additions, already validated by the
//! control layer for value ranges (ids and references are checked by `control/check.rs`).
use crate::model::params::LinkParams;
use crate::model::sim::agent::CbrSpec;
use crate::model::sim::host::HostConfig;
use crate::model::sim::router::{Interface, Route};
use crate::model::sim::tcp::sender::TcpSpec;

/// A point-to-point link between two ports.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    pub id: String,
    pub a: String,
    pub b: String,
    pub ab: LinkParams,
    pub ba: LinkParams,
}

/// A per-destination rule of link `link`: IPv4 frames to `prefix/len` cross their own
/// pipelines (`ab`, `ba`) instead of the link's.
#[derive(Debug, Clone)]
pub struct LinkRuleSpec {
    pub link: String,
    pub prefix: [u8; 4],
    pub len: u8,
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
    /// Per-pair channels, by member index (`from` != `to`, each ordered pair at most once).
    pub pairs: Vec<PairSpec>,
}

/// The channel of one ordered pair of LAN members (indices into `LanSpec::members`).
#[derive(Debug, Clone)]
pub struct PairSpec {
    pub from: usize,
    pub to: usize,
    pub params: LinkParams,
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
    Sink {
        port: u16,
    },
    Tcp(TcpSpec),
    TcpSink {
        port: u16,
        delayed_ack: bool,
        sack: bool,
    },
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
    /// Those of `ports` that are tunnels to another engine (`wire/stamp`).
    pub tunnels: Vec<String>,
    pub links: Vec<LinkSpec>,
    /// Per-destination rules of links in `links`.
    pub link_rules: Vec<LinkRuleSpec>,
    pub lans: Vec<LanSpec>,
    pub routers: Vec<RouterSpec>,
    pub hosts: Vec<HostSpec>,
    pub agents: Vec<AgentSpec>,
}
