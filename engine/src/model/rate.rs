//! The rate stage: serialization at the link bandwidth.
//!
//! A frame of `L` bytes at `B` bit/s occupies the link for `L·8/B` seconds. `L` is the
//! Ethernet frame exactly as read from the TAP: destination, source, EtherType and payload
//! (14-byte header included; no preamble, SFD, FCS or inter-frame gap, which a TAP never
//! sees). A 1000-byte frame at 1 Mbit/s therefore takes exactly 8 ms. The time is rounded up
//! to the next nanosecond so a link can never carry more than its bandwidth.
//! Bandwidth 0 means unlimited: zero serialization time and no queueing.

use super::packet::Packet;
use super::trace::Cursor;
use crate::time::Instant;

/// Serialization time of `len` bytes at `bandwidth_bps`, in ns (0 when unlimited).
pub fn serialization_ns(len: usize, bandwidth_bps: u64) -> u64 {
    if bandwidth_bps == 0 {
        return 0;
    }
    let bits = (len as u128) * 8 * 1_000_000_000;
    let b = u128::from(bandwidth_bps);
    u64::try_from(bits.div_ceil(b)).unwrap_or(u64::MAX)
}

/// The frame on the wire: being serialized until `done` (a super-frame let through whole:
/// all its wire frames back to back).
#[derive(Debug)]
pub struct InService {
    pub frame: Packet,
    pub done: Instant,
}

/// Serializer state for one direction. The bandwidth in force when a frame *starts* is the
/// one it is sent at; a change applies from the next frame.
#[derive(Debug, Default)]
pub struct Rate {
    pub current: Option<InService>,
    /// A capacity trace's next bytes (model/trace.rs), and the instant it was set.
    pub cursor: Cursor,
    pub origin: Instant,
}

impl Rate {
    pub fn is_busy(&self) -> bool {
        self.current.is_some()
    }

    /// Start serializing `frame` at `now` for `ns` nanoseconds.
    pub fn start(&mut self, frame: Packet, now: Instant, ns: u64) {
        let done = now.add_nanos(ns);
        self.current = Some(InService { frame, done });
    }

    pub fn done_at(&self) -> Option<Instant> {
        self.current.as_ref().map(|s| s.done)
    }

    /// Take the frame if its serialization finished by `now`.
    pub fn finish(&mut self, now: Instant) -> Option<InService> {
        match &self.current {
            Some(s) if s.done <= now => self.current.take(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_times() {
        assert_eq!(serialization_ns(1000, 1_000_000), 8_000_000);
        assert_eq!(serialization_ns(1500, 100_000_000_000), 120);
        assert_eq!(serialization_ns(1, 3), 2_666_666_667); // rounded up
        assert_eq!(serialization_ns(1000, 0), 0);
        assert_eq!(serialization_ns(usize::MAX, 1), u64::MAX);
    }
}
