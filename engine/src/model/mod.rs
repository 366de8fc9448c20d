//! The model: link directions, LANs and the network that schedules them.
//!
//! Nothing here performs I/O or reads a clock: every entry point takes `now` and every object
//! reports its next deadline through `poll_at()`. Stages of one link direction, in order:
//! `queue` → `rate` (serialization, or a capacity `trace`) → `delay` (propagation + jitter) → `loss` → dup/corrupt.
pub mod arena;
pub mod delay;
pub mod lan;
pub mod loss;
pub mod network;
pub mod packet;
pub mod params;
pub mod pipeline;
pub mod queue;
pub mod rate;
pub mod schedule;
pub mod sim;
pub mod trace;
