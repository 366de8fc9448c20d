//! Graceful stop on SIGINT/SIGTERM: the signal only sets a flag; the send and
//! receive loops check it, so a stopped sender still sends its FIN datagrams
//! and a stopped sink still prints its report. Traffic agents are stopped
//! this way by wanlab's event system (`$cbr stop`).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
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
    }
}

/// True once SIGINT or SIGTERM arrived.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
