//! Choosing the partitions of a parallel simulation from the topology.
//!
//! Nodes joined by a LAN, or by a link whose frames can be in flight for no time, always
//! share a partition. Among the remaining links, the ones with the largest delay are cut
//! first: for each candidate threshold `d` (the distinct link delays, largest first), links
//! shorter than `d` join their nodes into components, and the components are packed onto
//! `threads` partitions (heaviest first onto the lightest partition; a node weighs 1 plus
//! its agents). The first threshold whose packing is balanced within [`BALANCE`] wins; if
//! none is, the best-balanced one. The lookahead is then the smallest delay of a cut link,
//! at least `d`. Everything is decided from ids and delays only, so the same scenario and
//! thread count always give the same partitions.
use std::collections::HashMap;

use crate::model::network::partition::Graph;

/// Largest partition / mean partition accepted at once.
pub const BALANCE: f64 = 1.5;
/// At most this many candidate thresholds are tried (the largest delays).
const CANDIDATES: usize = 16;

/// The chosen placement: node id → partition, the number of partitions used (1: run
/// sequentially) and the lookahead (the smallest delay of a cut link).
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub nodes: HashMap<String, u32>,
    pub parts: u32,
    pub lookahead_ns: u64,
    /// Weight of each partition (for the log line).
    pub weights: Vec<u64>,
}

/// Union-find over node indices; a component's root is its smallest index (deterministic).
pub(crate) struct Dsu(pub(crate) Vec<usize>);
impl Dsu {
    pub(crate) fn new(n: usize) -> Self {
        Dsu((0..n).collect())
    }
    pub(crate) fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            let p = self.0[self.0[i]];
            self.0[i] = p;
            i = p;
        }
        i
    }
    pub(crate) fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            // The smaller index is the root: deterministic.
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            self.0[hi] = lo;
        }
    }
}

/// Components (root → weight) packed onto `bins` bins, heaviest first onto the lightest
/// (ties: lowest root, lowest bin): root → bin, and each bin's weight.
pub(crate) fn pack(comp: HashMap<usize, u64>, bins: usize) -> (HashMap<usize, u32>, Vec<u64>) {
    let mut comps: Vec<(usize, u64)> = comp.into_iter().collect();
    comps.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut weights = vec![0u64; bins.max(1)];
    let mut of_root: HashMap<usize, u32> = HashMap::new();
    for (root, w) in comps {
        let (bi, _) = weights
            .iter()
            .enumerate()
            .min_by_key(|(i, w)| (**w, *i))
            .unwrap_or((0, &0));
        weights[bi] += w;
        of_root.insert(root, bi as u32);
    }
    (of_root, weights)
}

