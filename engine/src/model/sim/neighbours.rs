//! The ARP neighbour cache of one IPv4 interface, shared by simulated hosts and routers.
//!
//! No clock and no timer, so it stays deterministic: entries never expire. A packet for an
//! unresolved next hop waits in a queue of [`ARP_QUEUE`] packets per next hop (more are
//! dropped); each of the first [`ARP_REQUESTS`] waiting packets broadcasts a request (no
//! timer retransmits: traffic does); a reply — or any ARP whose sender is on the
//! interface's subnet — teaches the entry and releases the queue in order.
use std::collections::BTreeMap;

use crate::wire::arp;
use crate::wire::ethernet::{self, Address};
use crate::wire::ipv4::{self, Addr};

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

#[derive(Debug)]
pub struct NeighbourCache<T> {
    entries: BTreeMap<Addr, Address>,
    /// The entry learned last, also in `entries`: a host's only neighbour (its gateway or
    /// peer) without a search of the map for every packet it sends.
    recent: Option<(Addr, Address)>,
    pending: BTreeMap<Addr, Vec<T>>,
}

impl<T> Default for NeighbourCache<T> {
    fn default() -> Self {
        NeighbourCache {
            entries: BTreeMap::new(),
            recent: None,
            pending: BTreeMap::new(),
        }
    }
}

impl<T> NeighbourCache<T> {
    pub fn lookup(&self, ip: Addr) -> Option<Address> {
        match self.recent {
            Some((a, mac)) if a == ip => Some(mac),
            _ => self.entries.get(&ip).copied(),
        }
    }

    /// Send `item` to `hop` from interface `me`: now, or after ARP resolution.
    pub fn resolve(&mut self, me: &Iface, hop: Addr, item: T) -> Resolved<T> {
        if let Some(mac) = self.lookup(hop) {
            return Resolved::Now(mac, item);
        }
        let q = self.pending.entry(hop).or_default();
        if q.len() >= ARP_QUEUE {
            return Resolved::Dropped;
        }
        q.push(item);
        let request = (q.len() <= ARP_REQUESTS).then(|| {
            let req = arp::build(arp::OP_REQUEST, me.mac, me.ip, Address([0; 6]), hop);
            ethernet::build(Address::BROADCAST, me.mac, arp::ETHERTYPE, &req)
        });
        Resolved::Queued { request }
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
            self.entries.insert(sip, smac);
            self.recent = Some((sip, smac));
            let waiting = self.pending.remove(&sip).unwrap_or_default();
            input.released = Some((smac, waiting));
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
