//! Software segmentation and checksum completion: turn a frame read with a `virtio_net_hdr`
//! (see [`super::vnet`]) into exactly the frames a NIC would put on the wire.
//!
//! * TCP super-frames (`gso_type` TCPv4/TCPv6, optionally ECN) are split into segments of
//!   `gso_size` payload bytes, as Linux `tcp_gso_segment` does: the Ethernet/IP/TCP headers
//!   are replicated; IPv4 total length, identification (+1 per segment) and header checksum,
//!   or the IPv6 payload length, are rewritten; the TCP sequence number advances by the
//!   payload already sent; FIN and PSH stay only on the last segment, CWR only on the first.
//! * Every segment, and every non-GSO frame marked `NEEDS_CSUM`, leaves with its **L4
//!   checksum computed in software** (not with `NEEDS_CSUM` for the receiving kernel to
//!   complete). So a shaped link carries frames that are byte-for-byte wire frames: a
//!   `corrupt`ed bit is caught by the receiver's checksum as on a real wire, and pcap
//!   captures show valid checksums.
//! * UDP GSO (UFO/USO) is not segmented: the engine does not enable it on its TAPs, so such
//!   frames only come from broken input and are refused ([`GsoError::Unsupported`]).
//!
//! Nothing here panics on arbitrary input: headers and lengths are checked before any index.

use super::vnet::{VnetHdr, GSO_ECN, GSO_TCPV4, GSO_TCPV6};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoError {
    /// Frame shorter than the headers it claims.
    Truncated,
    /// Headers that do not match the GSO type (wrong EtherType, IP version, protocol, …).
    BadHeader,
    /// A GSO type the engine does not segment (UDP) or `gso_size` 0.
    Unsupported,
}

const ETH_LEN: usize = 14;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Where the headers of a TCP super-frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TcpLayout {
    l3: usize,
    l4: usize,
    /// End of the TCP header = start of the payload.
    payload: usize,
    v6: bool,
}

fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn tcp_layout(hdr: &VnetHdr, f: &[u8]) -> Result<TcpLayout, GsoError> {
    if f.len() < ETH_LEN {
        return Err(GsoError::Truncated);
    }
    let mut l3 = ETH_LEN;
    let mut ethertype = be16(f, 12);
    if ethertype == 0x8100 || ethertype == 0x88a8 {
        if f.len() < ETH_LEN + 4 {
            return Err(GsoError::Truncated);
        }
        ethertype = be16(f, 16);
        l3 += 4;
    }
    let v6 = match hdr.gso_type & !GSO_ECN {
        GSO_TCPV4 => false,
        GSO_TCPV6 => true,
        _ => return Err(GsoError::Unsupported),
    };
    let l4 = if v6 {
        if ethertype != 0x86dd {
            return Err(GsoError::BadHeader);
        }
        if f.len() < l3 + 40 {
            return Err(GsoError::Truncated);
        }
        if f[l3] >> 4 != 6 {
            return Err(GsoError::BadHeader);
        }
        // Extension headers: trust csum_start (the kernel always sets it for TSO frames).
        let l4 = if hdr.needs_csum() {
            usize::from(hdr.csum_start)
        } else {
            l3 + 40
        };
        if l4 < l3 + 40 || (l4 == l3 + 40 && f[l3 + 6] != 6) {
            return Err(GsoError::BadHeader);
        }
        l4
    } else {
        if ethertype != 0x0800 {
            return Err(GsoError::BadHeader);
        }
        if f.len() < l3 + 20 {
            return Err(GsoError::Truncated);
        }
        let ihl = usize::from(f[l3] & 0x0f) * 4;
        if f[l3] >> 4 != 4 || ihl < 20 || f[l3 + 9] != 6 {
            return Err(GsoError::BadHeader);
        }
        l3 + ihl
    };
    if f.len() < l4 + 20 {
        return Err(GsoError::Truncated);
    }
    let thl = usize::from(f[l4 + 12] >> 4) * 4;
    if thl < 20 {
        return Err(GsoError::BadHeader);
    }
    if f.len() < l4 + thl {
        return Err(GsoError::Truncated);
    }
    Ok(TcpLayout {
        l3,
        l4,
        payload: l4 + thl,
        v6,
    })
}

use super::checksum::pseudo_header;
pub use super::checksum::{fold, sum};

