//! The control plane's interface: line-oriented JSON over a Unix stream socket.
//!
//! * [`protocol`]: request types, parsing with field paths in errors, parameter validation.
//! * [`exec`]: executes requests against the engine state (network, TAPs, captures).
//! * [`server`]: the non-blocking socket, connection buffers, subscriptions.
//!
//! The protocol itself is documented in `docs/engine-protocol.md`.
pub mod exec;
pub mod protocol;
pub mod server;
