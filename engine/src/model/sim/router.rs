//! A simulated IPv4 router: ARP, longest-prefix-match forwarding, TTL, ICMP.
//!
//! Its interfaces are *simulated ports* of the network: a frame a pipeline delivers to such a
//! port is handed to [`Router::receive`], which returns the frames the router sends, each on
//! one of its interfaces; the network enqueues them in that port's ingress pipeline at the
//! same instant (processing takes no time). The router holds no clock and no timer, so it is
//! deterministic and needs no event kind of its own.
//!
//! Behaviour (as a Linux router with `ip_forward=1`, simplified where noted):
//! * Accepts frames addressed to the interface MAC or to broadcast; others are ignored.
//! * ARP: answers requests for the receiving interface's address; learns the sender of any
//!   request/reply whose sender address is in that interface's subnet. Unresolved next hop:
//!   the packet waits in a per-next-hop queue of [`ARP_QUEUE`] packets (more are dropped,
//!   `arp_queue_drops`); each of the first [`ARP_REQUESTS`] waiting packets broadcasts an ARP
//!   request (no timer retransmits: traffic does); a reply releases the queue in order.
//!   Entries never expire.
//! * IPv4 to one of its own addresses (any interface, weak host model): an echo request with
//!   a valid checksum gets an echo reply from that address; anything else is counted in
//!   `dropped_other`. Multicast/broadcast destinations, bad header checksums, IPv6 and
//!   non-IP frames are dropped (`dropped_other`).
//! * Forwarding: route lookup first (no route → ICMP net unreachable, `dropped_no_route`),
//!   then TTL ≤ 1 → ICMP time exceeded (`dropped_ttl`), else TTL − 1 with an RFC 1624
//!   checksum update. ICMP errors quote the original header + 8 bytes, come from the
//!   incoming interface's address with TTL 64, are not rate-limited, and are not sent about
//!   ICMP errors, non-first fragments or packets from 0/127/multicast sources (RFC 1812).
//!   No MTU, no fragmentation, no redirects, no IP options processing.
use std::collections::BTreeMap;

use serde::Serialize;

use super::addr_hash::{AddrMap, AddrSet};
use super::neighbours::{Iface, NeighbourCache, Resolved};
use crate::wire::ethernet::{self, Address, Frame};
use crate::wire::ipv4::{self, Addr};
use crate::wire::{arp, icmp};

pub use super::neighbours::{ARP_QUEUE, ARP_REQUESTS};
const ETH_IPV4: u16 = 0x0800;
const ICMP_TTL: u8 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub mac: Address,
    pub ip: Addr,
    pub prefix: u8,
}

/// A static route `dst/prefix via gateway` (the gateway must be on a connected subnet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: Addr,
    pub prefix: u8,
    pub via: Addr,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct RouterCounters {
    pub forwarded: u64,
    pub icmp_sent: u64,
    pub arp_replies: u64,
    pub dropped_no_route: u64,
    pub dropped_ttl: u64,
    pub dropped_other: u64,
    pub arp_queue_drops: u64,
}

type Pending = (Vec<u8>, bool);
/// Networks of one prefix length: network → (interface, gateway; `None` if connected).
type Networks = AddrMap<u32, (usize, Option<Addr>)>;

#[derive(Debug)]
pub struct Router {
    ifaces: Vec<Interface>,
    /// Routes by prefix length, longest first: network → (interface, gateway). Connected
    /// routes were inserted first, then static ones, and the first entry for a network
    /// wins, so lookup costs one hash probe per distinct prefix length, not one per route.
    table: Vec<(u8, Networks)>,
    /// Own addresses → interface, and directed-broadcast addresses (prefix < 31).
    own: AddrMap<Addr, usize>,
    broadcasts: AddrSet<Addr>,
    /// One ARP cache per interface; waiting packets carry "is forwarded".
    neighbours: Vec<NeighbourCache<Pending>>,
    ident: u16,
    pub counters: RouterCounters,
}

