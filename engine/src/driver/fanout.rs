//! Commands across the partitions of the real-time engine.
//!
//! Every partition holds a whole replica of the network, built by the same commands in the
//! same order, so the indices of ports and pipelines agree and a frame in flight can name
//! its pipeline in any replica. The first partition (the *leader*) takes the commands from
//! the control thread and runs each first: it checks it, creates the TAPs of an `apply`,
//! opens capture files, and decides where what was added runs (`allocator::assign`). A
//! command that succeeded is then sent, in order, to every other partition (a *follower*):
//! an `apply` with handles on the new TAPs and the new placement, a capture with the shared
//! file, anything else as it came. Each follower runs it between its own frames (an `apply`
//! in slices, as the leader does) and acknowledges; the leader replies once every partition
//! has, so a client that got its reply sees the change everywhere. Replies keep their order.
//! `stats` are the merge of every replica's body (`control/merge.rs`): a pipeline's
//! counters are split between the replicas that run its halves and add up; `"realtime"` is
//! merged field by field and `"partitions"` tells the placement and each partition's load.
//!
//! The leader also moves ports between partitions (`move_port`, or the allocator's own
//! decision in `check_loads`; the steps are `port_move`'s); commands wait meanwhile, so none
//! sees the port half moved.
//!
//! Nothing here is on the frame path: commands and acknowledgements travel over channels
//! and wake the other thread through its eventfd; frames never wait for them.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::allocator::{self, PartLoad, Window};
use super::messages::{Ack, RtHists, ToPart};
use super::os::{Clock, EventFd};
use super::partition_loop::{Part, SLICE_NS};
use super::port_move::{hand_over, take_over, PortMoves};
use crate::control::command::Command;
use crate::control::exec::{ApplyJob, Effect, Outcome, Started};
use crate::control::merge::merge_body;
use crate::control::server::{Control, Subscriptions, ToEngine};
use crate::control::topology::ApplyCmd;
use crate::io::tap::Tap;
use crate::model::network::partition::{Partition, PortState};
use crate::model::network::Network;
use crate::stats::{Departures, Histogram};
use crate::time::Instant;

enum Dest {
    Reply(u64, Value),
    /// A subscription's periodic `stats` push.
    Event(u64),
}

enum Kind {
    First,
    Stats,
    /// Whether the leader runs the agent.
    Trace(bool),
}

struct Pending {
    seq: u64,
    dest: Dest,
    kind: Kind,
    leader: Outcome,
    hist: Option<RtHists>,
    waiting: usize,
    acks: Vec<Ack>,
}

/// Commands every replica runs after the leader (the rest are the leader's alone, or
/// special: `apply`, `capture_start`).
fn replicated(cmd: &Command) -> bool {
    !matches!(
        cmd,
        Command::Hello
            | Command::Subscribe { .. }
            | Command::Shutdown
            | Command::Apply(_)
            | Command::CaptureStart { .. }
    )
}

/// Whether `cmd` may add or remove pipelines, or move them between partitions (then the
/// partitions recompute which of their pipelines are cut: a scan of every pipeline, which
/// after each of 50 000 `agent` commands of a 100 000-node simulation held the engine
/// seconds behind real time).
fn may_change_pipes(cmd: &Command) -> bool {
    !matches!(
        cmd,
        Command::Hello
            | Command::Stats { .. }
            | Command::Agent { .. }
            | Command::Trace { .. }
            | Command::TunnelClock { .. }
            | Command::Subscribe { .. }
            | Command::CaptureStop(_)
            | Command::CaptureSnapshot(_)
    )
}

/// The first partition's side: the control thread, subscriptions, the other partitions.
pub struct Leader {
    control: Option<Control>,
    subs: Subscriptions,
    job: Option<(Dest, Box<ApplyJob>, Option<Box<ApplyCmd>>)>,
    peers: Vec<(Sender<ToPart>, Arc<EventFd>)>,
    acks: Receiver<Ack>,
    pending: VecDeque<Pending>,
    seq: u64,
    /// Where ports and nodes run (its `me` is 0).
    placement: Partition,
    loads: Vec<Arc<PartLoad>>,
    readings: Vec<(u64, u64, u64)>,
    windows: Vec<Window>,
    next_check: Instant,
    cores: Vec<usize>,
    threads: u32,
    shutdown: bool,
    moves: PortMoves,
    /// Each port's frame count at the last check, and the time of that check.
    port_counts: HashMap<String, u64>,
    last_check: Instant,
    next_publish: Instant,
}

