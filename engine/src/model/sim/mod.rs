//! Simulated nodes that exist only inside the engine. Like the rest of the model they take
//! deterministic inputs (a frame on an interface, a time) and produce frames that the
//! [`super::network::Network`] feeds into link pipelines, exactly as frames read from a TAP.
pub mod addr_hash;
pub mod agent;
pub mod host;
pub mod ip;
pub mod neighbours;
pub mod router;
pub mod tcp;
