//! The replicas of a parallel simulation as the scenario loop (`simulate`) sees them: the
//! [`Replicas`] trait, implemented by the threads of one process (`parallel`) and by one
//! replica per engine process (`remote`).
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::control::exec::Engine;
use crate::time::Instant;

/// The replicas of a run as the scenario loop sees them: on threads of this process
/// (`Pool`, `parallel`) or one per engine process (`Remote`, `remote`). With processes,
/// every process runs the same loop and calls these at the same points; values gathered by [`Replicas::each`]
/// reach the coordinator only (the others get their own), and only its result counts.
pub trait Replicas {
    /// Number of replicas (partitions) of the whole run.
    fn count(&self) -> usize;
    /// `f` on every replica, in partition order.
    fn each<R, F>(&mut self, f: F) -> Result<Vec<R>, String>
    where
        R: Serialize + DeserializeOwned,
        F: FnMut(&mut Engine) -> R;
    /// `f` on this process's first replica (for what every replica knows alike).
    fn local<R>(&mut self, f: impl FnOnce(&mut Engine) -> R) -> R;
    /// Run every network event with time ≤ `t` in every replica.
    fn advance_to(&mut self, t: Instant) -> Result<(), String>;
    /// Requests ran (with more than one replica): a delay of a cut link may have changed,
    /// and the lookahead follows; an error if a cut link lost its minimum delay.
    fn topology_changed(&mut self) -> Result<(), String>;
    fn windows(&self) -> u64;
}