impl Leader {
    pub fn new(
        control: Control,
        peers: Vec<(Sender<ToPart>, Arc<EventFd>)>,
        acks: Receiver<Ack>,
        loads: Vec<Arc<PartLoad>>,
        cores: Vec<usize>,
        threads: u32,
    ) -> Self {
        let n = loads.len();
        Leader {
            control: Some(control),
            subs: Subscriptions::default(),
            job: None,
            peers,
            acks,
            pending: VecDeque::new(),
            seq: 0,
            placement: Partition {
                direct_ports: true,
                ..Default::default()
            },
            loads,
            readings: vec![(0, 0, 0); n],
            windows: vec![Window::default(); n],
            next_check: Instant::ZERO,
            cores,
            threads,
            shutdown: false,
            moves: PortMoves::default(),
            port_counts: HashMap::new(),
            last_check: Instant::ZERO,
            next_publish: Instant::ZERO,
        }
    }

    fn control(&self) -> &Control {
        self.control.as_ref().expect("control runs until the end")
    }

    /// The first partition's loop: frames, timers and the control plane, until shutdown.
    pub fn run_loop(&mut self, p: &mut Part, clock: &Clock) {
        let mut next_push: Option<Instant> = None;
        while !self.shutdown {
            let seen = p.turn(clock, next_push, self.job.is_some());
            if seen.signal {
                self.shutdown = true;
            }
            if seen.control {
                self.control().reset_wake();
            }
            self.run(p, clock);
            p.register_new_ports();
            let now = clock.now();
            if now >= self.next_publish && !self.peers.is_empty() {
                self.next_publish = now.add_nanos(allocator::PUBLISH_NS);
                publish_ports(p);
            }
            if now >= self.next_check {
                self.check_loads(p, now);
            }
            next_push = self.push_stats(p, now);
        }
    }

    /// Tell the followers to stop (their threads end after the commands before it).
    pub fn stop_peers(&mut self) {
        for (tx, w) in &self.peers {
            let _ = tx.send(ToPart::Exit);
            w.wake();
        }
    }

    pub fn control_shutdown(&mut self) {
        if let Some(c) = self.control.take() {
            c.shutdown();
        }
    }

    /// Run waiting commands until one starts an `apply`, advance that for at most
    /// [`SLICE_NS`], and send the replies that every partition has answered.
    fn run(&mut self, p: &mut Part, clock: &Clock) {
        let start = clock.now();
        loop {
            self.take_acks();
            self.advance_move(p, clock.now());
            if let Some((_, job, _)) = self.job.as_mut() {
                let mut more = || clock.now().nanos_since(start) < SLICE_NS;
                match job.step(&mut p.engine, clock.now(), &mut more) {
                    Some(outcome) => {
                        if let Some((dest, _, copy)) = self.job.take() {
                            self.finish_apply(p, dest, outcome, copy);
                        }
                    }
                    None => break,
                }
            }
            // A port on its way holds the commands back (they might place it again).
            if self.shutdown || self.moves.busy() || clock.now().nanos_since(start) >= SLICE_NS {
                break;
            }
            let Some(msg) = self.control().next() else {
                break;
            };
            match msg {
                ToEngine::Closed(conn) => self.subs.remove(conn),
                ToEngine::Request(inc) => {
                    let dest = Dest::Reply(inc.conn, inc.id);
                    match inc.cmd {
                        Err(e) => self.push(dest, Kind::First, Err(e), None),
                        Ok(cmd) => self.begin(p, dest, cmd, clock.now()),
                    }
                }
            }
        }
        self.complete(&p.engine.net, clock.now());
    }

    fn push(&mut self, dest: Dest, kind: Kind, leader: Outcome, hist: Option<RtHists>) {
        self.pending.push_back(Pending {
            seq: 0,
            dest,
            kind,
            leader,
            hist,
            waiting: 0,
            acks: Vec::new(),
        });
    }

