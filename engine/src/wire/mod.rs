//! Wire formats: read-only views over frame bytes. No logic lives here, only parsing.
pub mod ethernet;
