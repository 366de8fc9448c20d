//! The real-time engine's core allocator: which partition runs each port and simulated node,
//! which core runs each partition, and when to move work between them.
//!
//! * **Ports and nodes → partitions**, when an `apply` finishes. Objects already placed stay
//!   where they are (their state lives in that partition's replica). Simulated nodes go by
//!   [`place_nodes`]: whole connected components if that balances the partitions (no frame
//!   crosses), else the virtual-time partitioner's cut at links with a delay if that
//!   balances them, else [`split_order`]: the topology walked end to end and cut in
//!   contiguous pieces of equal weight, at links of any delay. In real time a cut link needs
//!   no lookahead (a frame crosses through the rings as soon as it leaves its sender), so a
//!   chain of zero-delay routers is split over the partitions. Plain ports (TAPs) go one by
//!   one, in creation order, to the partition with the least load, a LAN's ports together
//!   (its switch runs with them). The load of a partition is the measured frames/s entering
//!   its ports (each new port counts as the mean of the measured ones, at least 1), so the
//!   two ends of a link, which each carry one direction, land on different partitions and a
//!   busy port is not joined by new ones.
//! * **Partitions → cores**: partition i on the i-th allowed CPU (mod their number), pinned
//!   with `sched_setaffinity`. The control plane places the nodes' processes from this
//!   (`wanlab/backends/emulate/cpuplace.py`: apart from these cores, or with the partition
//!   that reads a node's TAPs).
//! * **Rebalancing**: every [`CHECK_NS`] the busy fraction of every partition (the share of
//!   wall time its thread was not blocked in `epoll_wait`) and the frames/s of every port
//!   are measured. First the threads: a core whose partitions together are busier than
//!   [`OVERLOADED`] sends its least busy partition to the least loaded core, if that core
//!   stays below the first one's load. Then the work ([`port_move`]): a partition busier
//!   than [`OVERLOADED`], on another core than a partition at least [`MOVE_GAP`] less busy,
//!   gives that one the port (a TAP in no LAN, and not its last) whose share of its frames
//!   evens the two out best, at most once per [`MOVE_QUIET_CHECKS`] checks. A port moves
//!   without losing or reordering a frame (`driver/port_move.rs`): its old partition stops
//!   reading the TAP (frames wait in the kernel's queue) and hands over, through the command
//!   path, the state of the pipelines the port feeds — queue, the frame being serialized,
//!   random streams, and the frames in flight when the receiving half moves along — then
//!   the new partition takes it and reads the TAP (its TAP goes unread for one round trip
//!   between the two threads, about a millisecond; the kernel keeps 500 frames meanwhile).
//!   The one order a move can change: frames that a full ring held back on a cut link may
//!   reach their receiver after newer ones sent by the new partition. Every move is logged.
//!   Virtual time never moves anything (its partitions are fixed for determinism).
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::driver::partitioner::{pack, place, Dsu, BALANCE};
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
    /// Frames that entered each plain port it reads (port id, count since creation),
    /// published every [`PUBLISH_NS`] by the partition's loop.
    pub ports: Mutex<Vec<(String, u64)>>,
}

/// How often a partition publishes its ports' frame counts.
pub const PUBLISH_NS: u64 = 250_000_000;
/// A port is moved only off a partition busier than [`OVERLOADED`], to one at least this
/// much less busy, and no sooner than this many checks after the last move.
pub const MOVE_GAP: f64 = 0.3;
pub const MOVE_QUIET_CHECKS: u32 = 3;

/// A move of plain port `port` from partition `from` to partition `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct PortMove {
    pub port: String,
    pub from: u32,
    pub to: u32,
}