    /// Send `msg(i)` to every follower under a new sequence number; the last pending entry
    /// waits for their answers.
    fn fan_out(&mut self, mut msg: impl FnMut(usize, u64) -> ToPart) {
        self.seq += 1;
        let seq = self.seq;
        for (i, (tx, w)) in self.peers.iter().enumerate() {
            let _ = tx.send(msg(i, seq));
            w.wake();
        }
        if let Some(last) = self.pending.back_mut() {
            last.seq = seq;
            last.waiting = self.peers.len();
        }
    }

    fn begin(&mut self, p: &mut Part, dest: Dest, cmd: Command, now: Instant) {
        if let Command::MovePort { port, partition } = &cmd {
            let mv = allocator::PortMove {
                port: port.clone(),
                from: self.placement.ports.get(port).copied().unwrap_or(0),
                to: *partition,
            };
            match self.start_move(p, mv, "asked by move_port".into(), now) {
                Ok(seq) => {
                    self.push(dest, Kind::First, Ok((Map::new(), Effect::None)), None);
                    if let Some(last) = self.pending.back_mut() {
                        last.seq = seq;
                        last.waiting = 1;
                    }
                    self.moves.reply_when_done();
                }
                Err(e) => self.push(dest, Kind::First, Err(e), None),
            }
            return;
        }
        let followers = !self.peers.is_empty();
        let copy = match &cmd {
            Command::Apply(a) if followers => Some(a.clone()),
            _ => None,
        };
        let forward = (followers && replicated(&cmd)).then(|| cmd.clone());
        let capture = match &cmd {
            Command::CaptureStart { at, dir, .. } if followers => Some((at.clone(), *dir)),
            _ => None,
        };
        let recut = may_change_pipes(&cmd);
        let kind = match &cmd {
            Command::Stats { .. } => Kind::Stats,
            Command::Trace { agent, .. } => Kind::Trace(p.engine.net.runs_agent(agent)),
            _ => Kind::First,
        };
        match p.engine.begin(cmd, now) {
            Started::Apply(job) => self.job = Some((dest, job, copy)),
            Started::Done(outcome) => {
                let ok = outcome.is_ok();
                let hist = matches!(kind, Kind::Stats).then(|| rt_hists(p)).flatten();
                self.push(dest, kind, outcome, hist);
                if recut {
                    p.recut();
                }
                if !ok {
                    return;
                }
                if let Some(cmd) = forward {
                    self.fan_out(|_, seq| ToPart::Run {
                        seq,
                        cmd: cmd.clone(),
                    });
                } else if let Some((at, dir)) = capture {
                    let caps = p.engine.captures_of(&p.engine.capture_pipes(&at, dir));
                    self.fan_out(|_, seq| ToPart::Capture {
                        seq,
                        caps: caps.clone(),
                    });
                }
            }
        }
    }

    /// The leader's `apply` is done: place what it added, then let the followers apply it.
    fn finish_apply(
        &mut self,
        p: &mut Part,
        dest: Dest,
        mut outcome: Outcome,
        copy: Option<Box<ApplyCmd>>,
    ) {
        let Some(cmd) = copy.filter(|_| outcome.is_ok()) else {
            self.push(dest, Kind::First, outcome, None);
            p.recut();
            return;
        };
        let next = allocator::assign(
            &p.engine.net,
            &self.placement,
            self.threads,
            &HashMap::new(),
        );
        self.placement = next.clone();
        p.engine.net.repartition(Partition {
            me: 0,
            ..next.clone()
        });
        p.recut();
        self.log_placement(p);
        // Handles on the new TAPs for every follower, in the order of `cmd.taps`.
        let mut sets: Vec<Vec<Tap>> = Vec::new();
        for _ in &self.peers {
            let mut set = Vec::new();
            for t in &cmd.taps {
                let tap = p
                    .engine
                    .net
                    .port_index(&t.port)
                    .and_then(|i| p.engine.out.taps.get(&i))
                    .map(|t| t.try_clone());
                match tap {
                    Some(Ok(t)) => set.push(t),
                    Some(Err(e)) => {
                        outcome = Err(format!(
                            "ports: TAP \"{}\" cannot be shared with the engine's other threads: {e}",
                            t.tap
                        ));
                        break;
                    }
                    None => {}
                }
            }
            sets.push(set);
        }
        self.push(dest, Kind::First, outcome, None);
        let mut sets = sets.into_iter();
        self.fan_out(|i, seq| ToPart::Apply {
            seq,
            cmd: cmd.clone(),
            taps: sets.next().unwrap_or_default(),
            part: Partition {
                me: i as u32 + 1,
                ..next.clone()
            },
        });
    }

