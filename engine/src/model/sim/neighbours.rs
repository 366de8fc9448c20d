//! The neighbour cache of one interface, shared by simulated hosts and routers: ARP for
//! IPv4, neighbour discovery (RFC 4861, its address resolution only) for IPv6.
//!
//! No clock and no timer, so it stays deterministic: entries never expire. A packet for an
//! unresolved next hop waits in a queue of [`ARP_QUEUE`] packets per next hop (more are
//! dropped); each of the first [`ARP_REQUESTS`] waiting packets broadcasts a request (no
//! timer retransmits: traffic does); a reply — or any ARP whose sender is on the
//! interface's subnet — teaches the entry and releases the queue in order.
//!
//! IPv6 works the same way with neighbour solicitations (to the solicited-node group, hop
//! limit 255) for requests and advertisements for replies: a solicitation for the
//! interface's address or its link-local one is answered, its sender learned; an
//! advertisement teaches its target. No neighbour unreachability detection, no duplicate
//! address detection, no router advertisements (routes are static).
use std::collections::BTreeMap;

use crate::wire::ethernet::{self, Address};
use crate::wire::ipv4::{self, Addr};
use crate::wire::{arp, icmpv6, ipv6};

/// Packets queued per unresolved next hop (Linux's `unres_qlen` default is 101): enough for
/// an initial TCP window plus cross traffic while the first ARP exchange is under way.
pub const ARP_QUEUE: usize = 100;
/// Queued packets that each send an ARP request (retries without timers); later ones wait.
pub const ARP_REQUESTS: usize = 3;

/// The interface a cache belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iface {
    pub mac: Address,
    pub ip: Addr,
    pub prefix: u8,
}

/// The IPv6 side of an interface: its address and prefix, its link-local address (from the
/// MAC), and whether it advertises as a router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iface6 {
    pub mac: Address,
    pub ip: ipv6::Addr,
    pub prefix: u8,
    pub router: bool,
}

impl Iface6 {
    pub fn link_local(&self) -> ipv6::Addr {
        ipv6::link_local(self.mac.0)
    }
    /// One of the interface's own addresses (global or link-local).
    pub fn owns(&self, a: ipv6::Addr) -> bool {
        a == self.ip || a == self.link_local()
    }
    /// A multicast group the interface listens to: all-nodes and its solicited-node groups.
    pub fn listens(&self, g: ipv6::Addr) -> bool {
        g == ALL_NODES
            || g == ipv6::solicited_node(self.ip)
            || g == ipv6::solicited_node(self.link_local())
    }
}

/// ff02::1.
pub const ALL_NODES: ipv6::Addr = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// What became of a packet handed to [`NeighbourCache::resolve`].
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved<T> {
    /// The next hop is known: send `T` to this MAC now.
    Now(Address, T),
    /// Queued until the next hop answers; `request` is the ARP request frame to broadcast.
    Queued { request: Option<Vec<u8>> },
    /// The queue for this next hop is full: the packet is dropped.
    Dropped,
}

/// What an ARP packet did to the cache.
#[derive(Debug, PartialEq, Eq)]
pub struct ArpInput<T> {
    /// The sender was learned: its MAC and the packets that waited for it, in order.
    pub released: Option<(Address, Vec<T>)>,
    /// The reply frame to a request for the interface's address.
    pub reply: Option<Vec<u8>>,
    /// Neither learned nor answered (counted as `dropped_other` by the owner).
    pub ignored: bool,
}

/// The cache of one family: `K` is its address (IPv4 by default).
#[derive(Debug)]
pub struct NeighbourCache<T, K = Addr> {
    entries: BTreeMap<K, Address>,
    /// The entry learned last, also in `entries`: a host's only neighbour (its gateway or
    /// peer) without a search of the map for every packet it sends.
    recent: Option<(K, Address)>,
    pending: BTreeMap<K, Vec<T>>,
}

impl<T, K> Default for NeighbourCache<T, K> {
    fn default() -> Self {
        NeighbourCache {
            entries: BTreeMap::new(),
            recent: None,
            pending: BTreeMap::new(),
        }
    }
}

impl<T, K: Ord + Copy> NeighbourCache<T, K> {
    pub fn lookup(&self, ip: K) -> Option<Address> {
        match self.recent {
            Some((a, mac)) if a == ip => Some(mac),
            _ => self.entries.get(&ip).copied(),
        }
    }

