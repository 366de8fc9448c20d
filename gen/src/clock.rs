//! Monotonic clock helpers: nanosecond timestamps from CLOCK_MONOTONIC and
//! sleeping until an absolute deadline (clock_nanosleep with TIMER_ABSTIME),
//! spinning for the last few microseconds so pacing stays tight.

/// Current CLOCK_MONOTONIC time in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Below this remaining wait we spin instead of sleeping.
const SPIN_NS: u64 = 30_000;

/// Block until CLOCK_MONOTONIC reaches `deadline_ns`.
pub fn sleep_until(deadline_ns: u64) {
    loop {
        let now = now_ns();
        if now >= deadline_ns || crate::stop::requested() {
            return;
        }
        let left = deadline_ns - now;
        if left <= SPIN_NS {
            std::hint::spin_loop();
            continue;
        }
        let target = deadline_ns - SPIN_NS / 2;
        let ts = libc::timespec {
            tv_sec: (target / 1_000_000_000) as libc::time_t,
            tv_nsec: (target % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: valid timespec; remaining-time pointer may be null with TIMER_ABSTIME.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
    }
}

/// Reduce the kernel timer slack of this thread to 1 ns (default is 50 µs).
pub fn tighten_timer_slack() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sleep_reaches_deadline() {
        let t0 = now_ns();
        sleep_until(t0 + 2_000_000);
        let t1 = now_ns();
        assert!(t1 >= t0 + 2_000_000);
        assert!(t1 < t0 + 50_000_000);
    }
}
