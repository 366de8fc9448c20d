//! Simulated nodes that exist only inside the engine. Like the rest of the model they take
//! `now`-free, deterministic inputs (a frame on an interface) and produce frames that the
//! [`super::network::Network`] feeds into link pipelines, exactly as frames read from a TAP.
pub mod router;