    fn log_placement(&self, p: &Part) {
        let mut by_part: Vec<Vec<&str>> = vec![Vec::new(); self.threads as usize];
        let mut ports: Vec<(&String, &u32)> = self.placement.ports.iter().collect();
        ports.sort();
        for (id, &k) in ports {
            if let Some(v) = by_part.get_mut(k as usize) {
                v.push(id);
            }
        }
        let mut nodes = vec![0usize; self.threads as usize];
        for &k in self.placement.nodes.values() {
            if let Some(v) = nodes.get_mut(k as usize) {
                *v += 1;
            }
        }
        for (i, ports) in by_part.iter().enumerate() {
            let core = self.loads[i].core.load(Ordering::Relaxed);
            eprintln!(
                "wanlab-engine: placement: partition {i} on core {core}: {} ports {:?}, {} simulated nodes, {} cut pipelines from it",
                ports.len(),
                ports,
                nodes[i],
                if i == 0 { p.cut_len() } else { 0 },
            );
        }
    }

    fn take_acks(&mut self) {
        while let Ok(a) = self.acks.try_recv() {
            let Some(a) = self.moves.take_ack(a) else {
                continue;
            };
            if let Some(pd) = self.pending.iter_mut().find(|pd| pd.seq == a.seq) {
                pd.waiting = pd.waiting.saturating_sub(1);
                pd.acks.push(a);
            }
        }
    }

    /// Send every reply (and stats push) at the front whose partitions all answered.
    fn complete(&mut self, net: &Network, now: Instant) {
        while self.pending.front().is_some_and(|p| p.waiting == 0) {
            let Some(pd) = self.pending.pop_front() else {
                break;
            };
            let outcome = self.final_outcome(net, pd.kind, pd.leader, pd.hist, pd.acks);
            match pd.dest {
                Dest::Reply(conn, id) => {
                    self.shutdown |= self.subs.apply_effect(conn, &outcome, now);
                    self.control().reply(conn, id, &outcome);
                }
                Dest::Event(conn) => {
                    if let Ok((mut body, _)) = outcome {
                        body.insert("event".into(), Value::String("stats".into()));
                        self.control().event(conn, Value::Object(body).to_string());
                    }
                }
            }
        }
    }

    fn final_outcome(
        &self,
        net: &Network,
        kind: Kind,
        leader: Outcome,
        hist: Option<RtHists>,
        acks: Vec<Ack>,
    ) -> Outcome {
        match kind {
            Kind::First => {
                let failed = acks.into_iter().find_map(|a| a.outcome.err());
                match (leader, failed) {
                    (Ok(_), Some(e)) => Err(format!("internal: a partition failed: {e}")),
                    (r, _) => r,
                }
            }
            Kind::Trace(true) => leader,
            Kind::Trace(false) => acks
                .into_iter()
                .find(|a| a.owns_agent)
                .map_or(leader, |a| a.outcome),
            Kind::Stats => {
                let (mut body, effect) = leader?;
                let mut rts = vec![None; self.loads.len()];
                rts[0] = body.remove("realtime");
                let (mut h, mut d) = hist.unwrap_or_default();
                for a in acks {
                    let (mut m, _) = a.outcome?;
                    if let Some(slot) = rts.get_mut(a.from as usize) {
                        *slot = m.remove("realtime");
                    }
                    if let Some((x, y)) = &a.hist {
                        h.merge(x);
                        d.merge(y);
                    }
                    merge_body(&mut body, m);
                }
                body.insert("partitions".into(), self.partitions_json(net, &rts));
                if let Some(rt) = merge_realtime(rts, &h, &d) {
                    body.insert("realtime".into(), rt);
                }
                Ok((body, effect))
            }
        }
    }

