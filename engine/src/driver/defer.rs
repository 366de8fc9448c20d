//! Deferred TAPs: ports whose frames the real-time loop reads late on purpose, without a
//! wake-up of their own.
//!
//! A frame read from a TAP is stamped with the time it is read, and that time decides when
//! it starts on the wire, unless its link direction is busy: then it waits behind the frames
//! already queued and starts when the last of them is done, whenever it was offered before
//! that ([`Network::ingress_busy_until`]). So the TAP of a port whose direction has at least
//! [`DEFER_MIN_NS`] of queued work, in frames of at least [`DEFER_MIN_FRAME_NS`] each, need
//! not wake the engine: it leaves the loop's epoll set
//! (`EPOLL_CTL_MOD` to no events) for a second set that the loop never sleeps on, and is
//! read when the loop is awake anyway (at most every [`SWEEP_NS`], one `epoll_wait` with
//! timeout 0 telling which deferred TAPs hold frames). The loop still wakes for it when the
//! queue ahead is down to [`READ_BY_NS`], and takes it back once the queue is shorter than
//! [`KEEP_NS`]. Under light traffic on a saturated link this halves the wake-ups (one per
//! departure instead of one per arrival and one per departure).
//!
//! What changes: the frame's queueing delay statistic (sojourn) counts from the read, and a
//! droptail or RED queue decides on the frame with the queue as it is at the read, which may
//! hold fewer frames than at the arrival (frames left meanwhile): a full queue may take a
//! frame it would have dropped, as if it had arrived a little later. Departure times, and so
//! delays and rates, are unchanged.

use std::os::fd::{AsRawFd, RawFd};

use crate::control::exec::Engine;
use crate::time::Instant;

/// Defer a port when a frame arriving now would wait at least this long for the wire.
pub const DEFER_MIN_NS: u64 = 2_000_000;
/// Take a deferred port back when the queue ahead is shorter than this.
pub const KEEP_NS: u64 = 1_500_000;
/// Wake for a deferred port when the queue ahead is down to this (margin for a late wake-up).
pub const READ_BY_NS: u64 = 1_000_000;
/// Defer only a direction whose queued frames take at least this long each to serialize.
/// Denser departures wake the loop every few tens of µs anyway, so reading their TAP costs
/// no wake-up of its own, while a deferred TAP gives one frame per turn: at 1 Gbit/s
/// (12 µs per 1518-byte frame) that idled the link about 1 % of the time (the fidelity
/// suite's bandwidth table measured −1.2 % at the sink).
pub const DEFER_MIN_FRAME_NS: u64 = 50_000;
/// Look at the deferred TAPs at most this often (unless the last look found frames).
pub const SWEEP_NS: u64 = 250_000;

/// The deferred ports of one partition loop.
pub struct Deferred {
    /// The deferred TAPs (token = port index); never slept on.
    ep: RawFd,
    /// Deferred ports and their TAP descriptors.
    ports: Vec<(usize, RawFd)>,
    /// Per port index: deferred now.
    is: Vec<bool>,
    /// Ports read (undeferred) in the last turn: candidates for deferral.
    read: Vec<usize>,
    last_sweep: Instant,
    /// The last sweep found frames: look again next turn.
    again: bool,
    events: Vec<libc::epoll_event>,
    /// Frames read from deferred TAPs (reported in `stats`).
    pub reads: u64,
}

fn ctl(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> bool {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev is valid for the call.
    unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) == 0 }
}