    /// `item` for `hop`: now, or queued (the first few asking with `request()`).
    fn hold(&mut self, hop: K, item: T, request: impl FnOnce() -> Vec<u8>) -> Resolved<T> {
        if let Some(mac) = self.lookup(hop) {
            return Resolved::Now(mac, item);
        }
        let q = self.pending.entry(hop).or_default();
        if q.len() >= ARP_QUEUE {
            return Resolved::Dropped;
        }
        q.push(item);
        let request = (q.len() <= ARP_REQUESTS).then(request);
        Resolved::Queued { request }
    }

    /// `ip` is at `mac`: the packets that waited for it, in order.
    fn learn(&mut self, ip: K, mac: Address) -> Vec<T> {
        self.entries.insert(ip, mac);
        self.recent = Some((ip, mac));
        self.pending.remove(&ip).unwrap_or_default()
    }
}

impl<T> NeighbourCache<T> {
    /// Send `item` to `hop` from interface `me`: now, or after ARP resolution.
    pub fn resolve(&mut self, me: &Iface, hop: Addr, item: T) -> Resolved<T> {
        self.hold(hop, item, || {
            let req = arp::build(arp::OP_REQUEST, me.mac, me.ip, Address([0; 6]), hop);
            ethernet::build(Address::BROADCAST, me.mac, arp::ETHERTYPE, &req)
        })
    }

    /// An ARP packet arrived on interface `me`; `None` if it is malformed or neither a
    /// request nor a reply.
    pub fn receive_arp(&mut self, me: &Iface, payload: &[u8]) -> Option<ArpInput<T>> {
        let a = arp::Packet::new_checked(payload).ok()?;
        let (smac, sip, op) = (a.sender_mac(), a.sender_ip(), a.operation());
        if op != arp::OP_REQUEST && op != arp::OP_REPLY {
            return None;
        }
        let valid_sender = !smac.is_multicast()
            && sip != me.ip
            && ipv4::in_subnet(sip, me.ip, me.prefix)
            && !ipv4::is_special(sip);
        let mut input = ArpInput {
            released: None,
            reply: None,
            ignored: false,
        };
        if valid_sender {
            input.released = Some((smac, self.learn(sip, smac)));
        }
        if op == arp::OP_REQUEST && a.target_ip() == me.ip && !smac.is_multicast() {
            let reply = arp::build(arp::OP_REPLY, me.mac, me.ip, smac, sip);
            input.reply = Some(ethernet::build(smac, me.mac, arp::ETHERTYPE, &reply));
        } else if !valid_sender {
            input.ignored = true;
        }
        Some(input)
    }
}

impl<T> NeighbourCache<T, ipv6::Addr> {
    /// Send `item` to `hop` from interface `me`: now, or after a neighbour solicitation.
    pub fn resolve_nd(&mut self, me: &Iface6, hop: ipv6::Addr, item: T) -> Resolved<T> {
        self.hold(hop, item, || {
            let group = ipv6::solicited_node(hop);
            let msg = icmpv6::solicitation(me.ip, hop, me.mac.0);
            let mut pkt = ipv6::header(
                me.ip,
                group,
                ipv6::NEXT_ICMPV6,
                icmpv6::ND_HOP_LIMIT,
                msg.len(),
            )
            .to_vec();
            pkt.extend_from_slice(&msg);
            let mac = Address(ipv6::multicast_mac(group));
            ethernet::build(mac, me.mac, ipv6::ETHERTYPE, &pkt)
        })
    }

