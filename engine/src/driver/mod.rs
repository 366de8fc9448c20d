//! Drivers: thin loops that own the clock and feed the core.
//!
//! One file per concern. A file uses only the files listed before it here, so there is no
//! import circle between them (`tests::each_file_uses_only_the_files_before_it` checks
//! it):
//!
//! * helpers of the real-time loop: `spsc` (the lock-free rings between partitions), `wake`
//!   (wake-up latency, spin budget, answer windows), `priority` (real-time scheduling of
//!   the packet threads), `defer` (TAPs read late on purpose);
//! * placement: `partitioner` (cutting a topology into partitions at its longest links),
//!   `allocator` (the real-time engine's ports, nodes and threads on partitions and cores);
//! * the real-time driver, bottom up: `os` (OS handles: the monotonic clock, epoll,
//!   eventfd, signalfd), `messages` (what the partitions send each other besides frames),
//!   `partition_loop` (one partition's thread: its turn of timers, TAPs and rings),
//!   `port_move` (moving a TAP port between partitions), `fanout` (the leader's commands
//!   to every partition, and the followers' side), `realtime` (the wiring: threads, rings,
//!   channels, pinning; the entry point `run`);
//! * virtual time: `virtual_time` (one network stepped by hand, for tests), `replicas`
//!   (the `Replicas` trait the scenario loop runs on), `parallel` (replicas on threads,
//!   conservative windows), `remote` (replicas in several engine processes over TCP),
//!   `simulate` (scenario files: the `simulate` subcommand).
pub mod allocator;
pub mod defer;
pub mod fanout;
pub mod messages;
pub mod os;
pub mod parallel;
pub mod partition_loop;
pub mod partitioner;
pub mod port_move;
pub mod priority;
pub mod realtime;
pub mod remote;
pub mod replicas;
pub mod simulate;
pub mod spsc;
pub mod virtual_time;
pub mod wake;

#[cfg(test)]
mod tests {
    /// The files of this module, bottom up (as in the module docs).
    const ORDER: &[&str] = &[
        "spsc",
        "wake",
        "priority",
        "defer",
        "partitioner",
        "allocator",
        "os",
        "messages",
        "partition_loop",
        "port_move",
        "fanout",
        "realtime",
        "virtual_time",
        "replicas",
        "parallel",
        "remote",
        "simulate",
    ];

    /// The driver files that `code` names with one of `prefixes` (`super::x`,
    /// `crate::driver::x`).
    fn named(code: &str, prefixes: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for prefix in prefixes {
            for (i, _) in code.match_indices(prefix) {
                let rest = &code[i + prefix.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
        out
    }

    #[test]
    fn each_file_uses_only_the_files_before_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/driver");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".rs").map(str::to_string)
            })
            .filter(|n| n != "mod")
            .collect();
        files.sort();
        let mut listed: Vec<String> = ORDER.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(files, listed, "every driver file is in ORDER, once");
        for (k, file) in ORDER.iter().enumerate() {
            let text = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
            // In a file's test module `super` is the file itself: there only
            // `crate::driver::x` names another file.
            let (code, tests) = text.split_once("#[cfg(test)]").unwrap_or((&text, ""));
            let mut names = named(code, &["super::", "crate::driver::"]);
            names.extend(named(tests, &["crate::driver::"]));
            for name in names {
                let pos = ORDER.iter().position(|f| *f == name);
                assert!(
                    pos.is_some_and(|p| p < k),
                    "driver/{file}.rs uses driver/{name}.rs, which is not below it"
                );
            }
        }
    }
}
