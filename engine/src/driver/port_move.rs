//! Moving a TAP port between the real-time engine's partitions (`move_port`, or the
//! allocator's own decision; see the allocator's module docs), as the leader runs it: the
//! old partition stops reading the port's TAP and hands over the state of the pipelines it
//! feeds (its own, or through a [`ToPart::MoveOut`] to its thread); then the new one takes
//! it ([`ToPart::MoveIn`]) and reads the TAP, and the others take the new placement
//! ([`ToPart::Replace`]). Commands wait meanwhile (`fanout`), so none sees the port half
//! moved. [`hand_over`] and [`take_over`] are the two steps in whichever partition runs
//! them.
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::allocator::{self, PartLoad};
use super::messages::{Ack, ToPart};
use super::os::EventFd;
use super::partition_loop::Part;
use crate::model::network::partition::{Partition, PortState};
use crate::time::Instant;

/// The other partitions as the leader reaches them: a command channel and a wake-up each.
pub type Peers = [(Sender<ToPart>, Arc<EventFd>)];

/// A port on its way between partitions (see [`PortMoves::start`]).
struct Moving {
    mv: allocator::PortMove,
    port: usize,
    seq: u64,
    /// Waiting for the old partition's state (true), or for the others to take the new
    /// placement.
    out: bool,
    waiting: usize,
    pipelines: usize,
    /// Why (for the log line).
    why: String,
    started: Instant,
    /// A `move_port` request waiting for its reply (its pending entry has `seq`).
    reply: bool,
}

/// A move that ended with a `move_port` request waiting for its reply: the request's
/// sequence number and the reply's body.
pub struct Moved {
    pub seq: u64,
    pub body: Map<String, Value>,
}

/// The leader's port moves: at most one at a time.
pub struct PortMoves {
    moving: Option<Moving>,
    acks: Vec<Ack>,
    /// Load checks since the last port move (moves wait [`allocator::MOVE_QUIET_CHECKS`]).
    checks_since_move: u32,
}

impl Default for PortMoves {
    fn default() -> Self {
        PortMoves {
            moving: None,
            acks: Vec::new(),
            checks_since_move: allocator::MOVE_QUIET_CHECKS,
        }
    }
}

/// Stop reading `port`'s TAP in partition `p` and take the state of the pipelines it feeds
/// out of its replica (placement `part`, where the port is elsewhere).
pub fn hand_over(p: &mut Part, port: usize, part: Partition, now: Instant) -> PortState {
    p.unwatch_tap(port);
    let st = p.engine.net.hand_over_port(port, part, now);
    p.recut();
    st
}

/// Take over `port` in partition `p` with the `state` its old partition handed over
/// (placement `part`), and read its TAP.
pub fn take_over(p: &mut Part, port: usize, state: PortState, part: Partition) {
    p.engine.net.adopt_port(state, part);
    p.recut();
    p.watch_tap(port);
}

impl PortMoves {
    /// A port is on its way (commands wait).
    pub fn busy(&self) -> bool {
        self.moving.is_some()
    }

    /// Keep `a` if it answers the move on its way; otherwise give it back.
    pub fn take_ack(&mut self, a: Ack) -> Option<Ack> {
        if self.moving.as_ref().is_some_and(|m| m.seq == a.seq) {
            self.acks.push(a);
            return None;
        }
        Some(a)
    }

    /// Reply to the `move_port` request of the move on its way once it ends.
    pub fn reply_when_done(&mut self) {
        if let Some(m) = self.moving.as_mut() {
            m.reply = true;
        }
    }

    /// A load check: whether it may start a move (none on its way, and enough checks since
    /// the last one).
    pub fn count_check(&mut self) -> bool {
        self.checks_since_move = self.checks_since_move.saturating_add(1);
        !(self.moving.is_some() || self.checks_since_move < allocator::MOVE_QUIET_CHECKS)
    }

