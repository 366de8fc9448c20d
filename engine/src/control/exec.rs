//! Executes typed commands (`command.rs`) against the engine state: the network, its TAPs
//! and captures. No parsing and no socket here.
//!
//! Commands are all-or-nothing: everything is checked (and every TAP of an `apply` created)
//! before the network changes; on any error the state is as before and the reply names the
//! offending item. An `apply` runs as an [`ApplyJob`] that the real-time driver advances in
//! slices between frames, so a large topology does not stall packets; nothing else runs
//! until it is finished.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use super::check::{check_item, item_count};
use super::command::{validate, Command, Target};
use super::params::merge_params;
use super::protocol::{CaptureSel, DirSpec, Request, PROTOCOL_VERSION};
use super::topology::ApplyCmd;
use crate::io::capture_file::CaptureDir;
use crate::io::tap::{Tap, MAX_FRAME};
use crate::model::network::{Dir, Network, Output, PipeIdx, PortIdx, TopologySpec};
use crate::pcap::{PcapWriter, DEFAULT_SNAPLEN};
use crate::stats::Departures;
use crate::time::Instant;

/// A capture file, shared by the partitions that run the pipelines it records (each
/// direction of a link may run on its own thread); locked only to write a captured frame.
pub type SharedPcap = Arc<Mutex<PcapWriter<BufWriter<File>>>>;

fn lock(w: &SharedPcap) -> std::sync::MutexGuard<'_, PcapWriter<BufWriter<File>>> {
    // A poisoned lock only means another partition panicked mid-write.
    w.lock().unwrap_or_else(|e| e.into_inner())
}
/// What the server must do besides sending the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Subscribe {
        interval_ns: u64,
        target: Option<String>,
    },
    Shutdown,
}

pub struct Engine {
    pub net: Network,
    pub out: Sinks,
    /// Ports created since the driver last looked (it registers their fds).
    pub new_ports: Vec<PortIdx>,
    /// Set by the real-time driver: reported in `stats` as `"realtime"` (with the network's
    /// lateness counters); None in virtual time, where the object is absent.
    pub realtime: Option<RealtimeState>,
    /// Set by the real-time driver: how late each frame written to a port went out
    /// (`"departure"` in `"realtime"`).
    pub departures: Option<Departures>,
    /// Where captures may be written (None: `capture_start` is refused).
    pub capture_dir: Option<CaptureDir>,
    /// `rps_cpus` of the TAPs created (`--rps`; None: the kernel's default).
    pub rps_mask: Option<String>,
}

/// Whether the real-time driver is behind its timers (see `driver/partition_loop.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RealtimeState {
    /// Since when the last polls ran events later than the threshold (None: keeping up).
    pub behind_since: Option<Instant>,
    /// Running median of how late a timer sleep ends; the loop wakes that much early.
    pub wake_estimate_ns: u64,
    /// Timer wake-ups measured for it.
    pub wake_samples: u64,
    /// Linger windows after a write that saw an answer / ended without one.
    pub reply_hits: u64,
    pub reply_misses: u64,
    /// Time spent polling toward deadlines (bounded by the spin budget).
    pub spin_ns: u64,
    /// SCHED_RR priority of the packet thread (0: normal scheduling), and how many times it
    /// was lowered for being busy all the time (`driver/priority.rs`).
    pub rt_priority: i32,
    pub rt_lowerings: u64,
    /// Turns of the loop that slept (blocked in epoll), and how those sleeps ended: by their
    /// timeout (a deadline) or by a ready descriptor (a frame, a command, mail).
    pub sleeps: u64,
    pub woken_by_timer: u64,
    pub woken_by_io: u64,
    /// Frames read from deferred TAPs (`driver/defer.rs`), without a wake-up of their own.
    pub deferred_reads: u64,
}

