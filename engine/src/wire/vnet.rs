//! The `virtio_net_hdr` that precedes every frame on a TAP opened with `IFF_VNET_HDR`.
//!
//! The engine sets the header size to 12 bytes (`TUNSETVNETHDRSZ`, the `virtio_net_hdr_v1` /
//! `mrg_rxbuf` layout, the one modern virtio uses), little-endian as on every host wanlab runs
//! on (x86-64, arm64):
//!
//! | offset | field | meaning |
//! |---|---|---|
//! | 0 | `flags` u8 | bit 0 `NEEDS_CSUM`: the L4 checksum is partial (see below); bit 1 `DATA_VALID` |
//! | 1 | `gso_type` u8 | 0 none, 1 TCPv4, 3 UDP, 4 TCPv6, 5 UDP_L4; bit 7 ECN |
//! | 2 | `hdr_len` u16 | length of the headers (a hint; never trusted here) |
//! | 4 | `gso_size` u16 | payload bytes per segment (the MSS for TCP) |
//! | 6 | `csum_start` u16 | offset of the L4 header from the start of the Ethernet frame |
//! | 8 | `csum_offset` u16 | offset of the checksum field from `csum_start` (16 TCP, 6 UDP) |
//! | 10 | `num_buffers` u16 | unused (0) |
//!
//! With `NEEDS_CSUM` the checksum field holds the folded pseudo-header sum and the ones'
//! complement sum from `csum_start` to the end of the frame must still be added and inverted.

/// Size of the header the engine configures on its TAPs.
pub const LEN: usize = 12;

pub const F_NEEDS_CSUM: u8 = 1;
pub const F_DATA_VALID: u8 = 2;

pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

/// Offload metadata of one frame. `VnetHdr::default()` is a plain wire frame: complete
/// checksums, not a super-frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Parse the first [`LEN`] bytes; `None` if `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        if b.len() < LEN {
            return None;
        }
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn to_bytes(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// A super-frame the receiver must segment (TSO/USO).
    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }

    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    /// Anything that makes the frame differ from what a NIC would put on the wire.
    pub fn is_offloaded(&self) -> bool {
        self.is_gso() || self.needs_csum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = VnetHdr {
            flags: 1,
            gso_type: GSO_TCPV4 | GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(b, [1, 0x81, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0]);
        assert_eq!(VnetHdr::parse(&b), Some(h));
        assert!(h.is_gso() && h.needs_csum() && h.is_offloaded());
        assert_eq!(VnetHdr::parse(&b[..11]), None);
        assert!(!VnetHdr::default().is_offloaded());
        assert!(!VnetHdr {
            gso_type: GSO_ECN,
            ..VnetHdr::default()
        }
        .is_gso());
    }
}
