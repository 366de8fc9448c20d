//! A simulated router of IPv4, IPv6 or both: ARP and neighbour discovery,
//! longest-prefix-match forwarding, TTL / hop limit, ICMP and ICMPv6.
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
//! * IPv6 likewise, on interfaces that have an IPv6 address: neighbour discovery instead of
//!   ARP (solicitations for an interface's address or its link-local one answered, with the
//!   router flag), echo requests to any of its addresses answered, the hop limit instead of
//!   the TTL (no checksum to update), ICMPv6 destination unreachable (no route) and time
//!   exceeded from the incoming interface's address, quoting as much of the packet as fits
//!   in 1280 bytes, never about ICMPv6 errors or to multicast, unspecified or link-local
//!   sources. Packets to or from link-local addresses are not forwarded; extension headers
//!   are not processed (a packet with one is forwarded like any other).
//! * An interface without an IPv4 address (`prefix` 0, address 0.0.0.0: an IPv6-only
//!   experiment) ignores ARP and IPv4.
use std::collections::BTreeMap;

use serde::Serialize;

use super::addr_hash::{AddrMap, AddrSet};
use super::neighbours::{Iface, Iface6, NeighbourCache, Resolved};
use crate::wire::ethernet::{self, Address, Frame};
use crate::wire::ipv4::{self, Addr};
use crate::wire::{arp, icmp, icmpv6, ipv6};

pub use super::neighbours::{ARP_QUEUE, ARP_REQUESTS};
const ETH_IPV4: u16 = 0x0800;
const ICMP_TTL: u8 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub mac: Address,
    /// The IPv4 address and prefix length; prefix 0 (and 0.0.0.0): none.
    pub ip: Addr,
    pub prefix: u8,
    /// The IPv6 address and prefix length, if any.
    pub ip6: Option<(ipv6::Addr, u8)>,
}

impl Interface {
    /// Whether the interface has an IPv4 address.
    pub fn has_v4(&self) -> bool {
        self.prefix != 0
    }
}

/// A static route `dst/prefix via gateway` (the gateway must be on a connected subnet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: Addr,
    pub prefix: u8,
    pub via: Addr,
}

/// A static IPv6 route `dst/prefix via gateway` (the gateway on a connected `/64` or so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route6 {
    pub dst: ipv6::Addr,
    pub prefix: u8,
    pub via: ipv6::Addr,
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
/// The same for IPv6.
type Networks6 = AddrMap<u128, (usize, Option<ipv6::Addr>)>;

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
    /// IPv6: routes, own addresses (global and link-local) and neighbour caches likewise.
    table6: Vec<(u8, Networks6)>,
    own6: AddrMap<ipv6::Addr, usize>,
    neighbours6: Vec<NeighbourCache<Pending, ipv6::Addr>>,
    ident: u16,
    pub counters: RouterCounters,
}

/// Check interfaces and routes; the error names the field (`interfaces[i].ip`, `routes[j].via`).
pub fn validate(ifaces: &[Interface], routes: &[Route]) -> Result<(), String> {
    validate_dual(ifaces, routes, &[])
}

