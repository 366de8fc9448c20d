//! ARP (RFC 826) for Ethernet/IPv4 only: a view that refuses anything else, and a builder.

use super::ethernet::Address;
use super::ipv4::Addr;

pub const LEN: usize = 28;
pub const ETHERTYPE: u16 = 0x0806;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Malformed;

#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap `buffer` if it is an Ethernet/IPv4 ARP packet (htype 1, ptype 0x0800, 6/4).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < LEN || b[..6] != [0, 1, 0x08, 0x00, 6, 4] {
            return Err(Malformed);
        }
        Ok(Packet { buffer })
    }
    pub fn operation(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }
    pub fn sender_mac(&self) -> Address {
        let b = self.buffer.as_ref();
        Address([b[8], b[9], b[10], b[11], b[12], b[13]])
    }
    pub fn sender_ip(&self) -> Addr {
        let b = self.buffer.as_ref();
        [b[14], b[15], b[16], b[17]]
    }
    pub fn target_mac(&self) -> Address {
        let b = self.buffer.as_ref();
        Address([b[18], b[19], b[20], b[21], b[22], b[23]])
    }
    pub fn target_ip(&self) -> Addr {
        let b = self.buffer.as_ref();
        [b[24], b[25], b[26], b[27]]
    }
}

pub fn build(
    op: u16,
    sender_mac: Address,
    sender_ip: Addr,
    target_mac: Address,
    target_ip: Addr,
) -> [u8; LEN] {
    let mut p = [0u8; LEN];
    p[..6].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    p[6..8].copy_from_slice(&op.to_be_bytes());
    p[8..14].copy_from_slice(&sender_mac.0);
    p[14..18].copy_from_slice(&sender_ip);
    p[18..24].copy_from_slice(&target_mac.0);
    p[24..28].copy_from_slice(&target_ip);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    // Request "who has 10.0.0.2? tell 10.0.0.1 (02:00:00:00:00:01)", as Linux sends it.
    const REQ: [u8; 28] = [
        0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];

    #[test]
    fn parse_and_build_fixture() {
        let p = Packet::new_checked(&REQ[..]).unwrap();
        assert_eq!(p.operation(), OP_REQUEST);
        assert_eq!(p.sender_mac(), Address([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            (p.sender_ip(), p.target_ip()),
            ([10, 0, 0, 1], [10, 0, 0, 2])
        );
        assert_eq!(p.target_mac(), Address([0; 6]));
        assert_eq!(
            build(
                OP_REQUEST,
                Address([2, 0, 0, 0, 0, 1]),
                [10, 0, 0, 1],
                Address([0; 6]),
                [10, 0, 0, 2]
            ),
            REQ
        );
    }

    #[test]
    fn refuses_other_kinds() {
        assert!(Packet::new_checked(&REQ[..27]).is_err());
        for i in 0..6 {
            let mut r = REQ;
            r[i] ^= 0x10;
            assert!(Packet::new_checked(&r[..]).is_err());
        }
    }
}