/// Check interfaces and routes; the error names the field (`interfaces[i].ip`, `routes[j].via`).
pub fn validate(ifaces: &[Interface], routes: &[Route]) -> Result<(), String> {
    if ifaces.is_empty() {
        return Err("interfaces: a router needs at least one interface".into());
    }
    for (i, f) in ifaces.iter().enumerate() {
        if f.mac.is_multicast() || f.mac.0 == [0; 6] {
            return Err(format!(
                "interfaces[{i}].mac: must be a unicast, non-zero MAC"
            ));
        }
        if ipv4::is_special(f.ip) || f.prefix == 0 {
            return Err(format!(
                "interfaces[{i}].ip: must be a unicast address with a prefix of 1..=32"
            ));
        }
        if ifaces[..i].iter().any(|g| g.ip == f.ip) {
            return Err(format!("interfaces[{i}].ip: address appears twice"));
        }
    }
    for (j, r) in routes.iter().enumerate() {
        if u32::from_be_bytes(r.dst) & !ipv4::mask(r.prefix) != 0 {
            return Err(format!(
                "routes[{j}].dst: host bits set for the prefix length"
            ));
        }
        if !ifaces
            .iter()
            .any(|f| ipv4::in_subnet(r.via, f.ip, f.prefix))
        {
            return Err(format!(
                "routes[{j}].via: gateway is not on a connected subnet"
            ));
        }
        if ifaces.iter().any(|f| f.ip == r.via) {
            return Err(format!(
                "routes[{j}].via: gateway is one of the router's own addresses"
            ));
        }
    }
    Ok(())
}

impl Router {
    /// Build a router (call [`validate`] first; invalid routes are skipped).
    pub fn new(ifaces: Vec<Interface>, routes: &[Route]) -> Self {
        let mut by_len: BTreeMap<u8, Networks> = BTreeMap::new();
        let mut add = |net: Addr, prefix: u8, i: usize, via: Option<Addr>| {
            let key = u32::from_be_bytes(net) & ipv4::mask(prefix);
            by_len
                .entry(prefix)
                .or_default()
                .entry(key)
                .or_insert((i, via));
        };
        for (i, f) in ifaces.iter().enumerate() {
            add(f.ip, f.prefix, i, None);
        }
        for r in routes {
            if let Some(i) = ifaces
                .iter()
                .position(|f| ipv4::in_subnet(r.via, f.ip, f.prefix))
            {
                add(r.dst, r.prefix, i, Some(r.via));
            }
        }
        let table = by_len.into_iter().rev().collect();
        let mut own = AddrMap::default();
        for (i, f) in ifaces.iter().enumerate() {
            own.entry(f.ip).or_insert(i);
        }
        let broadcasts = ifaces
            .iter()
            .filter(|f| f.prefix < 31)
            .map(|f| (u32::from_be_bytes(f.ip) | !ipv4::mask(f.prefix)).to_be_bytes())
            .collect();
        let n_ifaces = ifaces.len();
        Router {
            ifaces,
            table,
            own,
            broadcasts,
            neighbours: (0..n_ifaces).map(|_| NeighbourCache::default()).collect(),
            ident: 0,
            counters: RouterCounters::default(),
        }
    }

    pub fn interfaces(&self) -> &[Interface] {
        &self.ifaces
    }

    /// Longest-prefix match: (outgoing interface, next hop).
    pub fn lookup(&self, dst: Addr) -> Option<(usize, Addr)> {
        let d = u32::from_be_bytes(dst);
        self.table
            .iter()
            .find_map(|(len, nets)| nets.get(&(d & ipv4::mask(*len))))
            .map(|&(i, via)| (i, via.unwrap_or(dst)))
    }

    /// Forward a frame in place where [`Router::receive`] would send exactly it with a new
    /// Ethernet header and its TTL one less: a valid IPv4 packet addressed to our MAC, not
    /// to us, routed, TTL > 1, the next hop's MAC known and nothing after the packet. Returns
    /// the outgoing interface; `None` leaves the frame untouched for `receive` (saves the
    /// copies and allocations of the general path on every simulated hop).
    pub fn forward_in_place(&mut self, iface: usize, frame: &mut [u8]) -> Option<usize> {
        let me = self.ifaces.get(iface)?;
        let (oif, hop) = {
            let eth = Frame::new_checked(&*frame).ok()?;
            if eth.dst() != me.mac || eth.ethertype() != ETH_IPV4 {
                return None;
            }
            let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
            let dst = ip.dst();
            if ip.packet().len() + ethernet::HEADER_LEN != frame.len()
                || ip.ttl() <= 1
                || !ip.verify_checksum()
                || ipv4::is_special(dst)
                || self.own.contains_key(&dst)
                || self.broadcasts.contains(&dst)
            {
                return None;
            }
            self.lookup(dst)?
        };
        let src = self.ifaces.get(oif)?.mac;
        let mac = self.neighbours.get(oif)?.lookup(hop)?;
        ethernet::write_header(frame, mac, src, ETH_IPV4);
        ipv4::decrement_ttl(&mut frame[ethernet::HEADER_LEN..]);
        self.counters.forwarded += 1;
        Some(oif)
    }

