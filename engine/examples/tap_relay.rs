//! `tap_relay A B`: the least a TAP-based forwarder can do, as a baseline for the capacity
//! benches (`bench/fidelity.py`'s "relay" path).
//!
//! It creates TAPs `A` and `B` exactly as the engine does (`Tap::create`: vnet header and
//! offloads) and copies every frame read from one to the other with the engine's own
//! `recv`/`send`, reading up to 64 frames per ready TAP, sleeping in `epoll_wait` when both
//! are empty. No link model, no timers, no statistics: the engine's capacity divided by this
//! one's is what the engine's own work costs, and this one's divided by a veth pair's is what
//! carrying frames through user space over TAPs costs on the machine. Prints `ready` once
//! both TAPs exist; runs until SIGTERM or SIGINT.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use wanlab_engine::io::tap::Tap;

const BATCH: usize = 64;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.len() != 2 {
        eprintln!("usage: tap_relay TAP_A TAP_B");
        std::process::exit(2);
    }
    let taps: Vec<Tap> = names
        .iter()
        .map(|n| {
            Tap::create(n).unwrap_or_else(|e| {
                eprintln!("tap_relay: {n}: {e}");
                std::process::exit(1);
            })
        })
        .collect();
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
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
    println!("ready");
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 2];
    let mut buf = Vec::new();
    // Large frames take over the read buffer; handing them back afterwards keeps super-frames
    // free of allocations and page faults, as the engine's pool does.
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let (mut moved, mut dropped) = (0u64, 0u64);
    while !STOP.load(Ordering::Relaxed) {
        // SAFETY: events is a valid buffer of 2 entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 2, 200) };
        for ev in events.iter().take(n.max(0) as usize) {
            let from = ev.u64 as usize;
            let (src, dst) = (&taps[from], &taps[1 - from]);
            for _ in 0..BATCH {
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
    }
    eprintln!("tap_relay: {moved} frames relayed, {dropped} dropped at a full TAP");
    // SAFETY: closing the epoll fd we created.
    unsafe { libc::close(ep) };
}
