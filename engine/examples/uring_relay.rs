//! `uring_relay [--queues N] [--io plain|uring] [--depth D] A B`: TAP relays with batched I/O, as ceilings
//! beside `tap_relay` (`bench/datapath_ceiling.py`).
//!
//! Like `tap_relay` it creates TAPs `A` and `B` as the engine does (vnet header, offloads) and
//! copies every frame from one to the other with nothing in between. Two ways of batching:
//!
//! * `--io uring`: io_uring, with `D` (default 64) reads in flight on each TAP. Each read lands in a
//!   registered buffer (vnet header and frame together); when it completes, the same buffer is
//!   written to the other TAP, and when that write completes, the read is posted again. One
//!   `io_uring_enter` submits everything queued since the last one and waits for at least one
//!   completion, so a busy relay moves a batch per system call. The TAP fds are blocking:
//!   io_uring then waits on the device's poll instead of returning `EAGAIN`.
//! * `--queues N`: multi-queue TAPs (`IFF_MULTI_QUEUE`), one thread per queue pair (queue `i`
//!   of `A` with queue `i` of `B`), thread `i` pinned to CPU `i`. The node's kernel picks a
//!   queue per flow, so one flow uses one queue and one thread.
//!
//! With `--io plain` (the default) each thread runs `tap_relay`'s loop (`epoll`, up to 64
//! reads per ready TAP, one `writev` per frame). Prints `ready` once the TAPs exist; on
//! SIGTERM or SIGINT says what it moved and exits.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use io_uring::{opcode, types, IoUring};
use wanlab_engine::io::tap::{Tap, MAX_FRAME};
use wanlab_engine::wire::vnet;

/// Reads in flight on each TAP (io_uring, `--depth`), and reads per ready TAP (plain).
const DEPTH: usize = 64;
/// One registered buffer: a vnet header and the largest frame.
const BUF: usize = (vnet::LEN + MAX_FRAME + 4095) & !4095;
/// `user_data` bit of a write completion; the low bits are the buffer's index.
const WRITE: u64 = 1 << 32;

