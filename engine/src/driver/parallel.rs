//! Parallel virtual time: replicas of the network on worker threads, synchronised
//! conservatively by windows.
//!
//! Each worker owns one replica (the network of a whole [`Engine`] built by the same
//! requests; the engine itself, with its capture files, stays with the driver, which lends it
//! the network while it runs a request) and runs only its partition's timers (see `model/network/partition`). Synchronisation is a window
//! barrier (not null messages): with lookahead L = the smallest time a frame spends in flight
//! on a cut link, and m = the earliest pending event of any replica, every replica runs all
//! its events up to min(m + L − 1, next request or sample time). A frame that finishes
//! serialization in that window arrives after its end, so no replica can receive anything
//! for a time it has already passed. At the barrier each sender hands its cut links' frames
//! in flight to the receiving replica (ordered by pipeline; each pipeline has one sender),
//! and the next window starts. Windows are chosen by the earliest event, so idle stretches
//! cost one window, not one per L.
//!
//! Determinism does not depend on the partitioning: every timer is ordered by the total key
//! (time, kind, source) in whichever replica runs it, every random stream belongs to one
//! object (pipeline half, agent), and nothing crosses partitions within a window, so each
//! object sees the same events in the same order with 1, 2 or N threads.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::replicas::Replicas;
use crate::control::exec::Engine;
use crate::model::network::partition::Flights;
use crate::model::network::{Network, PipeIdx};
use crate::time::Instant;

/// Run every network event of `engine` with time ≤ `t`.
pub fn run_until(engine: &mut Engine, t: Instant) {
    while let Some(d) = engine.net.poll_at() {
        if d > t {
            break;
        }
        engine.poll(d);
    }
}

/// The same for a partition's network: it has no TAP port or capture, so no output.
pub(crate) fn run_net_until(net: &mut Network, t: Instant) {
    while let Some(d) = net.poll_at() {
        if d > t {
            break;
        }
        net.poll(d, |_| {});
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another worker panicked; its data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Mail = Vec<(PipeIdx, Flights)>;

struct Shared {
    nets: Vec<Mutex<Network>>,
    mail: Vec<Mutex<Mail>>,
    /// The partition of replica 0 (0 unless this process runs one part of a run over several
    /// engine processes, `driver/remote`).
    first: u32,
    /// Frames in flight addressed to partitions of other processes, posted by the replicas
    /// for the driver to send at its next barrier across processes.
    outbox: Mutex<Vec<(u32, PipeIdx, Flights)>>,
    window_end: AtomicU64,
    stop: AtomicBool,
    /// A window starts (the driver's thread runs replica 0, one worker each other replica).
    go: Barrier,
    /// Every replica has run its window and posted its frames in flight. Each holds its
    /// network's lock from `go` until it has taken its mail, so the driver's next look at
    /// a network waits for that.
    posted: Barrier,
}

/// One replica's window: run to `end`, post the frames in flight on cut links, wait for
/// every replica to do so, take this replica's mail.
fn window(sh: &Shared, me: usize, end: Instant) {
    let mut e = lock(&sh.nets[me]);
    run_and_post(sh, &mut e, end);
    sh.posted.wait();
    take_mail(sh, me, &mut e);
}

/// Run a replica to `end` and post its frames in flight on cut links.
fn run_and_post(sh: &Shared, e: &mut Network, end: Instant) {
    run_net_until(e, end);
    for (to, pipe, f) in e.take_cut_flights() {
        match to
            .checked_sub(sh.first)
            .and_then(|i| sh.mail.get(i as usize))
        {
            Some(m) => lock(m).push((pipe, f)),
            None => lock(&sh.outbox).push((to, pipe, f)),
        }
    }
}

/// Hand replica `me` the frames in flight posted to it.
fn take_mail(sh: &Shared, me: usize, e: &mut Network) {
    let mut mail = std::mem::take(&mut *lock(&sh.mail[me]));
    // One sender per pipeline: ordering by pipeline makes the arrival order fixed.
    mail.sort_by_key(|m| m.0);
    for (pipe, f) in mail {
        e.put_flights(pipe, f);
    }
}

/// A window whose predecessor took less wall time than this runs its replicas one after
/// the other on the driver's thread instead of waking the workers: two barrier crossings
/// cost tens of µs each on a busy VM, more than a window of a few events (a scenario that
/// starts 50 000 traffic sources at 50 000 instants makes a window of each). Either way
/// every replica runs the same events, so results do not change.
const SERIAL_BELOW_NS: u128 = 300_000;

/// The replicas, as the driver sees them between windows.
pub struct Pool<'a> {
    shared: &'a Shared,
    /// The engines, each without its network while a worker holds it.
    engines: Vec<Engine>,
    /// Lookahead in ns (≥ 1); with one replica unused.
    pub lookahead_ns: u64,
    /// Windows run so far (for the log line).
    pub windows: u64,
    /// Wall time of the last window ([`SERIAL_BELOW_NS`]).
    last_window_ns: u128,
}

impl Pool<'_> {
    pub fn len(&self) -> usize {
        self.engines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.engines.is_empty()
    }

    /// Run `f` on replica `i` (between windows).
    pub fn with_engine<R>(&mut self, i: usize, f: impl FnOnce(&mut Engine) -> R) -> R {
        let Some(e) = self.engines.get_mut(i) else {
            return f(&mut Engine::new(0, 0));
        };
        match self.shared.nets.get(i) {
            None => f(e),
            Some(m) => {
                let mut net = lock(m);
                std::mem::swap(&mut *net, &mut e.net);
                let r = f(e);
                std::mem::swap(&mut *net, &mut e.net);
                r
            }
        }
    }

    /// The earliest pending event of any replica.
    pub fn next_event(&self) -> Option<Instant> {
        if self.shared.nets.is_empty() {
            return self.engines.first().and_then(|e| e.net.poll_at());
        }
        self.shared
            .nets
            .iter()
            .filter_map(|n| lock(n).poll_at())
            .min()
    }

    /// Take the frames in flight on cut links towards other processes' partitions: the
    /// ones the windows posted, and (one replica: no windows) the replica's own.
    pub fn take_outbox(&mut self) -> Vec<(u32, PipeIdx, Flights)> {
        let mut out = std::mem::take(&mut *lock(&self.shared.outbox));
        if self.shared.nets.is_empty() {
            if let Some(e) = self.engines.first_mut() {
                out.extend(e.net.take_cut_flights());
            }
        }
        out
    }

    /// Run every network event with time ≤ `t` in every replica.
    pub fn advance_to(&mut self, t: Instant) {
        let sh = self.shared;
        if sh.nets.is_empty() {
            if let Some(e) = self.engines.first_mut() {
                run_until(e, t);
            }
            return;
        }
        loop {
            let next = sh.nets.iter().filter_map(|n| lock(n).poll_at()).min();
            let Some(m) = next.filter(|&m| m <= t) else {
                break;
            };
            let end = t
                .nanos()
                .min(m.nanos().saturating_add(self.lookahead_ns.max(1) - 1));
            let start = std::time::Instant::now();
            if self.last_window_ns < SERIAL_BELOW_NS {
                let end = Instant::from_nanos(end);
                for n in &sh.nets {
                    run_and_post(sh, &mut lock(n), end);
                }
                for (me, n) in sh.nets.iter().enumerate() {
                    take_mail(sh, me, &mut lock(n));
                }
            } else {
                sh.window_end.store(end, Ordering::Release);
                sh.go.wait();
                window(sh, 0, Instant::from_nanos(end));
            }
            self.last_window_ns = start.elapsed().as_nanos();
            self.windows += 1;
        }
    }
}

