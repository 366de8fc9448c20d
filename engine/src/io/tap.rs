//! TAP devices opened through `/dev/net/tun` with `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`,
//! non-blocking.
//!
//! Offloads: every frame read or written is preceded by a 12-byte `virtio_net_hdr`
//! ([`crate::wire::vnet`], `TUNSETVNETHDRSZ` 12), and `TUNSETOFFLOAD` enables
//! `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN`: the node's kernel then hands the
//! engine TCP super-frames of up to 64 KB with partial checksums instead of segmenting and
//! checksumming every 1500-byte frame itself, and accepts the same from the engine. What the
//! engine does with them (pass whole over unlimited links, segment in software elsewhere) is in
//! [`crate::model::packet`]. UDP segmentation offload (USO/UFO) is not enabled, so UDP always
//! arrives as wire-sized datagrams.
//!
//! The engine creates each TAP either in its own (root) network namespace or, when the port
//! names one, directly inside a node's namespace: the engine enters it with `setns` just for
//! the `open`+`TUNSETIFF` (a TAP is born in the namespace of the thread that opens
//! `/dev/net/tun`). Creating it in place matters for swap-in time: moving an interface between
//! namespaces costs ~20 ms of kernel synchronisation on this machine class, creating it costs
//! ~0.1 ms. The fd keeps working whatever namespace the interface is in.
//!
//! A TAP in the root namespace is not persistent: closing the fd deletes it, so an engine that
//! exits, even by crash, leaves no interfaces there. A TAP inside a node's namespace is
//! persistent and goes with that namespace (see [`Tap::create_in`]).
//! Carrier is switched with `TUNSETCARRIER` so a node's kernel sees NO-CARRIER on link down.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::wire::vnet::{self, VnetHdr};

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// `_IOW('T', 208, unsigned int)`
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `_IOW('T', 216, int)`
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
/// Largest frame read from a TAP: a 64 KB IP super-frame plus Ethernet/VLAN headers.
pub const MAX_FRAME: usize = 65_536 + 256;
/// Frames up to this size are copied into a right-sized buffer after a read; larger ones
/// (super-frames) keep the read buffer, so they are never copied.
const COPY_BELOW: usize = 4096;
/// `_IOW('T', 202, int)`
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 203, int)`
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb;
/// `_IOW('T', 226, int)`
const TUNSETCARRIER: libc::c_ulong = 0x4004_54e2;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Check an interface name as the kernel would (1..=15 bytes, no '/', ':' or whitespace).
pub fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 {
        return Err(format!(
            "tap: interface name \"{name}\" must be 1 to 15 bytes"
        ));
    }
    if name == "."
        || name == ".."
        || name.bytes().any(|b| {
            b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace() || !b.is_ascii_graphic()
        })
    {
        return Err(format!(
            "tap: interface name \"{name}\" contains a forbidden character"
        ));
    }
    Ok(())
}

#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
    ifindex: u32,
    netns: Option<String>,
}

impl Tap {
    /// Create TAP `name` inside the network namespace bound at `netns` (a path such as
    /// `/run/netns/NAME`), or in the engine's own namespace when `netns` is `None`.
    /// `rps`: the `rps_cpus` mask its receive queue gets (`--rps`); failing to set it only
    /// warns, the TAP works without.
    pub fn create_in(name: &str, netns: Option<&str>, rps: Option<&str>) -> io::Result<Tap> {
        let Some(path) = netns else {
            let t = Tap::create(name)?;
            if let Some(mask) = rps {
                let f = format!("/sys/class/net/{name}/queues/rx-0/rps_cpus");
                warn_rps(name, std::fs::write(f, mask));
            }
            return Ok(t);
        };
        let own = open_ro("/proc/thread-self/ns/net")?;
        let target = open_ro(path)?;
        // SAFETY: setns on fds we own; the previous namespace is restored below.
        if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // A TAP inside a node's namespace is made persistent: closing the fd then does not
        // unregister it (one RCU synchronisation per device, ~20 ms each here); it goes when
        // the namespace is deleted, where the kernel removes all devices in one batch.
        //
        // The engine's /sys shows its own namespace's devices, not this one's: the receive
        // steering of a TAP made here comes from this namespace's default for new devices
        // (`net.core.rps_default_mask`, per namespace since Linux 6.x), set around the
        // creation and put back.
        let default_mask = rps.map(|mask| {
            let old = std::fs::read_to_string(RPS_DEFAULT).map(|s| s.trim().to_string());
            (old, std::fs::write(RPS_DEFAULT, mask))
        });
        let made = Tap::create(name)
            .and_then(|t| t.set_persist(true).map(|_| t))
            .map(|t| Tap {
                netns: Some(path.to_string()),
                ..t
            });
        if let Some((old, set)) = default_mask {
            if let Ok(old) = old {
                let _ = std::fs::write(RPS_DEFAULT, old);
            }
            warn_rps(name, set);
        }
        // SAFETY: as above; failing to come back would leave the engine in a node's namespace.
        if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            let e = io::Error::last_os_error();
            eprintln!("wanlab-engine: cannot return to own network namespace: {e}");
            std::process::abort();
        }
        made
    }

    /// Create TAP `name` (fails if an interface of that name exists and is not a free TAP).
    pub fn create(name: &str) -> io::Result<Tap> {
        Tap::open(name, 0)
    }

    /// Create multi-queue TAP `name` with `queues` queues (`IFF_MULTI_QUEUE`), one handle per
    /// queue, each set up as [`Tap::create`] does. The node's kernel spreads the frames it
    /// sends over the queues by flow; a frame written to any queue enters its stack alike.
    pub fn create_queues(name: &str, queues: usize) -> io::Result<Vec<Tap>> {
        (0..queues.max(1))
            .map(|_| Tap::open(name, IFF_MULTI_QUEUE))
            .collect()
    }

    fn open(name: &str, extra_flags: libc::c_short) -> io::Result<Tap> {
        check_ifname(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let path = CString::new("/dev/net/tun").expect("static path has no NUL");
        // SAFETY: plain open(2) with a valid C string.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | extra_flags,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: TUNSETIFF reads/writes an ifreq we own.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let hdr_len = vnet::LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads an int; TUNSETOFFLOAD takes its argument by value.
        if unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                TUNSETVNETHDRSZ,
                &hdr_len as *const libc::c_int,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        let offload = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
        // SAFETY: as above.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, offload as libc::c_ulong) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        // SAFETY: valid C string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        Ok(Tap {
            fd,
            name: name.to_string(),
            ifindex,
            netns: None,
        })
    }

    /// Another handle on the same TAP (a dup of its fd): each partition of a threaded engine
    /// writes to every TAP and reads the ones it owns. The device stays while any handle is
    /// open (or, in a node's namespace, until released).
    pub fn try_clone(&self) -> io::Result<Tap> {
        Ok(Tap {
            fd: self.fd.try_clone()?,
            name: self.name.clone(),
            ifindex: self.ifindex,
            netns: self.netns.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    /// The namespace path the TAP was created in (`None`: the engine's own).
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// Read one frame with its `virtio_net_hdr`; `Ok(None)` when nothing is waiting.
    /// `spare` is a reusable read buffer (capacity [`MAX_FRAME`] is ensured): a small frame
    /// is copied out of it, a large one takes it over (no copy) and `spare` is replaced by
    /// `refill()` (a recycled buffer, so super-frames cost no allocation or page faults).
    pub fn recv(
        &self,
        spare: &mut Vec<u8>,
        refill: impl FnOnce() -> Vec<u8>,
    ) -> io::Result<Option<(VnetHdr, Vec<u8>)>> {
        let mut hdr = [0u8; vnet::LEN];
        spare.clear();
        spare.reserve(MAX_FRAME);
        let iov = [
            libc::iovec {
                iov_base: hdr.as_mut_ptr().cast(),
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: spare.as_mut_ptr().cast(),
                iov_len: spare.capacity(),
            },
        ];
        // SAFETY: both iovecs point at memory we own, valid for writes of their lengths.
        let n = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let n = n as usize;
        let Some(h) = VnetHdr::parse(&hdr[..n.min(vnet::LEN)]) else {
            return Ok(Some((VnetHdr::default(), Vec::new()))); // shorter than the header
        };
        let len = n - vnet::LEN;
        // SAFETY: readv initialised the first `len` bytes of spare's buffer.
        unsafe { spare.set_len(len) };
        if len < COPY_BELOW {
            Ok(Some((h, spare.as_slice().to_vec())))
        } else {
            Ok(Some((h, std::mem::replace(spare, refill()))))
        }
    }

    /// Write one frame with its `virtio_net_hdr` (default for a plain wire frame). A full
    /// device queue or a down interface drops the frame (returns false), as a NIC would; we
    /// never block the engine on one TAP.
    pub fn send(&self, hdr: &VnetHdr, frame: &[u8]) -> bool {
        let h = hdr.to_bytes();
        let iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // SAFETY: both iovecs are valid for reads of their lengths; writev does not write them.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        n == (h.len() + frame.len()) as isize
    }

    fn set_persist(&self, on: bool) -> io::Result<()> {
        // SAFETY: TUNSETPERSIST takes its argument by value.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNSETPERSIST, libc::c_ulong::from(on)) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Close the TAP and delete its device now (used when a port is removed at run time;
    /// at shutdown persistent TAPs are left for their namespace's deletion).
    pub fn release(self) {
        if self.netns.is_some() {
            let _ = self.set_persist(false);
        }
    }

    pub fn set_carrier(&self, on: bool) -> io::Result<()> {
        let v: libc::c_int = on.into();
        // SAFETY: TUNSETCARRIER reads an int.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNSETCARRIER, &v as *const libc::c_int) } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The calling thread's namespace's `rps_cpus` for devices created from now on.
const RPS_DEFAULT: &str = "/proc/sys/net/core/rps_default_mask";

fn warn_rps(name: &str, r: io::Result<()>) {
    if let Err(e) = r {
        eprintln!("wanlab-engine: --rps: cannot steer the receive processing of TAP {name}: {e}");
    }
}

fn open_ro(path: &str) -> io::Result<OwnedFd> {
    let c = CString::new(path)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: plain open(2) with a valid C string.
    let raw = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_ifname("wl-e1-n1-0").is_ok());
        assert!(check_ifname("").is_err());
        assert!(check_ifname("0123456789abcdef").is_err());
        assert!(check_ifname("a/b").is_err());
        assert!(check_ifname("a b").is_err());
        assert!(check_ifname("..").is_err());
    }

    #[test]
    fn multi_queue_tap_has_a_handle_per_queue_and_goes_with_them() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // creating a TAP needs root
        }
        let name = format!("wlt{}mq", std::process::id() % 100_000);
        let queues = Tap::create_queues(&name, 2).unwrap();
        assert_eq!(queues.len(), 2);
        let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/tun_flags")).unwrap();
        let flags = i64::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
        assert_ne!(
            flags & i64::from(IFF_MULTI_QUEUE),
            0,
            "tun_flags {flags:#x}"
        );
        assert_ne!(flags & i64::from(IFF_VNET_HDR), 0, "tun_flags {flags:#x}");
        drop(queues);
        assert!(!std::path::Path::new(&format!("/sys/class/net/{name}")).exists());
    }
}
