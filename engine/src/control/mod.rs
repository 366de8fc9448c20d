//! The control plane's interface: line-oriented JSON over a Unix stream socket.
//!
//! From the bytes to the model, each step in its own module:
//! * [`protocol`]: the wire types and parsing (serde; errors name the field path).
//! * [`command`]: checks that need no state, turning a request into a typed [`command::Command`]
//!   ([`params`] for link parameters, [`topology`] and [`agents`] for `apply`).
//! * [`check`]: `apply`'s checks against the network's current state, item by item.
//! * [`exec`]: runs commands against the engine state (network, TAPs, captures); a large
//!   `apply` in slices.
//! * [`merge`]: one `stats` body from the bodies of a partitioned network's replicas.
//! * [`server`]: the socket, served by its own thread (peer credentials, connection buffers,
//!   parsing and validation), which hands commands to the real-time loop over a channel.
//!
//! The protocol itself is documented in `docs/engine-protocol.md`.
pub mod agents;
pub mod check;
pub mod command;
pub mod exec;
pub mod merge;
pub mod params;
pub mod protocol;
pub mod server;
pub mod topology;
