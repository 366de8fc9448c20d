//! The real-time engine's core allocator: which partition runs each port and simulated node,
//! which core runs each partition, and when to move a partition to another core.
//!
//! * **Ports and nodes → partitions**, when an `apply` finishes. Objects already placed stay
//!   where they are (their state lives in that partition's replica). Simulated nodes take the
//!   partition the virtual-time partitioner gives them (`partitioner::place`: it cuts only
//!   links with a delay, so frames crossing partitions have time to). Plain ports (TAPs)
//!   go one by one, in creation order, to the partition with the least load, a LAN's ports
//!   together (its switch runs with them). The load of a partition is the measured frames/s
//!   entering its ports (each new port counts as the mean of the measured ones, at least 1),
//!   so the two ends of a link, which each carry one direction, land on different
//!   partitions and a busy port is not joined by new ones.
//! * **Partitions → cores**: partition i on the i-th allowed CPU (mod their number), pinned
//!   with `sched_setaffinity`.
//! * **Rebalancing**: every [`CHECK_NS`] the busy fraction of every partition (the share of
//!   wall time its thread was not blocked in `epoll_wait`) is measured. A core whose
//!   partitions together are busier than [`OVERLOADED`] sends its least busy partition to
//!   the least loaded core, if that core stays below the first one's load; the move is
//!   logged. Ports are not moved between partitions at run time (a pipeline's queue, timers
//!   and random stream live in one replica); threads are re-pinned instead.
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::driver::partitioner::{pack, place, Dsu};
use crate::model::network::partition::{Graph, Partition, PlainPort};
use crate::model::network::Network;

/// Every this often the loads are measured and the placement reconsidered.
pub const CHECK_NS: u64 = 1_000_000_000;
/// A core whose partitions are busy for more than this share of the time is overloaded.
pub const OVERLOADED: f64 = 0.85;

/// What a partition's thread publishes about itself (read by the first partition).
#[derive(Debug, Default)]
pub struct PartLoad {
    /// Kernel thread id (for re-pinning), 0 until the thread runs.
    pub tid: AtomicI32,
    /// The CPU it is pinned to (-1: not pinned).
    pub core: AtomicI32,
    /// Time not blocked waiting, and wall time, since start (ns).
    pub busy_ns: AtomicU64,
    pub wall_ns: AtomicU64,
    /// Frames that entered it (TAP reads and frames from other partitions).
    pub frames: AtomicU64,
}

/// A partition's load over the last measurement window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub core: i32,
    pub busy: f64,
    pub frames_per_s: f64,
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills a local cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let v: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if v.is_empty() {
            vec![0]
        } else {
            v
        }
    }
}

/// Pin thread `tid` (0: the calling thread) to `cpu`.
pub fn pin(tid: i32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: sched_setaffinity reads a local cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A move of partition `part` from core `from` to core `to`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Move {
    pub part: usize,
    pub from: i32,
    pub to: i32,
}

/// The rebalancing decision for the partitions' last windows on `cores` (see the module
/// docs); None when nothing is overloaded or no move helps.
pub fn rebalance(parts: &[Window], cores: &[usize]) -> Option<Move> {
    let mut load: HashMap<i32, f64> = cores.iter().map(|&c| (c as i32, 0.0)).collect();
    for w in parts {
        *load.entry(w.core).or_insert(0.0) += w.busy;
    }
    // The most loaded core holding two or more partitions.
    let (&hot, &hot_load) = load
        .iter()
        .filter(|(c, _)| parts.iter().filter(|w| w.core == **c).count() >= 2)
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))?;
    if hot_load <= OVERLOADED {
        return None;
    }
    let (part, w) = parts
        .iter()
        .enumerate()
        .filter(|(_, w)| w.core == hot)
        .min_by(|a, b| a.1.busy.total_cmp(&b.1.busy).then(a.0.cmp(&b.0)))?;
    let (&cold, &cold_load) = load
        .iter()
        .filter(|(c, _)| **c != hot)
        .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)))?;
    if cold_load + w.busy >= hot_load {
        return None;
    }
    Some(Move {
        part,
        from: hot,
        to: cold,
    })
}

