//! Thin, safe wrappers around UDP sockets and the batched syscalls
//! `sendmmsg(2)` / `recvmmsg(2)`.
//!
//! A [`Batch`] owns one contiguous buffer of `n` slots of `slot` bytes plus
//! the iovec / mmsghdr / sockaddr arrays pointing into it. Heap allocations
//! do not move when the struct moves, so the raw pointers stay valid.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Set an integer socket option, returning the OS error on failure.
fn setsockopt_int(fd: i32, level: i32, name: i32, val: i32) -> io::Result<()> {
    // SAFETY: pointer to a live i32 with its correct length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Enlarge socket buffers (forcing past rmem_max/wmem_max when root).
pub fn set_buffers(sock: &UdpSocket, bytes: i32) {
    let fd = sock.as_raw_fd();
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
    }
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes);
    }
}

/// Set the TOS byte (IPv4) or traffic class (IPv6) of outgoing datagrams.
pub fn set_tos(sock: &UdpSocket, tos: u8) -> io::Result<()> {
    if sock.local_addr()?.is_ipv6() {
        setsockopt_int(
            sock.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            tos as i32,
        )
    } else {
        setsockopt_int(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, tos as i32)
    }
}

/// Socket for sending to `dst` (connected, so sendmmsg needs no addresses).
pub fn sender_socket(dst: SocketAddr, bind: Option<SocketAddr>) -> io::Result<UdpSocket> {
    let any = if dst.is_ipv6() {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let local = bind.unwrap_or(SocketAddr::new(any, 0));
    let s = UdpSocket::bind(local)?;
    s.connect(dst)?;
    set_buffers(&s, 4 << 20);
    Ok(s)
}

/// Socket bound to `addr` for receiving, with a read timeout so loops can
/// check their deadlines.
pub fn bound_socket(addr: SocketAddr, timeout: Duration) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(addr)?;
    set_buffers(&s, 32 << 20);
    s.set_read_timeout(Some(timeout))?;
    Ok(s)
}

pub struct Batch {
    pub slot: usize,
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    /// Peers' addresses (IPv4 or IPv6) as `recvmmsg` left them, for `reflect`.
    names: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
}

/// Outcome of a batched send.
pub enum SendResult {
    /// This many datagrams (a prefix of the batch) were sent.
    Sent(usize),
    /// Transient backpressure (ENOBUFS, EAGAIN, ECONNREFUSED): retry later.
    Busy(#[allow(dead_code)] io::Error),
}

impl Batch {
    pub fn new(n: usize, slot: usize) -> Batch {
        let n = n.max(1);
        let mut b = Batch {
            slot,
            buf: vec![0u8; n * slot],
            iov: Vec::with_capacity(n),
            // SAFETY: sockaddr_storage and mmsghdr are plain C structs; all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; n],
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
        };
        for i in 0..n {
            b.iov.push(libc::iovec {
                iov_base: b.buf[i * slot..].as_mut_ptr() as *mut libc::c_void,
                iov_len: slot,
            });
        }
        for i in 0..n {
            let h = &mut b.hdrs[i].msg_hdr;
            h.msg_iov = &mut b.iov[i] as *mut libc::iovec;
            h.msg_iovlen = 1;
        }
        b
    }

    /// Batch pre-filled as if `msgs` had just been received (for tests).
    #[cfg(test)]
    pub fn from_msgs(msgs: &[Vec<u8>]) -> Batch {
        let slot = msgs.iter().map(|m| m.len()).max().unwrap_or(1);
        let mut b = Batch::new(msgs.len(), slot);
        for (i, m) in msgs.iter().enumerate() {
            b.slot_mut(i)[..m.len()].copy_from_slice(m);
            b.hdrs[i].msg_len = m.len() as u32;
        }
        b
    }

    /// Capacity in messages.
    pub fn len(&self) -> usize {
        self.hdrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hdrs.is_empty()
    }

    /// Mutable view of slot `i` (the full slot size).
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[i * self.slot..(i + 1) * self.slot]
    }

    /// Received bytes of message `i` after [`Batch::recv`].
    pub fn msg(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &self.buf[i * self.slot..i * self.slot + len]
    }

    pub fn msg_len(&self, i: usize) -> usize {
        self.hdrs[i].msg_len as usize
    }

    /// Send slots `0..n` with length `len` each over a connected socket.
    pub fn send(&mut self, sock: &UdpSocket, n: usize, len: usize) -> io::Result<SendResult> {
        let n = n.min(self.len());
        for i in 0..n {
            self.iov[i].iov_len = len.min(self.slot);
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
        }
        self.sendmmsg(sock, 0, n)
    }

