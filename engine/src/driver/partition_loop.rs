//! The real-time driver's partition loop ([`Part::turn`]): one packet thread per partition,
//! each with one epoll set (its TAPs, a timerfd, its mail eventfd; the leader's also the
//! signalfd and the control thread's wake-up eventfd). The control socket is served by its own thread
//! (`control/server.rs`), which parses and validates requests off the frame path; this loop
//! only executes the typed commands, in arrival order, between frames. A large `apply` runs
//! in slices of at most [`SLICE_NS`] with frames and timers handled between them, so it
//! delays packets on other links by about one slice instead of the whole apply.
//!
//! Time is `CLOCK_MONOTONIC` in ns since start. Each turn of the loop: run the network up to
//! now, push due statistics, compute the next deadline, then wait. The loop is frugal: it
//! polls (epoll with timeout 0) only where that buys timing, and sleeps otherwise:
//! * no deadline: block in `epoll_wait` (an idle engine uses no CPU);
//! * a deadline: sleep in `epoll_pwait2` (ns timeout; the timerfd on kernels before 5.11)
//!   until `deadline − (measured wake-up latency + --spin-us)`; on waking before the
//!   deadline, poll the few µs left while the spin budget lasts. The wake-up latency is a
//!   running median of how late the wake-ups were (`wake.rs`: ~20 µs on a small VM), so a
//!   deadline costs a wake-up plus a few µs of polling, not a fixed spin window. Once the
//!   budget cannot pay for that polling, sleep to the deadline itself: an early wake-up
//!   would only sleep again, and a wake-up is the engine's largest cost (~20 µs of CPU on a
//!   loaded VM, `bench/engine_cpu.py`);
//! * coalescing (`--coalesce-us`, default 20): a wake-up also runs the deadlines due within
//!   that much after it, early, instead of sleeping again for each (frames read afterwards
//!   are stamped no earlier than the latest event run, so model time never goes back); the
//!   end of a serialization on a link with ≥ 2 ms of propagation delay is a lazy timer that
//!   may run up to 0.5 ms late at its exact time (`model/network/timers.rs`): it needs no
//!   wake-up of its own;
//! * after writing a frame to a port that usually answers (an echo, a TCP receiver), poll for
//!   `--linger-us` (default 100): the answer is caught without a sleep/wake-up cycle, which
//!   would add tens of µs per crossing. Ports whose frames go unanswered (a sink of a one-way
//!   stream) stop being waited for after two windows, so light one-way traffic sleeps;
//! * anticipation (`--anticipate-us`, default 100, 0 = off): a sleeping engine needs ~25–30 µs
//!   on this machine class to run again after a frame wakes it (scheduler + idle exit), which
//!   is most of its added latency for sparse traffic. When traffic arrives in regular bursts
//!   (a burst = frames after a pause of `--linger-us`; two consecutive gaps between burst
//!   starts that agree within 1/8 or 20 µs, gap ≤ 100 ms — e.g. heartbeats, paced probes;
//!   not a ping: its answer, read after a pause too, is a burst of its own, so the gaps
//!   alternate), the engine wakes by timer before the next expected burst and polls until it
//!   comes, at most `anticipate` after the expected time; the window's lead is the measured
//!   spread of burst times (at least 20 µs, at most `anticipate`). A missed prediction cancels
//!   it until the period is seen twice again, so an idle engine still sleeps (0 % CPU) and
//!   irregular traffic costs nothing;
//! * lingering and anticipation poll only while the spin budget (`--spin-budget`, default 10 %
//!   of wall time) lasts, so dense traffic, whose reads look like answers, cannot keep the
//!   loop polling. (At 2 %, the default for a while, a 1000 pps ping through one link ran out
//!   of budget and its RTT grew by ~30 µs, over the delay goal at 5 ms; 10 × 10 Mbit/s costs
//!   the same CPU at 2 and 10 %, `bench/engine_cpu.py`);
//! * at real-time priority, waiting for traffic (lingering, anticipation) does not poll: the
//!   thread sleeps in `epoll_pwait2` until its next due time (a deadline, or none), and the
//!   awaited frame wakes it. A real-time thread's `sched_yield` lets no normal task run, and
//!   the answering program is usually woken on the engine's own core, so polling held the
//!   answer back until the window closed (~100 µs more per round trip of a ping at a few
//!   per second). Napping in 50 µs steps, as it did before, cost a wake-up per step for
//!   nothing (with the same-turn write and the wake-up estimate below, a ping at 1–5/s
//!   through a link without delay wakes the engine 3.5 times per round trip instead of ~6,
//!   through a 10 ms link 6 instead of ~9; sleeping instead of napping is about 1.4 of
//!   each; `bench/results/low-rate-timing-20261128.md`);
//!   anticipation there is only the timer wake-up just before the expected burst;
//! * a frame whose departure is due by the time it has been read (a link without delay, or
//!   a frame read late) is written in the same turn, right after the reads;
//! * with `--busy-poll`: never sleep (lowest latency, one core at 100 %).
//!
//! Each partition thread runs at `SCHED_RR` priority `--rt-priority` (0 = off; see
//! `priority.rs`), so the nodes' own programs cannot delay it.
//!
//! Reading: a TAP that epoll reports gives one frame, unless it was read in the previous turn
//! too (a backlog): then up to [`BATCH`] frames, to EAGAIN. Light traffic thus costs no
//! failing `readv` per frame, and one saturated link cannot starve others; epoll is
//! level-triggered, so the rest is read next turn. A TAP whose link direction holds a long
//! queue wakes no one: it is read when the loop is awake anyway (`defer.rs`).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::allocator::PartLoad;
use super::defer::Deferred;
use super::os::{cvt, Clock, Epoll, EventFd};
use super::priority;
use super::spsc::{Consumer, Producer};
use super::wake::{Oversleep, Replies, SpinBudget};
use crate::control::exec::Engine;
use crate::model::network::partition::Flights;
use crate::model::network::{Output, PipeIdx};
use crate::model::packet::Packet;
use crate::time::{min_deadline, Instant};

