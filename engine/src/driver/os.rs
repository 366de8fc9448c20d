//! Handles on the operating system that the real-time driver's threads use: the monotonic
//! clock, epoll sets, eventfds and the signalfd. Nothing here knows the network.
use std::io;
use std::os::fd::RawFd;

use crate::time::Instant;

#[derive(Clone)]
pub struct Clock {
    origin: libc::timespec,
}

fn monotonic() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: monotonic(),
        }
    }
    pub fn now(&self) -> Instant {
        let t = monotonic();
        let ns = (t.tv_sec - self.origin.tv_sec) as i128 * 1_000_000_000
            + (t.tv_nsec - self.origin.tv_nsec) as i128;
        Instant(ns.max(0) as u64)
    }
    /// The absolute CLOCK_MONOTONIC timespec of engine instant `t`.
    pub fn to_timespec(&self, t: Instant) -> libc::timespec {
        let ns = self.origin.tv_sec as i128 * 1_000_000_000
            + self.origin.tv_nsec as i128
            + t.nanos() as i128;
        libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Unix time in ns now (for capture timestamps only; never used for scheduling).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An epoll set.
pub struct Epoll(RawFd);

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        Ok(Epoll(cvt(unsafe {
            libc::epoll_create1(libc::EPOLL_CLOEXEC)
        })?))
    }
    pub fn fd(&self) -> RawFd {
        self.0
    }
    pub fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev is valid for the call.
        cvt(unsafe { libc::epoll_ctl(self.0, op, fd, &mut ev) }).map(|_| ())
    }
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }
    pub fn del(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: events is a valid buffer of the given length.
        let n = unsafe {
            libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, timeout_ms)
        };
        n.max(0) as usize
    }
    /// Wait at most `ns` (`epoll_pwait2`, Linux 5.11+: a ns timeout without a timerfd to
    /// arm and read, two system calls fewer per timed sleep). `None`: not supported here.
    pub fn wait_ns(&self, events: &mut [libc::epoll_event], ns: u64) -> Option<usize> {
        let ts = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: events is a valid buffer of the given length, ts a valid timespec, no
        // signal mask.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.0,
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            return None;
        }
        Some(n.max(0) as usize)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own this fd.
        unsafe { libc::close(self.0) };
    }
}

/// Block SIGTERM/SIGINT and return a signalfd that reports them.
pub fn signal_fd() -> io::Result<RawFd> {
    // SAFETY: sigset manipulation on a local set; signalfd on it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        cvt(libc::pthread_sigmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        cvt(libc::signalfd(
            -1,
            &set,
            libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
        ))
    }
}

/// An eventfd: one thread writes it to wake another's epoll.
pub struct EventFd(RawFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall creating an fd we own.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        Ok(EventFd(fd))
    }
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes from a local buffer.
        unsafe { libc::write(self.0, one.as_ptr().cast(), 8) };
    }
    pub fn reset(&self) {
        let mut x = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer.
        unsafe { libc::read(self.0, x.as_mut_ptr().cast(), 8) };
    }
    pub fn fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: we own this fd.
        unsafe { libc::close(self.0) };
    }
}
