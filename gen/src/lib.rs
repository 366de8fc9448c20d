//! wanlab-gen as a library: paced sendmmsg sender, recvmmsg receiver with
//! loss/reorder/delay accounting, echo responder and RTT probe. The
//! `wanlab-gen` binary is a thin CLI over these modules; traffic agents (CBR)
//! can reuse [`send::run`] and [`sink::run`] directly.

pub mod args;
pub mod clock;
pub mod echo;
pub mod json;
pub mod net;
pub mod pacer;
pub mod packet;
pub mod pattern;
pub mod ping;
pub mod send;
pub mod sink;
pub mod stats;
pub mod stop;
