//! The network: ports, point-to-point links and LANs, and the timer queue that drives them.
//!
//! Ports are where frames enter and leave (a TAP in emulation). A port is attached to at most
//! one link end or LAN membership; its *ingress* pipeline is the direction that carries its
//! frames away (link `ab` for port `a`, LAN member `to_lan`).
//!
//! Scheduling: each pipeline reports when its halves next need a look (one timer for both
//! where they run in the same partition, see `one_timer`); the network keeps one [`timers`] queue
//! ordered by the total key (time, kind, source id, sequence), so the order of simultaneous
//! events never depends on hash order or on the driver, and an idle link costs nothing.
//! Timers are invalidated lazily: an entry is acted on only if it is still the pipeline's
//! scheduled deadline. Pipelines are polled at their event time, not at the driver's `now`,
//! so a frame crossing a LAN switch enters the next pipeline at its exact time.
//!
//! Every collection is an [`Arena`]: indices of ports, links, LANs and pipelines are never
//! reused while the engine runs, so a stale timer or capture can never point at a different
//! object.
//!
//! The rest is split by what it does: [`spec`] (what `apply` takes), `check` (validation of
//! a spec against the network), `topology` (apply and remove), `targets` (addressing link
//! and LAN directions), `delivery` (frames into simulated routers, hosts and LAN switches),
//! `udp_agents` and `tcp_agents` (traffic agents and their timers), `quiet` (which timers a
//! real-time driver may run late, and other lists derived from the topology), `stats`.
use std::collections::HashMap;

use super::arena::Arena;
use super::lan::Lan;
use super::packet::Packet;
use super::pipeline::Pipeline;
use super::sim::agent::{Cbr, UdpSink};
use super::sim::host::Host;
use super::sim::router::Router;
use super::sim::tcp::sender::TcpSender;
use super::sim::tcp::sink::TcpSink;
use crate::time::Instant;
use crate::wire::ethernet::HEADER_LEN;
use crate::wire::stamp;
use crate::wire::vnet::VnetHdr;

mod delivery;
mod lookup;
pub mod partition;
mod quiet;
pub mod spec;
mod stats;
mod targets;
mod tcp_agents;
pub mod timers;
mod topology;
mod udp_agents;

use partition::owns;
pub use spec::{
    AgentKindSpec, AgentSpec, HostSpec, LanSpec, LinkRuleSpec, LinkSpec, MemberSpec, PairSpec,
    PatchSpec, RouterSpec, RulePrefix, TopologySpec,
};
pub use stats::{DirStats, LinkStats, MemberStats, StatsBody};
pub use targets::Dir;
use timers::{TimerKind, TimerQueue};

/// Buffers kept for reuse (see `Network::spare`), and the largest kept (a frame's).
const SPARE_FRAMES: usize = 256;
const SPARE_CAPACITY: usize = 4096;

pub type PortIdx = usize;
pub type PipeIdx = usize;

/// A sending half whose frames spend at least this long in flight has lazy serialization
/// timers (see [`timers`]): its frames are handed on long before they leave the link.
pub const LAZY_MIN_FLIGHT_NS: u64 = 2_000_000;

/// Longest a frame from a tunnel is held (a clock stepped on one machine is no reason to
/// keep frames for ever; no link's delay is this long).
const MAX_HOLD_NS: u64 = 100_000_000_000;

fn lazy_tx(p: &Pipeline) -> bool {
    p.min_flight_ns() >= LAZY_MIN_FLIGHT_NS
}

/// Whether one timer runs both halves of a direction ([`Pipeline::one_timer`]): they run in
/// the same partition, so the end of a serialization needs no event of its own (a third of
/// a simulated packet's events on a link that is idle between packets).
fn one_timer(slot: &PipeSlot) -> bool {
    slot.tx_part == slot.rx_part && slot.pipe.one_timer()
}