/// [`validate`] with IPv6 routes (`routes6[j]`).
pub fn validate_dual(
    ifaces: &[Interface],
    routes: &[Route],
    routes6: &[Route6],
) -> Result<(), String> {
    if ifaces.is_empty() {
        return Err("interfaces: a router needs at least one interface".into());
    }
    for (i, f) in ifaces.iter().enumerate() {
        if f.mac.is_multicast() || f.mac.0 == [0; 6] {
            return Err(format!(
                "interfaces[{i}].mac: must be a unicast, non-zero MAC"
            ));
        }
        if !f.has_v4() && f.ip6.is_none() {
            return Err(format!(
                "interfaces[{i}].ip: an interface needs an IPv4 or an IPv6 address"
            ));
        }
        if f.has_v4() && ipv4::is_special(f.ip) {
            return Err(format!(
                "interfaces[{i}].ip: must be a unicast address with a prefix of 1..=32"
            ));
        }
        if f.has_v4() && ifaces[..i].iter().any(|g| g.has_v4() && g.ip == f.ip) {
            return Err(format!("interfaces[{i}].ip: address appears twice"));
        }
        if let Some((a, len)) = f.ip6 {
            if ipv6::is_special(a) || len == 0 || len > 128 {
                return Err(format!(
                    "interfaces[{i}].ip6: must be a unicast address with a prefix of 1..=128"
                ));
            }
            if ifaces[..i]
                .iter()
                .any(|g| g.ip6.is_some_and(|(b, _)| a == b))
            {
                return Err(format!("interfaces[{i}].ip6: address appears twice"));
            }
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
            .any(|f| f.has_v4() && ipv4::in_subnet(r.via, f.ip, f.prefix))
        {
            return Err(format!(
                "routes[{j}].via: gateway is not on a connected subnet"
            ));
        }
        if ifaces.iter().any(|f| f.has_v4() && f.ip == r.via) {
            return Err(format!(
                "routes[{j}].via: gateway is one of the router's own addresses"
            ));
        }
    }
    for (j, r) in routes6.iter().enumerate() {
        if u128::from_be_bytes(r.dst) & !ipv6::mask(r.prefix) != 0 {
            return Err(format!(
                "routes6[{j}].dst: host bits set for the prefix length"
            ));
        }
        if iface6_for(ifaces, r.via).is_none() {
            return Err(format!(
                "routes6[{j}].via: gateway is not on a connected subnet"
            ));
        }
        if ifaces
            .iter()
            .any(|f| f.ip6.is_some_and(|(a, _)| a == r.via))
        {
            return Err(format!(
                "routes6[{j}].via: gateway is one of the router's own addresses"
            ));
        }
    }
    Ok(())
}

/// The interface whose IPv6 subnet holds `a`.
fn iface6_for(ifaces: &[Interface], a: ipv6::Addr) -> Option<usize> {
    ifaces
        .iter()
        .position(|f| f.ip6.is_some_and(|(ip, len)| ipv6::in_subnet(a, ip, len)))
}

impl Router {
    /// Build a router (call [`validate`] first; invalid routes are skipped).
    pub fn new(ifaces: Vec<Interface>, routes: &[Route]) -> Self {
        Self::new_dual(ifaces, routes, &[])
    }

    /// [`Router::new`] with IPv6 routes (call [`validate_dual`] first).
    pub fn new_dual(ifaces: Vec<Interface>, routes: &[Route], routes6: &[Route6]) -> Self {
        let mut by_len: BTreeMap<u8, Networks> = BTreeMap::new();
        let mut add = |net: Addr, prefix: u8, i: usize, via: Option<Addr>| {
            let key = u32::from_be_bytes(net) & ipv4::mask(prefix);
            by_len
                .entry(prefix)
                .or_default()
                .entry(key)
                .or_insert((i, via));
        };
        for (i, f) in ifaces.iter().enumerate().filter(|(_, f)| f.has_v4()) {
            add(f.ip, f.prefix, i, None);
        }
        for r in routes {
            if let Some(i) = ifaces
                .iter()
                .position(|f| f.has_v4() && ipv4::in_subnet(r.via, f.ip, f.prefix))
            {
                add(r.dst, r.prefix, i, Some(r.via));
            }
        }
        let table = by_len.into_iter().rev().collect();
        let mut by_len6: BTreeMap<u8, Networks6> = BTreeMap::new();
        let mut add6 = |net: ipv6::Addr, prefix: u8, i: usize, via: Option<ipv6::Addr>| {
            let key = u128::from_be_bytes(net) & ipv6::mask(prefix);
            by_len6
                .entry(prefix)
                .or_default()
                .entry(key)
                .or_insert((i, via));
        };
        let mut own6 = AddrMap::default();
        for (i, f) in ifaces.iter().enumerate() {
            if let Some((a, len)) = f.ip6 {
                add6(a, len, i, None);
                own6.entry(a).or_insert(i);
            }
        }
        for (i, f) in ifaces.iter().enumerate() {
            if f.ip6.is_some() {
                own6.entry(ipv6::link_local(f.mac.0)).or_insert(i);
            }
        }
        for r in routes6 {
            if let Some(i) = iface6_for(&ifaces, r.via) {
                add6(r.dst, r.prefix, i, Some(r.via));
            }
        }
        let table6 = by_len6.into_iter().rev().collect();
        let mut own = AddrMap::default();
        for (i, f) in ifaces.iter().enumerate().filter(|(_, f)| f.has_v4()) {
            own.entry(f.ip).or_insert(i);
        }
        let broadcasts = ifaces
            .iter()
            .filter(|f| f.has_v4() && f.prefix < 31)
            .map(|f| (u32::from_be_bytes(f.ip) | !ipv4::mask(f.prefix)).to_be_bytes())
            .collect();
        let n_ifaces = ifaces.len();
        Router {
            ifaces,
            table,
            own,
            broadcasts,
            neighbours: (0..n_ifaces).map(|_| NeighbourCache::default()).collect(),
            table6,
            own6,
            neighbours6: (0..n_ifaces).map(|_| NeighbourCache::default()).collect(),
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

    /// Longest-prefix match of an IPv6 destination: (outgoing interface, next hop).
    pub fn lookup6(&self, dst: ipv6::Addr) -> Option<(usize, ipv6::Addr)> {
        let d = u128::from_be_bytes(dst);
        self.table6
            .iter()
            .find_map(|(len, nets)| nets.get(&(d & ipv6::mask(*len))))
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
            if eth.dst() == me.mac && eth.ethertype() == ipv6::ETHERTYPE && me.ip6.is_some() {
                return self.forward6_in_place(frame);
            }
            if eth.dst() != me.mac || eth.ethertype() != ETH_IPV4 || !me.has_v4() {
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

    /// [`Router::forward_in_place`] of an IPv6 packet (the frame is addressed to us).
    fn forward6_in_place(&mut self, frame: &mut [u8]) -> Option<usize> {
        let (oif, hop) = {
            let ip = ipv6::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).ok()?;
            let (src, dst) = (ip.src(), ip.dst());
            if ip.packet().len() + ethernet::HEADER_LEN != frame.len()
                || ip.hop_limit() <= 1
                || ipv6::is_special(dst)
                || ipv6::is_link_local(src)
                || self.own6.contains_key(&dst)
            {
                return None;
            }
            self.lookup6(dst)?
        };
        let src = self.ifaces.get(oif)?.mac;
        let mac = self.neighbours6.get(oif)?.lookup(hop)?;
        ethernet::write_header(frame, mac, src, ipv6::ETHERTYPE);
        ipv6::decrement_hop_limit(&mut frame[ethernet::HEADER_LEN..]);
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
        // IPv6 multicast (33:33:...): neighbour discovery reaches us that way.
        let group = eth.dst().0[..2] == [0x33, 0x33];
        if eth.dst() != me.mac && eth.dst() != Address::BROADCAST && !group {
            self.counters.dropped_other += 1;
            return out;
        }
        match eth.ethertype() {
            ipv6::ETHERTYPE if me.ip6.is_some() && eth.dst() != Address::BROADCAST => {
                self.receive_ipv6(iface, &me, (eth.src(), group), eth.payload(), &mut out)
            }
            _ if group || !me.has_v4() => self.counters.dropped_other += 1,
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

    fn receive_ipv6(
        &mut self,
        iface: usize,
        me: &Interface,
        (eth_src, group): (Address, bool),
        payload: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let (Some(me6), Ok(ip)) = (iface6_of(me), ipv6::Packet::new_checked(payload)) else {
            self.counters.dropped_other += 1;
            return;
        };
        let (src, dst) = (ip.src(), ip.dst());
        let own = self.own6.contains_key(&dst) || me6.owns(dst);
        if ipv6::is_multicast(dst) || own {
            if !own && !me6.listens(dst) {
                self.counters.dropped_other += 1;
                return;
            }
            let msg = ip.payload();
            let icmp = ip.next_header() == ipv6::NEXT_ICMPV6;
            match msg.first().copied() {
                Some(icmpv6::NEIGHBOUR_SOLICITATION | icmpv6::NEIGHBOUR_ADVERTISEMENT) if icmp => {
                    let hops = ip.hop_limit();
                    self.receive_nd(iface, &me6, (src, dst, hops), eth_src, msg, out);
                }
                Some(icmpv6::ECHO_REQUEST) if icmp && own => {
                    match icmpv6::echo_reply(src, dst, msg) {
                        Some(reply) => {
                            self.counters.icmp_sent += 1;
                            self.originate6(dst, src, &reply, out);
                        }
                        None => self.counters.dropped_other += 1,
                    }
                }
                _ => self.counters.dropped_other += 1,
            }
            return;
        }
        if group || ipv6::is_special(dst) || ipv6::is_link_local(src) {
            self.counters.dropped_other += 1; // link scope: not forwarded
            return;
        }
        let Some((oif, hop)) = self.lookup6(dst) else {
            self.counters.dropped_no_route += 1;
            self.icmp6_error(me6.ip, icmpv6::DEST_UNREACHABLE, icmpv6::NO_ROUTE, &ip, out);
            return;
        };
        if ip.hop_limit() <= 1 {
            self.counters.dropped_ttl += 1;
            self.icmp6_error(me6.ip, icmpv6::TIME_EXCEEDED, 0, &ip, out);
            return;
        }
        let mut pkt = ip.packet().to_vec();
        ipv6::decrement_hop_limit(&mut pkt);
        self.send6(oif, hop, pkt, true, out);
    }

    /// A neighbour solicitation or advertisement on `iface`.
    fn receive_nd(
        &mut self,
        iface: usize,
        me: &Iface6,
        addrs: (ipv6::Addr, ipv6::Addr, u8),
        eth_src: Address,
        msg: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(cache) = self.neighbours6.get_mut(iface) else {
            return;
        };
        let Some(input) = cache.receive_nd(me, addrs, eth_src, msg) else {
            self.counters.dropped_other += 1;
            return;
        };
        if let Some((mac, waiting)) = input.released {
            for (pkt, fwd) in waiting {
                if fwd {
                    self.counters.forwarded += 1;
                }
                out.push((iface, ethernet::build(mac, me.mac, ipv6::ETHERTYPE, &pkt)));
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

    fn icmp6_error(
        &mut self,
        from: ipv6::Addr,
        t: u8,
        code: u8,
        orig: &ipv6::Packet<&[u8]>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let src = orig.src();
        if ipv6::is_special(src) || self.own6.contains_key(&src) {
            return;
        }
        if orig.next_header() == ipv6::NEXT_ICMPV6
            && orig.payload().first().is_none_or(|t| icmpv6::is_error(*t))
        {
            return;
        }
        let msg = icmpv6::error(t, code, 0, from, src, orig.packet());
        self.counters.icmp_sent += 1;
        self.originate6(from, src, &msg, out);
    }

    /// Send an ICMPv6 message of our own, routed like any packet.
    fn originate6(
        &mut self,
        src: ipv6::Addr,
        dst: ipv6::Addr,
        msg: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some((oif, hop)) = self.lookup6(dst) else {
            return;
        };
        let mut pkt = ipv6::header(src, dst, ipv6::NEXT_ICMPV6, ICMP_TTL, msg.len()).to_vec();
        pkt.extend_from_slice(msg);
        self.send6(oif, hop, pkt, false, out);
    }

    /// Transmit an IPv6 packet to `hop` on `oif`, resolving its MAC first if needed.
    fn send6(
        &mut self,
        oif: usize,
        hop: ipv6::Addr,
        pkt: Vec<u8>,
        forwarded: bool,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(me6) = self.ifaces.get(oif).and_then(iface6_of) else {
            return;
        };
        let Some(cache) = self.neighbours6.get_mut(oif) else {
            return;
        };
        match cache.resolve_nd(&me6, hop, (pkt, forwarded)) {
            Resolved::Now(mac, (pkt, _)) => {
                if forwarded {
                    self.counters.forwarded += 1;
                }
                out.push((oif, ethernet::build(mac, me6.mac, ipv6::ETHERTYPE, &pkt)));
            }
            Resolved::Queued { request } => out.extend(request.map(|r| (oif, r))),
            Resolved::Dropped => self.counters.arp_queue_drops += 1,
        }
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

fn iface6_of(f: &Interface) -> Option<Iface6> {
    let (ip, prefix) = f.ip6?;
    Some(Iface6 {
        mac: f.mac,
        ip,
        prefix,
        router: true,
    })
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
                ip6: None,
            },
            Interface {
                mac: Address([2, 0, 0, 0, 1, 2]),
                ip: [10, 1, 2, 1],
                prefix: 24,
                ip6: None,
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
            ip6: None,
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

    fn a6(s: &str) -> ipv6::Addr {
        ipv6::parse_addr(s).unwrap()
    }

    const HOST_MAC: Address = Address([2, 0, 0, 0, 0, 5]);
    const PEER_MAC: Address = Address([2, 0, 0, 0, 0, 9]);
    const R0: Address = Address([2, 0, 0, 0, 1, 1]);

    /// An IPv6-only router: fd00:1::1/64 on 0, fd00:2::1/64 on 1, fd00:9::/48 via fd00:2::9.
    fn r6() -> Router {
        let ifs = vec![
            Interface {
                mac: R0,
                ip: [0; 4],
                prefix: 0,
                ip6: Some((a6("fd00:1::1"), 64)),
            },
            Interface {
                mac: Address([2, 0, 0, 0, 1, 2]),
                ip: [0; 4],
                prefix: 0,
                ip6: Some((a6("fd00:2::1"), 64)),
            },
        ];
        let routes6 = vec![Route6 {
            dst: a6("fd00:9::"),
            prefix: 48,
            via: a6("fd00:2::9"),
        }];
        validate_dual(&ifs, &[], &routes6).unwrap();
        Router::new_dual(ifs, &[], &routes6)
    }

    /// An IPv6 frame from `from` to the router's interface 0 (`to_mac`).
    fn frame6(to_mac: Address, from: Address, pkt: &[u8]) -> Vec<u8> {
        ethernet::build(to_mac, from, ipv6::ETHERTYPE, pkt)
    }

    fn icmp6(src: ipv6::Addr, dst: ipv6::Addr, hops: u8, msg: &[u8]) -> Vec<u8> {
        let mut p = ipv6::header(src, dst, ipv6::NEXT_ICMPV6, hops, msg.len()).to_vec();
        p.extend_from_slice(msg);
        p
    }

    fn udp6(dst: &str, hops: u8) -> Vec<u8> {
        let mut p = ipv6::header(a6("fd00:1::5"), a6(dst), ipv6::NEXT_UDP, hops, 12).to_vec();
        p.extend_from_slice(&[0xab; 12]);
        p
    }

    /// The ICMPv6 message of an IPv6 frame, with the packet's addresses.
    fn icmp_of(f: &[u8]) -> (ipv6::Addr, ipv6::Addr, Vec<u8>) {
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        let ip = ipv6::Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.next_header(), ipv6::NEXT_ICMPV6);
        assert!(icmpv6::verify(ip.src(), ip.dst(), ip.payload()));
        (ip.src(), ip.dst(), ip.payload().to_vec())
    }

    /// Neighbour discovery both ways, forwarding with the hop limit, ICMPv6 errors and echo:
    /// what an emulated Linux node sees of a simulated IPv6 router.
    #[test]
    fn ipv6_neighbours_forwarding_and_icmpv6() {
        let mut r = r6();
        let host = a6("fd00:1::5");
        // The host asks for the router's address (to the solicited-node group): answered
        // with a solicited advertisement carrying the router flag, to the host's MAC.
        let ns = icmpv6::solicitation(host, a6("fd00:1::1"), HOST_MAC.0);
        let group = ipv6::solicited_node(a6("fd00:1::1"));
        let gmac = Address(ipv6::multicast_mac(group));
        let out = r.receive(0, &frame6(gmac, HOST_MAC, &icmp6(host, group, 255, &ns)));
        assert_eq!(out.len(), 1);
        let (i, na) = &out[0];
        assert_eq!((*i, &na[..6]), (0, &HOST_MAC.0[..]));
        let (src, dst, msg) = icmp_of(na);
        assert_eq!((src, dst), (a6("fd00:1::1"), host));
        let n = icmpv6::neighbour(src, dst, 255, &msg).unwrap();
        assert_eq!(
            (n.kind, n.target, n.mac, n.solicited),
            (136, a6("fd00:1::1"), Some(R0.0), true)
        );
        assert_eq!(msg[4] & 0x80, 0x80, "the router flag");
        // A solicitation with the wrong hop limit (not from the link) is ignored.
        let out = r.receive(0, &frame6(gmac, HOST_MAC, &icmp6(host, group, 64, &ns)));
        assert!(out.is_empty());

        // A packet for the peer's network: the router solicits the next hop first ...
        let out = r.receive(0, &frame6(R0, HOST_MAC, &udp6("fd00:9::7", 64)));
        assert_eq!(out.len(), 1);
        let (i, req) = &out[0];
        assert_eq!(*i, 1);
        assert_eq!(&req[..6], &[0x33, 0x33, 0xff, 0, 0, 9]);
        let (src, dst, msg) = icmp_of(req);
        assert_eq!(
            (src, dst),
            (a6("fd00:2::1"), ipv6::solicited_node(a6("fd00:2::9")))
        );
        let n = icmpv6::neighbour(src, dst, 255, &msg).unwrap();
        assert_eq!((n.kind, n.target), (135, a6("fd00:2::9")));
        // ... and the advertisement releases it, its hop limit one less.
        let na = icmpv6::advertisement(
            a6("fd00:2::9"),
            a6("fd00:2::1"),
            a6("fd00:2::9"),
            PEER_MAC.0,
            true,
            false,
        );
        let r1 = Address([2, 0, 0, 0, 1, 2]);
        let pkt = icmp6(a6("fd00:2::9"), a6("fd00:2::1"), 255, &na);
        let out = r.receive(1, &frame6(r1, PEER_MAC, &pkt));
        assert_eq!(out.len(), 1);
        let (i, fwd) = &out[0];
        assert_eq!(
            (*i, &fwd[..6], &fwd[6..12]),
            (1, &PEER_MAC.0[..], &r1.0[..])
        );
        let mut want = udp6("fd00:9::7", 63);
        assert_eq!(&fwd[14..], &want[..]);
        assert_eq!(r.counters.forwarded, 1);

        // The in-place path does the same now that the next hop is known.
        let mut f = frame6(R0, HOST_MAC, &udp6("fd00:9::7", 64));
        assert_eq!(r.forward_in_place(0, &mut f), Some(1));
        assert_eq!(&f[14..], &want[..]);
        let mut last = frame6(R0, HOST_MAC, &udp6("fd00:9::7", 1));
        let untouched = last.clone();
        assert_eq!(r.forward_in_place(0, &mut last), None, "hop limit 1");
        assert_eq!(last, untouched);

        // Hop limit 1: time exceeded, from the incoming interface's address, quoting the
        // packet; no route: destination unreachable (no route).
        for (dst, hops, kind) in [("fd00:9::7", 1, 3u8), ("fd00:77::1", 64, 1)] {
            want = udp6(dst, hops);
            let out = r.receive(0, &frame6(R0, HOST_MAC, &want));
            assert_eq!(out.len(), 1, "{dst}");
            let (i, e) = &out[0];
            assert_eq!((*i, &e[..6]), (0, &HOST_MAC.0[..]));
            let (src, to, msg) = icmp_of(e);
            assert_eq!((src, to, msg[0], msg[1]), (a6("fd00:1::1"), host, kind, 0));
            assert_eq!(&msg[8..], &want[..]);
        }
        assert_eq!(
            (r.counters.dropped_ttl, r.counters.dropped_no_route),
            (1, 1)
        );
        // No error about an error.
        let err = icmpv6::error(3, 0, 0, host, a6("fd00:77::1"), &want);
        let out = r.receive(
            0,
            &frame6(R0, HOST_MAC, &icmp6(host, a6("fd00:77::1"), 64, &err)),
        );
        assert!(out.is_empty());

        // An echo request to the far interface's address is answered from that address.
        let mut echo = vec![128, 0, 0, 0, 0, 1, 0, 1, 1, 2, 3];
        let c = icmpv6::checksum(host, a6("fd00:2::1"), &echo);
        echo[2..4].copy_from_slice(&c.to_be_bytes());
        let pkt = icmp6(host, a6("fd00:2::1"), 64, &echo);
        let out = r.receive(0, &frame6(R0, HOST_MAC, &pkt));
        assert_eq!(out.len(), 1);
        let (src, to, msg) = icmp_of(&out[0].1);
        assert_eq!(
            (src, to, msg[0], &msg[4..]),
            (a6("fd00:2::1"), host, 129, &echo[4..])
        );
        // IPv4 and ARP on an interface without an IPv4 address: dropped.
        let before = r.counters.dropped_other;
        let v4 = ethernet::build(R0, HOST_MAC, ETH_IPV4, &udp6("fd00:9::7", 64));
        assert!(r.receive(0, &v4).is_empty());
        assert_eq!(r.counters.dropped_other, before + 1);
    }

    #[test]
    fn ipv6_validation_names_fields() {
        let f = |ip6: Option<(ipv6::Addr, u8)>| Interface {
            mac: R0,
            ip: [0; 4],
            prefix: 0,
            ip6,
        };
        assert!(validate_dual(&[f(None)], &[], &[])
            .unwrap_err()
            .starts_with("interfaces[0].ip:"));
        assert!(validate_dual(&[f(Some((a6("fe80::1"), 64)))], &[], &[])
            .unwrap_err()
            .starts_with("interfaces[0].ip6"));
        let ok = [f(Some((a6("fd00:1::1"), 64)))];
        let route = |dst: &str, via: &str| Route6 {
            dst: a6(dst),
            prefix: 48,
            via: a6(via),
        };
        assert!(validate_dual(&ok, &[], &[route("fd00:9::1", "fd00:1::2")])
            .unwrap_err()
            .starts_with("routes6[0].dst"));
        assert!(validate_dual(&ok, &[], &[route("fd00:9::", "fd00:3::2")])
            .unwrap_err()
            .starts_with("routes6[0].via"));
        assert!(validate_dual(&ok, &[], &[route("fd00:9::", "fd00:1::2")]).is_ok());
    }
}