/// Partition `g` over at most `threads` partitions.
pub fn place(g: &Graph, threads: u32) -> Placement {
    let index: HashMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let single = Placement {
        nodes: HashMap::new(),
        parts: 1,
        lookahead_ns: 0,
        weights: vec![g.nodes.iter().map(|n| n.1).sum()],
    };
    if threads <= 1 || g.nodes.len() < 2 {
        return single;
    }
    let mut base = Dsu((0..g.nodes.len()).collect());
    for group in &g.groups {
        let ids: Vec<usize> = group
            .iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .collect();
        for w in ids.windows(2) {
            base.union(w[0], w[1]);
        }
    }
    let ends = |l: &crate::model::network::partition::GraphLink| {
        Some((*index.get(l.a.as_str())?, *index.get(l.b.as_str())?))
    };
    let mut delays: Vec<u64> = g
        .links
        .iter()
        .map(|l| l.min_flight_ns)
        .filter(|&d| d > 0)
        .collect();
    delays.sort_unstable_by(|a, b| b.cmp(a));
    delays.dedup();
    delays.truncate(CANDIDATES);
    let total: u64 = g.nodes.iter().map(|n| n.1).sum();
    let mean = total as f64 / f64::from(threads);
    let mut best: Option<(f64, Vec<u32>, Vec<u64>)> = None;
    for &d in &delays {
        let mut dsu = Dsu(base.0.clone());
        for l in &g.links {
            if l.min_flight_ns < d {
                if let Some((a, b)) = ends(l) {
                    dsu.union(a, b);
                }
            }
        }
        // Components with their weight, heaviest first (ties: lowest root index).
        let mut comp: HashMap<usize, u64> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            *comp.entry(dsu.find(i)).or_insert(0) += n.1;
        }
        if comp.len() < 2 {
            continue;
        }
        let bins = (threads as usize).min(comp.len());
        let (of_root, weights) = pack(comp, bins);
        let assign: Vec<u32> = (0..g.nodes.len())
            .map(|i| of_root.get(&dsu.find(i)).copied().unwrap_or(0))
            .collect();
        let imbalance = weights.iter().copied().max().unwrap_or(0) as f64 / mean;
        let better = best.as_ref().is_none_or(|b| imbalance < b.0);
        if better {
            best = Some((imbalance, assign, weights));
        }
        if imbalance <= BALANCE {
            break;
        }
    }
    let Some((_, assign, weights)) = best else {
        return single;
    };
    let mut lookahead = u64::MAX;
    for l in &g.links {
        if let Some((a, b)) = ends(l) {
            if assign[a] != assign[b] {
                lookahead = lookahead.min(l.min_flight_ns);
            }
        }
    }
    // (u64::MAX: no link is cut, the partitions are independent and need no windows; 0: a
    // cut link gives no lookahead, which `pack`'s candidates never produce)
    if lookahead == 0 {
        return single;
    }
    Placement {
        nodes: g
            .nodes
            .iter()
            .zip(&assign)
            .map(|((n, _), &p)| (n.clone(), p))
            .collect(),
        parts: weights.len() as u32,
        lookahead_ns: lookahead,
        weights,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::network::partition::GraphLink;

    fn link(id: &str, a: &str, b: &str, d: u64) -> GraphLink {
        GraphLink {
            id: id.into(),
            a: a.into(),
            b: b.into(),
            min_flight_ns: d,
        }
    }

    fn dumbbell() -> Graph {
        Graph {
            nodes: ["h0", "h1", "h2", "h3", "r0", "r1"]
                .iter()
                .map(|n| (n.to_string(), 1))
                .collect(),
            links: vec![
                link("a0", "h0", "r0", 1_000),
                link("a1", "h1", "r0", 1_000),
                link("b0", "h2", "r1", 1_000),
                link("b1", "h3", "r1", 1_000),
                link("core", "r0", "r1", 20_000_000),
            ],
            groups: vec![],
        }
    }

    #[test]
    fn cuts_the_long_link_of_a_dumbbell() {
        let p = place(&dumbbell(), 2);
        assert_eq!(p.parts, 2);
        assert_eq!(p.lookahead_ns, 20_000_000);
        assert_eq!(p.nodes["h0"], p.nodes["r0"]);
        assert_eq!(p.nodes["h3"], p.nodes["r1"]);
        assert_ne!(p.nodes["r0"], p.nodes["r1"]);
        assert_eq!(p.weights, vec![3, 3]);
    }

    #[test]
    fn one_thread_or_a_lan_gives_one_partition() {
        assert_eq!(place(&dumbbell(), 1).parts, 1);
        let mut g = dumbbell();
        g.groups.push(vec!["h0".into(), "h3".into()]);
        // h0 and h3 must stay together: the core link cannot be cut alone.
        let p = place(&g, 2);
        assert!(p.parts == 1 || p.nodes["h0"] == p.nodes["h3"]);
    }

    #[test]
    fn zero_delay_links_are_never_cut() {
        let mut g = dumbbell();
        g.links[4].min_flight_ns = 0;
        let p = place(&g, 2);
        if p.parts > 1 {
            assert_eq!(p.nodes["r0"], p.nodes["r1"]);
            assert!(p.lookahead_ns > 0);
        }
    }

    #[test]
    fn same_input_same_placement() {
        assert_eq!(place(&dumbbell(), 3), place(&dumbbell(), 3));
    }
}