/// Frames read per TAP per wake-up.
pub const BATCH: usize = 64;

/// Longest stretch of control work (one slice of an `apply`) between two looks at the TAPs
/// and timers.
pub const SLICE_NS: u64 = 200_000;

const TOKEN_TIMER: u64 = 1;
pub const TOKEN_SIGNAL: u64 = 2;
pub const TOKEN_CONTROL: u64 = 3;
const TOKEN_MAIL: u64 = 4;
const TAG_TAP: u64 = 2 << 40;
const TAG_MASK: u64 = 0xff << 40;

/// The real-time driver's options (from `wanlab-engine`'s command line).
#[derive(Debug, Clone)]
pub struct Options {
    /// Partitions, each run by its own thread (1: one packet thread, as before).
    pub threads: u32,
    pub busy_poll: bool,
    /// Wake this long before a deadline on top of the measured wake-up latency.
    pub spin_ns: u64,
    /// Keep polling this long after writing to a port that usually answers.
    pub linger_ns: u64,
    /// Share of wall time (parts per million) that polling toward deadlines may take.
    pub spin_budget_ppm: u64,
    /// Half-width of the polling window around an expected periodic burst (0 = off).
    pub anticipate_ns: u64,
    /// Deadlines due within this much of a wake-up run in it, early (0 = off).
    pub coalesce_ns: u64,
    /// SCHED_RR priority of the partition threads (0 = normal scheduling; `priority.rs`).
    pub rt_priority: i32,
    /// A timer event that runs later than this behind its deadline counts as late.
    pub behind_ns: u64,
    /// Where captures may be written (`--capture-dir`; None: captures are refused).
    pub capture_dir: Option<std::path::PathBuf>,
    /// Pin the packet threads and steer the receive processing of frames written to the
    /// TAPs to the other cores (`--rps`; see [`rps_mask`]).
    pub rps: bool,
    /// `--cpus`: the CPUs reserved for the engine: the process is confined to them and every
    /// partition thread pinned among them (one thread too). None: the CPUs it was started
    /// with, pinned only with several partitions or `--rps`.
    pub cpus: Option<Vec<usize>>,
}

/// Polling for traffic needs at least this much budget left.
const POLL_QUANTUM_NS: u64 = 5_000;

