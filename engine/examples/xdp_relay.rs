//! `xdp_relay A B`: the least an AF_XDP forwarder can do, as a ceiling beside `tap_relay`
//! (`bench/datapath_ceiling.py`).
//!
//! `A` and `B` are existing interfaces (the host ends of two veth pairs). On each, a four-
//! instruction XDP program redirects every frame to an AF_XDP socket (an XSKMAP entry for
//! queue 0); the relay copies each frame received on one socket into the other's transmit
//! ring. Copy mode (`XDP_COPY`), native XDP where the driver has it (veth does), else generic
//! XDP. One thread, `poll` on both sockets when both are empty. No link model.
//!
//! Written on the raw system calls (`bpf`, `AF_XDP` sockets and their mmap'd rings) so it
//! needs no BPF compiler or library. Prints `ready` once both sockets receive; runs until
//! SIGTERM or SIGINT, then says what it moved. The XDP programs are attached by BPF links,
//! which the kernel detaches when the process exits.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

const FRAME: u64 = 2048;
/// Frames of each socket's UMEM: half for receiving (the fill ring), half for sending.
const FRAMES: u32 = 4096;
const RING: u32 = 2048;
const BATCH: u32 = 64;

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The `bpf` system call with a zeroed 128-byte attribute block `a`.
fn bpf(cmd: libc::c_long, a: &mut [u64; 16]) -> io::Result<i32> {
    // SAFETY: `a` is a valid, large enough bpf_attr; the kernel reads only what `cmd` needs.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, a.as_mut_ptr(), 128usize) };
    if r < 0 {
        return Err(os_err(&format!("bpf({cmd})")));
    }
    Ok(r as i32)
}

