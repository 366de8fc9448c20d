//! A frame inside the model, with its offload metadata.
//!
//! Almost every frame is a plain wire frame (`vnet` = default). Frames read from a TAP with
//! offloads may instead be a TCP super-frame (`vnet.is_gso()`, up to 64 KB) or carry a partial
//! checksum (`vnet.needs_csum()`). Such a frame may only cross a pipeline **whole** while that
//! pipeline does nothing per packet (unlimited bandwidth, no loss, duplication or corruption,
//! no capture): then it is handed to the destination TAP with its header, and the receiving
//! kernel sees what a GRO-capable NIC would deliver. Everywhere else it is first turned into
//! the wire frames a NIC would send ([`crate::wire::gso::to_wire`]), so queues, serialization,
//! loss and captures see exactly those frames.

use crate::wire::gso;
use crate::wire::vnet::VnetHdr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub data: Vec<u8>,
    pub vnet: VnetHdr,
}

impl Packet {
    /// A plain wire frame.
    pub fn plain(data: Vec<u8>) -> Self {
        Packet {
            data,
            vnet: VnetHdr::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// (wire frames, wire bytes) this packet stands for; (1, len) for a plain frame.
    pub fn wire_size(&self) -> (u64, u64) {
        if self.vnet.is_gso() {
            gso::wire_size(&self.vnet, &self.data)
        } else {
            (1, self.data.len() as u64)
        }
    }

    /// The wire frames this packet stands for (itself if plain). `Err` if malformed.
    pub fn into_wire(self) -> Result<Vec<Vec<u8>>, gso::GsoError> {
        if !self.vnet.is_offloaded() {
            return Ok(vec![self.data]);
        }
        let mut out = Vec::new();
        gso::to_wire(&self.vnet, &self.data, &mut out)?;
        Ok(out)
    }
}