/// Which port to move between partitions (see the module docs), given each partition's
/// last window and, for every movable port (one that reads a TAP and is in no LAN), its
/// partition and frames/s. The busy share a port takes along is its share of its
/// partition's frames; the port chosen leaves the two partitions closest to even, and is
/// moved only if that lowers the busier one's share. A partition's only port stays.
pub fn port_move(parts: &[Window], ports: &[(String, u32, f64)]) -> Option<PortMove> {
    let (hot, hw) = parts
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.busy.total_cmp(&b.1.busy).then(b.0.cmp(&a.0)))?;
    if hw.busy <= OVERLOADED {
        return None;
    }
    let (cold, cw) = parts
        .iter()
        .enumerate()
        .filter(|(i, w)| *i != hot && w.core != hw.core)
        .min_by(|a, b| a.1.busy.total_cmp(&b.1.busy).then(a.0.cmp(&b.0)))?;
    if cw.busy + MOVE_GAP > hw.busy {
        return None;
    }
    let mine: Vec<&(String, u32, f64)> = ports.iter().filter(|p| p.1 as usize == hot).collect();
    if mine.len() < 2 {
        return None;
    }
    let total: f64 = mine.iter().map(|p| p.2).sum();
    if total <= 0.0 {
        return None;
    }
    let (best, after) = mine
        .iter()
        .map(|p| {
            let m = hw.busy * p.2 / total;
            (p, (hw.busy - m).max(cw.busy + m))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0 .0.cmp(&b.0 .0)))?;
    if after >= hw.busy - 0.05 {
        return None;
    }
    Some(PortMove {
        port: best.0.clone(),
        from: hot as u32,
        to: cold as u32,
    })
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