/// Polling time toward deadlines that may be banked (see [`SpinBudget`]).
const SPIN_BANK_NS: u64 = 2_000_000;

/// Timer events per network poll, so an engine that fell behind still reads its socket and
/// TAPs between batches (and can answer `stats` or `agent stop`).
pub const POLL_LIMIT: u64 = 16_384;

/// Lazy timer events per network poll (after every plain one due): a simulated region's
/// backlog delays a frame for a TAP by at most this many events (tens of µs).
pub const LAZY_PER_POLL: u64 = 64;

/// Reports of falling behind go to stderr at most this often.
const BEHIND_LOG_NS: u64 = 1_000_000_000;

/// Falling-behind bookkeeping: the state in `engine.realtime` plus log rate limiting.
#[derive(Debug, Default)]
struct Behind {
    last_log: Option<Instant>,
    late_since_log: u64,
}

impl Behind {
    /// After a poll at `now`: late events in it mean behind (logged at most once per
    /// [`BEHIND_LOG_NS`]); a poll without late events means keeping up again.
    fn update(&mut self, engine: &mut Engine, late_before: u64, now: Instant) {
        let (Some(l), Some(rt)) = (engine.net.lateness(), engine.realtime.as_mut()) else {
            return;
        };
        let new_late = l.late_events - late_before;
        // (lazy events wait behind plain ones: a backlog of them is being behind too)
        if new_late == 0 && engine.net.lazy_lag_ns(now) <= l.threshold_ns {
            rt.behind_since = None;
            return;
        }
        rt.behind_since.get_or_insert(now);
        self.late_since_log += new_late;
        if self
            .last_log
            .is_none_or(|t| now.nanos_since(t) >= BEHIND_LOG_NS)
        {
            eprintln!(
                "wanlab-engine: behind real time by {:.3} ms ({} late events since the last report, {} in total, threshold {} µs)",
                l.last_poll_max_ns.max(engine.net.lazy_lag_ns(now)) as f64 / 1e6,
                self.late_since_log,
                l.late_events,
                l.threshold_ns / 1000
            );
            self.last_log = Some(now);
            self.late_since_log = 0;
        }
    }
}

/// Predicts the start of the next burst of sparse periodic traffic (see the module docs).
#[derive(Debug, Default)]
struct Anticipation {
    last_start: Option<Instant>,
    last_gap: Option<u64>,
    period: Option<u64>,
    /// Running mean of |actual − expected| burst start (ns), while predicting.
    spread_ns: u64,
}

impl Anticipation {
    const MAX_PERIOD_NS: u64 = 100_000_000;
    const MIN_LEAD_NS: u64 = 20_000;

    /// A frame arrived at `now` after a pause.
    fn burst(&mut self, now: Instant) {
        if let (Some(p), Some(prev)) = (self.period, self.last_start) {
            let err = now.nanos().abs_diff(prev.nanos().saturating_add(p));
            self.spread_ns = (self.spread_ns * 7 + err) / 8;
        }
        if let Some(prev) = self.last_start {
            let gap = now.nanos_since(prev);
            self.period = match self.last_gap {
                Some(g) if gap <= Self::MAX_PERIOD_NS && gap.abs_diff(g) <= (g / 8).max(20_000) => {
                    Some(gap)
                }
                _ => None,
            };
            self.last_gap = Some(gap);
        }
        self.last_start = Some(now);
    }

    /// The polling window `[start, end]` around the expected next burst, if any: it opens
    /// twice the measured spread before the expected time (at least 20 µs, at most `half`)
    /// and closes `half` after it. A window that passed without traffic cancels the
    /// prediction.
    fn window(&mut self, now: Instant, half: u64) -> Option<(Instant, Instant)> {
        let (p, last) = (self.period?, self.last_start?);
        let expected = last.add_nanos(p);
        let end = expected.add_nanos(half);
        if now > end {
            self.period = None;
            self.last_gap = None;
            self.spread_ns = 0;
            return None;
        }
        let lead = (2 * self.spread_ns).max(Self::MIN_LEAD_NS).min(half);
        Some((Instant(expected.nanos().saturating_sub(lead)), end))
    }
}