impl Deferred {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: plain syscall creating an fd we own (closed on drop).
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Deferred {
            ep,
            ports: Vec::new(),
            is: Vec::new(),
            read: Vec::new(),
            last_sweep: Instant::ZERO,
            again: false,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
            reads: 0,
        })
    }

    pub fn is_deferred(&self, port: usize) -> bool {
        self.is.get(port).copied().unwrap_or(false)
    }

    /// `port` was read by a wake-up of its own: consider deferring it next turn.
    pub fn note_read(&mut self, port: usize) {
        if !self.read.contains(&port) {
            self.read.push(port);
        }
    }

    /// Once per turn, after the network ran to `now`: defer the ports just read whose
    /// direction is busy for long, take back those whose queue ran short (or whose TAP
    /// went), and return when the loop must wake to read a deferred port at the latest.
    /// `main_ep` is the loop's epoll set, `tag` the token base of its TAPs.
    pub fn review(
        &mut self,
        engine: &Engine,
        now: Instant,
        main_ep: RawFd,
        tag: u64,
    ) -> Option<Instant> {
        let mut read_by: Option<Instant> = None;
        let mut i = 0;
        while i < self.ports.len() {
            let (port, fd) = self.ports[i];
            let tap = engine.out.taps.get(&port).map(|t| t.as_raw_fd());
            let until = engine.net.ingress_busy_until(port);
            match (tap, until) {
                (Some(t), Some(u)) if t == fd && u.nanos_since(now) >= KEEP_NS => {
                    let by = Instant(u.nanos() - READ_BY_NS);
                    read_by = Some(read_by.map_or(by, |r| r.min(by)));
                    i += 1;
                }
                _ => {
                    self.ports.swap_remove(i);
                    self.is[port] = false;
                    if tap == Some(fd) {
                        ctl(self.ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                        ctl(
                            main_ep,
                            libc::EPOLL_CTL_MOD,
                            fd,
                            libc::EPOLLIN as u32,
                            tag | port as u64,
                        );
                    }
                    // A TAP that went (port removed, or moved away) left the main set with it.
                }
            }
        }
        for port in std::mem::take(&mut self.read) {
            if self.is_deferred(port) {
                continue;
            }
            let (Some(tap), Some(u)) = (
                engine.out.taps.get(&port),
                engine.net.ingress_busy_until(port),
            ) else {
                continue;
            };
            if u.nanos_since(now) < DEFER_MIN_NS
                || engine
                    .net
                    .ingress_frame_ns(port)
                    .is_none_or(|f| f < DEFER_MIN_FRAME_NS)
            {
                continue;
            }
            let fd = tap.as_raw_fd();
            if !ctl(
                self.ep,
                libc::EPOLL_CTL_ADD,
                fd,
                libc::EPOLLIN as u32,
                port as u64,
            ) {
                continue;
            }
            if !ctl(main_ep, libc::EPOLL_CTL_MOD, fd, 0, tag | port as u64) {
                ctl(self.ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                continue;
            }
            if self.is.len() <= port {
                self.is.resize(port + 1, false);
            }
            self.is[port] = true;
            self.ports.push((port, fd));
            let by = Instant(u.nanos() - READ_BY_NS);
            read_by = Some(read_by.map_or(by, |r| r.min(by)));
        }
        read_by
    }

    /// Stop deferring `port` (its TAP leaves this loop, which removes it from the main set).
    pub fn forget(&mut self, port: usize, fd: RawFd) {
        if let Some(i) = self.ports.iter().position(|&(p, _)| p == port) {
            self.ports.swap_remove(i);
            self.is[port] = false;
            ctl(self.ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
    }

    /// The deferred ports holding frames, if it is time to look (see [`SWEEP_NS`]); the
    /// caller reads one frame from each (a sweep that found frames looks again next turn).
    pub fn ready(&mut self, now: Instant) -> Vec<usize> {
        if self.ports.is_empty() || !(self.again || now.nanos_since(self.last_sweep) >= SWEEP_NS) {
            return Vec::new();
        }
        self.last_sweep = now;
        // SAFETY: events is a valid buffer of the given length.
        let n = unsafe {
            libc::epoll_wait(
                self.ep,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                0,
            )
        };
        let ready: Vec<usize> = self.events[..n.max(0) as usize]
            .iter()
            .map(|e| e.u64 as usize)
            .filter(|&p| self.is_deferred(p))
            .collect();
        self.again = !ready.is_empty();
        ready
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: we own this fd.
        unsafe { libc::close(self.ep) };
    }
}
