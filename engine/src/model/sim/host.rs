//! A simulated host: one interface with an IPv4 address, an IPv6 address or both, no
//! forwarding. It answers ARP requests and neighbour solicitations for its addresses and
//! ICMP / ICMPv6 echo requests, resolves its next hop (the destination when it is on the
//! interface's subnet, else that family's default gateway) with ARP or neighbour
//! discovery, and hands UDP datagrams addressed to it to the network, which delivers them to
//! the sink agent bound to the port; TCP segments likewise go to the TCP agent bound to the
//! destination port.
//!
//! Like [`super::router::Router`] it holds no clock and no timer; address resolution is the
//! same [`NeighbourCache`] as the router's (see `neighbours` for its rules).
use serde::Serialize;

use super::ip::IpAddr;
use super::neighbours::{Iface, Iface6, NeighbourCache, Resolved};
use super::tcp::{self, Segment};
use crate::wire::ethernet::{self, Address, Frame};
use crate::wire::ipv4::{self, Addr};
use crate::wire::{arp, icmp, icmpv6, ipv6, udp};

const ETH_IPV4: u16 = 0x0800;
pub const PROTO_UDP: u8 = udp::PROTOCOL;
pub const UDP_HEADER_LEN: usize = udp::HEADER_LEN;
pub const PROTO_TCP: u8 = crate::wire::tcp::PROTOCOL;
const TTL: u8 = 64;

/// A host's addressing: IPv4, IPv6 or both (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    pub mac: Address,
    pub v4: Option<Family<Addr>>,
    pub v6: Option<Family<ipv6::Addr>>,
}

/// One family's address, prefix length and default gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family<A> {
    pub ip: A,
    pub prefix: u8,
    pub gateway: Option<A>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct HostCounters {
    pub udp_sent: u64,
    pub udp_received: u64,
    pub tcp_sent: u64,
    pub tcp_received: u64,
    pub icmp_sent: u64,
    pub arp_replies: u64,
    pub dropped_no_route: u64,
    pub dropped_other: u64,
    pub arp_queue_drops: u64,
}

/// A UDP datagram addressed to the host; its payload is borrowed from the received frame
/// (a sink only reads it: no copy per packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub src: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub payload: &'a [u8],
}

/// What a host hands up to its agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Up<'a> {
    Udp(Datagram<'a>),
    Tcp(Segment),
}

#[derive(Debug)]
pub struct Host {
    pub cfg: HostConfig,
    neighbours: NeighbourCache<Vec<u8>>,
    neighbours6: NeighbourCache<Vec<u8>, ipv6::Addr>,
    ident: u16,
    pub counters: HostCounters,
}

/// Check a host configuration; the error names the field.
pub fn validate(c: &HostConfig) -> Result<(), String> {
    if c.mac.is_multicast() || c.mac.0 == [0; 6] {
        return Err("mac: must be a unicast, non-zero MAC".into());
    }
    if c.v4.is_none() && c.v6.is_none() {
        return Err("ip: a host needs an IPv4 or an IPv6 address".into());
    }
    if let Some(f) = c.v4 {
        if ipv4::is_special(f.ip) || f.prefix == 0 {
            return Err("ip: must be a unicast address with a prefix of 1..=32".into());
        }
        if let Some(g) = f.gateway {
            if !ipv4::in_subnet(g, f.ip, f.prefix) || g == f.ip || ipv4::is_special(g) {
                return Err("gateway: must be another unicast address on the host's subnet".into());
            }
        }
    }
    if let Some(f) = c.v6 {
        if ipv6::is_special(f.ip) || f.prefix == 0 || f.prefix > 128 {
            return Err("ip6: must be a unicast address with a prefix of 1..=128".into());
        }
        if let Some(g) = f.gateway {
            let on_link = ipv6::in_subnet(g, f.ip, f.prefix) || ipv6::is_link_local(g);
            if !on_link || g == f.ip || ipv6::is_multicast(g) {
                return Err(
                    "gateway6: must be another unicast address on the host's subnet".into(),
                );
            }
        }
    }
    Ok(())
}

impl Host {
    pub fn new(cfg: HostConfig) -> Self {
        Host {
            cfg,
            neighbours: NeighbourCache::default(),
            neighbours6: NeighbourCache::default(),
            ident: 0,
            counters: HostCounters::default(),
        }
    }