    /// A frame arrived on interface `iface`; returns the frames to send, as (interface, frame).
    pub fn receive(&mut self, iface: usize, frame: &[u8]) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        let Some(me) = self.ifaces.get(iface).cloned() else {
            return out;
        };
        let Ok(eth) = Frame::new_checked(frame) else {
            self.counters.dropped_other += 1;
            return out;
        };
        if eth.dst() != me.mac && eth.dst() != Address::BROADCAST {
            self.counters.dropped_other += 1;
            return out;
        }
        match eth.ethertype() {
            arp::ETHERTYPE => self.receive_arp(iface, &me, eth.payload(), &mut out),
            ETH_IPV4 => self.receive_ipv4(
                &me,
                eth.dst() == Address::BROADCAST,
                eth.payload(),
                &mut out,
            ),
            _ => self.counters.dropped_other += 1,
        }
        out
    }

    fn receive_arp(
        &mut self,
        iface: usize,
        me: &Interface,
        payload: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(cache) = self.neighbours.get_mut(iface) else {
            return;
        };
        let Some(input) = cache.receive_arp(&iface_of(me), payload) else {
            self.counters.dropped_other += 1;
            return;
        };
        if let Some((mac, waiting)) = input.released {
            for (pkt, fwd) in waiting {
                if fwd {
                    self.counters.forwarded += 1;
                }
                out.push((iface, ethernet::build(mac, me.mac, ETH_IPV4, &pkt)));
            }
        }
        if let Some(reply) = input.reply {
            out.push((iface, reply));
            self.counters.arp_replies += 1;
        }
        if input.ignored {
            self.counters.dropped_other += 1;
        }
    }

    fn receive_ipv4(
        &mut self,
        me: &Interface,
        l2_broadcast: bool,
        payload: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Ok(ip) = ipv4::Packet::new_checked(payload) else {
            self.counters.dropped_other += 1;
            return;
        };
        let dst = ip.dst();
        if !ip.verify_checksum() || ipv4::is_special(dst) || l2_broadcast {
            self.counters.dropped_other += 1;
            return;
        }
        if let Some(own) = self.own.contains_key(&dst).then_some(dst) {
            // Local delivery: only unfragmented echo requests get an answer.
            let reply =
                (ip.protocol() == ipv4::PROTO_ICMP && ip.frag_offset() == 0 && !ip.more_frags())
                    .then(|| icmp::echo_reply(ip.payload()))
                    .flatten();
            match reply {
                Some(msg) => {
                    self.counters.icmp_sent += 1;
                    self.originate(own, ip.src(), &msg, out);
                }
                None => self.counters.dropped_other += 1,
            }
            return;
        }
        if self.broadcasts.contains(&dst) {
            self.counters.dropped_other += 1; // directed broadcast: not forwarded (Linux default)
            return;
        }
        let Some((oif, hop)) = self.lookup(dst) else {
            self.counters.dropped_no_route += 1;
            self.icmp_error(me.ip, icmp::DEST_UNREACHABLE, 0, &ip, out);
            return;
        };
        if ip.ttl() <= 1 {
            self.counters.dropped_ttl += 1;
            self.icmp_error(me.ip, icmp::TIME_EXCEEDED, 0, &ip, out);
            return;
        }
        let mut pkt = ip.packet().to_vec();
        ipv4::decrement_ttl(&mut pkt);
        self.send(oif, hop, pkt, true, out);
    }

    fn icmp_error(
        &mut self,
        from: Addr,
        t: u8,
        code: u8,
        orig: &ipv4::Packet<&[u8]>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let src = orig.src();
        if orig.frag_offset() != 0 || ipv4::is_special(src) || self.own.contains_key(&src) {
            return;
        }
        if orig.protocol() == ipv4::PROTO_ICMP
            && orig.payload().first().is_none_or(|t| icmp::is_error(*t))
        {
            return;
        }
        let msg = icmp::error(t, code, orig.packet(), orig.header_len());
        self.counters.icmp_sent += 1;
        self.originate(from, src, &msg, out);
    }

    /// Send an ICMP message of our own: route it like any packet (silently dropped if there
    /// is no route back).
    fn originate(&mut self, src: Addr, dst: Addr, msg: &[u8], out: &mut Vec<(usize, Vec<u8>)>) {
        let Some((oif, hop)) = self.lookup(dst) else {
            return;
        };
        self.ident = self.ident.wrapping_add(1);
        let mut pkt =
            ipv4::header(src, dst, ipv4::PROTO_ICMP, ICMP_TTL, self.ident, msg.len()).to_vec();
        pkt.extend_from_slice(msg);
        self.send(oif, hop, pkt, false, out);
    }

    /// Transmit an IP packet to `hop` on `oif`, resolving its MAC first if needed.
    fn send(
        &mut self,
        oif: usize,
        hop: Addr,
        pkt: Vec<u8>,
        forwarded: bool,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(f) = self.ifaces.get(oif).cloned() else {
            return;
        };
        let Some(cache) = self.neighbours.get_mut(oif) else {
            return;
        };
        match cache.resolve(&iface_of(&f), hop, (pkt, forwarded)) {
            Resolved::Now(mac, (pkt, _)) => {
                if forwarded {
                    self.counters.forwarded += 1;
                }
                out.push((oif, ethernet::build(mac, f.mac, ETH_IPV4, &pkt)));
            }
            Resolved::Queued { request } => out.extend(request.map(|r| (oif, r))),
            Resolved::Dropped => self.counters.arp_queue_drops += 1,
        }
    }
}