/// Where a pipeline delivers what leaves it.
#[derive(Debug, Clone, Copy)]
enum Sink {
    Port(PortIdx),
    Lan {
        lan: usize,
        member: usize,
    },
    /// A LAN's per-pair channel: into member `to`'s `from_lan` pipeline.
    Pair {
        lan: usize,
        to: usize,
    },
}

#[derive(Debug)]
struct PipeSlot {
    pipe: Pipeline,
    sink: Sink,
    capture: bool,
    /// Deadlines of the sending and receiving halves with a timer queued.
    scheduled_tx: Option<Instant>,
    scheduled_rx: Option<Instant>,
    /// Partitions of the sending half (the node whose port feeds it) and of the receiving
    /// half (the node it delivers to); see [`partition`].
    tx_part: u32,
    rx_part: u32,
    /// The port that feeds the sending half (its partition is the sending half's).
    from: PortIdx,
    /// It delivers to a node far from every plain port: its deliveries are lazy timers
    /// ([`quiet`]).
    lazy_rx: bool,
}

#[derive(Debug)]
struct Port {
    id: String,
    ingress: Option<PipeIdx>,
    /// A simulated port: (router, interface index); frames delivered to it go to the router.
    sim: Option<(usize, usize)>,
    /// A simulated host's port: frames delivered to it go to that host.
    host: Option<usize>,
    /// A patch's port: (patch, the other port); frames delivered to it enter the other
    /// port's ingress at the same instant.
    patch: Option<(usize, PortIdx)>,
    /// Frames that arrived on an unattached port (or too short for an unattached port).
    unattached_drops: u64,
    /// Per-destination rules of the link direction this port feeds, longest prefix first.
    rules: Vec<PortRule>,
    /// The port is a tunnel to another engine (a cluster's cut link, `wire/stamp`): frames
    /// to it carry their due time, frames from it are held until theirs.
    tunnel: bool,
    /// How far the far engine's clock is ahead of ours (ns), measured by the cluster's
    /// agents: its due times are read as `due - clock_ahead_ns` here.
    clock_ahead_ns: i64,
}

/// A destination prefix (IPv4 or IPv6, by the EtherType of the frames it matches; an IPv4
/// one in the low 32 bits) and the pipeline its frames take instead of the ingress.
#[derive(Debug, Clone, Copy)]
struct PortRule {
    ethertype: u16,
    net: u128,
    mask: u128,
    pipe: PipeIdx,
}

/// The pipeline of the first rule whose prefix holds the frame's IPv4 or IPv6 destination.
fn classify(rules: &[PortRule], frame: &[u8]) -> Option<PipeIdx> {
    let (ethertype, dst) = match frame.get(12..14)? {
        [0x08, 0x00] if frame.len() >= HEADER_LEN + 20 => (
            0x0800,
            u128::from(u32::from_be_bytes(frame[30..34].try_into().ok()?)),
        ),
        [0x86, 0xdd] if frame.len() >= HEADER_LEN + 40 => {
            (0x86dd, u128::from_be_bytes(frame[38..54].try_into().ok()?))
        }
        _ => return None,
    };
    rules
        .iter()
        .find(|r| r.ethertype == ethertype && dst & r.mask == r.net)
        .map(|r| r.pipe)
}

#[derive(Debug)]
struct Link {
    id: String,
    a: PortIdx,
    b: PortIdx,
    ab: PipeIdx,
    ba: PipeIdx,
    up: bool,
    /// Per-destination rules: (prefix as written, ab pipeline, ba pipeline).
    rules: Vec<(String, PipeIdx, PipeIdx)>,
}

#[derive(Debug)]
struct SimHost {
    id: String,
    port: PortIdx,
    host: Host,
}

#[derive(Debug)]
enum AgentKind {
    Cbr(Cbr),
    Sink(UdpSink),
    Tcp(Box<TcpSender>),
    TcpSink(TcpSink),
}

#[derive(Debug)]
struct Agent {
    id: String,
    host: usize,
    kind: AgentKind,
    scheduled: Option<Instant>,
    /// Partition of its host.
    part: u32,
    /// Its host is far from every plain port: its timers are lazy ([`quiet`]).
    lazy: bool,
}