/// Frames in flight on a cut pipeline, on their way to the partition of its receiving half.
pub type Mail = (PipeIdx, Flights);

/// How a partition's loop sleeps and polls (one set per thread; see the module docs).
struct Timing {
    armed: Option<Instant>,
    last_read: Option<Instant>,
    antic: Anticipation,
    oversleep: Oversleep,
    replies: Replies,
    budget: SpinBudget,
    /// Start of a turn that polled toward a deadline (charged to the budget next turn).
    spinning_since: Option<Instant>,
    behind: Behind,
    /// The latest event time run (coalesced deadlines run early): frames read later are
    /// stamped no earlier, so the model's time never goes back.
    horizon: Instant,
    /// Timed sleeps use epoll_pwait2 where the kernel has it, else the timerfd.
    pwait2: bool,
    /// Turns of the loop, and the turn in which each TAP (by port) was last read.
    turn: u64,
    read_turn: Vec<u64>,
    /// Sleeps, and how they ended (reported in `stats`).
    sleeps: u64,
    woken_by_timer: u64,
    woken_by_io: u64,
}

/// What a turn saw besides frames and timers.
#[derive(Default)]
pub struct Seen {
    pub signal: bool,
    pub control: bool,
}

/// One partition: its replica of the network, its TAPs (the ones it reads), its timer, its
/// epoll set, its rings, and its timing policy. Run by one thread.
pub struct Part {
    pub me: u32,
    pub engine: Engine,
    ep: Epoll,
    tfd: RawFd,
    /// Wakes this partition: frames in its rings, commands for it.
    pub mail: Arc<EventFd>,
    pub inbox: Vec<Consumer<Mail>>,
    /// Ring and wake-up of every other partition (None: this one).
    pub outbox: Vec<Option<(Producer<Mail>, Arc<EventFd>)>>,
    /// Frames in flight a full ring refused (sent first next turn).
    backlog: Vec<(u32, PipeIdx, Flights)>,
    /// Cut pipelines whose sending half runs here.
    cut: Vec<PipeIdx>,
    pub load: Arc<PartLoad>,
    t: Timing,
    /// TAPs read without a wake-up of their own (`defer.rs`).
    defer: Deferred,
    pub opts: Options,
    buf: Vec<u8>,
    events: Vec<libc::epoll_event>,
    idle_ns: u64,
    frames: u64,
    /// Keeps the thread at real-time priority only while it is not busy all the time.
    pub gov: priority::Governor,
}

