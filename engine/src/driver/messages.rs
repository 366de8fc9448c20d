//! What the real-time engine's partitions send each other besides frames: the leader's
//! commands to the other partitions ([`ToPart`]) and their answers ([`Ack`]), over channels
//! (`fanout`, `port_move`).
use crate::control::command::Command;
use crate::control::exec::{Outcome, SharedPcap};
use crate::control::topology::ApplyCmd;
use crate::io::tap::Tap;
use crate::model::network::partition::{Partition, PortState};
use crate::model::network::PipeIdx;
use crate::stats::{Departures, Histogram};

/// A partition's timer lateness and frame departures, for a merged `stats`.
pub type RtHists = (Histogram, Departures);

/// What the leader sends a follower.
pub enum ToPart {
    Apply {
        seq: u64,
        cmd: Box<ApplyCmd>,
        taps: Vec<Tap>,
        part: Partition,
    },
    Run {
        seq: u64,
        cmd: Command,
    },
    Capture {
        seq: u64,
        caps: Vec<(PipeIdx, SharedPcap)>,
    },
    /// Stop reading TAP port `port` and hand over its pipelines' state (placement `part`,
    /// where the port is elsewhere): the first step of moving a port.
    MoveOut {
        seq: u64,
        port: usize,
        part: Partition,
    },
    /// Take over port `port` with the state its old partition handed over, and read it.
    MoveIn {
        seq: u64,
        port: usize,
        state: PortState,
        part: Partition,
    },
    /// Take placement `part` (a port moved between two other partitions).
    Replace {
        seq: u64,
        part: Partition,
    },
    Exit,
}

/// A follower's answer to command `seq`.
pub struct Ack {
    pub seq: u64,
    /// The follower's partition.
    pub from: u32,
    pub outcome: Outcome,
    /// For `trace`: whether this replica runs the agent.
    pub owns_agent: bool,
    /// For `stats`: this replica's lateness and departure distributions.
    pub hist: Option<RtHists>,
    /// For `MoveOut`: the moving port's state.
    pub state: Option<PortState>,
}