    /// Each partition: its core, ports, load (busy share, frames/s over the last window) and
    /// timer lateness (from its `"realtime"` object, `rts`).
    fn partitions_json(&self, net: &Network, rts: &[Option<Value>]) -> Value {
        let mut ports: Vec<Vec<String>> = vec![Vec::new(); self.loads.len()];
        let mut nodes = vec![0usize; self.loads.len()];
        if self.loads.len() == 1 {
            ports[0] = net.plain_ports().into_iter().map(|p| p.id).collect();
            nodes[0] = net.node_count();
        }
        for &k in self.placement.nodes.values() {
            if let Some(n) = nodes.get_mut(k as usize) {
                *n += 1;
            }
        }
        // (ports removed since they were placed are not listed)
        for (id, &k) in &self.placement.ports {
            if let (Some(v), true) = (ports.get_mut(k as usize), net.port_index(id).is_some()) {
                v.push(id.clone());
            }
        }
        let list: Vec<Value> = self
            .loads
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut ps = ports[i].clone();
                ps.sort_unstable();
                let w = self.windows[i];
                let core = l.core.load(Ordering::Relaxed);
                let rt = rts.get(i).cloned().flatten().unwrap_or(Value::Null);
                json!({
                    "partition": i,
                    "core": (core >= 0).then_some(core),
                    "ports": ps,
                    "simulated_nodes": nodes[i],
                    "busy": (w.busy * 1000.0).round() / 1000.0,
                    "frames_per_s": w.frames_per_s.round(),
                    "frames": l.frames.load(Ordering::Relaxed),
                    "timer_events": rt["timer_events"],
                    "late_events": rt["late_events"],
                    "max_late_us": rt["max_late_us"],
                })
            })
            .collect();
        Value::Array(list)
    }

    /// Measure each partition's load over the last window and rebalance (module docs of
    /// `allocator`).
    fn check_loads(&mut self, p: &mut Part, now: Instant) {
        self.next_check = now.add_nanos(allocator::CHECK_NS);
        let secs = (now.nanos_since(self.last_check) as f64 / 1e9).max(1e-3);
        self.last_check = now;
        let mut rates: HashMap<String, f64> = HashMap::new();
        for l in &self.loads {
            let Ok(ports) = l.ports.lock() else { continue };
            for (id, n) in ports.iter() {
                let was = self.port_counts.insert(id.clone(), *n).unwrap_or(*n);
                rates.insert(id.clone(), n.saturating_sub(was) as f64 / secs);
            }
        }
        for (i, l) in self.loads.iter().enumerate() {
            let r = l.reading();
            self.windows[i] =
                allocator::window(self.readings[i], r, l.core.load(Ordering::Relaxed));
            self.readings[i] = r;
        }
        if self.loads.len() < 2 {
            return;
        }
        if let Some(mv) = allocator::rebalance(&self.windows, &self.cores) {
            let l = &self.loads[mv.part];
            let tid = l.tid.load(Ordering::Relaxed);
            match allocator::pin(tid, mv.to as usize) {
                Ok(()) => {
                    l.core.store(mv.to, Ordering::Relaxed);
                    self.windows[mv.part].core = mv.to;
                    let busy: Vec<String> = self
                        .windows
                        .iter()
                        .map(|w| format!("{:.0} %@{}", w.busy * 100.0, w.core))
                        .collect();
                    eprintln!(
                        "wanlab-engine: allocator: partition {} moved from core {} to core {} (core {} overloaded; partition busy@core: {})",
                        mv.part,
                        mv.from,
                        mv.to,
                        mv.from,
                        busy.join(", ")
                    );
                }
                Err(e) => eprintln!(
                    "wanlab-engine: allocator: cannot move partition {} to core {}: {e}",
                    mv.part, mv.to
                ),
            }
            return;
        }
        if !self.moves.count_check() || self.job.is_some() {
            return;
        }
        let ports: Vec<(String, u32, f64)> = p
            .engine
            .net
            .plain_ports()
            .into_iter()
            .filter(|x| x.lan.is_none())
            .map(|x| {
                let k = self.placement.ports.get(&x.id).copied().unwrap_or(0);
                let r = rates.get(&x.id).copied().unwrap_or(0.0);
                (x.id, k, r)
            })
            .collect();
        if let Some(mv) = allocator::port_move(&self.windows, &ports) {
            let (f, t) = (self.windows[mv.from as usize], self.windows[mv.to as usize]);
            let why = format!(
                "partition {} {:.0} % busy on core {}, partition {} {:.0} % on core {}; the port carried {:.0} frames/s",
                mv.from,
                f.busy * 100.0,
                f.core,
                mv.to,
                t.busy * 100.0,
                t.core,
                rates.get(&mv.port).copied().unwrap_or(0.0)
            );
            if let Err(e) = self.start_move(p, mv, why, now) {
                eprintln!("wanlab-engine: allocator: {e}");
            }
        }
    }

    /// Start moving a TAP port ([`PortMoves::start`]).
    fn start_move(
        &mut self,
        p: &mut Part,
        mv: allocator::PortMove,
        why: String,
        now: Instant,
    ) -> Result<u64, String> {
        self.moves.start(
            p,
            &self.peers,
            &mut self.placement,
            &mut self.seq,
            self.threads,
            mv,
            why,
            now,
        )
    }

    /// Move the port on its way on ([`PortMoves::advance`]); a `move_port` request it
    /// answers gets its reply.
    fn advance_move(&mut self, p: &mut Part, now: Instant) {
        let moved = self
            .moves
            .advance(p, &self.peers, &self.placement, &self.loads, now);
        if let Some(m) = moved {
            if let Some(pd) = self.pending.iter_mut().find(|pd| pd.seq == m.seq) {
                pd.leader = Ok((m.body, Effect::None));
                pd.waiting = 0;
            }
        }
    }

    /// Start the subscriptions' stats pushes that are due; returns the next push time.
    fn push_stats(&mut self, p: &mut Part, now: Instant) -> Option<Instant> {
        let (due, next) = self.subs.due_targets(now);
        for (conn, target) in due {
            let outcome = p
                .engine
                .stats(target.as_deref(), now)
                .map(|b| (b, Effect::None));
            let hist = rt_hists(p);
            let ok = outcome.is_ok();
            self.push(Dest::Event(conn), Kind::Stats, outcome, hist);
            if ok && !self.peers.is_empty() {
                self.fan_out(|_, seq| ToPart::Run {
                    seq,
                    cmd: Command::Stats {
                        target: target.clone(),
                    },
                });
            }
        }
        self.complete(&p.engine.net, now);
        next
    }
}