/// Place what the last `apply` added (see the module docs). `prev` is the placement so far
/// (its `me` is kept), `parts` the number of partitions, `port_load` the measured frames/s
/// per port id.
pub fn assign(
    net: &Network,
    prev: &Partition,
    parts: u32,
    port_load: &HashMap<String, f64>,
) -> Partition {
    let mut next = prev.clone();
    next.direct_ports = true;
    if parts <= 1 {
        return next;
    }
    // Simulated nodes: the partitioner's choice for new ones.
    let g = net.graph();
    if g.nodes.iter().any(|(n, _)| !prev.nodes.contains_key(n)) {
        let p = place(&g, parts);
        // Nothing to cut (the partitioner wants a link with a delay between partitions):
        // separate components still run apart.
        let chosen = if p.parts > 1 {
            p.nodes
        } else {
            pack_components(&g, parts)
        };
        for (n, _) in &g.nodes {
            if !next.nodes.contains_key(n) {
                next.nodes
                    .insert(n.clone(), chosen.get(n).copied().unwrap_or(0));
            }
        }
    }
    next.ports = assign_ports(&net.plain_ports(), &prev.ports, parts, port_load);
    next
}

/// The connected components of `g` (nodes joined by any link or LAN) packed onto `parts`
/// partitions, heaviest first onto the lightest (ties: lowest index), by node weight.
pub fn pack_components(g: &Graph, parts: u32) -> HashMap<String, u32> {
    let index: HashMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let mut dsu = Dsu::new(g.nodes.len());
    let mut join = |a: &str, b: &str| {
        if let (Some(&x), Some(&y)) = (index.get(a), index.get(b)) {
            dsu.union(x, y);
        }
    };
    for l in &g.links {
        join(&l.a, &l.b);
    }
    for grp in &g.groups {
        for w in grp.windows(2) {
            join(&w[0], &w[1]);
        }
    }
    let mut weight: HashMap<usize, u64> = HashMap::new();
    for (i, (_, w)) in g.nodes.iter().enumerate() {
        *weight.entry(dsu.find(i)).or_insert(0) += w;
    }
    let (of_root, _) = pack(weight, parts.max(1) as usize);
    g.nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            let r = dsu.find(i);
            (n.clone(), of_root.get(&r).copied().unwrap_or(0))
        })
        .collect()
}

/// Plain ports onto `parts` partitions: placed ones stay, new ones (a LAN's together) go to
/// the least loaded partition in creation order.
pub fn assign_ports(
    ports: &[PlainPort],
    prev: &HashMap<String, u32>,
    parts: u32,
    port_load: &HashMap<String, f64>,
) -> HashMap<String, u32> {
    let known: Vec<f64> = port_load.values().copied().filter(|v| *v > 0.0).collect();
    let default = if known.is_empty() {
        1.0
    } else {
        (known.iter().sum::<f64>() / known.len() as f64).max(1.0)
    };
    let weight = |id: &str| port_load.get(id).copied().unwrap_or(default).max(default);
    let mut out: HashMap<String, u32> = HashMap::new();
    let mut load = vec![0.0f64; parts.max(1) as usize];
    let mut lan_part: HashMap<&str, u32> = HashMap::new();
    for p in ports {
        if let Some(&k) = prev.get(&p.id) {
            let k = k.min(parts - 1);
            out.insert(p.id.clone(), k);
            load[k as usize] += weight(&p.id);
            if let Some(l) = &p.lan {
                lan_part.entry(l).or_insert(k);
            }
        }
    }
    for p in ports.iter().filter(|p| !prev.contains_key(&p.id)) {
        let k = match p.lan.as_deref().and_then(|l| lan_part.get(l)) {
            Some(&k) => k,
            None => {
                let (k, _) = load
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(&b.0)))
                    .unwrap_or((0, &0.0));
                k as u32
            }
        };
        if let Some(l) = &p.lan {
            lan_part.entry(l).or_insert(k);
        }
        out.insert(p.id.clone(), k);
        load[k as usize] += weight(&p.id);
    }
    out
}