fn iface_of(f: &Interface) -> Iface {
    Iface {
        mac: f.mac,
        ip: f.ip,
        prefix: f.prefix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Router {
        let ifs = vec![
            Interface {
                mac: Address([2, 0, 0, 0, 1, 1]),
                ip: [10, 1, 1, 1],
                prefix: 24,
            },
            Interface {
                mac: Address([2, 0, 0, 0, 1, 2]),
                ip: [10, 1, 2, 1],
                prefix: 24,
            },
        ];
        let routes = vec![
            Route {
                dst: [10, 9, 0, 0],
                prefix: 16,
                via: [10, 1, 2, 2],
            },
            Route {
                dst: [10, 9, 9, 0],
                prefix: 24,
                via: [10, 1, 1, 2],
            },
        ];
        validate(&ifs, &routes).unwrap();
        Router::new(ifs, &routes)
    }

    #[test]
    fn longest_prefix_match() {
        let r = r();
        assert_eq!(r.lookup([10, 1, 1, 7]), Some((0, [10, 1, 1, 7])));
        assert_eq!(r.lookup([10, 9, 1, 1]), Some((1, [10, 1, 2, 2])));
        assert_eq!(r.lookup([10, 9, 9, 1]), Some((0, [10, 1, 1, 2])));
        assert_eq!(r.lookup([10, 10, 0, 1]), None);
    }

    #[test]
    fn validation_names_fields() {
        let ifs = vec![Interface {
            mac: Address([2, 0, 0, 0, 1, 1]),
            ip: [10, 1, 1, 1],
            prefix: 24,
        }];
        assert!(validate(&[], &[]).unwrap_err().starts_with("interfaces:"));
        let bad = [Route {
            dst: [10, 9, 0, 1],
            prefix: 16,
            via: [10, 1, 1, 2],
        }];
        assert!(validate(&ifs, &bad)
            .unwrap_err()
            .starts_with("routes[0].dst"));
        let bad = [Route {
            dst: [10, 9, 0, 0],
            prefix: 16,
            via: [10, 2, 1, 2],
        }];
        assert!(validate(&ifs, &bad)
            .unwrap_err()
            .starts_with("routes[0].via"));
        let mut m = ifs.clone();
        m[0].mac = Address([1, 0, 0, 0, 0, 0]);
        assert!(validate(&m, &[])
            .unwrap_err()
            .starts_with("interfaces[0].mac"));
    }

    #[test]
    fn arp_queue_bounded() {
        let mut r = r();
        let mut h = ipv4::header([10, 1, 1, 5], [10, 1, 2, 9], 17, 64, 1, 0).to_vec();
        h.truncate(20);
        let f = ethernet::build(
            Address([2, 0, 0, 0, 1, 1]),
            Address([2, 0, 0, 0, 0, 5]),
            ETH_IPV4,
            &h,
        );
        let n = ARP_QUEUE + 2;
        for i in 0..n {
            let out = r.receive(0, &f);
            // an ARP request for each of the first ARP_REQUESTS packets, then silence
            assert_eq!(out.len(), usize::from(i < ARP_REQUESTS), "packet {i}");
            if let Some((oif, req)) = out.first() {
                assert_eq!(*oif, 1);
                assert_eq!(&req[12..14], &[8, 6]);
            }
        }
        assert_eq!(r.counters.arp_queue_drops, 2);
        let reply = arp::build(
            arp::OP_REPLY,
            Address([2, 0, 0, 0, 0, 9]),
            [10, 1, 2, 9],
            Address([2, 0, 0, 0, 1, 2]),
            [10, 1, 2, 1],
        );
        let out = r.receive(
            1,
            &ethernet::build(
                Address([2, 0, 0, 0, 1, 2]),
                Address([2, 0, 0, 0, 0, 9]),
                arp::ETHERTYPE,
                &reply,
            ),
        );
        assert_eq!(out.len(), ARP_QUEUE);
        assert_eq!(r.counters.forwarded, ARP_QUEUE as u64);
        assert!(out
            .iter()
            .all(|(i, f)| *i == 1 && f[..6] == [2, 0, 0, 0, 0, 9] && f[14 + 8] == 63));
    }

    /// The in-place path sends the very bytes the general one does, counts the same, and
    /// declines whatever the general path must decide (ARP, TTL, padding, local delivery).
    #[test]
    fn forwarding_in_place_matches_the_general_path() {
        let mut general = r();
        let mut fast = r();
        // Teach both the next hop's MAC (10.1.2.9 on interface 1).
        let reply = arp::build(
            arp::OP_REPLY,
            Address([2, 0, 0, 0, 0, 9]),
            [10, 1, 2, 9],
            Address([2, 0, 0, 0, 1, 2]),
            [10, 1, 2, 1],
        );
        let arp_frame = ethernet::build(
            Address([2, 0, 0, 0, 1, 2]),
            Address([2, 0, 0, 0, 0, 9]),
            arp::ETHERTYPE,
            &reply,
        );
        general.receive(1, &arp_frame);
        fast.receive(1, &arp_frame);
        let frame = |dst: Addr, ttl: u8, extra: usize| {
            let mut p = ipv4::header([10, 1, 1, 5], dst, 17, ttl, 7, 8 + extra).to_vec();
            p.truncate(20);
            p.extend(std::iter::repeat_n(0xab, 8 + extra));
            ethernet::build(
                Address([2, 0, 0, 0, 1, 1]),
                Address([2, 0, 0, 0, 0, 5]),
                ETH_IPV4,
                &p,
            )
        };
        let ok = frame([10, 1, 2, 9], 64, 30);
        let want = general.receive(0, &ok);
        let mut got = ok.clone();
        assert_eq!(fast.forward_in_place(0, &mut got), Some(1));
        assert_eq!(want, vec![(1, got)]);
        assert_eq!(fast.counters.forwarded, general.counters.forwarded);
        let mut padded = ok.clone();
        padded.push(0);
        let unknown_mac = frame([10, 1, 2, 77], 64, 0);
        for (what, f) in [
            ("TTL 1", frame([10, 1, 2, 9], 1, 0)),
            ("trailing bytes", padded),
            ("next hop unresolved", unknown_mac),
            ("addressed to the router", frame([10, 1, 2, 1], 64, 0)),
            ("no route", frame([10, 77, 0, 1], 64, 0)),
        ] {
            let mut g = f.clone();
            assert_eq!(fast.forward_in_place(0, &mut g), None, "{what}");
            assert_eq!(g, f, "{what}: left untouched");
        }
        assert_eq!(fast.counters.forwarded, 1);
    }
}
