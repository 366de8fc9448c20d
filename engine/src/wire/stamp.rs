//! The due-time trailer of a frame carried between two engines (a cluster's cut link).
//!
//! The sending engine shapes the direction (queue, bandwidth, loss) and hands the frame to
//! the tunnel as soon as it is serialized, with the instant it is due at the far end
//! appended: [`MAGIC`] then the due time in Unix ns (little endian). The receiving engine
//! strips the trailer and holds the frame until that instant. So the path between the
//! machines (the tunnel, the kernels, the receiving engine's wake-up) costs nothing as long
//! as it is shorter than the link's delay, and nothing has to be measured and subtracted.
//! Both engines read their own `CLOCK_REALTIME`: one host's machines share it; separate
//! machines must keep theirs synchronised (as they must for a common t = 0), and an offset
//! between them shifts that direction's delay by as much.
//!
//! A trailer after the Ethernet frame is ignored by whatever parses the frame (IP's own
//! length says where the packet ends), but the engines strip it anyway: the node receives
//! the frame it was sent.

/// The trailer's first bytes.
pub const MAGIC: [u8; 4] = *b"WLd1";
/// Bytes appended to a frame.
pub const LEN: usize = MAGIC.len() + 8;

/// Append the trailer for a frame due at `unix_ns`.
pub fn append(frame: &mut Vec<u8>, unix_ns: u64) {
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&unix_ns.to_le_bytes());
}

/// The due time in `frame`'s trailer and the frame without it (`None`: no trailer).
pub fn peek(frame: &[u8]) -> Option<(u64, &[u8])> {
    let n = frame.len();
    if n < LEN || frame[n - LEN..n - 8] != MAGIC {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&frame[n - 8..]);
    Some((u64::from_le_bytes(b), &frame[..n - LEN]))
}

/// Remove the trailer from `frame` and return its due time (Unix ns); `None` (frame left
/// as it is) when the frame carries none.
pub fn strip(frame: &mut Vec<u8>) -> Option<u64> {
    let (due, _) = peek(frame)?;
    frame.truncate(frame.len() - LEN);
    Some(due)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_round_trips_and_leaves_the_frame_as_it_was() {
        let mut f = vec![7u8; 60];
        append(&mut f, 1_764_000_000_123_456_789);
        assert_eq!(f.len(), 60 + LEN);
        assert_eq!(strip(&mut f), Some(1_764_000_000_123_456_789));
        assert_eq!(f, vec![7u8; 60]);
    }

    #[test]
    fn a_frame_without_a_trailer_is_left_alone() {
        let mut f = vec![0u8; 64];
        assert_eq!(strip(&mut f), None);
        assert_eq!(f.len(), 64);
        let mut short = b"WLd1".to_vec();
        assert_eq!(strip(&mut short), None);
    }
}
