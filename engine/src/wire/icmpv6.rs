//! ICMPv6 (RFC 4443) and neighbour discovery's solicitations and advertisements
//! (RFC 4861 §4.3, §4.4): the messages a router or host builds and reads. Every message's
//! checksum covers the IPv6 pseudo-header (`super::checksum::pseudo_header`).

use super::checksum;
use super::ipv6::{self, Addr};

pub const DEST_UNREACHABLE: u8 = 1;
pub const PACKET_TOO_BIG: u8 = 2;
pub const TIME_EXCEEDED: u8 = 3;
pub const PARAM_PROBLEM: u8 = 4;
pub const ECHO_REQUEST: u8 = 128;
pub const ECHO_REPLY: u8 = 129;
pub const NEIGHBOUR_SOLICITATION: u8 = 135;
pub const NEIGHBOUR_ADVERTISEMENT: u8 = 136;
pub const HEADER_LEN: usize = 8;
/// Destination unreachable's code for "no route to destination".
pub const NO_ROUTE: u8 = 0;
/// Neighbour discovery's messages go with hop limit 255, and are refused with any other.
pub const ND_HOP_LIMIT: u8 = 255;

const OPT_SOURCE_LL: u8 = 1;
const OPT_TARGET_LL: u8 = 2;
const FLAG_ROUTER: u8 = 0x80;
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;

/// Error types (below 128): never answered with another error (RFC 4443 §2.4 e).
pub fn is_error(t: u8) -> bool {
    t < 128
}

/// The checksum to store in `msg` (its own checksum field zero) sent from `src` to `dst`.
pub fn checksum(src: Addr, dst: Addr, msg: &[u8]) -> u16 {
    let acc = checksum::pseudo_header(&src, &dst, ipv6::NEXT_ICMPV6, msg.len());
    !checksum::fold(checksum::sum(msg, acc))
}

/// Whether `msg`'s checksum is right for a message from `src` to `dst`.
pub fn verify(src: Addr, dst: Addr, msg: &[u8]) -> bool {
    msg.len() >= 4 && checksum(src, dst, msg) == 0
}