impl Port {
    /// A port of the outside world (a TAP), not of a simulated node or a patch.
    fn plain(&self) -> bool {
        self.sim.is_none() && self.host.is_none() && self.patch.is_none()
    }
}

/// Two simulated ports joined back to back (a trunk between two LANs, say).
#[derive(Debug)]
struct Patch {
    id: String,
}

#[derive(Debug)]
struct SimRouter {
    id: String,
    ports: Vec<PortIdx>,
    router: Router,
}

/// What `poll` hands the driver.
#[derive(Debug)]
pub enum Output<'a> {
    /// A frame to write to a port; `vnet` is its offload metadata (default for a plain wire
    /// frame; a super-frame or partial checksum only after crossing unlimited pipelines).
    Frame {
        port: PortIdx,
        data: Vec<u8>,
        vnet: VnetHdr,
        /// Its scheduled departure: the model time it leaves the network (a real-time
        /// driver measures how late it actually went out against this).
        at: Instant,
    },
    /// A frame leaving a pipeline with capture enabled (emitted just before it is delivered).
    Capture {
        pipe: PipeIdx,
        at: Instant,
        data: &'a [u8],
    },
}

#[derive(Debug)]
pub struct Network {
    seed: u64,
    ports: Arena<Port>,
    links: Arena<Link>,
    lans: Arena<Lan>,
    pipes: Arena<PipeSlot>,
    routers: Arena<SimRouter>,
    patches: Arena<Patch>,
    hosts: Arena<SimHost>,
    agents: Arena<Agent>,
    /// (host, IP protocol, local port) → the agent that receives there (UDP sinks, TCP sinks
    /// and senders; the first one created wins), so delivery costs no scan of all agents.
    bound: HashMap<(usize, u8, u16), usize, BuildKeyHasher>,
    timers: TimerQueue,
    scratch: Vec<Packet>,
    /// Frames a traffic source sends at one instant (reused: no allocation per packet).
    frames: Vec<Vec<u8>>,
    /// Buffers of frames delivered to simulated hosts, for the frames their traffic sources
    /// send next (at most [`SPARE_FRAMES`]): no allocation per simulated packet.
    spare: Vec<Vec<u8>>,
    /// Timer events acted on (stale heap entries not counted).
    events: u64,
    /// Lateness of timer events behind the `now` they were polled at (real-time driver only).
    lateness: Option<Lateness>,
    /// Distribution of the same lateness (real-time driver only).
    lateness_hist: Option<crate::stats::Histogram>,
    /// At most this many events per `poll` call (None: all that are due).
    poll_limit: Option<u64>,
    /// Real time: plain timers run before lazy ones, and at most this many lazy ones per
    /// `poll` call, so a backlog of a large simulated region never holds up a frame for a
    /// TAP (None: every due event in the total order).
    lazy_per_poll: Option<u64>,
    /// This replica's share of a partitioned simulation (None: it owns everything).
    part: Option<partition::Partition>,
    /// What [`quiet`] derives from the topology (lazy timers, the pipelines plain ports
    /// feed) needs recomputing: the topology or a delay changed.
    quiet_stale: bool,
    /// Pipelines fed by a plain port (for [`Network::port_frames`]).
    plain_fed: Vec<PipeIdx>,
    /// Cut pipelines whose sending half runs here, with the partition that receives them
    /// (for [`Network::take_cut_flights`]).
    cut_out: Vec<(PipeIdx, u32)>,
    /// Unix time of instant 0 in ns: a tunnel's due times are Unix times (`wire/stamp`).
    wall_offset_ns: u64,
}

/// A hasher for small integer keys looked up once per delivered packet (`bound`): SipHash's
/// resistance to chosen keys is not needed for keys the engine makes itself, and cost as
/// much as the rest of a sink's delivery. Only lookups use it, never an iteration order.
#[derive(Debug, Default, Clone, Copy)]
struct BuildKeyHasher;

