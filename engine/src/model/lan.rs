//! A switched LAN: a learning switch with one pipeline pair per member.
//!
//! Each member has a `to_lan` pipeline (member → switch) and a `from_lan` pipeline
//! (switch → member), so per-member bandwidth, delay and loss are modelled on both sides as on
//! an Emulab LAN. The switch learns source MACs from frames leaving `to_lan` pipelines and
//! forwards: broadcast, multicast and unknown unicast are flooded to every other member;
//! known unicast goes to the learned member only (and is filtered if that is the sender).
//! The switch itself forwards instantly; all timing is in the pipelines. A learned address
//! ages out [`MAC_AGING_NS`] after its station was last heard (IEEE 802.1D's default, as a
//! Linux bridge's): a frame to it is flooded again until the station speaks, so a station
//! that moved silently is found again.
//!
//! A LAN may also have **per-pair channels** (a latency matrix, as hitbox's point-to-point
//! mode): a pipeline per ordered pair of members, each with its own queue and serialization,
//! between the switch and the destination's `from_lan` pipeline. A frame from `i` forwarded
//! to `j` crosses channel `(i, j)` if there is one; a flooded frame (broadcast, ARP,
//! multicast, unknown unicast) is copied per destination, and each copy crosses its own
//! pair's channel, so an ARP request reaches `j` after `d(i, j)` exactly like unicast.

use std::collections::HashMap;

use crate::time::Instant;
use crate::wire::ethernet::{Address, Frame};

/// How long a learned address is kept after its station was last heard, in nanoseconds.
pub const MAC_AGING_NS: u64 = 300_000_000_000;

/// Bound on learned addresses per LAN; when reached the table is flushed (as a switch under
/// MAC flooding would age entries out), so memory stays bounded for any input.
pub const MAC_TABLE_MAX: usize = 4096;

#[derive(Debug, Clone)]
pub struct Member {
    pub port: usize,
    pub to_lan: usize,
    pub from_lan: usize,
    pub up: bool,
}

#[derive(Debug)]
pub struct Lan {
    pub id: String,
    pub members: Vec<Member>,
    /// Learned addresses: the member each was last heard from, and when.
    macs: HashMap<Address, (usize, Instant)>,
    /// Pair channels, dense `from * n + to` (empty when the LAN has none).
    pairs: Vec<Option<usize>>,
}

/// Where the switch sends a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Forward {
    Flood,
    To(usize),
    Filter,
}

impl Lan {
    pub fn new(id: String, members: Vec<Member>) -> Self {
        Lan {
            id,
            members,
            macs: HashMap::new(),
            pairs: Vec::new(),
        }
    }

    /// Give the ordered pair (`from`, `to`) of member indices the channel pipeline `pipe`
    /// (ignored for indices out of range).
    pub fn set_pair(&mut self, from: usize, to: usize, pipe: usize) {
        let n = self.members.len();
        if from >= n || to >= n {
            return;
        }
        if self.pairs.is_empty() {
            self.pairs = vec![None; n * n];
        }
        self.pairs[from * n + to] = Some(pipe);
    }

    /// The channel pipeline of the ordered pair (`from`, `to`), if it has one.
    pub fn pair(&self, from: usize, to: usize) -> Option<usize> {
        let n = self.members.len();
        if from >= n || to >= n {
            return None;
        }
        self.pairs.get(from * n + to).copied().flatten()
    }