fn seal(src: Addr, dst: Addr, mut m: Vec<u8>) -> Vec<u8> {
    m[2..4].copy_from_slice(&[0, 0]);
    let c = checksum(src, dst, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// The echo reply (from `dst` back to `src`) to an echo request `msg` sent from `src` to
/// `dst`, or `None` if it is not a well-formed echo request with a correct checksum.
/// Identifier, sequence and data are kept.
pub fn echo_reply(src: Addr, dst: Addr, msg: &[u8]) -> Option<Vec<u8>> {
    if msg.len() < HEADER_LEN || msg[0] != ECHO_REQUEST || msg[1] != 0 || !verify(src, dst, msg) {
        return None;
    }
    let mut r = msg.to_vec();
    r[0] = ECHO_REPLY;
    Some(seal(dst, src, r))
}

/// An error message from `src` to `dst` quoting as much of `original` (an IPv6 packet) as
/// keeps the whole error within the minimum MTU (RFC 4443 §2.4 c). `param` is the
/// 32-bit field after the checksum (the MTU of packet too big, the pointer of a parameter
/// problem; 0 otherwise).
pub fn error(t: u8, code: u8, param: u32, src: Addr, dst: Addr, original: &[u8]) -> Vec<u8> {
    let quote = original
        .len()
        .min(ipv6::MIN_MTU - ipv6::HEADER_LEN - HEADER_LEN);
    let mut m = vec![t, code, 0, 0];
    m.extend_from_slice(&param.to_be_bytes());
    m.extend_from_slice(&original[..quote]);
    seal(src, dst, m)
}

/// A neighbour solicitation from `src` for `target`, carrying the sender's Ethernet
/// address; sent to `target`'s solicited-node group.
pub fn solicitation(src: Addr, target: Addr, mac: [u8; 6]) -> Vec<u8> {
    let mut m = vec![NEIGHBOUR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&target);
    m.extend_from_slice(&[OPT_SOURCE_LL, 1]);
    m.extend_from_slice(&mac);
    seal(src, ipv6::solicited_node(target), m)
}

/// A neighbour advertisement from `src` to `dst` that `target` is at `mac` (solicited:
/// the answer to a solicitation; `router`: the sender forwards packets).
pub fn advertisement(
    src: Addr,
    dst: Addr,
    target: Addr,
    mac: [u8; 6],
    solicited: bool,
    router: bool,
) -> Vec<u8> {
    let flags = FLAG_OVERRIDE
        | if solicited { FLAG_SOLICITED } else { 0 }
        | if router { FLAG_ROUTER } else { 0 };
    let mut m = vec![NEIGHBOUR_ADVERTISEMENT, 0, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target);
    m.extend_from_slice(&[OPT_TARGET_LL, 1]);
    m.extend_from_slice(&mac);
    seal(src, dst, m)
}

/// A solicitation or advertisement read: its type, target and the link-layer address its
/// option carries (source for a solicitation, target for an advertisement), if any.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Neighbour {
    pub kind: u8,
    pub target: Addr,
    pub mac: Option<[u8; 6]>,
    pub solicited: bool,
}

/// `msg` (from `src` to `dst`, received with `hop_limit`) as a neighbour solicitation or
/// advertisement; `None` for anything else or anything RFC 4861 §7.1 says to drop (hop
/// limit not 255, code not 0, bad checksum or options).
pub fn neighbour(src: Addr, dst: Addr, hop_limit: u8, msg: &[u8]) -> Option<Neighbour> {
    if msg.len() < 24
        || !matches!(msg[0], NEIGHBOUR_SOLICITATION | NEIGHBOUR_ADVERTISEMENT)
        || msg[1] != 0
        || hop_limit != ND_HOP_LIMIT
        || !verify(src, dst, msg)
    {
        return None;
    }
    let target: Addr = msg[8..24].try_into().ok()?;
    if ipv6::is_multicast(target) {
        return None;
    }
    let want = if msg[0] == NEIGHBOUR_SOLICITATION {
        OPT_SOURCE_LL
    } else {
        OPT_TARGET_LL
    };
    let mut mac = None;
    let mut opts = &msg[24..];
    while opts.len() >= 2 {
        let len = usize::from(opts[1]) * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        if opts[0] == want && len >= 8 {
            mac = opts[2..8].try_into().ok();
        }
        opts = &opts[len..];
    }
    Some(Neighbour {
        kind: msg[0],
        target,
        mac,
        solicited: msg[0] == NEIGHBOUR_ADVERTISEMENT && msg[4] & FLAG_SOLICITED != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv6::parse_addr;

    fn a(s: &str) -> Addr {
        parse_addr(s).unwrap()
    }

    #[test]
    fn echo_reply_fixture() {
        // echo request fd00::1 -> fd00::2, id 1 seq 2 data "abcd"; its checksum 0xc0ea was
        // computed independently (RFC 1071 sum over the pseudo-header and message in Python)
        let (s, d) = (a("fd00::1"), a("fd00::2"));
        let mut req = vec![128, 0, 0, 0, 0, 1, 0, 2, b'a', b'b', b'c', b'd'];
        let c = checksum(s, d, &req);
        req[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(c, 0xc0ea);
        assert!(verify(s, d, &req));
        let r = echo_reply(s, d, &req).unwrap();
        assert_eq!((r[0], &r[4..]), (ECHO_REPLY, &req[4..]));
        assert!(verify(d, s, &r));
        let mut bad = req.clone();
        bad[9] ^= 1;
        assert!(echo_reply(s, d, &bad).is_none());
        assert!(echo_reply(s, d, &r).is_none(), "a reply is not a request");
        assert!(
            echo_reply(s, a("fd00::3"), &req).is_none(),
            "the checksum binds the addresses"
        );
    }

    #[test]
    fn error_quotes_up_to_the_minimum_mtu() {
        let orig = {
            let mut p = ipv6::header(a("fd00::1"), a("fd00:9::1"), 17, 1, 1400).to_vec();
            p.extend_from_slice(&[7; 1400]);
            p
        };
        let (r, s) = (a("fd00:1::1"), a("fd00::1"));
        let e = error(TIME_EXCEEDED, 0, 0, r, s, &orig);
        assert_eq!(e.len() + ipv6::HEADER_LEN, ipv6::MIN_MTU);
        assert_eq!((&e[..2], &e[4..8]), (&[3u8, 0][..], &[0u8; 4][..]));
        assert_eq!(&e[8..], &orig[..e.len() - 8]);
        assert!(verify(r, s, &e));
        let small = error(PACKET_TOO_BIG, 0, 1280, r, s, &orig[..60]);
        assert_eq!(
            (small.len(), &small[4..8]),
            (68, &1280u32.to_be_bytes()[..])
        );
        assert!(is_error(TIME_EXCEEDED) && !is_error(ECHO_REQUEST));
    }

    #[test]
    fn solicitation_and_advertisement_round_trip() {
        let mac = [0x02, 0xab, 0xcd, 0, 1, 2];
        let (me, target) = (a("fd00::1"), a("fd00::2"));
        let ns = solicitation(me, target, mac);
        let group = ipv6::solicited_node(target);
        let n = neighbour(me, group, 255, &ns).unwrap();
        assert_eq!(
            n,
            Neighbour {
                kind: NEIGHBOUR_SOLICITATION,
                target,
                mac: Some(mac),
                solicited: false
            }
        );
        assert!(
            neighbour(me, group, 64, &ns).is_none(),
            "hop limit must be 255"
        );
        assert!(
            neighbour(me, target, 255, &ns).is_none(),
            "checksum binds the group"
        );
        let theirs = [0x02, 0, 0, 0, 0, 9];
        let na = advertisement(target, me, target, theirs, true, true);
        let n = neighbour(target, me, 255, &na).unwrap();
        assert_eq!(
            (n.kind, n.target, n.mac, n.solicited),
            (136, target, Some(theirs), true)
        );
        assert_eq!(na[4], 0xe0);
        let mut cut = na.clone();
        cut[25] = 0; // an option of length 0
        let c = checksum(target, me, &{
            let mut z = cut.clone();
            z[2..4].copy_from_slice(&[0, 0]);
            z
        });
        cut[2..4].copy_from_slice(&c.to_be_bytes());
        assert!(neighbour(target, me, 255, &cut).is_none());
    }
}