#[derive(Debug, Default)]
struct KeyHasher(u64);

impl std::hash::BuildHasher for BuildKeyHasher {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // A final avalanche, so the table's bucket bits depend on every input bit.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// How late timer events ran: lateness = the `now` passed to [`Network::poll`] − deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    pub threshold_ns: u64,
    /// Events with lateness > threshold.
    pub late_events: u64,
    pub max_late_ns: u64,
    /// Largest lateness in the last `poll` call (0 if nothing ran).
    pub last_poll_max_ns: u64,
}

impl Network {
    pub fn new(seed: u64) -> Self {
        Network {
            seed,
            ports: Arena::new(),
            links: Arena::new(),
            lans: Arena::new(),
            pipes: Arena::new(),
            routers: Arena::new(),
            patches: Arena::new(),
            hosts: Arena::new(),
            agents: Arena::new(),
            bound: HashMap::default(),
            timers: TimerQueue::default(),
            scratch: Vec::new(),
            frames: Vec::new(),
            spare: Vec::new(),
            events: 0,
            lateness: None,
            lateness_hist: None,
            poll_limit: None,
            lazy_per_poll: None,
            part: None,
            quiet_stale: false,
            plain_fed: Vec::new(),
            cut_out: Vec::new(),
            wall_offset_ns: 0,
        }
    }

    /// Unix time of instant 0 (the real-time driver's), for tunnels' due times.
    pub fn set_wall_offset(&mut self, ns: u64) {
        self.wall_offset_ns = ns;
    }

    /// Timer events processed so far.
    /// Model events run so far: timer events, and the end of every serialization whether a
    /// timer of its own marked it or not (so the count does not depend on [`one_timer`], and
    /// with it on the partitioning).
    pub fn events(&self, now: Instant) -> u64 {
        self.events
            + self
                .pipes
                .iter()
                .map(|s| s.pipe.settled_at(now).0)
                .sum::<u64>()
    }

    /// Measure lateness of timer events against the `now` of each poll (real-time driver).
    pub fn track_lateness(&mut self, threshold_ns: u64) {
        self.lateness = Some(Lateness {
            threshold_ns,
            ..Default::default()
        });
        self.lateness_hist = Some(Default::default());
    }

    pub fn lateness(&self) -> Option<Lateness> {
        self.lateness
    }

    /// Process at most `max` events per [`Network::poll`] call, so a driver that fell
    /// behind still gets to service its I/O between batches (None: no limit).
    pub fn set_poll_limit(&mut self, max: Option<u64>) {
        self.poll_limit = max;
    }

    /// Run plain timers first and at most `max` lazy ones per poll (see the field).
    pub fn set_lazy_per_poll(&mut self, max: Option<u64>) {
        self.lazy_per_poll = max;
    }

    /// Claim agent `ai`'s timer set for `at`: false if the agent is gone or the timer is
    /// stale (rescheduled since); otherwise the event is counted and the timer cleared.
    fn claim_agent_timer(&mut self, ai: usize, at: Instant, now: Instant) -> bool {
        let lazy = match self.agents.get(ai) {
            Some(a) if a.scheduled == Some(at) => a.lazy,
            _ => return false,
        };
        self.count_event(timers::due_at(at, lazy), now);
        if let Some(a) = self.agents.get_mut(ai) {
            a.scheduled = None;
        }
        true
    }

    fn count_event(&mut self, at: Instant, now: Instant) {
        self.events += 1;
        self.count_lateness(at, now);
    }

    /// The real-time lateness of a timer event due `at` and run at `now`.
    fn count_lateness(&mut self, at: Instant, now: Instant) {
        if let Some(l) = self.lateness.as_mut() {
            let late = now.nanos().saturating_sub(at.nanos());
            if late > l.threshold_ns {
                l.late_events += 1;
            }
            l.max_late_ns = l.max_late_ns.max(late);
            l.last_poll_max_ns = l.last_poll_max_ns.max(late);
            if let Some(h) = self.lateness_hist.as_mut() {
                h.record(late);
            }
        }
    }