/// Where network output goes: TAPs and capture files.
pub struct Sinks {
    pub taps: HashMap<PortIdx, Tap>,
    captures: HashMap<PipeIdx, SharedPcap>,
    /// Unix time of engine instant 0, for capture timestamps.
    wall_offset_ns: u64,
    /// Frames a TAP refused (device queue full or interface down).
    pub tx_errors: u64,
    /// Recycled super-frame buffers (capacity [`MAX_FRAME`]) for the next TAP reads.
    pub pool: Vec<Vec<u8>>,
}

/// Buffers kept for reuse; enough for a full read batch.
const POOL_MAX: usize = 128;

impl Sinks {
    /// Deliver what the network produced: frames to TAPs, captured copies to pcap files.
    pub fn handle_output(&mut self, out: Output<'_>) {
        match out {
            Output::Frame {
                port, data, vnet, ..
            } => {
                if let Some(t) = self.taps.get(&port) {
                    if !t.send(&vnet, &data) {
                        self.tx_errors += 1;
                    }
                }
                if data.capacity() >= MAX_FRAME && self.pool.len() < POOL_MAX {
                    self.pool.push(data);
                }
            }
            Output::Capture { pipe, at, data } => {
                let ts = self.wall_offset_ns.saturating_add(at.nanos());
                let failed = match self.captures.get(&pipe) {
                    Some(w) => lock(w).write(ts, data).err(),
                    None => None,
                };
                if let Some(e) = failed {
                    eprintln!("wanlab-engine: capture write failed, stopping it: {e}");
                    self.captures.remove(&pipe);
                }
            }
        }
    }
}

pub fn engine_version() -> String {
    format!("wanlab-engine {}", env!("CARGO_PKG_VERSION"))
}

/// A command's outcome: the reply body and what the server must do, or the error.
pub type Outcome = Result<(Map<String, Value>, Effect), String>;

/// What [`Engine::begin`] did with a command.
pub enum Started {
    Done(Outcome),
    /// An `apply` to advance with [`ApplyJob::step`] until it is done.
    Apply(Box<ApplyJob>),
}

/// Items an [`ApplyJob`] handles between two looks at the clock.
const STEP_ITEMS: usize = 64;

/// An `apply` in progress: check every item against the network, create the TAPs, then add
/// the topology in pieces. The network is not changed before the last check passed.
pub struct ApplyJob {
    cmd: Box<ApplyCmd>,
    stage: Stage,
    created: Vec<Tap>,
    /// A replica's job: checked and TAPs made by the first partition (`created` holds
    /// handles on them, in the order of `cmd.taps`).
    replica: bool,
}

enum Stage {
    Check(usize),
    Taps,
    /// Adding the topology; the spec's lists are reversed so pieces pop off the end.
    Add(Box<TopologySpec>),
}

impl ApplyJob {
    fn new(cmd: Box<ApplyCmd>) -> Self {
        ApplyJob {
            cmd,
            stage: Stage::Check(0),
            created: Vec::new(),
            replica: false,
        }
    }

    /// The same `apply` on another partition's replica of a network that already passed
    /// it: no checks, and `taps` (handles on the TAPs created for `cmd.taps`, same order)
    /// instead of new ones.
    pub fn replica(cmd: Box<ApplyCmd>, taps: Vec<Tap>) -> Self {
        ApplyJob {
            cmd,
            stage: Stage::Taps,
            created: taps,
            replica: true,
        }
    }

