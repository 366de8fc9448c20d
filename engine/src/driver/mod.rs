//! Drivers: thin loops that own the clock and feed the core.
pub mod parallel;
pub mod partitioner;
pub mod realtime;
pub mod remote;
pub mod simulate;
pub mod virtual_time;
pub mod wake;
