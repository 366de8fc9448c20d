//! Graceful stop on SIGINT/SIGTERM: the signal only sets a flag; the send and
//! receive loops check it, so a stopped sender still sends its FIN datagrams
//! and a stopped sink still prints its report. Traffic agents are stopped
//! this way by wanlab's event system (`$cbr stop`).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static GO: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGUSR1 {
        GO.store(true, Ordering::SeqCst);
    } else {
        REQUESTED.store(true, Ordering::SeqCst);
    }
}

/// Install the handlers (without SA_RESTART, so blocking calls return early).
pub fn install() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
}

/// Block until SIGUSR1 (true: go) or SIGINT/SIGTERM (false: stop before starting).
///
/// A sender started ahead of time with `--wait-signal` starts sending the instant
/// the event system signals it, so process start-up never delays a flow's start.
pub fn wait_go() -> bool {
    // SAFETY: signal-mask manipulation of this thread; sigsuspend atomically unblocks
    // and waits, so a signal arriving between the check and the wait is not lost.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        for s in [libc::SIGUSR1, libc::SIGINT, libc::SIGTERM] {
            libc::sigaddset(&mut block, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        while !GO.load(Ordering::SeqCst) && !requested() {
            libc::sigsuspend(&old);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    GO.load(Ordering::SeqCst) && !requested()
}

/// True once SIGINT or SIGTERM arrived.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
