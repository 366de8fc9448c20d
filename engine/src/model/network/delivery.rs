//! Simulated delivery: what happens to a frame when it leaves a pipeline. It goes out of a
//! real port (to the driver), into a simulated router or host (whose answers enter their
//! port's ingress pipeline at the same instant), or through a LAN's switch into the members'
//! `from_lan` pipelines.
use super::{AgentKind, Network, Output, PipeIdx, Sink};
use crate::model::lan::Forward;
use crate::model::packet::Packet;
use crate::model::sim::host::{Up, PROTO_UDP};
use crate::time::Instant;
use crate::wire::stamp;

impl Network {
    pub(super) fn forward(
        &mut self,
        sink: Sink,
        f: Packet,
        at: Instant,
        emit: &mut impl FnMut(Output<'_>),
    ) {
        match sink {
            Sink::Port(port) => {
                let p = self.ports.get(port);
                if let Some((_, other)) = p.and_then(|p| p.patch) {
                    // through the patch into whatever the other port is attached to
                    self.receive_packet(other, f, at);
                    return;
                }
                match (p.and_then(|p| p.sim), p.and_then(|p| p.host)) {
                    (Some((r, iface)), _) => self.route(r, iface, f, at),
                    (None, Some(h)) => self.host_receive(h, f, at),
                    (None, None) => {
                        let mut data = f.data;
                        if p.is_some_and(|p| p.tunnel) {
                            // the due time, stamped in engine time, as Unix time
                            if let Some(due) = stamp::strip(&mut data) {
                                stamp::append(&mut data, due.saturating_add(self.wall_offset_ns));
                            }
                        }
                        emit(Output::Frame {
                            port,
                            data,
                            vnet: f.vnet,
                            at,
                        })
                    }
                }
            }
            Sink::Lan { lan, member } => self.switch(lan, member, f, at),
            Sink::Pair { lan, to } => {
                let pipe = self.lans.get(lan).and_then(|l| l.members.get(to));
                if let Some(pipe) = pipe.map(|m| m.from_lan) {
                    self.enqueue(pipe, f, at);
                }
            }
        }
    }

    fn enqueue(&mut self, pipe: PipeIdx, f: Packet, at: Instant) {
        if let Some(slot) = self.pipes.get_mut(pipe) {
            slot.pipe.enqueue_packet(f, at);
            self.reschedule(pipe);
        }
    }

    /// Hand a frame to a simulated router and enqueue what it sends at the same instant.
    fn route(&mut self, r: usize, iface: usize, f: Packet, at: Instant) {
        let Some(sr) = self.routers.get_mut(r) else {
            return;
        };
        let mut f = f;
        if !f.vnet.is_offloaded() {
            if let Some(oif) = sr.router.forward_in_place(iface, &mut f.data) {
                if let Some(&port) = sr.ports.get(oif) {
                    self.receive_packet(port, Packet::plain(f.data), at);
                }
                return;
            }
        }
        let Ok(frames) = f.into_wire() else {
            sr.router.counters.dropped_other += 1;
            return;
        };
        let mut out = Vec::new();
        for w in frames {
            out.extend(
                sr.router
                    .receive(iface, &w)
                    .into_iter()
                    .filter_map(|(i, d)| sr.ports.get(i).map(|&p| (p, d))),
            );
        }
        for (port, d) in out {
            self.receive_packet(port, Packet::plain(d), at);
        }
    }

    /// Hand a frame to a simulated host: its answers are enqueued at the same instant, a UDP
    /// datagram goes to the sink bound to its port (or is counted as dropped), a TCP segment
    /// to the TCP agent bound to its port (see `tcp_agents`).
    fn host_receive(&mut self, h: usize, f: Packet, at: Instant) {
        if !f.vnet.is_offloaded() {
            // A plain frame (every frame between simulated nodes): no copy, and its buffer
            // serves a frame sent later.
            self.host_receive_wire(h, std::slice::from_ref(&f.data), at);
            if self.spare.len() < super::SPARE_FRAMES && f.data.capacity() <= super::SPARE_CAPACITY
            {
                self.spare.push(f.data);
            }
            return;
        }
        match f.into_wire() {
            Ok(frames) => self.host_receive_wire(h, &frames, at),
            Err(_) => {
                if let Some(sh) = self.hosts.get_mut(h) {
                    sh.host.counters.dropped_other += 1;
                }
            }
        }
    }

    /// The wire frames of one packet into host `h`: datagrams to their sinks first, then the
    /// host's answers, then TCP segments to their agents.
    fn host_receive_wire(&mut self, h: usize, frames: &[Vec<u8>], at: Instant) {
        let Some(sh) = self.hosts.get_mut(h) else {
            return;
        };
        let port = sh.port;
        let mut out = Vec::new();
        let mut ups = Vec::with_capacity(frames.len());
        for w in frames {
            let (o, u) = sh.host.receive_any(w);
            out.extend(o);
            ups.extend(u);
        }
        for u in &ups {
            let Up::Udp(d) = u else { continue };
            let ai = self.bound.get(&(h, PROTO_UDP, d.dport)).copied();
            let sink = ai
                .and_then(|ai| self.agents.get_mut(ai))
                .and_then(|a| match &mut a.kind {
                    AgentKind::Sink(s) => Some(s),
                    _ => None,
                });
            match sink {
                Some(s) => s.receive(d.payload, at),
                None => {
                    if let Some(sh) = self.hosts.get_mut(h) {
                        sh.host.counters.dropped_other += 1;
                    }
                }
            }
        }
        for d in out {
            self.receive_packet(port, Packet::plain(d), at);
        }
        for u in ups {
            if let Up::Tcp(s) = u {
                self.tcp_receive(h, s, at);
            }
        }
    }

    /// A frame left member `from`'s `to_lan` pipeline: the switch forwards it to one
    /// member or floods it to all others; towards each destination it enters the pair's
    /// channel if the LAN has one, else that member's `from_lan` pipeline.
    fn switch(&mut self, lan: usize, from: usize, frame: Packet, at: Instant) {
        let Some(l) = self.lans.get_mut(lan) else {
            return;
        };
        let towards = |l: &crate::model::lan::Lan, to: usize| {
            l.pair(from, to)
                .or_else(|| l.members.get(to).map(|m| m.from_lan))
        };
        let targets: Vec<PipeIdx> = match l.switch(from, &frame.data, at) {
            Forward::Filter => return,
            Forward::To(m) => towards(l, m).into_iter().collect(),
            Forward::Flood => (0..l.members.len())
                .filter(|&i| i != from)
                .filter_map(|i| towards(l, i))
                .collect(),
        };
        let last = targets.len().saturating_sub(1);
        let mut frame = Some(frame);
        for (i, pipe) in targets.into_iter().enumerate() {
            // Move the frame into the last target, clone for the others.
            let Some(f) = (if i == last {
                frame.take()
            } else {
                frame.clone()
            }) else {
                continue;
            };
            self.enqueue(pipe, f, at);
        }
    }
}
