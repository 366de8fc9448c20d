//! Classic libpcap file writer (LINKTYPE_ETHERNET), microsecond or nanosecond timestamps.
//!
//! Format: 24-byte global header (magic 0xa1b2c3d4 for µs, 0xa1b23c4d for ns, version 2.4,
//! snaplen, link type 1), then per frame a 16-byte record header (seconds, µs or ns, captured
//! length, original length) and the first `snaplen` bytes. Written in native byte order, which
//! readers detect from the magic.

use std::io::{self, Write};

pub const LINKTYPE_ETHERNET: u32 = 1;
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
pub const DEFAULT_SNAPLEN: u32 = 65_535;

pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    nanos: bool,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W, snaplen: u32, nanos: bool) -> io::Result<Self> {
        let snaplen = snaplen.max(1);
        let magic = if nanos { MAGIC_NANOS } else { MAGIC_MICROS };
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&magic.to_ne_bytes());
        h.extend_from_slice(&2u16.to_ne_bytes());
        h.extend_from_slice(&4u16.to_ne_bytes());
        h.extend_from_slice(&0i32.to_ne_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_ne_bytes()); // sigfigs
        h.extend_from_slice(&snaplen.to_ne_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            snaplen,
            nanos,
        })
    }

    /// Append one frame captured at `unix_ns` (nanoseconds since the Unix epoch).
    pub fn write(&mut self, unix_ns: u64, frame: &[u8]) -> io::Result<()> {
        let sec = (unix_ns / 1_000_000_000) as u32;
        let frac = if self.nanos {
            (unix_ns % 1_000_000_000) as u32
        } else {
            ((unix_ns % 1_000_000_000) / 1000) as u32
        };
        let caplen = frame.len().min(self.snaplen as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(frame.len().min(u32::MAX as usize) as u32).to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..caplen])
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record() {
        let mut w = PcapWriter::new(Vec::new(), 4, true).unwrap();
        w.write(1_500_000_123, &[1, 2, 3, 4, 5, 6]).unwrap();
        let b = w.out;
        assert_eq!(b.len(), 24 + 16 + 4);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), MAGIC_NANOS);
        assert_eq!(u32::from_ne_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_ne_bytes(b[28..32].try_into().unwrap()),
            500_000_123
        );
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 4);
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 6);
        assert_eq!(&b[40..], &[1, 2, 3, 4]);
    }
}
