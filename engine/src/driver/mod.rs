//! Drivers: thin loops that own the clock and feed the core.
pub mod realtime;
pub mod virtual_time;