impl Replicas for Pool<'_> {
    fn count(&self) -> usize {
        Pool::len(self)
    }

    fn each<R, F>(&mut self, mut f: F) -> Result<Vec<R>, String>
    where
        R: Serialize + DeserializeOwned,
        F: FnMut(&mut Engine) -> R,
    {
        Ok((0..Pool::len(self))
            .map(|i| self.with_engine(i, &mut f))
            .collect())
    }

    fn local<R>(&mut self, f: impl FnOnce(&mut Engine) -> R) -> R {
        self.with_engine(0, f)
    }

    fn advance_to(&mut self, t: Instant) -> Result<(), String> {
        Pool::advance_to(self, t);
        Ok(())
    }

    fn topology_changed(&mut self) -> Result<(), String> {
        self.lookahead_ns = match self.with_engine(0, |e| e.net.lookahead_ns()) {
            Some(0) => return Err("a link between partitions now has no minimum delay (no lookahead); run with --threads 1".into()),
            Some(l) => l,
            None => u64::MAX,
        };
        Ok(())
    }

    fn windows(&self) -> u64 {
        self.windows
    }
}

fn worker(sh: &Shared, me: usize) {
    loop {
        sh.go.wait();
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let end = Instant::from_nanos(sh.window_end.load(Ordering::Acquire));
        window(sh, me, end);
    }
}

/// Stops the workers when the driver returns (or unwinds).
struct Stop<'a>(&'a Shared);
impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        self.0.go.wait();
    }
}

/// Run `f` with the replicas `engines` (one worker thread each when more than one) and
/// return its result and the engines. `first` is the partition of `engines[0]`: frames in
/// flight addressed to a partition outside `first..first + engines.len()` wait in the
/// pool's outbox ([`Pool::take_outbox`]).
pub fn with_pool<R>(
    mut engines: Vec<Engine>,
    first: u32,
    lookahead_ns: u64,
    f: impl FnOnce(&mut Pool<'_>) -> R,
) -> (R, Vec<Engine>) {
    let n = engines.len();
    let parallel = n > 1;
    let nets: Vec<Mutex<Network>> = if parallel {
        engines
            .iter_mut()
            .map(|e| Mutex::new(std::mem::replace(&mut e.net, Network::new(0))))
            .collect()
    } else {
        Vec::new()
    };
    let shared = Shared {
        mail: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        nets,
        first,
        outbox: Mutex::new(Vec::new()),
        window_end: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        go: Barrier::new(n),
        posted: Barrier::new(n),
    };
    let mut pool = Pool {
        shared: &shared,
        engines,
        lookahead_ns,
        windows: 0,
        last_window_ns: 0,
    };
    let r = if parallel {
        std::thread::scope(|s| {
            for me in 1..n {
                let sh = &shared;
                s.spawn(move || worker(sh, me));
            }
            let _stop = Stop(&shared);
            f(&mut pool)
        })
    } else {
        f(&mut pool)
    };
    let mut engines = std::mem::take(&mut pool.engines);
    drop(pool);
    for (e, n) in engines.iter_mut().zip(shared.nets) {
        e.net = n.into_inner().unwrap_or_else(|e| e.into_inner());
    }
    (r, engines)
}