    /// A frame arrived; returns the frames to send and a UDP datagram for the host, if any.
    /// (A TCP segment counts as `dropped_other` here; see [`Host::receive_any`].)
    pub fn receive<'a>(&mut self, frame: &'a [u8]) -> (Vec<Vec<u8>>, Option<Datagram<'a>>) {
        match self.receive_any(frame) {
            (out, Some(Up::Udp(d))) => (out, Some(d)),
            (out, Some(Up::Tcp(_))) => {
                self.counters.dropped_other += 1;
                (out, None)
            }
            (out, None) => (out, None),
        }
    }

    /// A frame arrived; returns the frames to send and a UDP datagram or TCP segment
    /// addressed to the host, if any.
    pub fn receive_any<'a>(&mut self, frame: &'a [u8]) -> (Vec<Vec<u8>>, Option<Up<'a>>) {
        let mut out = Vec::new();
        let Ok(eth) = Frame::new_checked(frame) else {
            self.counters.dropped_other += 1;
            return (out, None);
        };
        let ours = eth.dst() == self.cfg.mac;
        // IPv6 multicast (33:33:...): neighbour discovery reaches us that way.
        let v6_group = eth.dst().0[..2] == [0x33, 0x33] && eth.ethertype() == ipv6::ETHERTYPE;
        if !ours && eth.dst() != Address::BROADCAST && !v6_group {
            self.counters.dropped_other += 1;
            return (out, None);
        }
        let mut dgram = None;
        match eth.ethertype() {
            arp::ETHERTYPE if self.cfg.v4.is_some() => self.receive_arp(eth.payload(), &mut out),
            ETH_IPV4 if ours && self.cfg.v4.is_some() => {
                dgram = self.receive_ipv4(eth.into_payload(), &mut out)
            }
            ipv6::ETHERTYPE if self.cfg.v6.is_some() && eth.dst() != Address::BROADCAST => {
                let src = eth.src();
                dgram = self.receive_ipv6(src, eth.into_payload(), &mut out)
            }
            _ => self.counters.dropped_other += 1,
        }
        (out, dgram)
    }

    fn iface(&self) -> Option<Iface> {
        let f = self.cfg.v4?;
        Some(Iface {
            mac: self.cfg.mac,
            ip: f.ip,
            prefix: f.prefix,
        })
    }

    fn iface6(&self) -> Option<Iface6> {
        let f = self.cfg.v6?;
        Some(Iface6 {
            mac: self.cfg.mac,
            ip: f.ip,
            prefix: f.prefix,
            router: false,
        })
    }

    fn receive_arp(&mut self, payload: &[u8], out: &mut Vec<Vec<u8>>) {
        let Some(me) = self.iface() else {
            return;
        };
        let Some(input) = self.neighbours.receive_arp(&me, payload) else {
            self.counters.dropped_other += 1;
            return;
        };
        if let Some((mac, waiting)) = input.released {
            for pkt in waiting {
                out.push(ethernet::build(mac, me.mac, ETH_IPV4, &pkt));
            }
        }
        if let Some(reply) = input.reply {
            out.push(reply);
            self.counters.arp_replies += 1;
        }
        if input.ignored {
            self.counters.dropped_other += 1;
        }
    }

    fn receive_ipv4<'a>(&mut self, payload: &'a [u8], out: &mut Vec<Vec<u8>>) -> Option<Up<'a>> {
        let Ok(ip) = ipv4::Packet::new_checked(payload) else {
            self.counters.dropped_other += 1;
            return None;
        };
        if !ip.verify_checksum()
            || Some(ip.dst()) != self.cfg.v4.map(|f| f.ip)
            || ip.frag_offset() != 0
            || ip.more_frags()
        {
            self.counters.dropped_other += 1;
            return None;
        }
        let (src, dst) = (ip.src(), ip.dst());
        match ip.protocol() {
            ipv4::PROTO_ICMP => match icmp::echo_reply(ip.payload()) {
                Some(msg) => {
                    self.counters.icmp_sent += 1;
                    let write = |d: &mut [u8]| d.copy_from_slice(&msg);
                    let to = IpAddr::V4(src);
                    self.send_ip(to, ipv4::PROTO_ICMP, msg.len(), write, Vec::new(), out);
                }
                None => self.counters.dropped_other += 1,
            },
            proto => return self.up(proto, (src.into(), dst.into()), ip.into_payload()),
        }
        None
    }

    /// An IPv6 packet from the MAC `eth_src`: neighbour discovery, echo, or for the agents.
    fn receive_ipv6<'a>(
        &mut self,
        eth_src: Address,
        payload: &'a [u8],
        out: &mut Vec<Vec<u8>>,
    ) -> Option<Up<'a>> {
        let (Some(me), Ok(ip)) = (self.iface6(), ipv6::Packet::new_checked(payload)) else {
            self.counters.dropped_other += 1;
            return None;
        };
        let (src, dst) = (ip.src(), ip.dst());
        if !me.owns(dst) && !me.listens(dst) {
            self.counters.dropped_other += 1;
            return None;
        }
        if ip.next_header() != ipv6::NEXT_ICMPV6 {
            if ipv6::is_multicast(dst) {
                self.counters.dropped_other += 1;
                return None;
            }
            let len = ip.payload_len();
            let body = &payload[ipv6::HEADER_LEN..ipv6::HEADER_LEN + len];
            return self.up(ip.next_header(), (src.into(), dst.into()), body);
        }
        let msg = ip.payload();
        match msg.first().copied() {
            Some(icmpv6::NEIGHBOUR_SOLICITATION | icmpv6::NEIGHBOUR_ADVERTISEMENT) => {
                let hops = ip.hop_limit();
                match self
                    .neighbours6
                    .receive_nd(&me, (src, dst, hops), eth_src, msg)
                {
                    Some(input) => {
                        if let Some((mac, waiting)) = input.released {
                            for pkt in waiting {
                                out.push(ethernet::build(mac, me.mac, ipv6::ETHERTYPE, &pkt));
                            }
                        }
                        if let Some(reply) = input.reply {
                            out.push(reply);
                            self.counters.arp_replies += 1;
                        }
                        if input.ignored {
                            self.counters.dropped_other += 1;
                        }
                    }
                    None => self.counters.dropped_other += 1,
                }
            }
            Some(icmpv6::ECHO_REQUEST) if me.owns(dst) => match icmpv6::echo_reply(src, dst, msg) {
                Some(reply) => {
                    self.counters.icmp_sent += 1;
                    let write = |d: &mut [u8]| d.copy_from_slice(&reply);
                    let to = IpAddr::V6(src);
                    let len = reply.len();
                    self.send_ip(to, ipv6::NEXT_ICMPV6, len, write, Vec::new(), out);
                }
                None => self.counters.dropped_other += 1,
            },
            _ => self.counters.dropped_other += 1,
        }
        None
    }

    /// A UDP datagram or TCP segment from `src` to `dst` (either family), for the agents.
    fn up<'a>(
        &mut self,
        proto: u8,
        (src, dst): (IpAddr, IpAddr),
        body: &'a [u8],
    ) -> Option<Up<'a>> {
        match proto {
            PROTO_UDP => {
                let Ok(u) = udp::Packet::new_checked(body) else {
                    self.counters.dropped_other += 1;
                    return None;
                };
                self.counters.udp_received += 1;
                Some(Up::Udp(Datagram {
                    src,
                    sport: u.src_port(),
                    dport: u.dst_port(),
                    payload: u.into_payload(),
                }))
            }
            PROTO_TCP => match tcp::parse(src, dst, body) {
                Some(seg) => {
                    self.counters.tcp_received += 1;
                    Some(Up::Tcp(seg))
                }
                None => {
                    self.counters.dropped_other += 1;
                    None
                }
            },
            _ => {
                self.counters.dropped_other += 1;
                None
            }
        }
    }

    /// The host's address of `dst`'s family (`None`: the host does not speak it).
    fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(_) => self.cfg.v4.map(|f| IpAddr::V4(f.ip)),
            IpAddr::V6(_) => self.cfg.v6.map(|f| IpAddr::V6(f.ip)),
        }
    }

    /// Send a UDP datagram; returns the frames to transmit (the datagram itself, or an ARP
    /// request while the next hop is unresolved).
    pub fn send_udp(
        &mut self,
        dst: impl Into<IpAddr>,
        sport: u16,
        dport: u16,
        payload: &[u8],
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let fill = |p: &mut [u8]| p.copy_from_slice(payload);
        self.send_udp_with(
            dst.into(),
            (sport, dport),
            payload.len(),
            fill,
            Vec::new(),
            &mut out,
        );
        out
    }

    /// [`Host::send_udp`] of a `len`-byte payload that `fill` writes in place, into `out`:
    /// a traffic source's datagram is built in its frame, in `buf`'s memory (a frame
    /// delivered earlier: no allocation per packet).
    pub fn send_udp_with(
        &mut self,
        dst: IpAddr,
        (sport, dport): (u16, u16),
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let Some(src) = self.source_for(dst) else {
            self.counters.dropped_no_route += 1;
            return;
        };
        let write = |d: &mut [u8]| {
            fill(&mut d[UDP_HEADER_LEN..]);
            udp::emit(d, src, dst, sport, dport);
        };
        if self.send_ip(dst, PROTO_UDP, UDP_HEADER_LEN + len, write, buf, out) {
            self.counters.udp_sent += 1;
        }
    }

    /// Send a TCP segment (20-byte header, `payload_len` zero bytes of payload); returns the
    /// frames to transmit like [`Host::send_udp`].
    pub fn send_tcp(
        &mut self,
        dst: impl Into<IpAddr>,
        sport: u16,
        dport: u16,
        seg: &tcp::TxSeg,
    ) -> Vec<Vec<u8>> {
        let dst = dst.into();
        let mut out = Vec::new();
        let Some(src) = self.source_for(dst) else {
            self.counters.dropped_no_route += 1;
            return out;
        };
        let msg = tcp::build(src, dst, sport, dport, seg);
        let write = |d: &mut [u8]| d.copy_from_slice(&msg);
        if self.send_ip(dst, PROTO_TCP, msg.len(), write, Vec::new(), &mut out) {
            self.counters.tcp_sent += 1;
        }
        out
    }

    /// Send an IP packet of `dst`'s family whose `len`-byte payload `write` fills in place:
    /// into its frame when the next hop is known, else into the packet that waits for
    /// address resolution; either in `buf`'s memory.
    fn send_ip(
        &mut self,
        dst: IpAddr,
        proto: u8,
        len: usize,
        write: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        match dst {
            IpAddr::V4(d) => self.send_ipv4(d, proto, len, write, buf, out),
            IpAddr::V6(d) => self.send_ipv6(d, proto, len, write, buf, out),
        }
    }

    fn send_ipv4(
        &mut self,
        dst: Addr,
        proto: u8,
        len: usize,
        write: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        let Some((me, c)) = self.iface().zip(self.cfg.v4) else {
            self.counters.dropped_no_route += 1;
            return false;
        };
        let hop = if ipv4::in_subnet(dst, c.ip, c.prefix) {
            Some(dst)
        } else {
            c.gateway
        };
        let Some(hop) = hop.filter(|h| *h != c.ip && !ipv4::is_special(dst)) else {
            self.counters.dropped_no_route += 1;
            return false;
        };
        self.ident = self.ident.wrapping_add(1);
        let header = ipv4::header(c.ip, dst, proto, TTL, self.ident, len);
        if let Some(mac) = self.neighbours.lookup(hop) {
            out.push(in_frame(buf, (mac, me.mac, ETH_IPV4), &header, len, write));
            return true;
        }
        let pkt = in_packet(buf, &header, len, write);
        match self.neighbours.resolve(&me, hop, pkt) {
            Resolved::Now(mac, pkt) => out.push(ethernet::build(mac, me.mac, ETH_IPV4, &pkt)),
            Resolved::Queued { request } => out.extend(request),
            Resolved::Dropped => self.counters.arp_queue_drops += 1,
        }
        true
    }

    fn send_ipv6(
        &mut self,
        dst: ipv6::Addr,
        proto: u8,
        len: usize,
        write: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        let Some((me, c)) = self.iface6().zip(self.cfg.v6) else {
            self.counters.dropped_no_route += 1;
            return false;
        };
        let hop = if ipv6::in_subnet(dst, c.ip, c.prefix) || ipv6::is_link_local(dst) {
            Some(dst)
        } else {
            c.gateway
        };
        let Some(hop) = hop.filter(|h| *h != c.ip && !ipv6::is_multicast(dst)) else {
            self.counters.dropped_no_route += 1;
            return false;
        };
        let header = ipv6::header(c.ip, dst, proto, TTL, len);
        if let Some(mac) = self.neighbours6.lookup(hop) {
            out.push(in_frame(
                buf,
                (mac, me.mac, ipv6::ETHERTYPE),
                &header,
                len,
                write,
            ));
            return true;
        }
        let pkt = in_packet(buf, &header, len, write);
        match self.neighbours6.resolve_nd(&me, hop, pkt) {
            Resolved::Now(mac, pkt) => {
                out.push(ethernet::build(mac, me.mac, ipv6::ETHERTYPE, &pkt))
            }
            Resolved::Queued { request } => out.extend(request),
            Resolved::Dropped => self.counters.arp_queue_drops += 1,
        }
        true
    }
}

/// A frame (Ethernet `(dst, src, type)`, `header`, a `len`-byte payload that `write` fills)
/// in `buf`'s memory.
fn in_frame(
    buf: Vec<u8>,
    (dst, src, ethertype): (Address, Address, u16),
    header: &[u8],
    len: usize,
    write: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut f = buf;
    f.clear();
    f.resize(ethernet::HEADER_LEN + header.len() + len, 0);
    ethernet::write_header(&mut f, dst, src, ethertype);
    let (h, payload) = f[ethernet::HEADER_LEN..].split_at_mut(header.len());
    h.copy_from_slice(header);
    write(payload);
    f
}

/// An IP packet (`header` + payload) in `buf`'s memory, to wait for address resolution.
fn in_packet(buf: Vec<u8>, header: &[u8], len: usize, write: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut pkt = buf;
    pkt.clear();
    pkt.resize(header.len() + len, 0);
    pkt[..header.len()].copy_from_slice(header);
    write(&mut pkt[header.len()..]);
    pkt
}