    /// Every pair channel: (from member, to member, pipeline).
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let n = self.members.len().max(1);
        self.pairs
            .iter()
            .enumerate()
            .filter_map(move |(k, p)| p.map(|p| (k / n, k % n, p)))
    }

    /// Learn the source of a frame that entered the switch from member `from` at `now`,
    /// and decide where it goes. Frames shorter than a header (cannot happen after ingress
    /// checks) are filtered.
    pub fn switch(&mut self, from: usize, frame: &[u8], now: Instant) -> Forward {
        let Ok(eth) = Frame::new_checked(frame) else {
            return Forward::Filter;
        };
        let src = eth.src();
        if !src.is_multicast() {
            if self.macs.len() >= MAC_TABLE_MAX && !self.macs.contains_key(&src) {
                self.macs.clear();
            }
            self.macs.insert(src, (from, now));
        }
        let dst = eth.dst();
        if dst.is_multicast() {
            return Forward::Flood;
        }
        match self.macs.get(&dst) {
            Some(&(_, seen)) if now.nanos_since(seen) >= MAC_AGING_NS => {
                self.macs.remove(&dst);
                Forward::Flood
            }
            None => Forward::Flood,
            Some(&(m, _)) if m == from => Forward::Filter,
            Some(&(m, _)) => Forward::To(m),
        }
    }

    pub fn learned(&self, mac: &Address) -> Option<usize> {
        self.macs.get(mac).map(|&(m, _)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00, 0xaa]);
        f
    }

    /// Member `i` on port `i`, its pipelines numbered 2i (to the LAN) and 2i + 1 (from it).
    fn member(i: usize) -> Member {
        Member {
            port: i,
            to_lan: 2 * i,
            from_lan: 2 * i + 1,
            up: true,
        }
    }

    #[test]
    fn learning_and_flooding() {
        let mut lan = Lan::new("lan0".into(), vec![member(0), member(1), member(2)]);
        let t = Instant::ZERO;
        let a = [2, 0, 0, 0, 0, 0xa];
        let b = [2, 0, 0, 0, 0, 0xb];
        // Unknown destination: flood; source learned.
        assert_eq!(lan.switch(0, &frame(b, a), t), Forward::Flood);
        assert_eq!(lan.learned(&Address(a)), Some(0));
        // Broadcast always floods.
        assert_eq!(lan.switch(1, &frame([0xff; 6], b), t), Forward::Flood);
        // Now both are known: unicast goes to the learned member only.
        assert_eq!(lan.switch(1, &frame(a, b), t), Forward::To(0));
        assert_eq!(lan.switch(0, &frame(b, a), t), Forward::To(1));
        // Multicast floods; same-member destination is filtered.
        assert_eq!(
            lan.switch(0, &frame([0x01, 0, 0x5e, 0, 0, 1], a), t),
            Forward::Flood
        );
        assert_eq!(lan.switch(0, &frame(a, a), t), Forward::Filter);
        // Station moved: relearned.
        assert_eq!(lan.switch(2, &frame(b, a), t), Forward::To(1));
        assert_eq!(lan.learned(&Address(a)), Some(2));
        assert_eq!(lan.switch(2, &[1, 2, 3], t), Forward::Filter);
    }

    #[test]
    fn learned_addresses_age_out_and_are_flooded_again() {
        let mut lan = Lan::new("lan0".into(), vec![member(0), member(1), member(2)]);
        let a = [2, 0, 0, 0, 0, 0xa];
        let b = [2, 0, 0, 0, 0, 0xb];
        let t0 = Instant::from_millis(1_000);
        lan.switch(1, &frame(a, b), t0);
        let just_before = t0.add_nanos(MAC_AGING_NS - 1);
        assert_eq!(lan.switch(0, &frame(b, a), just_before), Forward::To(1));
        // b was last heard at t0: aged out, flooded, forgotten until it speaks again
        let aged = t0.add_nanos(MAC_AGING_NS);
        assert_eq!(lan.switch(0, &frame(b, a), aged), Forward::Flood);
        assert_eq!(lan.learned(&Address(b)), None);
        // a spoke at `just_before` and `aged`: still known; b speaks from member 2 now
        assert_eq!(lan.switch(2, &frame(a, b), aged), Forward::To(0));
        assert_eq!(
            lan.switch(0, &frame(b, a), aged.add_nanos(1)),
            Forward::To(2)
        );
    }

    #[test]
    fn pair_channels_are_per_ordered_pair() {
        let mut lan = Lan::new("wan".into(), vec![member(0), member(1), member(2)]);
        assert_eq!(lan.pair(0, 1), None);
        lan.set_pair(0, 1, 10);
        lan.set_pair(1, 0, 11);
        lan.set_pair(2, 1, 12);
        lan.set_pair(3, 1, 13); // out of range: ignored
        assert_eq!(lan.pair(0, 1), Some(10));
        assert_eq!(lan.pair(1, 0), Some(11));
        assert_eq!(lan.pair(1, 2), None);
        assert_eq!(lan.pair(7, 0), None);
        let all: Vec<_> = lan.pairs().collect();
        assert_eq!(all, vec![(0, 1, 10), (1, 0, 11), (2, 1, 12)]);
    }
}