    /// Start moving a TAP port to another partition (module docs) under a new sequence
    /// number from `seq`, with the leader's partition `p`, its `peers` and the placement of
    /// every port (updated here); [`PortMoves::advance`] then gives it to the new one.
    /// Returns the move's sequence number.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        p: &mut Part,
        peers: &Peers,
        placement: &mut Partition,
        seq: &mut u64,
        threads: u32,
        mv: allocator::PortMove,
        why: String,
        now: Instant,
    ) -> Result<u64, String> {
        if peers.is_empty() {
            return Err("move_port: only a real-time engine of several partitions (--threads 2 or more) moves ports".into());
        }
        if self.moving.is_some() {
            return Err("move_port: another port is being moved".into());
        }
        let Some(idx) = p.engine.net.port_index(&mv.port) else {
            return Err(format!("port: no such port {:?}", mv.port));
        };
        match p
            .engine
            .net
            .plain_ports()
            .into_iter()
            .find(|x| x.id == mv.port)
        {
            None => {
                return Err(format!(
                    "port: {:?} is a simulated node's port (it runs with its node)",
                    mv.port
                ))
            }
            Some(x) => {
                if let Some(lan) = x.lan {
                    return Err(format!("port: {:?} is on LAN {lan:?}, whose ports and switch stay on one partition", mv.port));
                }
            }
        }
        if mv.to >= threads {
            return Err(format!(
                "partition: must be below {} (the engine's partitions), got {}",
                threads, mv.to
            ));
        }
        if mv.to == mv.from {
            return Err(format!(
                "port: {:?} is on partition {} already",
                mv.port, mv.to
            ));
        }
        placement.ports.insert(mv.port.clone(), mv.to);
        *seq += 1;
        let seq = *seq;
        let from = mv.from;
        self.moving = Some(Moving {
            mv,
            port: idx,
            seq,
            out: true,
            waiting: 1,
            pipelines: 0,
            why,
            started: now,
            reply: false,
        });
        if from == 0 {
            let part = Partition {
                me: 0,
                ..placement.clone()
            };
            let st = hand_over(p, idx, part, now);
            self.deliver(p, peers, placement, st);
        } else if let Some((tx, w)) = peers.get(from as usize - 1) {
            let _ = tx.send(ToPart::MoveOut {
                seq,
                port: idx,
                part: Partition {
                    me: from,
                    ..placement.clone()
                },
            });
            w.wake();
        }
        Ok(seq)
    }

    /// The old partition handed the port's state over: give it to the new one, the new
    /// placement to the others.
    fn deliver(&mut self, p: &mut Part, peers: &Peers, placement: &Partition, state: PortState) {
        let Some(m) = self.moving.as_mut() else {
            return;
        };
        m.out = false;
        m.pipelines = state.len();
        let (from, to, port, seq) = (m.mv.from, m.mv.to, m.port, m.seq);
        let mut state = Some(state);
        let mut waiting = 0;
        for (i, (tx, w)) in peers.iter().enumerate() {
            let me = i as u32 + 1;
            if me == from {
                continue; // it took the placement as it handed over
            }
            let part = Partition {
                me,
                ..placement.clone()
            };
            let msg = if me == to {
                ToPart::MoveIn {
                    seq,
                    port,
                    state: state.take().unwrap_or_default(),
                    part,
                }
            } else {
                ToPart::Replace { seq, part }
            };
            let _ = tx.send(msg);
            w.wake();
            waiting += 1;
        }
        let part = Partition {
            me: 0,
            ..placement.clone()
        };
        if to == 0 {
            take_over(p, port, state.take().unwrap_or_default(), part);
        } else if from != 0 {
            p.engine.net.repartition(part);
            p.recut();
        }
        m.waiting = waiting;
    }

    /// Acknowledgements of the port on its way; the move ends when every partition has the
    /// new placement (logged with the cores of `loads`). Returns the reply of a `move_port`
    /// request that the end answers.
    pub fn advance(
        &mut self,
        p: &mut Part,
        peers: &Peers,
        placement: &Partition,
        loads: &[Arc<PartLoad>],
        now: Instant,
    ) -> Option<Moved> {
        for a in std::mem::take(&mut self.acks) {
            let Some(m) = self.moving.as_mut() else {
                break;
            };
            if m.out {
                self.deliver(p, peers, placement, a.state.unwrap_or_default());
            } else {
                m.waiting = m.waiting.saturating_sub(1);
            }
        }
        let done = self
            .moving
            .as_ref()
            .is_some_and(|m| !m.out && m.waiting == 0);
        if !done {
            return None;
        }
        let m = self.moving.take()?;
        self.checks_since_move = 0;
        let core = |k: u32| loads[k as usize].core.load(Ordering::Relaxed);
        let took_us = now.nanos_since(m.started) as f64 / 1e3;
        eprintln!(
            "wanlab-engine: allocator: port {} moved from partition {} (core {}) to partition {} (core {}): {}; {} pipelines handed over, its TAP unread for {took_us:.0} us",
            m.mv.port,
            m.mv.from,
            core(m.mv.from),
            m.mv.to,
            core(m.mv.to),
            m.why,
            m.pipelines,
        );
        if !m.reply {
            return None;
        }
        let mut body = Map::new();
        body.insert("port".into(), json!(m.mv.port));
        body.insert("from".into(), json!(m.mv.from));
        body.insert("to".into(), json!(m.mv.to));
        body.insert("pipelines".into(), json!(m.pipelines));
        body.insert("unread_us".into(), json!(took_us.round()));
        Some(Moved { seq: m.seq, body })
    }
}