    /// Work until done or until `more()` says the time slice is over (asked every
    /// [`STEP_ITEMS`] items). Returns the outcome once done.
    pub fn step(
        &mut self,
        e: &mut Engine,
        now: Instant,
        more: &mut dyn FnMut() -> bool,
    ) -> Option<Outcome> {
        loop {
            match &mut self.stage {
                Stage::Check(k) => {
                    let n = item_count(&self.cmd);
                    let end = (*k + STEP_ITEMS).min(n);
                    for i in *k..end {
                        if let Err(err) = check_item(&e.net, &self.cmd, i) {
                            return Some(Err(err));
                        }
                    }
                    *k = end;
                    if end == n {
                        if let Err(err) = e.check_taps(&self.cmd) {
                            return Some(Err(err));
                        }
                        self.stage = Stage::Taps;
                    }
                }
                Stage::Taps => {
                    // TAPs are few and each is a handful of system calls: all at once, so a
                    // failure leaves the network untouched (the created ones close on drop).
                    let make = if self.replica {
                        &[][..]
                    } else {
                        &self.cmd.taps[..]
                    };
                    for (i, p) in make.iter().enumerate() {
                        match Tap::create_in(&p.tap, p.netns.as_deref(), e.rps_mask.as_deref()) {
                            Ok(t) => self.created.push(t),
                            Err(err) => {
                                return Some(Err(format!(
                                    "ports[{i}] (\"{}\"): cannot create TAP \"{}\": {err}",
                                    p.port, p.tap
                                )))
                            }
                        }
                    }
                    let mut topo = std::mem::take(&mut self.cmd.topo);
                    // TAP ports first and whole, so they can be registered below.
                    let ports = TopologySpec {
                        ports: std::mem::take(&mut topo.ports),
                        tunnels: std::mem::take(&mut topo.tunnels),
                        ..Default::default()
                    };
                    e.net.apply(ports, now);
                    reverse_all(&mut topo);
                    self.stage = Stage::Add(Box::new(topo));
                }
                Stage::Add(topo) => match next_piece(topo, STEP_ITEMS) {
                    Some(piece) => e.net.apply(piece, now),
                    None => {
                        return Some(Ok((
                            e.register_taps(&self.cmd, &mut self.created),
                            Effect::None,
                        )))
                    }
                },
            }
            if !more() {
                return None;
            }
        }
    }
}

fn reverse_all(t: &mut TopologySpec) {
    t.ports.reverse();
    t.routers.reverse();
    t.patches.reverse();
    t.hosts.reverse();
    t.agents.reverse();
    t.links.reverse();
    t.link_rules.reverse();
    t.lans.reverse();
}

/// Up to `n` items off the end of the first non-empty list of a reversed spec, in the order
/// `Network::apply` adds them (routers, patches, hosts, agents, links, their rules, LANs).
fn next_piece(t: &mut TopologySpec, n: usize) -> Option<TopologySpec> {
    fn take<T>(v: &mut Vec<T>, n: usize) -> Vec<T> {
        let k = v.len().saturating_sub(n);
        let mut out = v.split_off(k);
        out.reverse();
        out
    }
    let mut p = TopologySpec::default();
    if !t.routers.is_empty() {
        p.routers = take(&mut t.routers, n);
    } else if !t.patches.is_empty() {
        p.patches = take(&mut t.patches, n);
    } else if !t.hosts.is_empty() {
        p.hosts = take(&mut t.hosts, n);
    } else if !t.agents.is_empty() {
        p.agents = take(&mut t.agents, n);
    } else if !t.links.is_empty() {
        p.links = take(&mut t.links, n);
    } else if !t.link_rules.is_empty() {
        p.link_rules = take(&mut t.link_rules, n);
    } else if !t.lans.is_empty() {
        p.lans = take(&mut t.lans, n.div_ceil(8));
    } else {
        return None;
    }
    Some(p)
}

impl Engine {
    pub fn new(seed: u64, wall_offset_ns: u64) -> Self {
        let mut net = Network::new(seed);
        net.set_wall_offset(wall_offset_ns);
        Engine {
            net,
            out: Sinks {
                taps: HashMap::new(),
                captures: HashMap::new(),
                wall_offset_ns,
                tx_errors: 0,
                pool: Vec::new(),
            },
            new_ports: Vec::new(),
            realtime: None,
            departures: None,
            capture_dir: None,
            rps_mask: None,
        }
    }