impl Part {
    pub fn new(me: u32, engine: Engine, opts: Options, load: Arc<PartLoad>) -> io::Result<Part> {
        let ep = Epoll::new()?;
        // SAFETY: plain syscall creating an fd we own (closed on drop).
        let tfd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        ep.add(tfd, libc::EPOLLIN as u32, TOKEN_TIMER)?;
        let mail = Arc::new(EventFd::new()?);
        ep.add(mail.fd(), libc::EPOLLIN as u32, TOKEN_MAIL)?;
        let budget = SpinBudget::new(opts.spin_budget_ppm, SPIN_BANK_NS);
        Ok(Part {
            me,
            engine,
            ep,
            tfd,
            mail,
            inbox: Vec::new(),
            outbox: Vec::new(),
            backlog: Vec::new(),
            cut: Vec::new(),
            load,
            t: Timing {
                armed: None,
                last_read: None,
                antic: Anticipation::default(),
                oversleep: Oversleep::new(),
                replies: Replies::default(),
                budget,
                spinning_since: None,
                behind: Behind::default(),
                horizon: Instant::ZERO,
                pwait2: true,
                turn: 0,
                read_turn: Vec::new(),
                sleeps: 0,
                woken_by_timer: 0,
                woken_by_io: 0,
            },
            gov: priority::Governor::new(0),
            defer: Deferred::new()?,
            opts,
            buf: Vec::new(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            idle_ns: 0,
            frames: 0,
        })
    }

    /// Cut pipelines whose sending half runs here.
    pub fn cut_len(&self) -> usize {
        self.cut.len()
    }

    pub fn add_fd(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ep.add(fd, libc::EPOLLIN as u32, token)
    }

    /// After the topology or the placement changed: which pipelines send to others (none
    /// with one partition, whose only outbox slot is its own, empty one: no scan of every
    /// pipeline then).
    pub fn recut(&mut self) {
        self.cut = if self.outbox.iter().all(Option::is_none) {
            Vec::new()
        } else {
            self.engine.net.cut_from_here()
        };
    }

    /// New TAPs of ports this partition owns join its epoll set.
    pub fn register_new_ports(&mut self) {
        for port in std::mem::take(&mut self.engine.new_ports) {
            if !self.engine.net.owns_port(port) {
                continue;
            }
            if let Some(tap) = self.engine.out.taps.get(&port) {
                let _ = self
                    .ep
                    .add(tap.as_raw_fd(), libc::EPOLLIN as u32, TAG_TAP | port as u64);
            }
        }
    }

    /// Stop reading `port`'s TAP (it moves to another partition; frames wait in the TAP).
    pub fn unwatch_tap(&mut self, port: usize) {
        if let Some(tap) = self.engine.out.taps.get(&port) {
            self.defer.forget(port, tap.as_raw_fd());
            let _ = self.ep.del(tap.as_raw_fd());
        }
    }

    /// Start reading `port`'s TAP (it moved here).
    pub fn watch_tap(&mut self, port: usize) {
        if let Some(tap) = self.engine.out.taps.get(&port) {
            let _ = self
                .ep
                .add(tap.as_raw_fd(), libc::EPOLLIN as u32, TAG_TAP | port as u64);
        }
    }

    /// Hand the frames that entered flight on cut pipelines to their partitions' rings.
    fn ship(&mut self) {
        if self.cut.is_empty() && self.backlog.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.backlog);
        self.engine.net.take_flights(&self.cut, &mut out);
        let mut woken = 0u64;
        for (to, pipe, f) in out {
            // No such partition: the frames are dropped.
            if let Some((ring, _)) = self.outbox.get_mut(to as usize).and_then(Option::as_mut) {
                match ring.push((pipe, f)) {
                    Ok(()) => woken |= 1 << (to % 64),
                    Err((pipe, f)) => self.backlog.push((to, pipe, f)),
                }
            }
        }
        for (i, o) in self.outbox.iter().enumerate() {
            if let (Some((_, w)), true) = (o, woken & (1 << (i % 64)) != 0) {
                w.wake();
            }
        }
    }

    /// Take what other partitions sent.
    fn drain_inbox(&mut self) {
        for c in &mut self.inbox {
            while let Some((pipe, f)) = c.pop() {
                self.frames += f.len() as u64;
                self.engine.net.put_flights(pipe, f);
            }
        }
    }

    /// Run the network up to `now` (and the deadlines within `--coalesce-us` after it),
    /// writing the frames that leave.
    fn advance(&mut self, now: Instant, clock: &Clock) {
        let (opts, t) = (&self.opts, &mut self.t);
        let late_before = self.engine.net.lateness().map_or(0, |l| l.late_events);
        let Engine {
            net,
            out,
            departures,
            ..
        } = &mut self.engine;
        let replies = &mut t.replies;
        let defer = &self.defer;
        let ran = net.poll_until(now, now.add_nanos(opts.coalesce_ns), |o| {
            let mut due = None;
            // A deferred port's frames are not read by polling: no answer to wait for.
            if let Output::Frame { port, at, .. } = &o {
                if !defer.is_deferred(*port) {
                    replies.written(*port, now, opts.linger_ns);
                }
                due = Some(*at);
            }
            out.handle_output(o);
            // The frame's departure lateness: the clock once its write is done.
            if let (Some(due), Some(d)) = (due, departures.as_mut()) {
                d.record(due.nanos(), clock.now().nanos());
            }
        });
        t.horizon = t.horizon.max(ran.unwrap_or(Instant::ZERO));
        t.behind.update(&mut self.engine, late_before, now);
    }

