//! Packet I/O with the kernel: TAP devices.
pub mod tap;
