//! Real-time scheduling of the packet thread (`--rt-priority N`).
//!
//! With every core busy with the nodes' own programs, a packet thread at normal priority
//! waits behind them for a time slice, and frames leave late by milliseconds. At a modest
//! `SCHED_RR` priority it runs as soon as a frame or a deadline wakes it. It cannot starve
//! the machine:
//! * the kernel's real-time throttling (`kernel.sched_rt_runtime_us`, by default 95 % of each
//!   second) stays as it is; where it is off (-1), the thread stays at normal priority;
//! * the loop sleeps whenever it has nothing due (an idle engine uses no CPU), and its
//!   polling is bounded by the spin budget (`wake.rs`);
//! * with `--busy-poll` (one core at 100 % by design) the priority is not raised;
//! * `SCHED_RESET_ON_FORK`: nothing the engine starts inherits it.
//!
//! The node processes stay at normal priority (their cgroups' CPU weights rank them among
//! themselves; see `wanlab/backends/emulate/cgroups.py`).

use std::io;

/// Where the kernel's real-time throttling is configured.
const RT_RUNTIME: &str = "/proc/sys/kernel/sched_rt_runtime_us";

/// Highest priority accepted: well below the kernel's own real-time threads (e.g. the
/// migration and watchdog threads at 99) and typical audio/IRQ threads (50).
pub const MAX_PRIORITY: i32 = 40;

/// Check a requested priority (0 = off).
pub fn check(prio: i32) -> Result<(), String> {
    if !(0..=MAX_PRIORITY).contains(&prio) {
        return Err(format!(
            "--rt-priority: 0 (off) to {MAX_PRIORITY}, got {prio}"
        ));
    }
    Ok(())
}

/// Whether real-time throttling is on, from the contents of [`RT_RUNTIME`].
pub fn throttled(runtime_us: &str) -> bool {
    runtime_us.trim().parse::<i64>().is_ok_and(|v| v >= 0)
}

/// Put the calling thread at `SCHED_RR` priority `prio`. Returns the priority in effect
/// (0: normal scheduling) and, when it could not be raised, why.
pub fn raise(prio: i32) -> (i32, Option<String>) {
    if prio == 0 {
        return (0, None);
    }
    match std::fs::read_to_string(RT_RUNTIME) {
        Ok(v) if throttled(&v) => {}
        Ok(_) => {
            return (
                0,
                Some(format!(
                    "real-time throttling is off ({RT_RUNTIME} = -1): staying at normal priority"
                )),
            )
        }
        Err(e) => return (0, Some(format!("cannot read {RT_RUNTIME}: {e}"))),
    }
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    let r =
        unsafe { libc::sched_setscheduler(0, libc::SCHED_RR | libc::SCHED_RESET_ON_FORK, &param) };
    if r < 0 {
        return (
            0,
            Some(format!(
                "SCHED_RR priority {prio}: {}",
                io::Error::last_os_error()
            )),
        );
    }
    (prio, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_throttling() {
        assert!(check(0).is_ok());
        assert!(check(10).is_ok());
        assert!(check(MAX_PRIORITY).is_ok());
        assert!(check(-1).is_err());
        assert!(check(MAX_PRIORITY + 1).is_err());
        assert!(throttled("950000\n"));
        assert!(throttled("0"));
        assert!(!throttled("-1\n"));
        assert!(!throttled("garbage"));
        // Off: nothing is changed.
        assert_eq!(raise(0), (0, None));
    }
}
