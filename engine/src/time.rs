//! Engine time: a monotonic instant in nanoseconds, owned by the caller.
//!
//! The core never reads a clock. Drivers decide what "now" is: the real-time driver maps
//! `CLOCK_MONOTONIC` to nanoseconds since engine start, the virtual-time driver jumps from
//! deadline to deadline. A plain `u64` of nanoseconds covers 584 years, so arithmetic saturates
//! instead of wrapping and never panics.

use std::fmt;

/// Nanoseconds since an arbitrary origin chosen by the driver.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    pub const fn from_micros(us: u64) -> Self {
        Instant(us.saturating_mul(1_000))
    }
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }
    pub const fn nanos(self) -> u64 {
        self.0
    }
    /// `self + ns`, saturating.
    pub const fn add_nanos(self, ns: u64) -> Self {
        Instant(self.0.saturating_add(ns))
    }
    /// `self - earlier` in nanoseconds, 0 if `earlier` is later.
    pub const fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Earlier of two optional deadlines (`None` = never).
pub fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}