    /// One turn: run the network up to now, ship frames to other partitions, sleep or poll
    /// until the next deadline (or `extra`), then read the TAPs and rings that are ready.
    /// `busy`: control work is waiting, do not sleep.
    pub fn turn(&mut self, clock: &Clock, extra: Option<Instant>, busy: bool) -> Seen {
        let now = clock.now();
        self.t.turn += 1;
        if let Some(s) = self.t.spinning_since.take() {
            self.t.budget.spend(now.nanos_since(s));
        }
        self.advance(now, clock);
        let (t, engine) = (&mut self.t, &mut self.engine);
        if let Some(rt) = engine.realtime.as_mut() {
            rt.wake_estimate_ns = t.oversleep.estimate_ns();
            rt.wake_samples = t.oversleep.samples();
            rt.reply_hits = t.replies.hits;
            rt.reply_misses = t.replies.misses;
            rt.spin_ns = t.budget.spent_ns;
            rt.sleeps = t.sleeps;
            rt.woken_by_timer = t.woken_by_timer;
            rt.woken_by_io = t.woken_by_io;
            rt.deferred_reads = self.defer.reads;
        }
        self.ship();
        let read_by = self.defer.review(&self.engine, now, self.ep.fd(), TAG_TAP);
        let (opts, t) = (&self.opts, &mut self.t);
        let mut deadline = min_deadline(min_deadline(self.engine.net.wake_at(), extra), read_by);
        if !self.backlog.is_empty() || self.engine.net.lazy_due(now) {
            deadline = Some(now);
        }
        let waiting = t.replies.waiting(now);
        let mut in_window = false;
        if opts.anticipate_ns > 0 {
            if let Some((start, end)) = t.antic.window(now, opts.anticipate_ns) {
                if now >= start && now <= end {
                    in_window = true;
                } else {
                    // Wake by timer to be polling at `start`.
                    deadline = min_deadline(deadline, Some(start));
                }
            }
        }
        // Arm the timer this long before a deadline: the measured wake-up latency, plus a
        // margin; what is left after waking is polled while the spin budget lasts. Without
        // budget, sleep to the deadline itself (it runs one wake-up latency late).
        let lead = t.oversleep.estimate_ns().saturating_add(opts.spin_ns);
        // Polling for an answer or an expected burst draws on the same budget as polling
        // toward a deadline: where traffic is dense, it would otherwise never stop.
        let want_poll = (waiting || in_window) && t.budget.allows(now, POLL_QUANTUM_NS);
        // At real-time priority a poll cannot give way: `sched_yield` yields only to other
        // real-time tasks, and the program whose answer (or next frame) is awaited was most
        // likely woken on this very core (a TAP write wakes its reader with a sync wake-up,
        // which places it on the writer's core). Polling would hold it off until the window
        // closed. Sleep instead, to the next due time as if there were nothing to wait for:
        // the core runs that program, whose write wakes us at once.
        let poll_for_traffic = want_poll && !self.gov.realtime();
        if poll_for_traffic {
            t.spinning_since = Some(now);
        }
        let mut sleep_until = None;
        let timeout = if opts.busy_poll || poll_for_traffic || busy {
            0
        } else {
            match deadline {
                None => -1,
                Some(d) if d <= now => 0,
                Some(d) => {
                    let left = d.nanos_since(now);
                    // Waking `lead` early pays only if the budget can then poll the rest;
                    // without it the early wake-up would sleep again to `d`: two wake-ups
                    // (each tens of µs of CPU on a busy VM) for one deadline.
                    let wake = if left > lead && t.budget.allows(now, lead) {
                        Some(Instant(d.nanos() - lead))
                    } else if left > lead {
                        Some(d)
                    } else if t.budget.allows(now, left) {
                        t.spinning_since = Some(now);
                        None
                    } else {
                        Some(d)
                    };
                    match wake {
                        None => 0,
                        Some(wake) if t.pwait2 => {
                            sleep_until = Some(wake);
                            -1
                        }
                        Some(wake) => {
                            if t.armed != Some(wake) {
                                let its = libc::itimerspec {
                                    it_interval: libc::timespec {
                                        tv_sec: 0,
                                        tv_nsec: 0,
                                    },
                                    it_value: clock.to_timespec(wake),
                                };
                                // SAFETY: valid itimerspec.
                                unsafe {
                                    libc::timerfd_settime(
                                        self.tfd,
                                        libc::TFD_TIMER_ABSTIME,
                                        &its,
                                        std::ptr::null_mut(),
                                    )
                                };
                                t.armed = Some(wake);
                            }
                            -1
                        }
                    }
                }
            }
        };
        let before = clock.now();
        let mut n = None;
        if let Some(w) = sleep_until {
            n = self
                .ep
                .wait_ns(&mut self.events, w.nanos().saturating_sub(before.nanos()));
            if n.is_none() {
                // An old kernel: poll this once, and use the timerfd from the next turn on.
                self.t.pwait2 = false;
                sleep_until = None;
                n = Some(self.ep.wait(&mut self.events, 0));
            }
        }
        let n = n.unwrap_or_else(|| self.ep.wait(&mut self.events, timeout));
        let woke = clock.now();
        if let (Some(w), 0) = (sleep_until, n) {
            self.t.oversleep.record(w, woke);
        }
        if timeout != 0 {
            self.idle_ns += woke.nanos_since(before);
        }
        if n == 0 && timeout == 0 {
            // Polling with nothing to do: let other runnable tasks on this core (the kernel's
            // softirq thread, the node's programs) go first, or we would delay the very
            // packets we are waiting for.
            // SAFETY: no arguments.
            unsafe { libc::sched_yield() };
        }
        let mut seen = Seen::default();
        if timeout != 0 {
            self.t.sleeps += 1;
            if self.events[..n].iter().all(|e| e.u64 == TOKEN_TIMER) {
                self.t.woken_by_timer += 1;
            } else {
                self.t.woken_by_io += 1;
            }
        }
        for k in 0..n {
            let token = self.events[k].u64;
            match token {
                TOKEN_TIMER => {
                    let mut x = [0u8; 8];
                    // SAFETY: reading 8 bytes into a local buffer.
                    unsafe { libc::read(self.tfd, x.as_mut_ptr().cast(), 8) };
                    // Only a wake-up from a real sleep measures the wake-up latency.
                    if let (Some(a), true) = (self.t.armed, timeout < 0) {
                        self.t.oversleep.record(a, woke);
                    }
                    self.t.armed = None;
                }
                TOKEN_SIGNAL => seen.signal = true,
                TOKEN_CONTROL => seen.control = true,
                TOKEN_MAIL => self.mail.reset(),
                t if t & TAG_MASK == TAG_TAP => self.read_tap((t & !TAG_MASK) as usize, clock),
                _ => {}
            }
        }
        for port in self.defer.ready(woke) {
            self.read_deferred(port, clock);
        }
        self.drain_inbox();
        // A frame whose departure is due by now (a link without delay, or one read late)
        // leaves in this turn, not after another round of the loop.
        let now = clock.now();
        if self
            .engine
            .net
            .wake_at()
            .is_some_and(|w| w <= now.add_nanos(self.opts.coalesce_ns))
        {
            self.advance(now, clock);
        }
        let wall = clock.now().nanos();
        let busy = wall.saturating_sub(self.idle_ns);
        self.load.wall_ns.store(wall, Ordering::Relaxed);
        self.load.busy_ns.store(busy, Ordering::Relaxed);
        self.load.frames.store(self.frames, Ordering::Relaxed);
        self.govern(wall, busy);
        seen
    }

