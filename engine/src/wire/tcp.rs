//! TCP (RFC 9293) headers: a view over a segment's bytes and an emitter of the 20-byte
//! header, optionally followed by options (a multiple of 4 bytes). `Packet::new_checked` refuses a buffer shorter than 20 bytes or
//! than its data offset (and an offset below 20), so the accessors never panic. The
//! checksum covers the IPv4 or IPv6 pseudo-header ([`super::checksum`]).
use super::checksum;

pub const HEADER_LEN: usize = 20;
pub const PROTOCOL: u8 = 6;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

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
        let off = usize::from(b[12] >> 4) * 4;
        if off < HEADER_LEN || off > b.len() {
            return Err(Malformed);
        }
        Ok(Packet { buffer })
    }
    fn be16(&self, i: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[i], b[i + 1]])
    }
    fn be32(&self, i: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }
    pub fn src_port(&self) -> u16 {
        self.be16(0)
    }
    pub fn dst_port(&self) -> u16 {
        self.be16(2)
    }
    pub fn seq(&self) -> u32 {
        self.be32(4)
    }
    pub fn ack(&self) -> u32 {
        self.be32(8)
    }
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[13]
    }
    pub fn window(&self) -> u16 {
        self.be16(14)
    }
    pub fn checksum(&self) -> u16 {
        self.be16(16)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// The option bytes between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    pub fn verify_checksum(&self, src: impl AsRef<[u8]>, dst: impl AsRef<[u8]>) -> bool {
        checksum::transport(src.as_ref(), dst.as_ref(), PROTOCOL, self.buffer.as_ref()) == 0
    }
}

/// The fields of a header (options are passed to [`Header::emit_with_options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

impl Header {
    /// Write the header into `buf` (header + payload, payload already in place) and the
    /// checksum over the pseudo-header and all of `buf`. Does nothing if `buf` is shorter
    /// than the header.
    pub fn emit(&self, buf: &mut [u8], src: impl AsRef<[u8]>, dst: impl AsRef<[u8]>) {
        self.emit_with_options(buf, &[], src, dst);
    }

    /// As [`Header::emit`], with `opts` (a multiple of 4 bytes, at most 40) after the
    /// fixed header: `buf` is header + options + payload. Does nothing if the options do
    /// not fit or are not a multiple of 4 bytes.
    pub fn emit_with_options(
        &self,
        buf: &mut [u8],
        opts: &[u8],
        src: impl AsRef<[u8]>,
        dst: impl AsRef<[u8]>,
    ) {
        let hl = HEADER_LEN + opts.len();
        if buf.len() < hl || !opts.len().is_multiple_of(4) || opts.len() > 40 {
            return;
        }
        buf[HEADER_LEN..hl].copy_from_slice(opts);
        buf[0..2].copy_from_slice(&self.sport.to_be_bytes());
        buf[2..4].copy_from_slice(&self.dport.to_be_bytes());
        buf[4..8].copy_from_slice(&self.seq.to_be_bytes());
        buf[8..12].copy_from_slice(&self.ack.to_be_bytes());
        buf[12] = ((hl / 4) as u8) << 4;
        buf[13] = self.flags;
        buf[14..16].copy_from_slice(&self.window.to_be_bytes());
        buf[16..20].copy_from_slice(&[0; 4]);
        let c = checksum::transport(src.as_ref(), dst.as_ref(), PROTOCOL, buf);
        buf[16..18].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Addr;

    const A: Addr = [10, 0, 0, 1];
    const B: Addr = [10, 0, 0, 2];
    // 10.0.0.1:1234 → 10.0.0.2:80, seq 0xdeadbeef, ack 7, PSH|ACK, window 65535, payload
    // "hi"; checksum computed independently (RFC 1071 over pseudo-header + segment).
    const SEG: [u8; 22] = [
        0x04, 0xd2, 0x00, 0x50, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7, 0x50, 0x18, 0xff, 0xff, 0x00,
        0x00, 0, 0, b'h', b'i',
    ];

    fn reference_checksum(seg: &[u8]) -> u16 {
        let mut all = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, seg.len() as u8];
        all.extend_from_slice(seg);
        let mut s: u32 = 0;
        for w in all.chunks(2) {
            s += u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn emit_and_parse_fixture() {
        let h = Header {
            sport: 1234,
            dport: 80,
            seq: 0xdead_beef,
            ack: 7,
            flags: PSH | ACK,
            window: 65535,
        };
        let mut buf = vec![0u8; 20];
        buf.extend_from_slice(b"hi");
        h.emit(&mut buf, A, B);
        let mut expect = SEG;
        expect[16..18].copy_from_slice(&reference_checksum(&SEG).to_be_bytes());
        assert_eq!(buf, expect);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (
                p.src_port(),
                p.dst_port(),
                p.seq(),
                p.ack(),
                p.flags(),
                p.window()
            ),
            (1234, 80, 0xdead_beef, 7, PSH | ACK, 65535)
        );
        assert_eq!((p.header_len(), p.payload()), (20, &b"hi"[..]));
        assert!(p.verify_checksum(A, B));
        assert!(!p.verify_checksum(A, [10, 0, 0, 3]));
        let mut bad = buf.clone();
        bad[21] ^= 1;
        assert!(!Packet::new_checked(&bad[..]).unwrap().verify_checksum(A, B));
    }

    #[test]
    fn malformed_refused() {
        for n in 0..HEADER_LEN {
            assert!(Packet::new_checked(&SEG[..n]).is_err());
        }
        let mut off = SEG;
        off[12] = 0x40; // data offset 16 < 20
        assert!(Packet::new_checked(&off[..]).is_err());
        off[12] = 0x60; // 24 > 22-byte buffer
        assert!(Packet::new_checked(&off[..]).is_err());
    }
}
