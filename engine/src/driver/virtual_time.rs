//! Virtual-time driver: jumps from deadline to deadline, as fast as the CPU allows.
//!
//! Used by the tests (exact departure times) and, later, for pure simulation. Frames that
//! leave the network are collected with their delivery time instead of written to TAPs.

use crate::model::network::{Network, Output, PortIdx};
use crate::model::packet::Packet;
use crate::time::Instant;
use crate::wire::vnet::VnetHdr;

/// A frame delivered to a port at a virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub at: Instant,
    pub port: PortIdx,
    pub data: Vec<u8>,
    /// Offload metadata (default: a plain wire frame).
    pub vnet: VnetHdr,
}

pub struct VirtualTime {
    pub net: Network,
    pub now: Instant,
    pub delivered: Vec<Delivered>,
}

impl VirtualTime {
    pub fn new(net: Network) -> Self {
        VirtualTime {
            net,
            now: Instant::ZERO,
            delivered: Vec::new(),
        }
    }

    /// Run every event up to and including `t`, then set the clock to `t`.
    pub fn run_until(&mut self, t: Instant) {
        while let Some(d) = self.net.poll_at() {
            if d > t {
                break;
            }
            self.now = self.now.max(d);
            let now = self.now;
            let delivered = &mut self.delivered;
            self.net.poll(now, |o| {
                if let Output::Frame {
                    port, data, vnet, ..
                } = o
                {
                    delivered.push(Delivered {
                        at: now,
                        port,
                        data,
                        vnet,
                    });
                }
            });
        }
        self.now = self.now.max(t);
    }

    /// Run until nothing is scheduled.
    pub fn run_to_idle(&mut self) {
        while let Some(d) = self.net.poll_at() {
            self.run_until(d.max(self.now));
        }
    }

    /// Advance to `at` and hand the network a frame with offload metadata received on `port`.
    pub fn inject_packet(&mut self, port: PortIdx, pkt: Packet, at: Instant) {
        self.run_until(at);
        self.net.receive_packet(port, pkt, self.now);
    }

    /// Advance to `at` and hand the network a frame received on `port`.
    pub fn inject(&mut self, port: PortIdx, frame: Vec<u8>, at: Instant) {
        self.run_until(at);
        self.net.receive(port, frame, self.now);
    }

    pub fn take(&mut self) -> Vec<Delivered> {
        std::mem::take(&mut self.delivered)
    }
}