/// Publish the frame counts of the ports partition `p` reads (for the allocator).
fn publish_ports(p: &Part) {
    if let Ok(mut v) = p.load.ports.lock() {
        *v = p.engine.net.port_frames();
    }
}

/// A partition's lateness and departure distributions (None outside real time).
fn rt_hists(p: &Part) -> Option<RtHists> {
    let h = p.engine.net.lateness_histogram()?.clone();
    Some((h, p.engine.departures.clone().unwrap_or_default()))
}

/// `"realtime"` of several partitions: counts add up, maxima and flags combine, the lateness
/// and departure distributions are the merges of theirs.
fn merge_realtime(objs: Vec<Option<Value>>, hist: &Histogram, dep: &Departures) -> Option<Value> {
    let objs: Vec<Map<String, Value>> = objs
        .into_iter()
        .filter_map(|o| match o {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        })
        .collect();
    let mut out = objs.first()?.clone();
    if objs.len() < 2 {
        return Some(Value::Object(out));
    }
    let f = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let u = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
    for k in [
        "timer_events",
        "late_events",
        "wake_samples",
        "linger_answered",
        "linger_unanswered",
        "sleeps",
        "woken_by_timer",
        "woken_by_io",
        "deferred_reads",
        "rt_lowerings",
    ] {
        out.insert(k.into(), json!(objs.iter().map(|m| u(m, k)).sum::<u64>()));
    }
    out.insert(
        "spin_ms".into(),
        json!(objs.iter().map(|m| f(m, "spin_ms")).sum::<f64>()),
    );
    for k in ["max_late_us", "wake_estimate_us"] {
        out.insert(
            k.into(),
            json!(objs.iter().map(|m| f(m, k)).fold(0.0, f64::max)),
        );
    }
    out.insert(
        "behind".into(),
        json!(objs
            .iter()
            .any(|m| m.get("behind").and_then(Value::as_bool) == Some(true))),
    );
    out.insert(
        "behind_since_ns".into(),
        json!(objs
            .iter()
            .filter_map(|m| m.get("behind_since_ns").and_then(Value::as_u64))
            .min()),
    );
    out.insert("lateness".into(), json!(hist.summary()));
    out.insert("departure".into(), json!(dep.summary()));
    Some(Value::Object(out))
}