static STOP: AtomicBool = AtomicBool::new(false);
/// Frames relayed per queue pair, and frames not written whole (any queue).
static MOVED: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
static DROPPED: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn fail(msg: String) -> ! {
    eprintln!("uring_relay: {msg}");
    std::process::exit(1);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut queues, mut uring, mut depth, mut names) = (1usize, false, DEPTH, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--queues" => {
                queues = match args.next().and_then(|v| v.parse().ok()) {
                    Some(n @ 1..=16) => n,
                    _ => fail("--queues takes 1 to 16".into()),
                }
            }
            "--depth" => {
                depth = match args.next().and_then(|v| v.parse().ok()) {
                    Some(n @ 1..=256) => n,
                    _ => fail("--depth takes 1 to 256".into()),
                }
            }
            "--io" => {
                uring = match args.next().as_deref() {
                    Some("uring") => true,
                    Some("plain") => false,
                    _ => fail("--io takes plain or uring".into()),
                }
            }
            _ => names.push(a),
        }
    }
    if names.len() != 2 {
        eprintln!("usage: uring_relay [--queues N] [--io plain|uring] [--depth D] TAP_A TAP_B");
        std::process::exit(2);
    }
    let open = |n: &String| {
        let made = if queues == 1 {
            Tap::create(n).map(|t| vec![t])
        } else {
            Tap::create_queues(n, queues)
        };
        made.unwrap_or_else(|e| fail(format!("{n}: {e}")))
    };
    let (taps_a, taps_b) = (open(&names[0]), open(&names[1]));
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut workers = Vec::new();
    for (i, (a, b)) in taps_a.into_iter().zip(taps_b).enumerate() {
        let ring = if uring {
            Some(Relay::new(a.as_raw_fd(), b.as_raw_fd(), i, depth).unwrap_or_else(|e| fail(e)))
        } else {
            None
        };
        workers.push(std::thread::spawn(move || {
            if queues > 1 {
                pin(i % cpus);
            }
            match ring {
                Some(mut r) => r.run(),
                None => plain(&[a, b], i),
            }
        }));
    }
    println!("ready");
    // The workers may sleep in the kernel with nothing to relay: the main thread watches
    // for the signal, reports, and ends the process.
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let per_queue: Vec<u64> = MOVED[..queues]
        .iter()
        .map(|m| m.load(Ordering::Relaxed))
        .collect();
    eprintln!(
        "uring_relay: {} frames relayed (per queue pair {per_queue:?}), {} not written whole",
        per_queue.iter().sum::<u64>(),
        DROPPED.load(Ordering::Relaxed)
    );
    std::process::exit(0);
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// `tap_relay`'s loop over one pair of TAP handles.
fn plain(taps: &[Tap; 2], queue: usize) {
    // SAFETY: epoll_create1 has no pointer arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    for (i, t) in taps.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: ev is a valid epoll_event we own; the fd is open.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, t.as_raw_fd(), &mut ev) };
        assert!(r == 0, "epoll_ctl");
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 2];
    let mut buf = Vec::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    loop {
        // SAFETY: events is a valid buffer of 2 entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 2, 200) };
        let (mut moved, mut dropped) = (0, 0);
        for ev in events.iter().take(n.max(0) as usize) {
            let from = ev.u64 as usize;
            let (src, dst) = (&taps[from], &taps[1 - from]);
            for _ in 0..DEPTH {
                match src.recv(&mut buf, || pool.pop().unwrap_or_default()) {
                    Ok(Some((hdr, frame))) => {
                        if dst.send(&hdr, &frame) {
                            moved += 1;
                        } else {
                            dropped += 1;
                        }
                        if frame.capacity() > buf.capacity() / 2 {
                            pool.push(frame);
                        }
                    }
                    _ => break,
                }
            }
        }
        MOVED[queue].fetch_add(moved, Ordering::Relaxed);
        DROPPED.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// One io_uring relaying between two TAP fds: buffers `0..depth` read from `fds[0]`,
/// `depth..2*depth` from `fds[1]`.
struct Relay {
    ring: IoUring,
    fds: [i32; 2],
    queue: usize,
    depth: usize,
    mem: Vec<u8>,
    len: Vec<u32>,
}

impl Relay {
    fn new(a: i32, b: i32, queue: usize, depth: usize) -> Result<Relay, String> {
        for fd in [a, b] {
            // SAFETY: fcntl on an open fd; clearing O_NONBLOCK makes io_uring wait on poll.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        let ring = IoUring::new((4 * depth) as u32).map_err(|e| format!("io_uring: {e}"))?;
        let mut mem = vec![0u8; 2 * depth * BUF];
        let iovs: Vec<libc::iovec> = mem
            .chunks_mut(BUF)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: BUF,
            })
            .collect();
        // SAFETY: the buffers live in `mem`, owned by the Relay for as long as the ring.
        unsafe { ring.submitter().register_buffers(&iovs) }
            .map_err(|e| format!("io_uring buffers: {e}"))?;
        Ok(Relay {
            ring,
            fds: [a, b],
            queue,
            depth,
            mem,
            len: vec![0; 2 * depth],
        })
    }

    fn read(&mut self, i: usize) {
        let fd = self.fds[i / self.depth];
        let ptr = self.mem[i * BUF..].as_mut_ptr();
        let e = opcode::ReadFixed::new(types::Fd(fd), ptr, BUF as u32, i as u16)
            .build()
            .user_data(i as u64);
        // SAFETY: the buffer is registered and idle until this read completes. The ring
        // holds 4 * depth entries and at most 2 * depth operations are ever pending.
        unsafe { self.ring.submission().push(&e) }.expect("submission queue full");
    }

    fn write(&mut self, i: usize) {
        let fd = self.fds[1 - i / self.depth];
        let ptr = self.mem[i * BUF..].as_mut_ptr();
        let e = opcode::WriteFixed::new(types::Fd(fd), ptr, self.len[i], i as u16)
            .build()
            .user_data(i as u64 | WRITE);
        // SAFETY: as in `read`; the buffer holds the frame just read until this completes.
        unsafe { self.ring.submission().push(&e) }.expect("submission queue full");
    }

    fn run(&mut self) {
        for i in 0..2 * self.depth {
            self.read(i);
        }
        let mut done = Vec::with_capacity(4 * self.depth);
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => fail(format!("io_uring_enter: {e}")),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            let (mut moved, mut dropped) = (0, 0);
            for &(tag, res) in &done {
                let i = (tag & 0xffff_ffff) as usize;
                if tag & WRITE != 0 {
                    if res == self.len[i] as i32 {
                        moved += 1;
                    } else {
                        dropped += 1;
                    }
                    self.read(i);
                } else if res > vnet::LEN as i32 {
                    self.len[i] = res as u32;
                    self.write(i);
                } else if res < 0 && res != -libc::EAGAIN && res != -libc::EINTR {
                    fail(format!("read: {}", std::io::Error::from_raw_os_error(-res)));
                } else {
                    self.read(i);
                }
            }
            MOVED[self.queue].fetch_add(moved, Ordering::Relaxed);
            DROPPED.fetch_add(dropped, Ordering::Relaxed);
        }
    }
}