    /// Send back the first `n` received messages to their source addresses
    /// (as recorded by the preceding [`Batch::recv`]).
    pub fn reflect(&mut self, sock: &UdpSocket, n: usize) -> io::Result<usize> {
        let n = n.min(self.len());
        for i in 0..n {
            self.iov[i].iov_len = self.hdrs[i].msg_len as usize;
            let name = &mut self.names[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
            // msg_namelen stays what recvmmsg wrote: the peer's address length
            self.hdrs[i].msg_hdr.msg_name = name;
        }
        let mut done = 0;
        let mut spins = 0;
        while done < n {
            match self.sendmmsg(sock, done, n - done)? {
                SendResult::Sent(k) => done += k,
                SendResult::Busy(_) => {
                    spins += 1;
                    if spins > 100 {
                        break; // give up on this batch rather than stall the echo loop
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        Ok(done)
    }

    fn sendmmsg(&mut self, sock: &UdpSocket, from: usize, n: usize) -> io::Result<SendResult> {
        if n == 0 {
            return Ok(SendResult::Sent(0));
        }
        // SAFETY: hdrs[from..from+n] are initialised and point at live buffers.
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                self.hdrs[from..].as_mut_ptr(),
                n as u32,
                0,
            )
        };
        if r >= 0 {
            return Ok(SendResult::Sent(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOBUFS)
            | Some(libc::EAGAIN)
            | Some(libc::ECONNREFUSED)
            | Some(libc::EINTR) => Ok(SendResult::Busy(e)),
            _ => Err(e),
        }
    }

    /// Receive up to `len()` datagrams, blocking until at least one arrives
    /// or the socket's read timeout expires (then returns 0).
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let n = self.len();
        for i in 0..n {
            self.iov[i].iov_len = self.slot;
            let name = &mut self.names[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = name;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: all headers point at live buffers of the stated sizes.
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNREFUSED) => Ok(0),
            _ => Err(e),
        }
    }
}

/// Parse `IP:PORT` (IPv4) or `[IPv6]:PORT`, with a readable error.
pub fn parse_addr(s: &str, what: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .map_err(|_| format!("{what}: expected IP:PORT or [IPv6]:PORT, got '{s}'"))
}

/// The bytes an IPv6 header adds per datagram over IPv4's (0 for an IPv4 address).
pub fn extra_header(a: SocketAddr) -> usize {
    if a.is_ipv6() {
        crate::packet::IPV6_EXTRA
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn loopback_batch_roundtrip() {
        let rx = bound_socket("127.0.0.1:0".parse().unwrap(), Duration::from_millis(200)).unwrap();
        let dst = rx.local_addr().unwrap();
        let tx = sender_socket(dst, None).unwrap();
        let mut b = Batch::new(8, 100);
        for i in 0..8 {
            b.slot_mut(i)[0] = i as u8;
        }
        match b.send(&tx, 8, 50).unwrap() {
            SendResult::Sent(k) => assert_eq!(k, 8),
            SendResult::Busy(e) => panic!("busy: {e}"),
        }
        let mut r = Batch::new(16, 2048);
        let mut got = 0;
        while got < 8 {
            let n = r.recv(&rx).unwrap();
            assert!(n > 0);
            for i in 0..n {
                assert_eq!(r.msg_len(i), 50);
                assert_eq!(r.msg(i)[0] as usize, got + i);
            }
            got += n;
        }
        assert_eq!(parse_addr("1.2.3.4:5", "x").unwrap().port(), 5);
        assert!(parse_addr("[::1]:5", "x").unwrap().is_ipv6());
        assert_eq!(extra_header(parse_addr("[::1]:5", "x").unwrap()), 20);
        assert!(parse_addr("nope", "x").is_err());
    }

    #[test]
    fn ipv6_datagrams_are_reflected_to_their_sender() {
        let Ok(rx) = bound_socket("[::1]:0".parse().unwrap(), Duration::from_millis(200)) else {
            return; // no IPv6 on this machine's loopback
        };
        let tx = sender_socket(rx.local_addr().unwrap(), None).unwrap();
        tx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut b = Batch::new(4, 100);
        b.slot_mut(0)[..3].copy_from_slice(b"abc");
        assert!(matches!(b.send(&tx, 1, 3).unwrap(), SendResult::Sent(1)));
        let mut r = Batch::new(4, 100);
        assert_eq!(r.recv(&rx).unwrap(), 1);
        assert_eq!(r.reflect(&rx, 1).unwrap(), 1);
        let mut back = [0u8; 16];
        assert_eq!(tx.recv(&mut back).unwrap(), 3);
        assert_eq!(&back[..3], b"abc");
    }
}