    /// An ICMPv6 message `msg` from `src` to `dst` (hop limit `hops`) arrived on `me` from
    /// the MAC `eth_src`; `None` if it is not a valid solicitation or advertisement.
    pub fn receive_nd(
        &mut self,
        me: &Iface6,
        (src, dst, hops): (ipv6::Addr, ipv6::Addr, u8),
        eth_src: Address,
        msg: &[u8],
    ) -> Option<ArpInput<T>> {
        let nd = icmpv6::neighbour(src, dst, hops, msg)?;
        let near = |a: ipv6::Addr| {
            !me.owns(a)
                && (ipv6::is_link_local(a) || ipv6::in_subnet(a, me.ip, me.prefix))
                && !ipv6::is_multicast(a)
        };
        let mut input = ArpInput {
            released: None,
            reply: None,
            ignored: false,
        };
        let unspecified = src == [0; 16];
        // The neighbour that spoke: a solicitation's sender, an advertisement's target.
        let (who, mac) = if nd.kind == icmpv6::NEIGHBOUR_SOLICITATION {
            (src, nd.mac)
        } else {
            (nd.target, nd.mac.or(Some(eth_src.0)))
        };
        match mac.map(Address).filter(|m| !m.is_multicast()) {
            Some(m) if !unspecified && near(who) => input.released = Some((m, self.learn(who, m))),
            _ => input.ignored = true,
        }
        // Answer a solicitation for one of our addresses (not duplicate address detection,
        // whose sender has no address yet).
        if nd.kind == icmpv6::NEIGHBOUR_SOLICITATION && me.owns(nd.target) && !unspecified {
            let to = Address(nd.mac.unwrap_or(eth_src.0));
            let msg = icmpv6::advertisement(nd.target, src, nd.target, me.mac.0, true, me.router);
            let mut pkt = ipv6::header(
                nd.target,
                src,
                ipv6::NEXT_ICMPV6,
                icmpv6::ND_HOP_LIMIT,
                msg.len(),
            )
            .to_vec();
            pkt.extend_from_slice(&msg);
            input.reply = Some(ethernet::build(to, me.mac, ipv6::ETHERTYPE, &pkt));
            input.ignored = false;
        }
        Some(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Iface = Iface {
        mac: Address([2, 0, 0, 0, 0, 1]),
        ip: [10, 0, 0, 1],
        prefix: 24,
    };
    const PEER: Address = Address([2, 0, 0, 0, 0, 2]);

    fn arp_from_peer(op: u16, sender_ip: Addr, target_ip: Addr) -> [u8; arp::LEN] {
        arp::build(op, PEER, sender_ip, Address([0; 6]), target_ip)
    }

    #[test]
    fn queue_request_release() {
        let mut c = NeighbourCache::default();
        let hop = [10, 0, 0, 2];
        for i in 0..ARP_QUEUE + 2 {
            match c.resolve(&ME, hop, i) {
                Resolved::Queued { request } => {
                    assert!(i < ARP_QUEUE);
                    assert_eq!(request.is_some(), i < ARP_REQUESTS, "packet {i}");
                    if let Some(r) = request {
                        // broadcast, ARP, "who has 10.0.0.2? tell 10.0.0.1"
                        assert_eq!(&r[..6], &[0xff; 6]);
                        assert_eq!(&r[12..14], &[8, 6]);
                        assert_eq!(&r[14 + 24..14 + 28], &hop);
                    }
                }
                Resolved::Dropped => assert!(i >= ARP_QUEUE),
                Resolved::Now(..) => panic!("unresolved"),
            }
        }
        let input = c
            .receive_arp(&ME, &arp_from_peer(arp::OP_REPLY, hop, ME.ip))
            .unwrap();
        let (mac, waiting) = input.released.unwrap();
        assert_eq!(mac, PEER);
        assert_eq!(waiting, (0..ARP_QUEUE).collect::<Vec<_>>());
        assert!(input.reply.is_none() && !input.ignored);
        assert_eq!(c.resolve(&ME, hop, 7), Resolved::Now(PEER, 7));
    }

    #[test]
    fn answers_requests_and_ignores_strangers() {
        let mut c: NeighbourCache<()> = NeighbourCache::default();
        let input = c
            .receive_arp(&ME, &arp_from_peer(arp::OP_REQUEST, [10, 0, 0, 9], ME.ip))
            .unwrap();
        let reply = input.reply.unwrap();
        assert_eq!(&reply[..6], &PEER.0);
        assert_eq!(&reply[14 + 6..14 + 8], &[0, 2], "a reply");
        assert_eq!(c.lookup([10, 0, 0, 9]), Some(PEER), "the asker is learned");
        // A sender off the subnet is neither learned nor answered unless it asks for us.
        let input = c
            .receive_arp(&ME, &arp_from_peer(arp::OP_REPLY, [10, 9, 0, 9], ME.ip))
            .unwrap();
        assert!(input.ignored && input.released.is_none());
        assert!(c.receive_arp(&ME, &[0; 27]).is_none());
        let mut bad_op = arp_from_peer(arp::OP_REPLY, [10, 0, 0, 3], ME.ip);
        bad_op[7] = 9;
        assert!(c.receive_arp(&ME, &bad_op).is_none());
    }
}