    /// Run the network up to `now` and deliver its output.
    pub fn poll(&mut self, now: Instant) {
        let Engine { net, out, .. } = self;
        net.poll(now, |o| out.handle_output(o));
    }

    /// Validate and run a parsed request at once (virtual time, scenarios and tests).
    pub fn execute(&mut self, req: Request, now: Instant) -> Outcome {
        self.run(validate(req)?, now)
    }

    /// Run a command to the end (an `apply` in one go).
    pub fn run(&mut self, cmd: Command, now: Instant) -> Outcome {
        match self.begin(cmd, now) {
            Started::Done(r) => r,
            Started::Apply(mut job) => loop {
                if let Some(r) = job.step(self, now, &mut || true) {
                    return r;
                }
            },
        }
    }

    /// Run a command; an `apply` is returned as a job to advance in slices.
    pub fn begin(&mut self, cmd: Command, now: Instant) -> Started {
        let mut body = Map::new();
        let mut effect = Effect::None;
        let r = match cmd {
            Command::Apply(a) => return Started::Apply(Box::new(ApplyJob::new(a))),
            Command::Hello => {
                body.insert("protocol".into(), json!(PROTOCOL_VERSION));
                body.insert("engine".into(), json!(engine_version()));
                Ok(())
            }
            Command::Remove(r) => self.remove(&r),
            Command::Set {
                at,
                dir,
                params,
                to,
            } => self.set(&at, dir, to.as_deref(), &params, now),
            Command::SetUp { at, up } => self.set_up(&at, up, now),
            Command::Stats { target } => self.stats(target.as_deref(), now).map(|b| body = b),
            Command::CaptureStart {
                at,
                dir,
                path,
                snaplen,
                nanos,
            } => self.capture_start(&at, dir, &path, snaplen, nanos),
            Command::CaptureStop(sel) => self.select_captures(&sel).map(|pipes| {
                for p in pipes {
                    if let Some(w) = self.out.captures.remove(&p) {
                        let _ = lock(&w).flush();
                    }
                    self.net.set_capture(p, false);
                }
            }),
            Command::CaptureSnapshot(sel) => self.capture_snapshot(&sel),
            Command::Subscribe {
                interval_ns,
                target,
            } => match &target {
                Some(t) => self.net.stats(Some(t), now).map(|_| ()),
                None => Ok(()),
            }
            .map(|()| {
                effect = Effect::Subscribe {
                    interval_ns,
                    target,
                }
            }),
            Command::Agent { agent, start } => self.net.agent_action(&agent, start, now),
            Command::Trace { agent, clear } => self.trace(&agent, clear).map(|s| {
                body.insert("samples".into(), s);
            }),
            Command::TunnelClock { port, offset_ns } => self.net.set_tunnel_clock(&port, offset_ns),
            Command::MovePort { .. } => Err(
                "move_port: only a real-time engine of several partitions (--threads 2 or more) moves ports"
                    .into(),
            ),
            Command::Shutdown => {
                effect = Effect::Shutdown;
                Ok(())
            }
        };
        Started::Done(r.map(|()| (body, effect)))
    }

    fn remove(&mut self, r: &super::protocol::RemoveReq) -> Result<(), String> {
        let gone = self
            .net
            .remove_with_routers(&r.links, &r.lans, &r.routers, &r.ports)?;
        for p in gone {
            if let Some(t) = self.out.taps.remove(&p) {
                t.release();
            }
        }
        self.drop_dead_captures();
        Ok(())
    }

    /// Merge `params` into every selected direction; all or none change.
    fn set(
        &mut self,
        at: &Target,
        dir: Dir,
        to: Option<&str>,
        params: &super::protocol::ParamsSpec,
        now: Instant,
    ) -> Result<(), String> {
        let pipes = match to {
            Some(to) => self.net.select_pair(&at.target, at.member.as_deref(), to)?,
            None => self.net.select(&at.target, at.member.as_deref(), dir)?,
        };
        let mut merged = Vec::new();
        for &p in &pipes {
            let base = self.net.pipe_params(p).cloned().unwrap_or_default();
            merged.push((p, merge_params(&base, params, "params")?));
        }
        for (p, params) in merged {
            self.net.set_pipe_params(p, params, now);
        }
        Ok(())
    }