    /// Lower this thread to normal priority while it is busy nearly all the time, and raise
    /// it again when it is not (`priority.rs`), saying so in the engine's log.
    fn govern(&mut self, wall: u64, busy: u64) {
        let Some(change) = self.gov.check(wall, busy) else {
            return;
        };
        let me = self.me;
        let got = match change {
            priority::Change::Lower { busy_pct } => match priority::lower() {
                Ok(()) => {
                    eprintln!(
                        "wanlab-engine: partition {me} busy {busy_pct} % of the last second: \
                         at normal priority until it is under {:.0} %, so the nodes and the \
                         control keep a share of its core",
                        priority::Governor::RAISE_AT * 100.0
                    );
                    0
                }
                Err(e) => {
                    eprintln!("wanlab-engine: partition {me}: cannot lower its priority: {e}");
                    return;
                }
            },
            priority::Change::Raise { busy_pct, prio } => {
                let (got, why) = priority::raise(prio);
                match why {
                    Some(why) => eprintln!("wanlab-engine: partition {me}: {why}"),
                    None => eprintln!(
                        "wanlab-engine: partition {me} busy {busy_pct} % of the last second: \
                         back at real-time priority {got}"
                    ),
                }
                got
            }
        };
        if let Some(rt) = self.engine.realtime.as_mut() {
            rt.rt_priority = got;
            rt.rt_lowerings = self.gov.lowerings;
        }
    }

