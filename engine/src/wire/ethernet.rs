//! Ethernet II header view over a byte buffer (smoltcp style: `Frame<T: AsRef<[u8]>>`).
//!
//! Frames come from a TAP opened with `IFF_NO_PI`: destination MAC, source MAC, EtherType,
//! payload; no preamble and no FCS. `Frame::new_checked` refuses buffers shorter than the
//! 14-byte header, so the accessors can index without panicking.

pub const HEADER_LEN: usize = 14;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Address(pub [u8; 6]);

impl Address {
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Group bit set: broadcast or multicast; a switch floods these.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Truncated;

/// Read-only view of an Ethernet II frame.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap `buffer` if it holds at least a full Ethernet header.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        if buffer.as_ref().len() < HEADER_LEN {
            Err(Truncated)
        } else {
            Ok(Frame { buffer })
        }
    }

    pub fn dst(&self) -> Address {
        let b = self.buffer.as_ref();
        Address([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    pub fn src(&self) -> Address {
        let b = self.buffer.as_ref();
        Address([b[6], b[7], b[8], b[9], b[10], b[11]])
    }

    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[12], b[13]])
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<'a> Frame<&'a [u8]> {
    /// The payload, borrowed from the buffer rather than from the view (it outlives it).
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[HEADER_LEN..]
    }
}

/// Write a frame header into the first [`HEADER_LEN`] bytes of `f` (`f` must hold them).
pub fn write_header(f: &mut [u8], dst: Address, src: Address, ethertype: u16) {
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// A frame: header (`dst`, `src`, `ethertype`) followed by `payload` (no padding, no FCS).
pub fn build(dst: Address, src: Address, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_LEN + payload.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    // ARP request from 02:00:00:00:00:01, broadcast.
    const ARP: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06, 0x00, 0x01,
    ];

    #[test]
    fn parses_fixture() {
        let f = Frame::new_checked(&ARP[..]).unwrap();
        assert_eq!(f.dst(), Address::BROADCAST);
        assert!(f.dst().is_multicast());
        assert_eq!(f.src(), Address([2, 0, 0, 0, 0, 1]));
        assert!(!f.src().is_multicast());
        assert_eq!(f.ethertype(), 0x0806);
        assert_eq!(f.payload(), &[0x00, 0x01]);
    }

    #[test]
    fn short_frames_refused() {
        for n in 0..HEADER_LEN {
            assert_eq!(Frame::new_checked(&ARP[..n]).unwrap_err(), Truncated);
        }
        assert!(Frame::new_checked(&ARP[..HEADER_LEN])
            .unwrap()
            .payload()
            .is_empty());
    }
}
