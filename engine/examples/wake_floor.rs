//! `wake_floor RATE SECONDS`: what sleeping and waking alone costs on this machine, as a
//! baseline for `bench/engine_cpu.py`.
//!
//! It sleeps the way the real-time engine does (`epoll_pwait2` on an epoll set, timer slack
//! 1 ns) until deadlines spaced 1/RATE apart, does nothing when it wakes, and prints one JSON
//! line: the wake-ups it made and the CPU time (user + system) they cost. Run at the engine's
//! measured wake-ups per second, its CPU is the part of the engine's that no work inside the
//! engine can remove: a floor set by the kernel and, in a VM, the hypervisor.

use std::time::{Duration, Instant};

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills a struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or(f64::NAN))
        .collect();
    let (rate, secs) = match args[..] {
        [r, s] if r >= 1.0 && s > 0.0 => (r, s),
        _ => {
            eprintln!("usage: wake_floor RATE SECONDS (RATE >= 1 wake-ups per second)");
            std::process::exit(2);
        }
    };
    // SAFETY: prctl and epoll_create1 take integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // SAFETY: as above.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    let gap = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds();
    let mut next = start + gap;
    let mut wakes = 0u64;
    let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
    while next < end {
        let now = Instant::now();
        if next > now {
            let d = next - now;
            let ts = libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            // SAFETY: valid epoll fd, event buffer and timespec; no signal mask.
            unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    ep,
                    ev.as_mut_ptr(),
                    1,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            wakes += 1;
        }
        next += gap;
    }
    let cpu = cpu_seconds() - cpu0;
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{{\"rate\": {rate}, \"seconds\": {wall:.3}, \"wakes\": {wakes}, \"cpu_seconds\": {cpu:.6}}}"
    );
    // SAFETY: closing the epoll fd we created.
    unsafe { libc::close(ep) };
}