    fn capture_start(
        &mut self,
        at: &Target,
        dir: Dir,
        path: &str,
        snaplen: Option<u32>,
        nanos: bool,
    ) -> Result<(), String> {
        let folder = self
            .capture_dir
            .as_ref()
            .ok_or("path: captures are disabled: the engine was started without --capture-dir")?;
        let pipes = self.net.select(&at.target, at.member.as_deref(), dir)?;
        if let Some(p) = pipes.iter().find(|p| self.out.captures.contains_key(p)) {
            return Err(format!(
                "target: a capture is already running on pipeline {p} of \"{}\"; stop it first",
                at.target
            ));
        }
        let file = folder.create(path)?;
        let w = PcapWriter::new(
            BufWriter::new(file),
            snaplen.unwrap_or(DEFAULT_SNAPLEN),
            nanos,
        )
        .map_err(|e| format!("path: cannot write \"{path}\": {e}"))?;
        let w = Arc::new(Mutex::new(w));
        for p in pipes {
            self.out.captures.insert(p, w.clone());
            self.net.set_capture(p, true);
        }
        Ok(())
    }

    fn capture_snapshot(&mut self, sel: &CaptureSel) -> Result<(), String> {
        for p in self.select_captures(sel)? {
            if let Some(w) = self.out.captures.get(&p) {
                lock(w)
                    .flush()
                    .map_err(|e| format!("capture flush failed: {e}"))?;
            }
        }
        Ok(())
    }

    fn trace(&mut self, agent: &str, clear: bool) -> Result<Value, String> {
        if !self.net.has_agent(agent) {
            return Err(format!("agent: unknown agent \"{agent}\""));
        }
        let samples = if clear {
            self.net.take_agent_trace(agent)
        } else {
            self.net.agent_trace(agent).map(<[_]>::to_vec)
        };
        let samples = samples.ok_or_else(|| format!("agent: \"{agent}\" is not a tcp agent"))?;
        serde_json::to_value(samples).map_err(|e| format!("internal: {e}"))
    }

    pub fn stats(&self, target: Option<&str>, now: Instant) -> Result<Map<String, Value>, String> {
        let s = self.net.stats(target, now)?;
        let mut m = match serde_json::to_value(s) {
            Ok(Value::Object(m)) => m,
            _ => return Err("internal: stats not serializable".into()),
        };
        if let (Some(rt), Some(l)) = (self.realtime, self.net.lateness()) {
            m.insert(
                "realtime".into(),
                json!({
                    "timer_events": self.net.events(now),
                    "late_events": l.late_events,
                    "max_late_us": l.max_late_ns as f64 / 1000.0,
                    "threshold_us": l.threshold_ns as f64 / 1000.0,
                    "behind": rt.behind_since.is_some(),
                    "behind_since_ns": rt.behind_since.map(|t| t.nanos()),
                    "wake_estimate_us": rt.wake_estimate_ns as f64 / 1000.0,
                    "wake_samples": rt.wake_samples,
                    "linger_answered": rt.reply_hits,
                    "linger_unanswered": rt.reply_misses,
                    "spin_ms": rt.spin_ns as f64 / 1e6,
                    "rt_priority": rt.rt_priority,
                    "rt_lowerings": rt.rt_lowerings,
                    "sleeps": rt.sleeps,
                    "woken_by_timer": rt.woken_by_timer,
                    "woken_by_io": rt.woken_by_io,
                    "deferred_reads": rt.deferred_reads,
                    "lateness": self.net.lateness_histogram().map(|h| h.summary()),
                    "departure": self.departures.as_ref().map(|d| d.summary()),
                }),
            );
        }
        Ok(m)
    }