    /// Set the clock offset of the engine across tunnel port `id` (see `Port::clock_ahead_ns`).
    pub fn set_tunnel_clock(&mut self, id: &str, offset_ns: i64) -> Result<(), String> {
        let Some(pi) = self.port_index(id) else {
            return Err(format!("port: no port {id:?}"));
        };
        match self.ports.get_mut(pi) {
            Some(p) if p.tunnel => {
                p.clock_ahead_ns = offset_ns;
                Ok(())
            }
            _ => Err(format!("port: {id:?} is not a tunnel to another engine")),
        }
    }

    pub fn port_index(&self, id: &str) -> Option<PortIdx> {
        self.ports.index_of(id)
    }

    pub fn port_id(&self, port: PortIdx) -> Option<&str> {
        self.ports.get(port).map(|p| p.id.as_str())
    }

    pub fn has_link(&self, id: &str) -> bool {
        self.links.contains_id(id)
    }
    pub fn has_lan(&self, id: &str) -> bool {
        self.lans.contains_id(id)
    }
    pub fn has_router(&self, id: &str) -> bool {
        self.routers.contains_id(id)
    }
    pub fn has_patch(&self, id: &str) -> bool {
        self.patches.contains_id(id)
    }
    pub fn has_agent(&self, id: &str) -> bool {
        self.agents.contains_id(id)
    }

    /// The simulated router behind a port, if it is a simulated port: (router id, interface).
    pub fn sim_port(&self, port: PortIdx) -> Option<(&str, usize)> {
        let (r, i) = self.ports.get(port)?.sim?;
        Some((self.routers.get(r)?.id.as_str(), i))
    }

    /// A plain wire frame arrived on `port` at `now`.
    pub fn receive(&mut self, port: PortIdx, frame: Vec<u8>, now: Instant) {
        self.receive_packet(port, Packet::plain(frame), now);
    }