/// Load of `part` over the window between two readings (busy_ns, wall_ns, frames).
pub fn window(prev: (u64, u64, u64), now: (u64, u64, u64), core: i32) -> Window {
    let wall = now.1.saturating_sub(prev.1).max(1) as f64;
    Window {
        core,
        busy: (now.0.saturating_sub(prev.0) as f64 / wall).min(1.0),
        frames_per_s: now.2.saturating_sub(prev.2) as f64 * 1e9 / wall,
    }
}

impl PartLoad {
    /// (busy_ns, wall_ns, frames) now.
    pub fn reading(&self) -> (u64, u64, u64) {
        (
            self.busy_ns.load(Ordering::Relaxed),
            self.wall_ns.load(Ordering::Relaxed),
            self.frames.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(id: &str, lan: Option<&str>) -> PlainPort {
        PlainPort {
            id: id.into(),
            lan: lan.map(str::to_string),
        }
    }

    #[test]
    fn link_ends_alternate_and_lans_stay_together() {
        let ports = [
            port("a", None),
            port("b", None),
            port("c", None),
            port("d", None),
            port("l1", Some("lan")),
            port("l2", Some("lan")),
            port("l3", Some("lan")),
        ];
        let m = assign_ports(&ports, &HashMap::new(), 2, &HashMap::new());
        assert_ne!(m["a"], m["b"]);
        assert_ne!(m["c"], m["d"]);
        assert_eq!(m["l1"], m["l2"]);
        assert_eq!(m["l2"], m["l3"]);
        // Placed ports stay; a new one goes where the load is lower.
        let prev: HashMap<String, u32> = [("a".to_string(), 1), ("b".to_string(), 1)].into();
        let load: HashMap<String, f64> = [("a".to_string(), 1000.0)].into();
        let m = assign_ports(&ports[..3], &prev, 2, &load);
        assert_eq!((m["a"], m["b"], m["c"]), (1, 1, 0));
        // One partition: everything on it.
        let m = assign_ports(&ports, &HashMap::new(), 1, &HashMap::new());
        assert!(m.values().all(|&k| k == 0));
    }

    #[test]
    fn rebalance_moves_off_an_overloaded_shared_core() {
        let w = |core, busy| Window {
            core,
            busy,
            frames_per_s: 0.0,
        };
        // Two partitions on core 0, one saturated; core 1 idle: the lighter one moves.
        let m = rebalance(&[w(0, 0.9), w(0, 0.3), w(1, 0.0)], &[0, 1]);
        assert_eq!(
            m,
            Some(Move {
                part: 1,
                from: 0,
                to: 1
            })
        );
        // Not overloaded: stay.
        assert_eq!(rebalance(&[w(0, 0.4), w(0, 0.3), w(1, 0.0)], &[0, 1]), None);
        // One partition per core: nothing to move even if busy.
        assert_eq!(rebalance(&[w(0, 1.0), w(1, 1.0)], &[0, 1]), None);
        // The other core is as busy: a move would not help.
        assert_eq!(rebalance(&[w(0, 0.6), w(0, 0.5), w(1, 1.0)], &[0, 1]), None);
    }

    #[test]
    fn separate_components_go_to_separate_partitions() {
        use crate::model::network::partition::GraphLink;
        let link = |a: &str, b: &str| GraphLink {
            id: format!("{a}-{b}"),
            a: a.into(),
            b: b.into(),
            min_flight_ns: 0,
        };
        let g = Graph {
            nodes: ["a", "b", "c", "x", "y"]
                .iter()
                .map(|n| (n.to_string(), 1))
                .collect(),
            links: vec![link("a", "b"), link("b", "c"), link("x", "y")],
            groups: vec![],
        };
        let m = pack_components(&g, 2);
        assert_eq!(m["a"], m["b"]);
        assert_eq!(m["b"], m["c"]);
        assert_eq!(m["x"], m["y"]);
        assert_ne!(m["a"], m["x"]);
    }

    #[test]
    fn window_fractions() {
        let w = window((0, 0, 0), (250, 1000, 5), 3);
        assert_eq!(w.core, 3);
        assert!((w.busy - 0.25).abs() < 1e-9);
        assert!((w.frames_per_s - 5e6).abs() < 1e-3);
    }
}
