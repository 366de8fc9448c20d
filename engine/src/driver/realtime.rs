//! The real-time driver's wiring: [`run`] starts one partition per thread (`--threads`),
//! each a [`Part`] of `partition_loop`, joins every two of them by a ring for the frames in
//! flight on the links cut between them, hands the first (the leader) the control socket and
//! the signals and the others their command channels (`fanout`), pins the threads to cores
//! and raises their priority.
//!
//! `--cpus LIST`: the CPUs reserved for the engine (the control plane keeps the nodes off
//! them): the process is confined to them before any thread starts and the partitions are
//! pinned among them, one thread too.
//!
//! `--rps`: the partition threads are pinned (one thread too) and every TAP's receive queue
//! gets the other cores as its `rps_cpus` ([`rps_mask`], set in `io/tap.rs`), so the
//! receiving node's network stack, which a TAP write otherwise runs in the engine's thread,
//! runs in the softirq of another core. Off by default: it costs an inter-processor
//! interrupt per write to an idle core, and the host as a whole spends more
//! (`bench/results/engine-cpu-latest.md`).

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::channel;
use std::sync::Arc;

use super::allocator::{self, PartLoad};
use super::fanout::{Follower, Leader};
use super::os::{signal_fd, unix_now_ns, Clock};
pub use super::partition_loop::Options;
use super::partition_loop::{Mail, Part, LAZY_PER_POLL, POLL_LIMIT, TOKEN_CONTROL, TOKEN_SIGNAL};
use super::priority;
use super::spsc::ring;
use crate::control::exec::Engine;
use crate::control::server::Control;
use crate::io::capture_file::CaptureDir;
use crate::model::network::partition::Partition;

/// Messages a ring between two partitions holds before the sender keeps them back.
const RING_CAP: usize = 4096;

/// A fresh engine for one partition of `threads`.
fn new_engine(
    seed: u64,
    wall_offset: u64,
    me: u32,
    threads: u32,
    opts: &Options,
) -> io::Result<Engine> {
    let mut engine = Engine::new(seed, wall_offset);
    engine.net.track_lateness(opts.behind_ns);
    engine.net.set_poll_limit(Some(POLL_LIMIT));
    engine.net.set_lazy_per_poll(Some(LAZY_PER_POLL));
    engine.realtime = Some(Default::default());
    engine.departures = Some(Default::default());
    if threads > 1 {
        engine.net.set_partition(Partition {
            me,
            direct_ports: true,
            ..Default::default()
        });
    }
    if let Some(d) = &opts.capture_dir {
        engine.capture_dir = Some(CaptureDir::open(d).map_err(|e| {
            io::Error::new(e.kind(), format!("--capture-dir {}: {e}", d.display()))
        })?);
    }
    Ok(engine)
}

/// `--rps`: the `rps_cpus` mask (hex, in 32-bit groups separated by commas, as sysfs writes
/// it) of the allowed `cores` that run no packet thread (`used`); None when none is left.
///
/// A TAP write runs the receiving node's network stack (IP, UDP/TCP, waking the receiving
/// program) in the writer's thread unless Receive Packet Steering hands the frame to another
/// core's backlog. Steered, that work is the node's (as a real receiving host's kernel pays
/// it) and the engine pays an inter-processor interrupt instead when that core's backlog
/// was idle.
pub fn rps_mask(cores: &[usize], used: &[usize]) -> Option<String> {
    let free: Vec<usize> = cores
        .iter()
        .copied()
        .filter(|c| !used.contains(c))
        .collect();
    let top = *free.iter().max()?;
    let mut words = vec![0u32; top / 32 + 1];
    for c in free {
        words[c / 32] |= 1 << (c % 32);
    }
    let hex: Vec<String> = words.iter().rev().map(|w| format!("{w:08x}")).collect();
    Some(hex.join(","))
}

