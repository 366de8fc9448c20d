//! Per-direction counters, serialized as-is in `stats` replies (field names are protocol).

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Frames offered to the direction (including those then dropped).
    pub in_pkts: u64,
    pub in_bytes: u64,
    /// Frames delivered by the direction (duplicates included).
    pub out_pkts: u64,
    pub out_bytes: u64,
    /// Refused by the queue (tail drop or RED).
    pub drop_queue: u64,
    /// Dropped by the loss model.
    pub drop_loss: u64,
    /// Dropped because the link (or LAN member) was down.
    pub drop_down: u64,
    /// Frames shorter than an Ethernet header, dropped on arrival from the TAP.
    pub drop_malformed: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames/bytes waiting in the queue now (not counting the one being serialized).
    pub qlen_pkts: u64,
    pub qlen_bytes: u64,
    pub peak_qlen_pkts: u64,
}