    /// Read `port`'s TAP into the network: one frame, or up to [`BATCH`] when it was read
    /// in the previous turn too (a backlog; see the module docs).
    fn read_tap(&mut self, port: usize, clock: &Clock) {
        let engine = &mut self.engine;
        let t = &mut self.t;
        if t.read_turn.len() <= port {
            t.read_turn.resize(port + 1, u64::MAX);
        }
        let batch = if t.read_turn[port].wrapping_add(1) == t.turn {
            BATCH
        } else {
            1
        };
        t.read_turn[port] = t.turn;
        for _ in 0..batch {
            let Some(tap) = engine.out.taps.get(&port) else {
                break;
            };
            let pool = &mut engine.out.pool;
            match tap.recv(&mut self.buf, || pool.pop().unwrap_or_default()) {
                Ok(Some((vnet, data))) => {
                    let t = clock.now().max(self.t.horizon);
                    if self
                        .t
                        .last_read
                        .is_none_or(|l| t.nanos_since(l) >= self.opts.linger_ns)
                    {
                        self.t.antic.burst(t);
                    }
                    self.t.last_read = Some(t);
                    self.t.replies.read(port);
                    self.frames += 1;
                    engine.net.receive_packet(port, Packet { data, vnet }, t);
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
        self.defer.note_read(port);
    }

    /// Read one frame from a deferred TAP (`defer.rs`): its read time is no arrival time, so
    /// it feeds neither the burst prediction nor the answer windows.
    fn read_deferred(&mut self, port: usize, clock: &Clock) {
        let engine = &mut self.engine;
        let Some(tap) = engine.out.taps.get(&port) else {
            return;
        };
        let pool = &mut engine.out.pool;
        if let Ok(Some((vnet, data))) = tap.recv(&mut self.buf, || pool.pop().unwrap_or_default()) {
            let t = clock.now().max(self.t.horizon);
            self.frames += 1;
            self.defer.reads += 1;
            engine.net.receive_packet(port, Packet { data, vnet }, t);
        }
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        // SAFETY: closing the timerfd we created.
        unsafe { libc::close(self.tfd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anticipation_needs_two_equal_gaps_and_cancels_on_a_miss() {
        let ms = |x: u64| Instant(x * 1_000_000);
        let mut a = Anticipation::default();
        a.burst(ms(0));
        a.burst(ms(10));
        assert_eq!(a.window(ms(11), 100_000), None); // one gap seen: no prediction
        a.burst(Instant(20_050_000)); // 10.05 ms ≈ 10 ms
        assert_eq!(
            a.window(ms(21), 100_000),
            Some((Instant(30_080_000), Instant(30_200_000)))
        );
        // No burst in the window: the prediction is dropped, and stays so.
        assert_eq!(a.window(ms(31), 100_000), None);
        assert_eq!(a.window(ms(41), 100_000), None);
        // Irregular gaps never predict.
        let mut b = Anticipation::default();
        for t in [0, 10, 35, 37, 90] {
            b.burst(ms(t));
        }
        assert_eq!(b.window(ms(91), 100_000), None);
        // Bursts that come off the expected time widen the lead of the window.
        let mut c = Anticipation::default();
        for t in [0, 10_000, 20_000, 30_030, 40_000, 50_030] {
            c.burst(Instant::from_micros(t));
        }
        // Last gap 10.03 ms: the next burst is expected at 60.06 ms.
        let (start, end) = c.window(Instant::from_micros(50_040), 100_000).unwrap();
        assert!(start < Instant::from_micros(60_060 - 20), "{start:?}");
        assert!(start > Instant::from_micros(60_060 - 100), "{start:?}");
        assert_eq!(end, Instant::from_micros(60_160));
    }
}
