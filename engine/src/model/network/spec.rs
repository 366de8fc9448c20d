//! What [`super::Network::apply`] takes: topology additions, already validated by the
//! control layer for value ranges (ids and references are checked by `control/check.rs`).
use crate::model::params::LinkParams;
use crate::model::sim::agent::CbrSpec;
use crate::model::sim::host::HostConfig;
use crate::model::sim::router::{Interface, Route, Route6};
use crate::model::sim::tcp::sender::TcpSpec;
use crate::model::sim::tcp::sink::{Acks, Rmem};
use crate::wire::{ipv4, ipv6};

/// A point-to-point link between two ports.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    pub id: String,
    pub a: String,
    pub b: String,
    pub ab: LinkParams,
    pub ba: LinkParams,
}

/// A per-destination rule of link `link`: IPv4 or IPv6 frames to `prefix` cross their own
/// pipelines (`ab`, `ba`) instead of the link's.
#[derive(Debug, Clone)]
pub struct LinkRuleSpec {
    pub link: String,
    pub prefix: RulePrefix,
    pub ab: LinkParams,
    pub ba: LinkParams,
}

/// A rule's destination prefix, of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RulePrefix {
    V4(ipv4::Addr, u8),
    V6(ipv6::Addr, u8),
}

impl RulePrefix {
    /// `"a.b.c.d/len"` or `"addr:.../len"`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.contains(':') {
            ipv6::parse_cidr(s).map(|(a, l)| RulePrefix::V6(a, l))
        } else {
            ipv4::parse_cidr(s).map(|(a, l)| RulePrefix::V4(a, l))
        }
    }
    /// Its usual text form (the network address, host bits cleared).
    pub fn label(&self) -> String {
        match *self {
            RulePrefix::V4(a, l) => {
                let [p0, p1, p2, p3] = (u32::from_be_bytes(a) & ipv4::mask(l)).to_be_bytes();
                format!("{p0}.{p1}.{p2}.{p3}/{l}")
            }
            RulePrefix::V6(a, l) => {
                let net = (u128::from_be_bytes(a) & ipv6::mask(l)).to_be_bytes();
                format!("{}/{l}", ipv6::display(net))
            }
        }
    }
    /// The EtherType of the frames it matches, and its network and mask as 128-bit numbers
    /// (an IPv4 one in the low 32 bits).
    pub fn matcher(&self) -> (u16, u128, u128) {
        match *self {
            RulePrefix::V4(a, l) => {
                let m = u128::from(ipv4::mask(l));
                (0x0800, u128::from(u32::from_be_bytes(a)) & m, m)
            }
            RulePrefix::V6(a, l) => {
                let m = ipv6::mask(l);
                (ipv6::ETHERTYPE, u128::from_be_bytes(a) & m, m)
            }
        }
    }
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
    pub routes6: Vec<Route6>,
}

/// A patch: it creates the two simulated ports `ports`, joined back to back.
#[derive(Debug, Clone)]
pub struct PatchSpec {
    pub id: String,
    pub ports: [String; 2],
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
        acks: Acks,
        sack: bool,
        rmem: Rmem,
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
    pub patches: Vec<PatchSpec>,
    pub hosts: Vec<HostSpec>,
    pub agents: Vec<AgentSpec>,
}