    /// A frame with offload metadata arrived on `port` at `now`.
    pub fn receive_packet(&mut self, port: PortIdx, frame: Packet, now: Instant) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        let Some(pipe) = p.ingress else {
            p.unattached_drops += 1;
            return;
        };
        let mut frame = frame;
        // from another engine: due when that engine said
        let hold = p
            .tunnel
            .then(|| stamp::strip(&mut frame.data))
            .flatten()
            .map(|unix| {
                let here = unix.saturating_add_signed(p.clock_ahead_ns.saturating_neg());
                Instant(here.saturating_sub(self.wall_offset_ns))
            })
            .map(|due| due.min(now.add_nanos(MAX_HOLD_NS)));
        let pipe = classify(&p.rules, &frame.data).unwrap_or(pipe);
        let Some(slot) = self.pipes.get_mut(pipe) else {
            return;
        };
        if !owns(&self.part, slot.tx_part) {
            // Another partition's replica carries this frame.
            return;
        }
        if frame.len() < HEADER_LEN {
            slot.pipe.count_malformed(frame.len());
            return;
        }
        slot.pipe.enqueue_held(frame, now, hold);
        self.reschedule(pipe);
    }

    fn reschedule(&mut self, pipe: PipeIdx) {
        self.refresh_quiet();
        let Some(slot) = self.pipes.get_mut(pipe) else {
            return;
        };
        if one_timer(slot) {
            let at = slot.pipe.poll_at();
            if let Some(t) = at.filter(|_| at != slot.scheduled_rx) {
                slot.scheduled_rx = at;
                self.timers
                    .push_as(slot.lazy_rx, t, TimerKind::PipeRx, pipe);
            }
            return;
        }
        let at = slot.pipe.tx_at();
        if let Some(t) = at.filter(|_| at != slot.scheduled_tx) {
            slot.scheduled_tx = at;
            if lazy_tx(&slot.pipe) {
                self.timers.push_lazy(t, TimerKind::PipeTx, pipe);
            } else {
                self.timers.push(t, TimerKind::PipeTx, pipe);
            }
        }
        let at = slot.pipe.rx_at();
        if let Some(t) = at.filter(|_| at != slot.scheduled_rx) {
            slot.scheduled_rx = at;
            self.timers
                .push_as(slot.lazy_rx, t, TimerKind::PipeRx, pipe);
        }
    }

    /// Whether this replica runs timer `t` (always, unless partitioned).
    fn runs(&self, t: &timers::Timer) -> bool {
        let Some(part) = &self.part else {
            return true;
        };
        let owner = match t.kind {
            TimerKind::PipeTx => self.pipes.get(t.source).map(|s| s.tx_part),
            TimerKind::PipeRx => self.pipes.get(t.source).map(|s| s.rx_part),
            TimerKind::Agent | TimerKind::Tcp => self.agents.get(t.source).map(|a| a.part),
        };
        owner == Some(part.me)
    }

    /// Until when a frame arriving now on `port` would wait behind the frames already queued
    /// on its link direction ([`Pipeline::busy_until`]); None when it would not wait or its
    /// path is not fixed (no ingress, per-destination rules, a direction this replica does
    /// not run). A real-time driver may read such a port late, up to that time, without
    /// changing when its frames leave.
    pub fn ingress_busy_until(&self, port: PortIdx) -> Option<Instant> {
        let p = self.ports.get(port)?;
        if !p.rules.is_empty() {
            return None;
        }
        let slot = self.pipes.get(p.ingress?)?;
        if !owns(&self.part, slot.tx_part) {
            return None;
        }
        slot.pipe.busy_until()
    }

    /// [`Pipeline::queued_frame_ns`] of the direction that `port`'s frames enter (as for
    /// [`Network::ingress_busy_until`]).
    pub fn ingress_frame_ns(&self, port: PortIdx) -> Option<u64> {
        let p = self.ports.get(port)?;
        let slot = self.pipes.get(p.ingress?)?;
        slot.pipe.queued_frame_ns()
    }

    /// Next deadline (possibly a stale one, which only costs an early wake-up).
    pub fn poll_at(&self) -> Option<Instant> {
        self.timers.peek().map(|t| t.at)
    }

    /// When a real-time driver must poll next: [`Network::poll_at`], except that the end of
    /// a serialization on a link with a propagation delay of at least [`LAZY_MIN_FLIGHT_NS`]
    /// may wait [`timers::LAZY_GRACE_NS`] (it is computed at its own time whenever it runs
    /// and nothing leaves the model before the frame's propagation delay is over).
    pub fn wake_at(&self) -> Option<Instant> {
        self.timers.wake_at()
    }

    /// Whether lazy events due by `now` are left after a poll (at most
    /// [`Network::set_lazy_per_poll`] of them run in one): a real-time driver polls again
    /// before it sleeps.
    pub fn lazy_due(&self, now: Instant) -> bool {
        self.timers.lazy_due(now)
    }

    /// How long ago the earliest lazy event's grace ran out (0: none is overdue). Plain
    /// events run first ([`Network::set_lazy_per_poll`]), so a backlog of lazy ones shows
    /// here rather than in the lateness of the events a poll ran.
    pub fn lazy_lag_ns(&self, now: Instant) -> u64 {
        self.timers.lazy_lag_ns(now)
    }

    /// Run every event due by `now`, in total order, handing outputs to `emit`.
    pub fn poll(&mut self, now: Instant, emit: impl FnMut(Output<'_>)) {
        let _ = self.poll_until(now, now, emit);
    }

    /// Run every event due by `until` (at or after `now`: a real-time driver coalescing the
    /// deadlines of the next few µs into this wake-up), in total order; lateness is measured
    /// against the real time `now`. Returns the time of the latest event run (frames that
    /// arrive later must not be stamped before it).
    pub fn poll_until(
        &mut self,
        now: Instant,
        until: Instant,
        mut emit: impl FnMut(Output<'_>),
    ) -> Option<Instant> {
        if let Some(l) = self.lateness.as_mut() {
            l.last_poll_max_ns = 0;
        }
        let stop_at = self.poll_limit.map(|n| self.events.saturating_add(n));
        let mut last: Option<Instant> = None;
        let mut lazy_run = 0;
        let due_by = until.max(now);
        loop {
            if stop_at.is_some_and(|s| self.events >= s) {
                break;
            }
            let t = match self.lazy_per_poll {
                None => match self.timers.peek() {
                    Some(t) if t.at <= due_by => {
                        self.timers.pop();
                        t
                    }
                    _ => break,
                },
                Some(max) => match self.timers.pop_due_plain_first(due_by, lazy_run < max) {
                    Some((t, lazy)) => {
                        lazy_run += u64::from(lazy);
                        t
                    }
                    None => break,
                },
            };
            last = last.max(Some(t.at));
            if !self.runs(&t) {
                continue;
            }
            match t.kind {
                TimerKind::PipeTx => self.fire_tx(t.source, t.at, now),
                TimerKind::PipeRx => self.fire_pipe(t.source, t.at, now, &mut emit),
                TimerKind::Agent => self.fire_agent(t.source, t.at, now),
                TimerKind::Tcp => self.fire_tcp(t.source, t.at, now),
            }
        }
        last
    }

    /// A sending half's deadline: finish the serialization, start the next one.
    fn fire_tx(&mut self, pipe: PipeIdx, at: Instant, now: Instant) {
        let Some(slot) = self.pipes.get_mut(pipe) else {
            return;
        };
        if slot.scheduled_tx != Some(at) {
            return; // stale entry
        }
        slot.scheduled_tx = None;
        slot.pipe.poll_tx(at);
        let due = timers::due_at(at, lazy_tx(&slot.pipe));
        // (the serialization it ends is counted as an event by the pipeline)
        self.count_lateness(due, now);
        self.reschedule(pipe);
    }

    /// A receiving half's deadline: deliver what leaves the pipeline at its event time.
    fn fire_pipe(
        &mut self,
        pipe: PipeIdx,
        at: Instant,
        now: Instant,
        emit: &mut impl FnMut(Output<'_>),
    ) {
        let Some(slot) = self.pipes.get_mut(pipe) else {
            return;
        };
        if slot.scheduled_rx != Some(at) {
            return; // stale entry
        }
        slot.scheduled_rx = None;
        let mut out = std::mem::take(&mut self.scratch);
        let left = if one_timer(slot) {
            slot.pipe.poll(at, |f| out.push(f))
        } else {
            slot.pipe.poll_rx(at, |f| out.push(f))
        };
        let (sink, capture, stamped) = (slot.sink, slot.capture, slot.pipe.is_stamped());
        let lazy = slot.lazy_rx;
        // An event only if frames left the delay stage: a timer whose frames a link's going
        // down dropped counts in neither scheduling (one timer or two, see `one_timer`).
        if left > 0 {
            self.count_event(timers::due_at(at, lazy), now);
        }
        self.reschedule(pipe);
        for f in out.drain(..) {
            if capture && f.vnet.is_offloaded() {
                // A capture sees wire frames: segment (and checksum) what would otherwise
                // cross whole, and forward those frames instead.
                for w in f.into_wire().unwrap_or_default() {
                    emit(Output::Capture { pipe, at, data: &w });
                    self.forward(sink, Packet::plain(w), at, emit);
                }
                continue;
            }
            if capture {
                // a frame for another engine is captured as it will arrive there: at its due
                // time, without the trailer
                let (at, data) = match stamp::peek(&f.data).filter(|_| stamped) {
                    Some((due, frame)) => (Instant(due), frame),
                    None => (at, &f.data[..]),
                };
                emit(Output::Capture { pipe, at, data });
            }
            self.forward(sink, f, at, emit);
        }
        self.scratch = out;
    }
}
