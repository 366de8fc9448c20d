//! wanlab-engine: the real-time packet engine of wanlab.
//!
//! Layers, from the bytes up (each depends only on the ones above it in this list):
//!
//! * [`time`], [`rng`]: the caller-owned clock type and the deterministic per-link PRNG.
//! * [`wire`]: views over frame bytes (Ethernet, ARP, IPv4, ICMP, UDP, TCP), the one Internet
//!   checksum, and offload handling.
//! * [`stats`], [`pcap`]: counters and distributions, and the capture file format.
//! * [`model`]: the core without I/O — link-direction pipelines (queue → rate → delay → loss
//!   → dup/corrupt), LANs, simulated routers (`model::sim`), and the
//!   [`model::network::Network`] that schedules them. Every
//!   entry point takes `now`; every object reports `poll_at()`.
//! * [`io`]: TAP devices, capture files confined to a directory, control-peer credentials.
//! * [`control`]: the line-oriented JSON control protocol: wire types, pure validation into
//!   typed commands, checks against the network, execution, and the socket's own thread.
//! * [`driver`]: the real-time driver (epoll, timerfd, spinning; one thread per partition),
//!   the virtual-time driver (jumps from deadline to deadline) and batch simulation
//!   (`simulate`: scenario files run in virtual time through the control layer, on threads
//!   or engine processes), all thin loops over the same `Network`; its files and their order
//!   are in its module docs.
pub mod control;
pub mod driver;
pub mod io;
pub mod model;
pub mod pcap;
pub mod rng;
pub mod stats;
pub mod time;
pub mod wire;

#[cfg(test)]
mod tests {
    /// The layers of the module docs, bottom up (a line of the list: one entry).
    const LAYERS: &[&[&str]] = &[
        &["time", "rng"],
        &["wire"],
        &["stats", "pcap"],
        &["model"],
        &["io"],
        &["control"],
        &["driver"],
    ];

    /// Every `.rs` file under `path` (a module file or folder).
    fn sources(path: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        if path.is_dir() {
            for e in std::fs::read_dir(path).unwrap() {
                sources(&e.unwrap().path(), out);
            }
        } else if path.is_file() && path.extension().is_some_and(|x| x == "rs") {
            out.push(path.to_path_buf());
        }
    }

    #[test]
    fn each_layer_uses_only_the_layers_above_it_in_the_docs() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let level = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
        for (k, layer) in LAYERS.iter().enumerate() {
            for m in *layer {
                let mut files = Vec::new();
                sources(&src.join(m), &mut files);
                sources(&src.join(format!("{m}.rs")), &mut files);
                assert!(!files.is_empty(), "{m}");
                for f in files {
                    let text = std::fs::read_to_string(&f).unwrap();
                    for (i, _) in text.match_indices("crate::") {
                        let name: String = text[i + 7..]
                            .chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect();
                        if let Some(l) = level(&name) {
                            assert!(
                                l < k || layer.contains(&name.as_str()),
                                "{} uses crate::{name}, which is not above {m}",
                                f.display()
                            );
                        }
                    }
                }
            }
        }
    }
}