fn put32(a: &mut [u64; 16], off: usize, v: u32) {
    let b = a.as_mut_ptr() as *mut u8;
    // SAFETY: off + 4 <= 128 at every call site.
    unsafe { (b.add(off) as *mut u32).write_unaligned(v) };
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;

fn xskmap() -> io::Result<i32> {
    let mut a = [0u64; 16];
    put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
    put32(&mut a, 4, 4);
    put32(&mut a, 8, 4);
    put32(&mut a, 12, 1);
    bpf(BPF_MAP_CREATE, &mut a)
}

/// `r2 = ctx->rx_queue_index; r1 = map; r3 = XDP_PASS; return bpf_redirect_map(r1, r2, r3)`.
fn load_prog(map_fd: i32) -> io::Result<i32> {
    let insn = |code: u8, regs: u8, off: i16, imm: i32| -> u64 {
        (code as u64)
            | ((regs as u64) << 8)
            | ((off as u16 as u64) << 16)
            | ((imm as u32 as u64) << 32)
    };
    let prog: [u64; 6] = [
        insn(0x61, 0x12, 16, 0),     // ldxw r2, [r1 + 16]
        insn(0x18, 0x11, 0, map_fd), // lddw r1, map (pseudo map fd)
        insn(0, 0, 0, 0),
        insn(0xb7, 0x03, 0, 2), // mov r3, XDP_PASS (the action when the entry is empty)
        insn(0x85, 0, 0, 51),   // call bpf_redirect_map
        insn(0x95, 0, 0, 0),    // exit
    ];
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let mut a = [0u64; 16];
    put32(&mut a, 0, BPF_PROG_TYPE_XDP);
    put32(&mut a, 4, prog.len() as u32);
    a[1] = prog.as_ptr() as u64;
    a[2] = license.as_ptr() as u64;
    put32(&mut a, 24, 1);
    put32(&mut a, 28, log.len() as u32);
    a[4] = log.as_mut_ptr() as u64;
    put32(&mut a, 68, BPF_XDP);
    bpf(BPF_PROG_LOAD, &mut a).map_err(|e| {
        let end = log.iter().position(|&c| c == 0).unwrap_or(0);
        io::Error::new(
            e.kind(),
            format!("{e}: {}", String::from_utf8_lossy(&log[..end])),
        )
    })
}

/// Attach `prog` to `ifindex` by a BPF link: native mode, else generic. Returns the link fd
/// and whether it is native.
fn attach(prog: i32, ifindex: u32) -> io::Result<(i32, bool)> {
    let mut last = None;
    for (flags, native) in [(XDP_FLAGS_DRV_MODE, true), (XDP_FLAGS_SKB_MODE, false)] {
        let mut a = [0u64; 16];
        put32(&mut a, 0, prog as u32);
        put32(&mut a, 4, ifindex);
        put32(&mut a, 8, BPF_XDP);
        put32(&mut a, 12, flags);
        match bpf(BPF_LINK_CREATE, &mut a) {
            Ok(fd) => return Ok((fd, native)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap())
}

/// One mmap'd ring: producer, consumer and `RING` entries of `T`.
struct Ring<T> {
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    desc: *mut T,
}

impl<T> Ring<T> {
    fn map(fd: i32, off: &libc::xdp_ring_offset, pgoff: i64) -> io::Result<Ring<T>> {
        let len = off.desc as usize + RING as usize * std::mem::size_of::<T>();
        // SAFETY: mapping the ring the kernel set up for this socket.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap ring"));
        }
        let b = p as *mut u8;
        // SAFETY: offsets inside the mapping, as the kernel reported them.
        unsafe {
            Ok(Ring {
                prod: b.add(off.producer as usize) as *const AtomicU32,
                cons: b.add(off.consumer as usize) as *const AtomicU32,
                desc: b.add(off.desc as usize) as *mut T,
            })
        }
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into a live mapping.
        unsafe { &*self.prod }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: points into a live mapping.
        unsafe { &*self.cons }
    }
    fn at(&self, i: u32) -> *mut T {
        // SAFETY: the index is masked into the ring.
        unsafe { self.desc.add((i & (RING - 1)) as usize) }
    }
}

/// An AF_XDP socket bound to queue 0 of an interface, with its own UMEM.
struct Xsk {
    fd: i32,
    umem: *mut u8,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    /// UMEM frames free for sending.
    free_tx: Vec<u64>,
}

fn setopt<T>(fd: i32, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: v is a valid T for the option.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r != 0 {
        return Err(os_err(&format!("setsockopt({opt})")));
    }
    Ok(())
}

impl Xsk {
    fn open(ifindex: u32) -> io::Result<Xsk> {
        // SAFETY: plain syscalls creating objects we own for the process's life.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(os_err("socket(AF_XDP)"));
        }
        let len = FRAME as usize * FRAMES as usize;
        // SAFETY: anonymous private mapping.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(os_err("mmap umem"));
        }
        // SAFETY: all-zero is a valid xdp_umem_reg.
        let mut reg: libc::xdp_umem_reg = unsafe { std::mem::zeroed() };
        reg.addr = umem as u64;
        reg.len = len as u64;
        reg.chunk_size = FRAME as u32;
        setopt(fd, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setopt(fd, opt, &RING)?;
        }
        // SAFETY: all-zero is a valid xdp_mmap_offsets; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut olen = std::mem::size_of::<libc::xdp_mmap_offsets>() as u32;
        // SAFETY: off/olen are valid out-parameters.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut _ as *mut libc::c_void,
                &mut olen,
            )
        };
        if r != 0 {
            return Err(os_err("getsockopt(XDP_MMAP_OFFSETS)"));
        }
        let x = Xsk {
            fd,
            umem: umem as *mut u8,
            rx: Ring::map(fd, &off.rx, libc::XDP_PGOFF_RX_RING)?,
            tx: Ring::map(fd, &off.tx, libc::XDP_PGOFF_TX_RING)?,
            fill: Ring::map(fd, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING as i64)?,
            comp: Ring::map(fd, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64)?,
            free_tx: (FRAMES / 2..FRAMES).map(|i| i as u64 * FRAME).collect(),
        };
        // The first half of the UMEM waits in the fill ring for received frames.
        for i in 0..FRAMES / 2 {
            // SAFETY: the ring has room for RING >= FRAMES / 2 entries.
            unsafe { *x.fill.at(i) = i as u64 * FRAME };
        }
        x.fill.prod().store(FRAMES / 2, Ordering::Release);
        // SAFETY: all-zero is a valid sockaddr_xdp.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = 0;
        sa.sxdp_flags = libc::XDP_COPY;
        // SAFETY: sa is a valid sockaddr_xdp.
        let r = unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as u32,
            )
        };
        if r != 0 {
            return Err(os_err("bind(AF_XDP)"));
        }
        Ok(x)
    }

    /// Take back the frames the kernel finished sending.
    fn reap(&mut self) {
        let (c, p) = (
            self.comp.cons().load(Ordering::Relaxed),
            self.comp.prod().load(Ordering::Acquire),
        );
        for i in c..p {
            // SAFETY: entries between consumer and producer are the kernel's completions.
            self.free_tx.push(unsafe { *self.comp.at(i) });
        }
        self.comp.cons().store(p, Ordering::Release);
    }
}