/// Pin the calling thread to `cpu` (when the engine runs several partitions) and record it.
fn pin_self(load: &PartLoad, cpu: Option<usize>) {
    // SAFETY: gettid has no arguments.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    load.tid.store(tid, Ordering::Relaxed);
    load.core.store(-1, Ordering::Relaxed);
    if let Some(c) = cpu {
        match allocator::pin(0, c) {
            Ok(()) => load.core.store(c as i32, Ordering::Relaxed),
            Err(e) => eprintln!("wanlab-engine: cannot pin a partition to cpu {c}: {e}"),
        }
    }
    // Timer slack would add up to 50 µs to every sleep.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// Put the calling partition thread at real-time priority `prio` (not with `--busy-poll`:
/// a thread that never sleeps must not outrank the nodes) and record it in `stats`.
fn raise_priority(part: &mut Part, prio: i32, busy_poll: bool) {
    let (got, why) = priority::raise(if busy_poll { 0 } else { prio });
    if let Some(why) = why {
        eprintln!("wanlab-engine: --rt-priority {prio}: {why}");
    }
    part.gov = priority::Governor::new(got);
    if let Some(rt) = part.engine.realtime.as_mut() {
        rt.rt_priority = got;
    }
}

/// Run the engine until `shutdown` or a signal. Returns after closing everything.
pub fn run(socket: &Path, seed: u64, opts: Options) -> io::Result<()> {
    let clock = Clock::new();
    let wall_offset = unix_now_ns().saturating_sub(clock.now().nanos());
    let n = opts.threads.max(1);
    // (receive steering goes to the CPUs besides the engine's: its threads' or reserved)
    let all = allocator::allowed_cpus();
    if let Some(cpus) = &opts.cpus {
        // Before any thread starts: the control thread stays on these CPUs too.
        allocator::confine(cpus).map_err(|e| io::Error::new(e.kind(), format!("--cpus: {e}")))?;
    }
    let cores = allocator::allowed_cpus();
    let pinned = n > 1 || opts.rps || opts.cpus.is_some();
    let core_of = |i: u32| pinned.then(|| cores[i as usize % cores.len()]);
    let rps = if opts.rps {
        let used: Vec<usize> = match opts.cpus {
            Some(_) => cores.clone(),
            None => (0..n).filter_map(core_of).collect(),
        };
        let mask = rps_mask(&all, &used);
        if mask.is_none() {
            eprintln!("wanlab-engine: --rps: no core is left for the nodes' receive processing; not steering it");
        }
        mask
    } else {
        None
    };
    // Signals are blocked before any thread starts, so every thread inherits the mask and
    // only the first partition's signalfd sees them.
    let sfd = signal_fd()?;
    let control = Control::spawn(socket)?;
    let mut parts = Vec::new();
    for me in 0..n {
        let mut engine = new_engine(seed, wall_offset, me, n, &opts)?;
        engine.rps_mask = rps.clone();
        parts.push(Part::new(
            me,
            engine,
            opts.clone(),
            Arc::new(PartLoad::default()),
        )?);
    }
    // A ring for every ordered pair of partitions.
    for from in 0..n as usize {
        for to in 0..n as usize {
            if from == to {
                parts[from].outbox.push(None);
                continue;
            }
            let (p, c) = ring::<Mail>(RING_CAP);
            let wake = parts[to].mail.clone();
            parts[from].outbox.push(Some((p, wake)));
            parts[to].inbox.push(c);
        }
    }
    let loads: Vec<Arc<PartLoad>> = parts.iter().map(|p| p.load.clone()).collect();
    let mut leader_part = parts.remove(0);
    leader_part.add_fd(sfd, TOKEN_SIGNAL)?;
    leader_part.add_fd(control.wake_fd(), TOKEN_CONTROL)?;
    let (ack_tx, acks) = channel();
    let mut peers = Vec::new();
    let mut handles = Vec::new();
    for mut part in parts {
        let (tx, rx) = channel();
        peers.push((tx, part.mail.clone()));
        let mut f = Follower::new(part.me, rx, ack_tx.clone(), leader_part.mail.clone());
        let cpu = core_of(part.me);
        // Every partition reads the same clock: frames carry their arrival times across.
        let clock = clock.clone();
        let h = std::thread::Builder::new()
            .name(format!("partition-{}", part.me))
            .spawn(move || {
                pin_self(&part.load, cpu);
                let (prio, busy_poll) = (part.opts.rt_priority, part.opts.busy_poll);
                raise_priority(&mut part, prio, busy_poll);
                f.run_loop(&mut part, &clock);
                part.engine.flush_captures();
            })?;
        handles.push(h);
    }
    pin_self(&leader_part.load, core_of(0));
    raise_priority(&mut leader_part, opts.rt_priority, opts.busy_poll);
    let mut leader = Leader::new(control, peers, acks, loads, cores, n);
    leader.run_loop(&mut leader_part, &clock);
    leader.stop_peers();
    for h in handles {
        let _ = h.join();
    }
    leader.control_shutdown();
    leader_part.engine.flush_captures();
    // SAFETY: closing the signalfd we created.
    unsafe { libc::close(sfd) };
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rps_mask_names_the_cores_without_packet_threads() {
        assert_eq!(rps_mask(&[0, 1], &[0]).as_deref(), Some("00000002"));
        assert_eq!(rps_mask(&[0, 1, 2, 3], &[1]).as_deref(), Some("0000000d"));
        assert_eq!(
            rps_mask(&[2, 33], &[2]).as_deref(),
            Some("00000002,00000000")
        );
        assert_eq!(rps_mask(&[0], &[0]), None);
        assert_eq!(rps_mask(&[0, 1], &[0, 1]), None);
    }
}
