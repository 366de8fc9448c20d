//! ICMPv4 messages a router sends: echo replies and errors (RFC 792, RFC 1812 §4.3.2).

use super::ipv4;

pub const ECHO_REPLY: u8 = 0;
pub const DEST_UNREACHABLE: u8 = 3;
pub const ECHO_REQUEST: u8 = 8;
pub const TIME_EXCEEDED: u8 = 11;
pub const HEADER_LEN: usize = 8;

/// Types that are error messages (never answered with another error, RFC 1812 §4.3.2.7).
pub fn is_error(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// The echo reply to an echo request message (ICMP header + data), or `None` if `msg` is
/// not a well-formed echo request with a correct checksum. Identifier, sequence and data
/// are kept.
pub fn echo_reply(msg: &[u8]) -> Option<Vec<u8>> {
    if msg.len() < HEADER_LEN || msg[0] != ECHO_REQUEST || msg[1] != 0 || ipv4::checksum(msg) != 0 {
        return None;
    }
    let mut r = msg.to_vec();
    r[0] = ECHO_REPLY;
    r[2..4].copy_from_slice(&[0, 0]);
    let c = ipv4::checksum(&r);
    r[2..4].copy_from_slice(&c.to_be_bytes());
    Some(r)
}

/// An error message quoting `original` (an IP packet): its header and the first 8 bytes of
/// its payload (fewer if it has fewer).
pub fn error(t: u8, code: u8, original: &[u8], header_len: usize) -> Vec<u8> {
    let quote = original.len().min(header_len + 8);
    let mut m = vec![0u8; HEADER_LEN];
    m[0] = t;
    m[1] = code;
    m.extend_from_slice(&original[..quote]);
    let c = ipv4::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    // Echo request id 0x0001 seq 0x0002 data "abcd"; checksum by RFC 1071 over the message.
    fn request() -> Vec<u8> {
        let mut m = vec![8, 0, 0, 0, 0, 1, 0, 2, b'a', b'b', b'c', b'd'];
        let c = ipv4::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        m
    }

    #[test]
    fn echo_reply_fixture() {
        let req = request();
        assert_eq!(&req[2..4], &[0x33, 0x36]); // computed independently in Python
        let r = echo_reply(&req).unwrap();
        assert_eq!(
            r,
            vec![0, 0, 0x3b, 0x36, 0, 1, 0, 2, b'a', b'b', b'c', b'd']
        );
        assert_eq!(ipv4::checksum(&r), 0);
        let mut bad = req.clone();
        bad[9] ^= 1;
        assert!(echo_reply(&bad).is_none());
        assert!(echo_reply(&r).is_none());
        assert!(echo_reply(&req[..7]).is_none());
    }

    #[test]
    fn error_quotes_header_and_8_bytes() {
        let h = ipv4::header([10, 0, 0, 1], [10, 9, 0, 1], 17, 1, 7, 12);
        let mut orig = h.to_vec();
        orig.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let e = error(TIME_EXCEEDED, 0, &orig, 20);
        assert_eq!(e.len(), 8 + 28);
        assert_eq!(&e[..2], &[11, 0]);
        assert_eq!(&e[4..8], &[0; 4]);
        assert_eq!(&e[8..], &orig[..28]);
        assert_eq!(ipv4::checksum(&e), 0);
        assert_eq!(error(3, 0, &orig[..22], 20).len(), 8 + 22);
    }
}