/// Move up to BATCH frames from `src`'s receive ring to `dst`'s transmit ring; returns
/// (moved, dropped for want of a free transmit frame).
fn relay(src: &mut Xsk, dst: &mut Xsk) -> (u32, u32) {
    let c = src.rx.cons().load(Ordering::Relaxed);
    let p = src.rx.prod().load(Ordering::Acquire);
    let n = p.wrapping_sub(c).min(BATCH);
    if n == 0 {
        return (0, 0);
    }
    dst.reap();
    let tp = dst.tx.prod().load(Ordering::Relaxed);
    let tc = dst.tx.cons().load(Ordering::Acquire);
    let mut room = RING - tp.wrapping_sub(tc);
    let fp = src.fill.prod().load(Ordering::Relaxed);
    let (mut sent, mut dropped) = (0u32, 0u32);
    for k in 0..n {
        // SAFETY: the entry is between consumer and producer: the kernel wrote it.
        let d = unsafe { *src.rx.at(c.wrapping_add(k)) };
        match (room > 0).then(|| dst.free_tx.pop()).flatten() {
            Some(addr) => {
                // SAFETY: both frames lie inside their UMEMs; len <= FRAME.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.umem.add(d.addr as usize),
                        dst.umem.add(addr as usize),
                        d.len as usize,
                    );
                    *dst.tx.at(tp.wrapping_add(sent)) = libc::xdp_desc {
                        addr,
                        len: d.len,
                        options: 0,
                    };
                }
                sent += 1;
                room -= 1;
            }
            None => dropped += 1,
        }
        // The receive frame goes back to the fill ring (it has room: FRAMES / 2 <= RING).
        // SAFETY: index masked into the ring.
        unsafe { *src.fill.at(fp.wrapping_add(k)) = d.addr & !(FRAME - 1) };
    }
    src.fill.prod().store(fp.wrapping_add(n), Ordering::Release);
    src.rx.cons().store(c.wrapping_add(n), Ordering::Release);
    if sent > 0 {
        dst.tx
            .prod()
            .store(tp.wrapping_add(sent), Ordering::Release);
        // Copy mode transmits in the sendto call, at most 32 frames per call.
        for _ in 0..sent.div_ceil(32) {
            // SAFETY: a zero-length send on our socket.
            unsafe {
                libc::sendto(
                    dst.fd,
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
        }
    }
    (sent, dropped)
}

fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::other("bad name"))?;
    // SAFETY: c is a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(os_err(name));
    }
    Ok(i)
}

fn setup(name: &str) -> io::Result<(Xsk, i32, bool)> {
    let idx = ifindex(name)?;
    let map = xskmap()?;
    let prog = load_prog(map)?;
    let x = Xsk::open(idx)?;
    let key = 0u32;
    let val = x.fd as u32;
    let mut a = [0u64; 16];
    put32(&mut a, 0, map as u32);
    a[1] = &key as *const u32 as u64;
    a[2] = &val as *const u32 as u64;
    bpf(BPF_MAP_UPDATE_ELEM, &mut a)?;
    let (link, native) = attach(prog, idx)?;
    Ok((x, link, native))
}

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.len() != 2 {
        eprintln!("usage: xdp_relay IFACE_A IFACE_B");
        std::process::exit(2);
    }
    let mut socks = Vec::new();
    for n in &names {
        match setup(n) {
            Ok((x, _link, native)) => {
                eprintln!(
                    "xdp_relay: {n}: {} XDP, copy mode",
                    if native { "native" } else { "generic" }
                );
                socks.push(x);
            }
            Err(e) => {
                eprintln!("xdp_relay: {n}: {e}");
                std::process::exit(1);
            }
        }
    }
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    println!("ready");
    let (first, rest) = socks.split_at_mut(1);
    let (a, b) = (&mut first[0], &mut rest[0]);
    let (mut moved, mut dropped) = (0u64, 0u64);
    let mut fds = [
        libc::pollfd {
            fd: a.fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b.fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    while !STOP.load(Ordering::Relaxed) {
        let (m1, d1) = relay(a, b);
        let (m2, d2) = relay(b, a);
        moved += (m1 + m2) as u64;
        dropped += (d1 + d2) as u64;
        if m1 + m2 + d1 + d2 == 0 {
            // SAFETY: fds is a valid array of 2 pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 200) };
        }
    }
    eprintln!("xdp_relay: {moved} frames relayed, {dropped} dropped at a full transmit ring");
}