/// Complete a partial checksum (`NEEDS_CSUM`) in place: add the sum from `csum_start` to the
/// end to the pseudo-header sum already in the field and store the complement.
pub fn complete_csum(hdr: &VnetHdr, f: &mut [u8]) -> Result<(), GsoError> {
    let start = usize::from(hdr.csum_start);
    let at = start + usize::from(hdr.csum_offset);
    if at + 2 > f.len() {
        return Err(GsoError::Truncated);
    }
    let mut c = !fold(sum(&f[start..], 0));
    if c == 0 && hdr.csum_offset == 6 {
        c = 0xffff; // UDP: 0 means "no checksum"
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Whether `f` is a TCP super-frame that [`to_wire`] can cut into segments.
pub fn is_super_frame(hdr: &VnetHdr, f: &[u8]) -> bool {
    hdr.is_gso() && hdr.gso_size > 0 && tcp_layout(hdr, f).is_ok()
}

/// Number of wire frames and their total bytes that `frame` stands for (1 and its length
/// unless it is a well-formed TCP super-frame). Used for counters of super-frames that cross
/// an unlimited link whole.
pub fn wire_size(hdr: &VnetHdr, f: &[u8]) -> (u64, u64) {
    if hdr.is_gso() && hdr.gso_size > 0 {
        if let Ok(t) = tcp_layout(hdr, f) {
            let n = (f.len() - t.payload)
                .div_ceil(usize::from(hdr.gso_size))
                .max(1);
            return (n as u64, (f.len() + (n - 1) * t.payload) as u64);
        }
    }
    (1, f.len() as u64)
}

/// Append to `out` the wire frames `frame` stands for: the TCP segments of a super-frame, or
/// the frame itself, each with a complete checksum. On error nothing is appended.
pub fn to_wire(hdr: &VnetHdr, frame: &[u8], out: &mut Vec<Vec<u8>>) -> Result<(), GsoError> {
    if !hdr.is_gso() {
        let mut f = frame.to_vec();
        if hdr.needs_csum() {
            complete_csum(hdr, &mut f)?;
        }
        out.push(f);
        return Ok(());
    }
    let t = tcp_layout(hdr, frame)?;
    let mss = usize::from(hdr.gso_size);
    if mss == 0 {
        return Err(GsoError::Unsupported);
    }
    let payload = &frame[t.payload..];
    let n = payload.len().div_ceil(mss).max(1);
    if t.payload - t.l3 + mss.min(payload.len()) > 65_535 {
        return Err(GsoError::BadHeader); // a segment would not fit an IP length field
    }
    let seq0 = u32::from_be_bytes([
        frame[t.l4 + 4],
        frame[t.l4 + 5],
        frame[t.l4 + 6],
        frame[t.l4 + 7],
    ]);
    let flags0 = frame[t.l4 + 13];
    let ecn = hdr.gso_type & GSO_ECN != 0 || flags0 & TCP_CWR != 0;
    let id0 = if t.v6 { 0 } else { be16(frame, t.l3 + 4) };
    let start = out.len();
    for i in 0..n {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        let mut s = Vec::with_capacity(t.payload + chunk.len());
        s.extend_from_slice(&frame[..t.payload]);
        s.extend_from_slice(chunk);
        let l3_len = s.len() - t.l3;
        if t.v6 {
            s[t.l3 + 4..t.l3 + 6].copy_from_slice(&((l3_len - 40) as u16).to_be_bytes());
        } else {
            s[t.l3 + 2..t.l3 + 4].copy_from_slice(&(l3_len as u16).to_be_bytes());
            s[t.l3 + 4..t.l3 + 6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            s[t.l3 + 10..t.l3 + 12].copy_from_slice(&[0, 0]);
            let c = !fold(sum(&s[t.l3..t.l4], 0));
            s[t.l3 + 10..t.l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let seq = seq0.wrapping_add((i * mss) as u32);
        s[t.l4 + 4..t.l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut fl = flags0;
        if i + 1 < n {
            fl &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 && ecn {
            fl &= !TCP_CWR;
        }
        s[t.l4 + 13] = fl;
        // TCP checksum over the pseudo-header and the segment.
        s[t.l4 + 16..t.l4 + 18].copy_from_slice(&[0, 0]);
        let tcp_len = s.len() - t.l4;
        let (src, dst) = if t.v6 {
            (t.l3 + 8..t.l3 + 24, t.l3 + 24..t.l3 + 40)
        } else {
            (t.l3 + 12..t.l3 + 16, t.l3 + 16..t.l3 + 20)
        };
        let acc = pseudo_header(&s[src], &s[dst], 6, tcp_len);
        let c = !fold(sum(&s[t.l4..], acc));
        s[t.l4 + 16..t.l4 + 18].copy_from_slice(&c.to_be_bytes());
        out.push(s);
    }
    debug_assert_eq!(out.len() - start, n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::vnet::{F_NEEDS_CSUM, GSO_UDP};

    /// Independent reference checksum: RFC 1071 over 16-bit words, byte by byte.
    fn rfc1071(parts: &[&[u8]]) -> u16 {
        let mut all = Vec::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        if all.len() % 2 == 1 {
            all.push(0);
        }
        let mut s: u32 = 0;
        for w in all.chunks(2) {
            s += u32::from(w[0]) << 8 | u32::from(w[1]);
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    const MAC: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

    /// IPv4 TCP super-frame 10.0.0.1:1000 → 10.0.0.2:2000, seq 0x01020304, flags PSH|ACK|FIN
    /// (+CWR if `cwr`), `payload` bytes of 0, 1, 2, …; the TCP checksum field holds the partial
    /// pseudo-header sum as the kernel leaves it.
    fn v4_super(payload: usize, cwr: bool) -> Vec<u8> {
        let mut f = MAC.to_vec();
        f.extend_from_slice(&[0x08, 0x00]);
        let tot = (20 + 20 + payload) as u16;
        f.extend_from_slice(&[
            0x45,
            0,
            (tot >> 8) as u8,
            tot as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            6,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ]);
        let fl = 0x19 | if cwr { 0x80 } else { 0 };
        f.extend_from_slice(&[
            0x03, 0xe8, 0x07, 0xd0, 1, 2, 3, 4, 0, 0, 0, 9, 0x50, fl, 0xff, 0xff, 0xaa, 0xbb, 0, 0,
        ]);
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    fn tso(gso: u8, mss: u16, start: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: gso,
            hdr_len: start + 20,
            gso_size: mss,
            csum_start: start,
            csum_offset: 16,
        }
    }

    #[test]
    fn ipv4_three_segments_exact_bytes() {
        let sf = v4_super(250, true); // 100 + 100 + 50
        let mut out = Vec::new();
        to_wire(&tso(GSO_TCPV4 | GSO_ECN, 100, 34), &sf, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(wire_size(&tso(GSO_TCPV4, 100, 34), &sf), (3, 3 * 54 + 250));
        // Expected bytes, built independently: header per segment + its slice of the payload.
        let expect = |i: usize, len: usize, seq: u32, id: u16, flags: u8| {
            let mut f = MAC.to_vec();
            f.extend_from_slice(&[0x08, 0x00]);
            let tot = (40 + len) as u16;
            let mut ip = vec![
                0x45,
                0,
                (tot >> 8) as u8,
                tot as u8,
                (id >> 8) as u8,
                id as u8,
                0x40,
                0,
                64,
                6,
                0,
                0,
                10,
                0,
                0,
                1,
                10,
                0,
                0,
                2,
            ];
            let c = rfc1071(&[&ip]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
            let s = seq.to_be_bytes();
            let mut tcp = vec![
                0x03, 0xe8, 0x07, 0xd0, s[0], s[1], s[2], s[3], 0, 0, 0, 9, 0x50, flags, 0xff,
                0xff, 0, 0, 0, 0,
            ];
            tcp.extend((i * 100..i * 100 + len).map(|x| x as u8));
            let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, (20 + len) as u8];
            let c = rfc1071(&[&pseudo, &tcp]);
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&tcp);
            f
        };
        assert_eq!(out[0], expect(0, 100, 0x0102_0304, 0x1234, 0x90)); // CWR|ACK: no FIN/PSH
        assert_eq!(out[1], expect(1, 100, 0x0102_0368, 0x1235, 0x10)); // ACK only
        assert_eq!(out[2], expect(2, 50, 0x0102_03cc, 0x1236, 0x19)); // FIN|PSH|ACK, no CWR
                                                                      // Spot-check against hand-computed values for the first segment.
        assert_eq!(&out[0][16..18], &[0, 140]);
        for s in &out {
            assert_eq!(rfc1071(&[&s[14..34]]), 0, "IPv4 header checksum verifies");
        }
    }

    #[test]
    fn ipv6_segments() {
        let payload = 3000;
        let mut f = MAC.to_vec();
        f.extend_from_slice(&[0x86, 0xdd]);
        let pl = (20 + payload) as u16;
        f.extend_from_slice(&[0x60, 0, 0, 0, (pl >> 8) as u8, pl as u8, 6, 64]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[
            0x03, 0xe8, 0x07, 0xd0, 0xff, 0xff, 0xff, 0x00, 0, 0, 0, 9, 0x50, 0x18, 0xff, 0xff, 0,
            0, 0, 0,
        ]);
        f.extend((0..payload).map(|i| (i * 7) as u8));
        let mut out = Vec::new();
        to_wire(&tso(GSO_TCPV6, 1428, 54), &f, &mut out).unwrap();
        assert_eq!(
            out.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![74 + 1428, 74 + 1428, 74 + 144]
        );
        let mut seq = 0xffff_ff00u32;
        let mut data = Vec::new();
        for (i, s) in out.iter().enumerate() {
            assert_eq!(
                &s[..54],
                &{
                    let mut h = f[..54].to_vec();
                    h[18..20].copy_from_slice(&((s.len() - 54) as u16).to_be_bytes());
                    h
                }[..]
            );
            assert_eq!(u32::from_be_bytes(s[58..62].try_into().unwrap()), seq);
            seq = seq.wrapping_add(1428);
            assert_eq!(s[67], if i == 2 { 0x18 } else { 0x10 });
            let tcp_len = (s.len() - 54) as u16;
            let mut pseudo = s[22..54].to_vec();
            pseudo.extend_from_slice(&[0, 0, (tcp_len >> 8) as u8, tcp_len as u8, 0, 0, 0, 6]);
            assert_eq!(rfc1071(&[&pseudo, &s[54..]]), 0, "TCP checksum verifies");
            data.extend_from_slice(&s[74..]);
        }
        assert_eq!(data, f[74..]);
    }

    #[test]
    fn needs_csum_completed() {
        // UDP 10.0.0.1:5 → 10.0.0.2:6, 3-byte payload, field = pseudo-header sum.
        let mut f = MAC.to_vec();
        f.extend_from_slice(&[
            0x08, 0x00, 0x45, 0, 0, 31, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 11];
        let partial = fold(sum(&pseudo, 0));
        f.extend_from_slice(&[0, 5, 0, 6, 0, 11]);
        f.extend_from_slice(&partial.to_be_bytes());
        f.extend_from_slice(&[1, 2, 3]);
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 6,
            ..VnetHdr::default()
        };
        let mut out = Vec::new();
        to_wire(&h, &f, &mut out).unwrap();
        let mut udp = out[0][34..].to_vec();
        let got = u16::from_be_bytes([udp[6], udp[7]]);
        udp[6] = 0;
        udp[7] = 0;
        assert_eq!(got, rfc1071(&[&pseudo, &udp]));
        // Plain frames pass unchanged.
        out.clear();
        to_wire(&VnetHdr::default(), &f, &mut out).unwrap();
        assert_eq!(out[0], f);
    }

    #[test]
    fn malformed_refused_without_panic() {
        let sf = v4_super(250, false);
        let mut out = Vec::new();
        for n in 0..sf.len().min(60) {
            let _ = to_wire(&tso(GSO_TCPV4, 100, 34), &sf[..n], &mut out);
        }
        assert_eq!(
            to_wire(&tso(GSO_TCPV4, 0, 34), &sf, &mut out),
            Err(GsoError::Unsupported)
        );
        assert_eq!(
            to_wire(&tso(GSO_UDP, 100, 34), &sf, &mut out),
            Err(GsoError::Unsupported)
        );
        assert_eq!(
            to_wire(&tso(GSO_TCPV6, 100, 34), &sf, &mut out),
            Err(GsoError::BadHeader)
        );
        let bad = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 0xffff,
            csum_offset: 0xffff,
            ..VnetHdr::default()
        };
        assert_eq!(to_wire(&bad, &sf, &mut out), Err(GsoError::Truncated));
        // A segment of exactly the payload (MSS larger than the payload): one frame.
        out.clear();
        to_wire(&tso(GSO_TCPV4, 9000, 34), &sf, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][47], 0x19);
    }
}