/// A CPU list as the kernel writes it (`0-2,5`), sorted, without repeats.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("{s:?} is not a CPU list such as 1 or 0-2,5");
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b || b >= libc::CPU_SETSIZE as usize {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Confine this process (the calling thread, and every thread it starts afterwards) to
/// `cpus`; an error names the CPUs it may not use.
pub fn confine(cpus: &[usize]) -> std::io::Result<()> {
    let allowed = allowed_cpus();
    let outside: Vec<String> = cpus
        .iter()
        .filter(|c| !allowed.contains(c))
        .map(usize::to_string)
        .collect();
    if !outside.is_empty() {
        return Err(std::io::Error::other(format!(
            "CPU {} not among the CPUs this process may use",
            outside.join(", ")
        )));
    }
    // SAFETY: sched_setaffinity reads a local cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
    // Simulated nodes: new ones where `place_nodes` puts them.
    let g = net.graph();
    if g.nodes.iter().any(|(n, _)| !prev.nodes.contains_key(n)) {
        let chosen = place_nodes(&g, parts);
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

/// Whether partition weights `w` (over `parts` partitions) are balanced: the heaviest at
/// most [`BALANCE`] times the mean.
fn balanced(w: &[u64], parts: u32) -> bool {
    let total: u64 = w.iter().sum();
    let mean = total as f64 / f64::from(parts.max(1));
    total == 0 || w.iter().copied().max().unwrap_or(0) as f64 <= BALANCE * mean
}

/// Simulated nodes onto `parts` partitions in real time, where a cut link needs no
/// lookahead (a frame crosses through the rings as soon as it leaves): whole connected
/// components if that is balanced (no frame crosses); else the virtual-time partitioner's
/// cut at links with a delay if that is; else [`split_order`], which cuts links of any
/// delay, zero included (a chain of zero-delay routers split in contiguous pieces).
pub fn place_nodes(g: &Graph, parts: u32) -> HashMap<String, u32> {
    let weights = |m: &HashMap<String, u32>| {
        let mut w = vec![0u64; parts.max(1) as usize];
        for (n, nw) in &g.nodes {
            if let Some(x) = m.get(n).and_then(|&k| w.get_mut(k as usize)) {
                *x += nw;
            }
        }
        w
    };
    let whole = pack_components(g, parts);
    if balanced(&weights(&whole), parts) {
        return whole;
    }
    let p = place(g, parts);
    if p.parts == parts && balanced(&p.weights, parts) {
        return p.nodes;
    }
    split_order(g, parts)
}

/// `g`'s nodes in an order that walks the topology (breadth first from a node at the edge
/// of each component: the far end of a breadth-first walk from its first node, so a chain
/// is walked end to end), cut into `parts` contiguous pieces of about equal weight. A
/// LAN's members move as one.
pub fn split_order(g: &Graph, parts: u32) -> HashMap<String, u32> {
    let n = g.nodes.len();
    let index: HashMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let mut dsu = Dsu::new(n);
    for grp in &g.groups {
        let ids: Vec<usize> = grp
            .iter()
            .filter_map(|m| index.get(m.as_str()).copied())
            .collect();
        for w in ids.windows(2) {
            dsu.union(w[0], w[1]);
        }
    }
    let unit: Vec<usize> = (0..n).map(|i| dsu.find(i)).collect();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for l in &g.links {
        if let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) {
            let (a, b) = (unit[a], unit[b]);
            if a != b {
                adj[a].push(b);
                adj[b].push(a);
            }
        }
    }
    for v in &mut adj {
        v.sort_unstable();
        v.dedup();
    }
    let mut weight = vec![0u64; n];
    for (i, (_, w)) in g.nodes.iter().enumerate() {
        weight[unit[i]] += w;
    }
    let bfs = |from: usize, seen: &mut Vec<bool>| -> Vec<usize> {
        let mut order = vec![from];
        seen[from] = true;
        let mut k = 0;
        while k < order.len() {
            for &m in &adj[order[k]] {
                if !seen[m] {
                    seen[m] = true;
                    order.push(m);
                }
            }
            k += 1;
        }
        order
    };
    let mut seen = vec![false; n];
    let mut order: Vec<usize> = Vec::new();
    for r in 0..n {
        if unit[r] != r || seen[r] {
            continue;
        }
        let mut probe = seen.clone();
        let far = bfs(r, &mut probe).last().copied().unwrap_or(r);
        order.extend(bfs(far, &mut seen));
    }
    let total: u64 = weight.iter().sum::<u64>().max(1);
    let parts = u64::from(parts.max(1));
    let mut of_unit: HashMap<usize, u32> = HashMap::new();
    let mut before = 0u64;
    for u in order {
        // The piece whose share of the total holds this unit's middle.
        let k = ((2 * before + weight[u]) * parts / (2 * total)).min(parts - 1);
        of_unit.insert(u, k as u32);
        before += weight[u];
    }
    g.nodes
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.clone(), of_unit.get(&unit[i]).copied().unwrap_or(0)))
        .collect()
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

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpulist("1"), Ok(vec![1]));
        assert_eq!(parse_cpulist("0-2,5"), Ok(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpulist("3,1-2,2"), Ok(vec![1, 2, 3]));
        for bad in ["", "a", "2-1", "1,", "-1", "99999"] {
            assert!(parse_cpulist(bad).is_err(), "{bad:?}");
        }
    }

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
    fn a_zero_delay_chain_is_cut_in_contiguous_halves() {
        use crate::model::network::partition::GraphLink;
        let link = |a: String, b: String| GraphLink {
            id: format!("{a}-{b}"),
            a,
            b,
            min_flight_ns: 0,
        };
        // r1 - r2 - ... - r8, named so that sorting does not follow the chain
        let names: Vec<String> = (1..=8).map(|i| format!("r{}", (i * 5) % 9)).collect();
        let g = Graph {
            nodes: names.iter().map(|n| (n.clone(), 1)).collect(),
            links: names
                .windows(2)
                .map(|w| link(w[0].clone(), w[1].clone()))
                .collect(),
            groups: vec![],
        };
        let m = place_nodes(&g, 2);
        let along: Vec<u32> = names.iter().map(|n| m[n]).collect();
        // one cut, in the middle
        let cuts = along.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(cuts, 1, "{along:?}");
        assert_eq!(along.iter().filter(|&&k| k == 0).count(), 4, "{along:?}");
        // the same on 4 partitions: 3 cuts, two routers each
        let m = place_nodes(&g, 4);
        let along: Vec<u32> = names.iter().map(|n| m[n]).collect();
        assert_eq!(along.windows(2).filter(|w| w[0] != w[1]).count(), 3);
        // balanced components are kept whole (nothing crosses)
        let mut two = g.clone();
        two.links.remove(3);
        let m = place_nodes(&two, 2);
        let along: Vec<u32> = names.iter().map(|n| m[n]).collect();
        assert_eq!(along.windows(2).filter(|w| w[0] != w[1]).count(), 1);
        assert_ne!(along[3], along[4]);
        // one partition: everything on it
        assert!(place_nodes(&g, 1).values().all(|&k| k == 0));
    }

    #[test]
    fn a_lans_members_stay_together_when_the_order_is_split() {
        use crate::model::network::partition::GraphLink;
        let link = |a: &str, b: &str| GraphLink {
            id: format!("{a}-{b}"),
            a: a.into(),
            b: b.into(),
            min_flight_ns: 0,
        };
        let g = Graph {
            nodes: ["a", "b", "c", "d", "e", "f"]
                .iter()
                .map(|n| (n.to_string(), 1))
                .collect(),
            links: vec![
                link("a", "b"),
                link("b", "c"),
                link("d", "e"),
                link("e", "f"),
            ],
            groups: vec![vec!["c".into(), "d".into()]],
        };
        let m = split_order(&g, 2);
        assert_eq!(m["c"], m["d"]);
        assert_ne!(m["a"], m["f"]);
    }

    #[test]
    fn a_port_moves_off_an_overloaded_partition_to_an_idle_one() {
        let w = |core, busy| Window {
            core,
            busy,
            frames_per_s: 0.0,
        };
        let ports = |v: &[(&str, u32, f64)]| -> Vec<(String, u32, f64)> {
            v.iter().map(|(p, k, r)| (p.to_string(), *k, *r)).collect()
        };
        // Partition 0 saturated by two ports, 1 idle: the one that evens them out moves
        // (b: 0.71 and 0.29 after; a would leave 0.24 and 0.76).
        let m = port_move(
            &[w(0, 0.95), w(1, 0.05)],
            &ports(&[("a", 0, 30_000.0), ("b", 0, 10_000.0), ("c", 1, 100.0)]),
        );
        assert_eq!(
            m,
            Some(PortMove {
                port: "b".into(),
                from: 0,
                to: 1
            })
        );
        // Its only port never moves; nor does anything when nobody is overloaded, or
        // when the other partition is about as busy, or shares the core.
        let one = ports(&[("a", 0, 30_000.0), ("c", 1, 100.0)]);
        assert_eq!(port_move(&[w(0, 0.95), w(1, 0.05)], &one), None);
        let two = ports(&[("a", 0, 30_000.0), ("b", 0, 10_000.0)]);
        assert_eq!(port_move(&[w(0, 0.6), w(1, 0.0)], &two), None);
        assert_eq!(port_move(&[w(0, 0.95), w(1, 0.8)], &two), None);
        assert_eq!(port_move(&[w(0, 0.95), w(0, 0.05)], &two), None);
        // One port carries everything: moving it would only swap the roles.
        let skew = ports(&[("a", 0, 40_000.0), ("b", 0, 0.0)]);
        assert_eq!(port_move(&[w(0, 0.95), w(1, 0.0)], &skew), None);
    }

    #[test]
    fn window_fractions() {
        let w = window((0, 0, 0), (250, 1000, 5), 3);
        assert_eq!(w.core, 3);
        assert!((w.busy - 0.25).abs() < 1e-9);
        assert!((w.frames_per_s - 5e6).abs() < 1e-3);
    }
}