    fn set_up(&mut self, at: &Target, up: bool, now: Instant) -> Result<(), String> {
        let ports = self.net.set_up(&at.target, at.member.as_deref(), up, now)?;
        for p in ports {
            if let Some(t) = self.out.taps.get(&p) {
                if let Err(e) = t.set_carrier(up) {
                    return Err(format!("target: link state changed but carrier of TAP \"{}\" could not be set: {e}", t.name()));
                }
            }
        }
        Ok(())
    }

    fn select_captures(&self, sel: &CaptureSel) -> Result<Vec<PipeIdx>, String> {
        match &sel.target {
            None => {
                if sel.member.is_some() || sel.dir.is_some() {
                    return Err("target: required when member or dir is given".into());
                }
                Ok(self.out.captures.keys().copied().collect())
            }
            Some(t) => {
                let dir = sel.dir.unwrap_or(DirSpec::Both).into();
                self.net.select(t, sel.member.as_deref(), dir)
            }
        }
    }

    fn drop_dead_captures(&mut self) {
        let dead: Vec<PipeIdx> = self
            .out
            .captures
            .keys()
            .copied()
            .filter(|p| !self.net.pipe_exists(*p))
            .collect();
        for p in dead {
            if let Some(w) = self.out.captures.remove(&p) {
                let _ = lock(&w).flush();
            }
        }
    }

    /// The capture files of `pipes` (to share with the other partitions).
    pub fn captures_of(&self, pipes: &[PipeIdx]) -> Vec<(PipeIdx, SharedPcap)> {
        pipes
            .iter()
            .filter_map(|p| Some((*p, self.out.captures.get(p)?.clone())))
            .collect()
    }

    /// Record into capture files another partition opened (see [`Engine::captures_of`]).
    pub fn adopt_captures(&mut self, caps: Vec<(PipeIdx, SharedPcap)>) {
        for (p, w) in caps {
            self.out.captures.insert(p, w);
            self.net.set_capture(p, true);
        }
    }

    /// Pipelines that a capture command selects (for sharing a new capture).
    pub fn capture_pipes(&self, at: &Target, dir: Dir) -> Vec<PipeIdx> {
        self.net
            .select(&at.target, at.member.as_deref(), dir)
            .unwrap_or_default()
    }

    /// Flush every capture (at exit).
    pub fn flush_captures(&mut self) {
        for w in self.out.captures.values() {
            let _ = lock(w).flush();
        }
    }

    /// TAP names must not be in use by another port (TAPs are per namespace).
    fn check_taps(&self, cmd: &ApplyCmd) -> Result<(), String> {
        let existing: HashSet<(&str, Option<&str>)> = self
            .out
            .taps
            .values()
            .map(|t| (t.name(), t.netns()))
            .collect();
        for (i, p) in cmd.taps.iter().enumerate() {
            if existing.contains(&(p.tap.as_str(), p.netns.as_deref())) {
                return Err(format!(
                    "ports[{i}] (\"{}\").tap: TAP \"{}\" is already used by another port",
                    p.port, p.tap
                ));
            }
        }
        Ok(())
    }

    /// Hand the created TAPs to their (now added) ports; the reply's `ports` object.
    fn register_taps(&mut self, cmd: &ApplyCmd, created: &mut Vec<Tap>) -> Map<String, Value> {
        let mut ports = Map::new();
        for (p, tap) in cmd.taps.iter().zip(created.drain(..)) {
            let Some(idx) = self.net.port_index(&p.port) else {
                continue;
            };
            ports.insert(
                p.port.clone(),
                json!({"tap": tap.name(), "ifindex": tap.ifindex()}),
            );
            self.out.taps.insert(idx, tap);
            self.new_ports.push(idx);
        }
        let mut body = Map::new();
        body.insert("ports".into(), Value::Object(ports));
        body
    }
}
