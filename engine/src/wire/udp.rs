//! UDP (RFC 768): a view over a datagram's bytes and an emitter.
//!
//! `Packet::new_checked` refuses a buffer shorter than the header or than its length field
//! (and a length field below 8), so the accessors never panic; `payload()` stops at the
//! length field. The checksum covers the IPv4 or IPv6 pseudo-header ([`super::checksum`]); a
//! computed 0 is sent as 0xffff, and a received 0 means "no checksum".
use super::checksum;

pub const HEADER_LEN: usize = 8;
pub const PROTOCOL: u8 = 17;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Malformed;

#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed);
        }
        let len = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if len < HEADER_LEN || len > b.len() {
            return Err(Malformed);
        }
        Ok(Packet { buffer })
    }
    fn be16(&self, i: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[i], b[i + 1]])
    }
    pub fn src_port(&self) -> u16 {
        self.be16(0)
    }
    pub fn dst_port(&self) -> u16 {
        self.be16(2)
    }
    /// Header + payload, from the length field.
    pub fn len(&self) -> usize {
        usize::from(self.be16(4))
    }
    /// Never true for a checked packet (the length field is at least 8).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn checksum(&self) -> u16 {
        self.be16(6)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }
    /// The checksum is absent (0) or correct for this pseudo-header.
    pub fn verify_checksum(&self, src: impl AsRef<[u8]>, dst: impl AsRef<[u8]>) -> bool {
        self.checksum() == 0
            || checksum::transport(
                src.as_ref(),
                dst.as_ref(),
                PROTOCOL,
                &self.buffer.as_ref()[..self.len()],
            ) == 0
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The payload, borrowed from the buffer rather than from the view (it outlives it).
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[HEADER_LEN..self.len()]
    }
}

/// Write the header of the datagram in `buf` (header + payload, payload already in place)
/// and its checksum. `buf` must hold at least the header; a length above 65535 is capped.
pub fn emit(buf: &mut [u8], src: impl AsRef<[u8]>, dst: impl AsRef<[u8]>, sport: u16, dport: u16) {
    if buf.len() < HEADER_LEN {
        return;
    }
    buf[0..2].copy_from_slice(&sport.to_be_bytes());
    buf[2..4].copy_from_slice(&dport.to_be_bytes());
    let len = buf.len().min(0xffff) as u16;
    buf[4..6].copy_from_slice(&len.to_be_bytes());
    buf[6..8].copy_from_slice(&[0, 0]);
    let c = match checksum::transport(src.as_ref(), dst.as_ref(), PROTOCOL, buf) {
        0 => 0xffff,
        c => c,
    };
    buf[6..8].copy_from_slice(&c.to_be_bytes());
}

/// A datagram (header + `payload`) from `sport` to `dport` with its checksum.
pub fn build(
    src: impl AsRef<[u8]>,
    dst: impl AsRef<[u8]>,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut d = Vec::with_capacity(HEADER_LEN + payload.len());
    d.extend_from_slice(&[0; HEADER_LEN]);
    d.extend_from_slice(payload);
    emit(&mut d, src, dst, sport, dport);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Addr;

    const A: Addr = [10, 0, 0, 1];
    const B: Addr = [10, 0, 0, 2];
    // 10.0.0.1:5 → 10.0.0.2:6, payload 01 02 03; checksum by hand in `checksum` tests.
    const DGRAM: [u8; 11] = [0, 5, 0, 6, 0, 11, 0xe7, 0xc8, 1, 2, 3];

    #[test]
    fn parse_fixture() {
        let mut buf = DGRAM.to_vec();
        buf.push(0xee); // trailing bytes beyond the length field are not payload
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5, 6, 11));
        assert_eq!(p.payload(), &[1, 2, 3]);
        assert!(p.verify_checksum(A, B));
        assert!(!p.verify_checksum(A, [10, 0, 0, 3]));
        let mut none = DGRAM;
        none[6..8].copy_from_slice(&[0, 0]);
        assert!(Packet::new_checked(&none[..])
            .unwrap()
            .verify_checksum(A, [9, 9, 9, 9]));
    }

    #[test]
    fn emit_fixture() {
        assert_eq!(build(A, B, 5, 6, &[1, 2, 3]), DGRAM);
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose a payload word that makes the sum 0xffff (checksum 0).
        let mut d = build(A, B, 5, 6, &[0, 0]);
        let c = u16::from_be_bytes([d[6], d[7]]);
        // The sum S had checksum c = !S; a payload word c makes the sum S + !S = 0xffff.
        d = build(A, B, 5, 6, &c.to_be_bytes());
        assert_eq!(&d[6..8], &[0xff, 0xff]);
        assert!(Packet::new_checked(&d[..]).unwrap().verify_checksum(A, B));
    }

    #[test]
    fn malformed_refused() {
        for n in 0..HEADER_LEN {
            assert!(Packet::new_checked(&DGRAM[..n]).is_err());
        }
        assert!(
            Packet::new_checked(&DGRAM[..10]).is_err(),
            "length 11 > buffer"
        );
        let mut short = DGRAM;
        short[5] = 7;
        assert!(Packet::new_checked(&short[..]).is_err(), "length < 8");
    }
}
