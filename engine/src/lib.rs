//! wanlab-engine: the real-time packet engine of wanlab.
//!
//! Layers, from the bytes up (each depends only on the ones above it in this list):
//!
//! * [`time`], [`rng`]: the caller-owned clock type and the deterministic per-link PRNG.
//! * [`wire`]: views over frame bytes (Ethernet, ARP, IPv4, ICMP, UDP, TCP), the one Internet
//!   checksum, and offload handling.
//! * [`model`]: the core without I/O — link-direction pipelines (queue → rate → delay → loss
//!   → dup/corrupt), LANs, simulated routers (`model::sim`), and the
//!   [`model::network::Network`] that schedules them. Every
//!   entry point takes `now`; every object reports `poll_at()`.
//! * [`stats`], [`pcap`]: counters and the capture file format.
//! * [`control`]: the line-oriented JSON control protocol: wire types, pure validation into
//!   typed commands, checks against the network, execution, and the socket's own thread.
//! * [`io`]: TAP devices, capture files confined to a directory, control-peer credentials.
//! * [`driver`]: the real-time driver (epoll, timerfd, spinning), the virtual-time driver
//!   (jumps from deadline to deadline) and batch simulation (`simulate`: scenario files run in
//!   virtual time through the control layer), all thin loops over the same `Network`.
pub mod control;
pub mod driver;
pub mod io;
pub mod model;
pub mod pcap;
pub mod rng;
pub mod stats;
pub mod time;
pub mod wire;
