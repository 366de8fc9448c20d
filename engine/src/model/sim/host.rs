//! A simulated IPv4 host: one interface, no forwarding. It answers ARP requests for its
//! address and ICMP echo requests, resolves its next hop (the destination when it is on the
//! interface's subnet, else the default gateway) with ARP, and hands UDP datagrams addressed
//! to it to the network, which delivers them to the sink agent bound to the port; TCP
//! segments likewise go to the TCP agent bound to the destination port.
//!
//! Like [`super::router::Router`] it holds no clock and no timer; ARP is the same
//! [`NeighbourCache`] as the router's (see `neighbours` for its rules).
use serde::Serialize;

use super::neighbours::{Iface, NeighbourCache, Resolved};
use super::tcp::{self, Segment};
use crate::wire::ethernet::{self, Address, Frame};
use crate::wire::ipv4::{self, Addr};
use crate::wire::{arp, icmp, udp};

const ETH_IPV4: u16 = 0x0800;
pub const PROTO_UDP: u8 = udp::PROTOCOL;
pub const UDP_HEADER_LEN: usize = udp::HEADER_LEN;
pub const PROTO_TCP: u8 = crate::wire::tcp::PROTOCOL;
const TTL: u8 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    pub mac: Address,
    pub ip: Addr,
    pub prefix: u8,
    pub gateway: Option<Addr>,
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
    pub src: Addr,
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
    ident: u16,
    pub counters: HostCounters,
}

/// Check a host configuration; the error names the field.
pub fn validate(c: &HostConfig) -> Result<(), String> {
    if c.mac.is_multicast() || c.mac.0 == [0; 6] {
        return Err("mac: must be a unicast, non-zero MAC".into());
    }
    if ipv4::is_special(c.ip) || c.prefix == 0 {
        return Err("ip: must be a unicast address with a prefix of 1..=32".into());
    }
    if let Some(g) = c.gateway {
        if !ipv4::in_subnet(g, c.ip, c.prefix) || g == c.ip || ipv4::is_special(g) {
            return Err("gateway: must be another unicast address on the host's subnet".into());
        }
    }
    Ok(())
}

impl Host {
    pub fn new(cfg: HostConfig) -> Self {
        Host {
            cfg,
            neighbours: NeighbourCache::default(),
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
        if eth.dst() != self.cfg.mac && eth.dst() != Address::BROADCAST {
            self.counters.dropped_other += 1;
            return (out, None);
        }
        let mut dgram = None;
        match eth.ethertype() {
            arp::ETHERTYPE => self.receive_arp(eth.payload(), &mut out),
            ETH_IPV4 if eth.dst() == self.cfg.mac => {
                dgram = self.receive_ipv4(eth.into_payload(), &mut out)
            }
            _ => self.counters.dropped_other += 1,
        }
        (out, dgram)
    }

    fn iface(&self) -> Iface {
        Iface {
            mac: self.cfg.mac,
            ip: self.cfg.ip,
            prefix: self.cfg.prefix,
        }
    }

    fn receive_arp(&mut self, payload: &[u8], out: &mut Vec<Vec<u8>>) {
        let me = self.iface();
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
            || ip.dst() != self.cfg.ip
            || ip.frag_offset() != 0
            || ip.more_frags()
        {
            self.counters.dropped_other += 1;
            return None;
        }
        match ip.protocol() {
            ipv4::PROTO_ICMP => match icmp::echo_reply(ip.payload()) {
                Some(msg) => {
                    self.counters.icmp_sent += 1;
                    let write = |d: &mut [u8]| d.copy_from_slice(&msg);
                    self.send_ip(
                        ip.src(),
                        ipv4::PROTO_ICMP,
                        msg.len(),
                        write,
                        Vec::new(),
                        out,
                    );
                }
                None => self.counters.dropped_other += 1,
            },
            PROTO_UDP => {
                let src = ip.src();
                let Ok(u) = udp::Packet::new_checked(ip.into_payload()) else {
                    self.counters.dropped_other += 1;
                    return None;
                };
                self.counters.udp_received += 1;
                return Some(Up::Udp(Datagram {
                    src,
                    sport: u.src_port(),
                    dport: u.dst_port(),
                    payload: u.into_payload(),
                }));
            }
            PROTO_TCP => match tcp::parse(ip.src(), ip.dst(), ip.payload()) {
                Some(seg) => {
                    self.counters.tcp_received += 1;
                    return Some(Up::Tcp(seg));
                }
                None => self.counters.dropped_other += 1,
            },
            _ => self.counters.dropped_other += 1,
        }
        None
    }

    /// Send a UDP datagram; returns the frames to transmit (the datagram itself, or an ARP
    /// request while the next hop is unresolved).
    pub fn send_udp(&mut self, dst: Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let fill = |p: &mut [u8]| p.copy_from_slice(payload);
        self.send_udp_with(
            dst,
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
        dst: Addr,
        (sport, dport): (u16, u16),
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let src = self.cfg.ip;
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
        dst: Addr,
        sport: u16,
        dport: u16,
        seg: &tcp::TxSeg,
    ) -> Vec<Vec<u8>> {
        let msg = tcp::build(self.cfg.ip, dst, sport, dport, seg);
        let mut out = Vec::new();
        let write = |d: &mut [u8]| d.copy_from_slice(&msg);
        if self.send_ip(dst, PROTO_TCP, msg.len(), write, Vec::new(), &mut out) {
            self.counters.tcp_sent += 1;
        }
        out
    }

    /// Send an IP packet whose `len`-byte payload `write` fills in place: into its frame
    /// when the next hop is known, else into the packet that waits for ARP; either in
    /// `buf`'s memory.
    fn send_ip(
        &mut self,
        dst: Addr,
        proto: u8,
        len: usize,
        write: impl FnOnce(&mut [u8]),
        buf: Vec<u8>,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        let c = &self.cfg;
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
        let me = self.iface();
        if let Some(mac) = self.neighbours.lookup(hop) {
            let mut f = buf;
            f.clear();
            f.resize(ethernet::HEADER_LEN + header.len() + len, 0);
            ethernet::write_header(&mut f, mac, me.mac, ETH_IPV4);
            let (h, payload) = f[ethernet::HEADER_LEN..].split_at_mut(header.len());
            h.copy_from_slice(&header);
            write(payload);
            out.push(f);
            return true;
        }
        let mut pkt = buf;
        pkt.clear();
        pkt.resize(header.len() + len, 0);
        pkt[..header.len()].copy_from_slice(&header);
        write(&mut pkt[header.len()..]);
        match self.neighbours.resolve(&me, hop, pkt) {
            Resolved::Now(mac, pkt) => out.push(ethernet::build(mac, me.mac, ETH_IPV4, &pkt)),
            Resolved::Queued { request } => out.extend(request),
            Resolved::Dropped => self.counters.arp_queue_drops += 1,
        }
        true
    }
}