/// Another partition's side: the commands from the leader, run in order between frames.
pub struct Follower {
    me: u32,
    rx: Receiver<ToPart>,
    acks: Sender<Ack>,
    leader: Arc<EventFd>,
    job: Option<(u64, Box<ApplyJob>, Partition)>,
    exit: bool,
    next_publish: Instant,
}

impl Follower {
    pub fn new(me: u32, rx: Receiver<ToPart>, acks: Sender<Ack>, leader: Arc<EventFd>) -> Self {
        Follower {
            me,
            rx,
            acks,
            leader,
            job: None,
            exit: false,
            next_publish: Instant::ZERO,
        }
    }

    pub fn run_loop(&mut self, p: &mut Part, clock: &Clock) {
        while !self.exit {
            p.turn(clock, None, self.job.is_some());
            self.run(p, clock);
            p.register_new_ports();
            let now = clock.now();
            if now >= self.next_publish {
                self.next_publish = now.add_nanos(allocator::PUBLISH_NS);
                publish_ports(p);
            }
        }
    }

    fn ack(&self, seq: u64, outcome: Outcome, owns_agent: bool, hist: Option<RtHists>) {
        let _ = self.acks.send(Ack {
            seq,
            from: self.me,
            outcome,
            owns_agent,
            hist,
            state: None,
        });
        self.leader.wake();
    }

    fn ack_state(&self, seq: u64, state: PortState) {
        let _ = self.acks.send(Ack {
            seq,
            from: self.me,
            outcome: Ok((Map::new(), Effect::None)),
            owns_agent: false,
            hist: None,
            state: Some(state),
        });
        self.leader.wake();
    }

    fn run(&mut self, p: &mut Part, clock: &Clock) {
        let start = clock.now();
        loop {
            if let Some((seq, job, part)) = self.job.as_mut() {
                let mut more = || clock.now().nanos_since(start) < SLICE_NS;
                match job.step(&mut p.engine, clock.now(), &mut more) {
                    None => return,
                    Some(outcome) => {
                        let seq = *seq;
                        p.engine.net.repartition(std::mem::take(part));
                        p.recut();
                        self.job = None;
                        self.ack(seq, outcome, false, None);
                    }
                }
            }
            if clock.now().nanos_since(start) >= SLICE_NS {
                return;
            }
            match self.rx.try_recv() {
                Ok(ToPart::Apply {
                    seq,
                    cmd,
                    taps,
                    part,
                }) => self.job = Some((seq, Box::new(ApplyJob::replica(cmd, taps)), part)),
                Ok(ToPart::Run { seq, cmd }) => {
                    let owns = match &cmd {
                        Command::Trace { agent, .. } => p.engine.net.runs_agent(agent),
                        _ => false,
                    };
                    let stats = matches!(cmd, Command::Stats { .. });
                    let recut = may_change_pipes(&cmd);
                    let outcome = match p.engine.begin(cmd, clock.now()) {
                        Started::Done(o) => o,
                        Started::Apply(_) => Err("internal: apply sent as a plain command".into()),
                    };
                    let hist = stats.then(|| rt_hists(p)).flatten();
                    if recut {
                        p.recut();
                    }
                    self.ack(seq, outcome, owns, hist);
                }
                Ok(ToPart::Capture { seq, caps }) => {
                    p.engine.adopt_captures(caps);
                    p.recut();
                    self.ack(seq, Ok((Map::new(), Effect::None)), false, None);
                }
                Ok(ToPart::MoveOut { seq, port, part }) => {
                    let st = hand_over(p, port, part, clock.now());
                    self.ack_state(seq, st);
                }
                Ok(ToPart::MoveIn {
                    seq,
                    port,
                    state,
                    part,
                }) => {
                    take_over(p, port, state, part);
                    self.ack(seq, Ok((Map::new(), Effect::None)), false, None);
                }
                Ok(ToPart::Replace { seq, part }) => {
                    p.engine.net.repartition(part);
                    p.recut();
                    self.ack(seq, Ok((Map::new(), Effect::None)), false, None);
                }
                Ok(ToPart::Exit) | Err(TryRecvError::Disconnected) => {
                    self.exit = true;
                    return;
                }
                Err(TryRecvError::Empty) => return,
            }
        }
    }
}
