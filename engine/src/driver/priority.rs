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
//! * a partition busy for [`Governor::LOWER_AT`] of a second (a large simulated network in
//!   real time, a flood at the engine's ceiling) drops to normal priority until it is back
//!   under [`Governor::RAISE_AT`]: throttling alone leaves the other tasks of its core 5 %,
//!   which starved a 2-core machine's nodes and control when two partitions ran a 100 000-node
//!   simulation (the bench's own process could not send its commands for 15 minutes);
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

/// Put the calling thread back to normal scheduling.
pub fn lower() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    let r = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK, &param)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Decides, once per [`Governor::WINDOW_NS`] of wall time, whether a partition thread raised
/// to real-time priority keeps it, from the share of that window it was not blocked waiting.
#[derive(Debug, Clone, Copy)]
pub struct Governor {
    /// The priority in effect at the thread's start (0: the governor does nothing).
    want: i32,
    /// Whether it is lowered now.
    pub lowered: bool,
    /// How many times it was lowered.
    pub lowerings: u64,
    since_wall: u64,
    since_busy: u64,
}

/// What a [`Governor::check`] asks of the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Lower { busy_pct: u32 },
    Raise { busy_pct: u32, prio: i32 },
}

impl Governor {
    pub const WINDOW_NS: u64 = 1_000_000_000;
    /// Lower a partition busy this share of a window (or more).
    pub const LOWER_AT: f64 = 0.90;
    /// Raise it again once it is busy less than this share of a window.
    pub const RAISE_AT: f64 = 0.60;

    /// A governor for a thread running at `got` (the priority [`raise`] gave it).
    pub fn new(got: i32) -> Self {
        Governor {
            want: got,
            lowered: false,
            lowerings: 0,
            since_wall: 0,
            since_busy: 0,
        }
    }

    /// Whether the thread runs at real-time priority now.
    pub fn realtime(&self) -> bool {
        self.want > 0 && !self.lowered
    }

    /// Given the thread's cumulative wall and busy time (ns), the change due now, if any.
    pub fn check(&mut self, wall_ns: u64, busy_ns: u64) -> Option<Change> {
        if self.want == 0 {
            return None;
        }
        let dt = wall_ns.saturating_sub(self.since_wall);
        if dt < Self::WINDOW_NS {
            return None;
        }
        let share = busy_ns.saturating_sub(self.since_busy) as f64 / dt as f64;
        self.since_wall = wall_ns;
        self.since_busy = busy_ns;
        let busy_pct = (share * 100.0).round().min(100.0) as u32;
        if !self.lowered && share >= Self::LOWER_AT {
            self.lowered = true;
            self.lowerings += 1;
            Some(Change::Lower { busy_pct })
        } else if self.lowered && share < Self::RAISE_AT {
            self.lowered = false;
            Some(Change::Raise {
                busy_pct,
                prio: self.want,
            })
        } else {
            None
        }
    }
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

    const S: u64 = Governor::WINDOW_NS;

    #[test]
    fn a_partition_busy_for_a_whole_window_is_lowered_and_raised_when_it_is_not() {
        let mut g = Governor::new(10);
        // the first window starts at the thread's start
        assert_eq!(
            g.check(S / 2, S / 2),
            None,
            "less than a window: no decision"
        );
        assert_eq!(g.check(S, S / 2), None, "busy half the window: stays");
        // busy 95 % of the next window
        assert_eq!(
            g.check(2 * S, S / 2 + S * 95 / 100),
            Some(Change::Lower { busy_pct: 95 })
        );
        assert!(g.lowered);
        assert!(!g.realtime(), "lowered: polls as a normal thread");
        // still busy: nothing more to do
        assert_eq!(g.check(3 * S, S / 2 + S * 95 / 100 + S), None);
        // 70 % is under the lowering mark but not under the raising one: stays lowered
        let b = S / 2 + S * 95 / 100 + S;
        assert_eq!(g.check(4 * S, b + S * 7 / 10), None);
        assert!(g.lowered);
        // 30 %: back to its priority
        let b = b + S * 7 / 10;
        assert_eq!(
            g.check(5 * S, b + S * 3 / 10),
            Some(Change::Raise {
                busy_pct: 30,
                prio: 10
            })
        );
        assert!(!g.lowered);
        assert!(g.realtime());
        assert_eq!(g.lowerings, 1);
    }

    #[test]
    fn a_thread_at_normal_priority_is_never_governed() {
        let mut g = Governor::new(0);
        assert!(!g.realtime());
        assert_eq!(g.check(S, S), None);
        assert_eq!(g.check(10 * S, 10 * S), None);
        assert!(!g.lowered);
    }
}
