//! `wanlab-engine simulate`: the real binary on scenario files in virtual time — exact packet
//! counts around a link failure, byte-identical results, errors naming the request, TAP ports
//! refused, captures with virtual timestamps, and the event rate of a bigger scenario.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const S: u64 = 1_000_000_000;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wl-sim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(dir: &Path, name: &str, scenario: &Value) -> (Output, PathBuf) {
    run_with(dir, name, scenario, &[])
}

/// [`run`] with more arguments for `wanlab-engine simulate`.
fn run_with(dir: &Path, name: &str, scenario: &Value, extra: &[&str]) -> (Output, PathBuf) {
    let sc = dir.join(format!("{name}.json"));
    std::fs::write(&sc, scenario.to_string()).unwrap();
    let out = dir.join(format!("{name}.result.json"));
    let o = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args([
            "simulate",
            sc.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(extra)
        .output()
        .unwrap();
    (o, out)
}

fn ok(dir: &Path, name: &str, scenario: &Value) -> (Value, Vec<u8>) {
    let (o, out) = run(dir, name, scenario);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{name}: {err}");
    eprintln!("{name}: {}", err.trim());
    assert!(err.contains("events/s"), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    (serde_json::from_slice(&bytes).unwrap(), bytes)
}

fn fail(dir: &Path, name: &str, scenario: &Value) -> String {
    let (o, out) = run(dir, name, scenario);
    assert_eq!(o.status.code(), Some(1), "{name}");
    assert!(!out.exists(), "{name}: no result file on failure");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// host a —la 1 ms— router r —lb 1 ms— host b; CBR c1 (100-byte payloads every 10 ms) from a to
/// b's sink s1: start at 1 s, la down at 3 s, up at 4 s, stop at 6 s; run to 7 s.
fn small(pcap: &Path) -> Value {
    let l = json!({"delay_us": 1000});
    json!({"seed": 1, "until_ns": 7 * S, "sample_interval_ns": S, "requests": [
        {"at_ns": 0, "cmd": "apply",
         "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                   {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
         "routers": [{"router": "r", "interfaces": [{"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
                                                    {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
         "links": [{"link": "la", "a": "pa", "b": "r0", "ab": l, "ba": l}, {"link": "lb", "a": "r1", "b": "pb", "ab": l, "ba": l}],
         "agents": [{"agent": "c1", "host": "a", "kind": "cbr", "dst": "10.1.2.2:5000", "size": 100, "interval_us": 10000},
                    {"agent": "s1", "host": "b", "kind": "sink", "port": 5000}]},
        {"at_ns": S, "cmd": "agent", "agent": "c1", "action": "start"},
        {"at_ns": S, "cmd": "capture_start", "target": "lb", "dir": "ab", "path": pcap.to_str().unwrap(), "nanos": true},
        {"at_ns": 3 * S, "cmd": "down", "target": "la"},
        {"at_ns": 4 * S, "cmd": "up", "target": "la"},
        {"at_ns": 6 * S, "id": "last", "cmd": "stats", "target": "s1"},
        {"at_ns": 6 * S, "cmd": "agent", "agent": "c1", "action": "stop"}
    ]})
}

#[test]
fn link_failure_exact_counts_and_identical_bytes() {
    let d = dir("small");
    let pcap = d.join("lb.pcap");
    let (r, bytes) = ok(&d, "small", &small(&pcap));
    // Sends at 1 s + k·10 ms for k = 0..=500 (the packet due at 6 s runs before the stop).
    assert_eq!(
        r["stats"]["agents"]["c1"],
        json!({"kind": "cbr", "running": false, "sent_pkts": 501, "sent_bytes": 50100})
    );
    // Lost: the packet sent at 3 s (in flight on la when it goes down, since requests run
    // after the events at their time), those sent while down, and the one due at 4 s (sent
    // just before `up`): k = 200..=300.
    let s1 = &r["stats"]["agents"]["s1"];
    assert_eq!(
        (s1["pkts"].as_u64(), s1["lost"].as_u64()),
        (Some(501 - 101), Some(101)),
        "{s1}"
    );
    assert_eq!(r["stats"]["links"]["la"]["ab"]["drop_down"], json!(101));
    assert_eq!(s1["owd_min_us"], json!(2000.0));
    assert_eq!(r["stats"]["now_ns"], json!(7 * S));
    // Replies in time order, file order at equal times; ids kept.
    let replies = r["replies"].as_array().unwrap();
    let cmds: Vec<(&str, u64)> = replies
        .iter()
        .map(|x| (x["cmd"].as_str().unwrap(), x["at_ns"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        cmds,
        [
            ("apply", 0),
            ("agent", S),
            ("capture_start", S),
            ("down", 3 * S),
            ("up", 4 * S),
            ("stats", 6 * S),
            ("agent", 6 * S)
        ]
    );
    assert!(replies.iter().all(|x| x["ok"] == json!(true)));
    // The stats at 6 s ran before the stop but after the events at 6 s: the packet sent at
    // 6 s is still in flight (2 ms).
    assert_eq!(replies[5]["id"], json!("last"));
    assert_eq!(replies[5]["agents"]["s1"]["pkts"], json!(400 - 1));
    // Samples at 1..=7 s: before any traffic, during, after.
    let samples = r["samples"].as_array().unwrap();
    assert_eq!(
        samples
            .iter()
            .map(|x| x["t_ns"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        (1..=7).map(|k| k * S).collect::<Vec<_>>()
    );
    assert_eq!(samples[0]["agents"]["c1"]["sent_pkts"], json!(0), "the sample at 1 s comes after the start request; its first packet is due at 1 s, after the request ran");
    assert_eq!(samples[2]["agents"]["c1"]["sent_pkts"], json!(201));
    assert_eq!(samples[2]["agents"]["s1"]["pkts"], json!(200));
    assert_eq!(
        samples[3]["agents"]["s1"]["pkts"],
        json!(200),
        "nothing arrives while la is down"
    );
    assert!(r["events"].as_u64().unwrap() > 1000);
    assert!(r.get("realtime").is_none() && r["stats"].get("realtime").is_none());
    // Captured with virtual timestamps (epoch 0): the first data frame at 1 s + ARP + 2 ms.
    let cap = std::fs::read(&pcap).unwrap();
    assert_eq!(
        u32::from_ne_bytes(cap[0..4].try_into().unwrap()),
        0xa1b2_3c4d
    );
    let sec = u32::from_ne_bytes(cap[24..28].try_into().unwrap());
    assert_eq!(sec, 1);
    // Identical bytes on a second run (the capture, which is never overwritten, too).
    let first = std::fs::read(&pcap).unwrap();
    std::fs::remove_file(&pcap).unwrap();
    let (_, again) = ok(&d, "small", &small(&pcap));
    assert_eq!(bytes, again);
    assert_eq!(first, std::fs::read(&pcap).unwrap());
    // With an epoch, capture timestamps move; the result does not.
    std::fs::remove_file(&pcap).unwrap();
    let mut sc = small(&pcap);
    sc["epoch_ns"] = json!(1_700_000_000u64 * S);
    let (_, third) = ok(&d, "small", &sc);
    assert_eq!(bytes, third);
    let cap = std::fs::read(&pcap).unwrap();
    assert_eq!(
        u32::from_ne_bytes(cap[24..28].try_into().unwrap()),
        1_700_000_001
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn seeds_change_random_results_only() {
    let d = dir("seed");
    let mut sc = small(&d.join("x.pcap"));
    sc["requests"][0]["agents"][0] = json!({"agent": "c1", "host": "a", "kind": "poisson", "dst": "10.1.2.2:5000", "size": 100, "rate_bps": 80_000});
    // Captures never overwrite a file: each run gets the path anew.
    let (a, ab) = ok(&d, "a", &sc);
    std::fs::remove_file(d.join("x.pcap")).unwrap();
    let (_, ab2) = ok(&d, "a2", &sc);
    assert_eq!(ab, ab2);
    std::fs::remove_file(d.join("x.pcap")).unwrap();
    sc["seed"] = json!(2);
    let (b, _) = ok(&d, "b", &sc);
    assert_ne!(a["stats"]["agents"], b["stats"]["agents"]);
    assert_eq!(b["seed"], json!(2));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn errors_name_the_request_and_field() {
    let d = dir("errors");
    let base = small(&d.join("x.pcap"));
    let with = |f: &dyn Fn(&mut Value)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            with(&|s| s["requests"][3]["target"] = json!("nope")),
            "requests[3] (\"down\", at_ns 3000000000): target: no link or lan \"nope\"",
        ),
        (
            with(&|s| s["requests"][1]["actoin"] = json!("start")),
            "requests[1] (\"agent\"): actoin",
        ),
        (
            with(&|s| s["requests"][0]["links"][0]["ab"]["delay_us"] = json!(-1)),
            "requests[0] (\"apply\", at_ns 0): links[0] (\"la\").ab.delay_us",
        ),
        (
            with(&|s| s["requests"][2]["at_ns"] = json!(8 * S)),
            "requests[2].at_ns",
        ),
        (
            with(&|s| {
                s["requests"][2]
                    .as_object_mut()
                    .unwrap()
                    .remove("at_ns")
                    .map(|_| ())
                    .unwrap()
            }),
            "requests[2].at_ns: missing",
        ),
        (
            with(&|s| {
                s["requests"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"at_ns": 0, "cmd": "subscribe", "interval_ms": 100}))
            }),
            "requests[7].cmd: \"subscribe\"",
        ),
        (
            with(&|s| {
                s["requests"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"at_ns": 0, "cmd": "shutdown"}))
            }),
            "requests[7].cmd: \"shutdown\"",
        ),
        (with(&|s| s["until_nss"] = json!(1)), "until_nss"),
        (
            with(&|s| s["sample_interval_ns"] = json!(0)),
            "sample_interval_ns",
        ),
        (
            with(&|s| s["requests"][4]["cmd"] = json!("upp")),
            "requests[4] (\"upp\"): cmd: unknown command",
        ),
    ];
    for (i, (sc, want)) in cases.into_iter().enumerate() {
        let err = fail(&d, &format!("bad{i}"), &sc);
        assert!(err.contains(want), "case {i}: {err} (want {want})");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tap_ports_are_refused() {
    let d = dir("tap");
    let mut sc = small(&d.join("x.pcap"));
    sc["requests"][0]["ports"] = json!([{"port": "t1", "tap": "wlsim0"}]);
    let err = fail(&d, "tap", &sc);
    assert!(err.contains("requests[0] (\"apply\"): ports[0] (\"t1\").tap: TAP ports are not available in simulate mode"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `n` source hosts behind router r1, `n` sink hosts behind r2, a 1 Gbit/s backbone; each
/// source sends 1 Mbit/s of 1000-byte payloads for `secs` seconds.
fn big(n: usize, secs: u64) -> Value {
    let mac = |a: usize, b: usize| format!("02:00:00:{:02x}:{:02x}:{:02x}", a, b >> 8, b & 0xff);
    let (mut hosts, mut links, mut agents, mut if1, mut if2) =
        (vec![], vec![], vec![], vec![], vec![]);
    let edge = json!({"bandwidth_bps": 10_000_000, "delay_us": 2000});
    for i in 0..n {
        hosts.push(json!({"host": format!("s{i}"), "port": format!("s{i}-0"), "mac": mac(1, i), "ip": format!("10.1.{i}.2/24"), "gateway": format!("10.1.{i}.1")}));
        hosts.push(json!({"host": format!("d{i}"), "port": format!("d{i}-0"), "mac": mac(2, i), "ip": format!("10.2.{i}.2/24"), "gateway": format!("10.2.{i}.1")}));
        if1.push(
            json!({"port": format!("r1-{i}"), "mac": mac(3, i), "ip": format!("10.1.{i}.1/24")}),
        );
        if2.push(
            json!({"port": format!("r2-{i}"), "mac": mac(4, i), "ip": format!("10.2.{i}.1/24")}),
        );
        links.push(json!({"link": format!("ls{i}"), "a": format!("s{i}-0"), "b": format!("r1-{i}"), "ab": edge, "ba": edge}));
        links.push(json!({"link": format!("ld{i}"), "a": format!("r2-{i}"), "b": format!("d{i}-0"), "ab": edge, "ba": edge}));
        agents.push(json!({"agent": format!("c{i}"), "host": format!("s{i}"), "kind": "cbr", "dst": format!("10.2.{i}.2:5000"), "size": 1000, "rate_bps": 1_000_000}));
        agents.push(json!({"agent": format!("k{i}"), "host": format!("d{i}"), "kind": "sink", "port": 5000}));
    }
    if1.push(json!({"port": "r1-b", "mac": mac(3, 999), "ip": "10.0.0.1/30"}));
    if2.push(json!({"port": "r2-b", "mac": mac(4, 999), "ip": "10.0.0.2/30"}));
    let bb =
        json!({"bandwidth_bps": 1_000_000_000u64, "delay_us": 10_000, "queue": {"limit": 1000}});
    links.push(json!({"link": "bb", "a": "r1-b", "b": "r2-b", "ab": bb, "ba": bb}));
    let mut requests = vec![
        json!({"at_ns": 0, "cmd": "apply", "hosts": hosts, "links": links, "agents": agents,
        "routers": [{"router": "r1", "interfaces": if1, "routes": [{"dst": "10.2.0.0/16", "via": "10.0.0.2"}]},
                    {"router": "r2", "interfaces": if2, "routes": [{"dst": "10.1.0.0/16", "via": "10.0.0.1"}]}]}),
    ];
    for i in 0..n {
        requests.push(json!({"at_ns": i as u64 * 1_000_000, "cmd": "agent", "agent": format!("c{i}"), "action": "start"}));
        requests.push(
            json!({"at_ns": secs * S, "cmd": "agent", "agent": format!("c{i}"), "action": "stop"}),
        );
    }
    json!({"seed": 3, "until_ns": (secs + 1) * S, "sample_interval_ns": S, "requests": requests})
}

#[test]
fn bigger_scenario_event_rate() {
    let d = dir("big");
    let (r, _) = ok(&d, "big", &big(100, 10));
    let agents = r["stats"]["agents"].as_object().unwrap();
    let sent: u64 = (0..100)
        .map(|i| agents[&format!("c{i}")]["sent_pkts"].as_u64().unwrap())
        .sum();
    let recv: u64 = (0..100)
        .map(|i| agents[&format!("k{i}")]["pkts"].as_u64().unwrap())
        .sum();
    assert!(sent >= 100 * 1240, "{sent}");
    // No queue drops at 10 % load; only the first packets that waited for the routers'
    // ARP resolution beyond the 3-packet ARP queue (r1's backbone next hop takes 20 ms).
    let arp: u64 = ["r1", "r2"]
        .iter()
        .map(|x| {
            r["stats"]["routers"][x]["arp_queue_drops"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(arp < 100, "{arp}");
    assert_eq!(recv, sent - arp);
    eprintln!("big: {sent} packets, {} events", r["events"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// `n` pairs of simulated hosts, each pair alone on its 1 Mbit/s, 5 ms link, CBR from one to
/// the other's sink, started 1 ms apart.
fn isolated_pairs(n: usize) -> Value {
    let (mut hosts, mut links, mut agents, mut requests) = (vec![], vec![], vec![], vec![]);
    let l = json!({"bandwidth_bps": 1_000_000, "delay_us": 5000});
    for i in 0..n {
        let (s, d) = (format!("s{i}"), format!("d{i}"));
        hosts.push(json!({"host": s, "port": format!("{s}-0"), "mac": format!("02:00:00:01:00:{i:02x}"), "ip": format!("10.0.{i}.1/30")}));
        hosts.push(json!({"host": d, "port": format!("{d}-0"), "mac": format!("02:00:00:02:00:{i:02x}"), "ip": format!("10.0.{i}.2/30")}));
        links.push(json!({"link": format!("l{i}"), "a": format!("{s}-0"), "b": format!("{d}-0"), "ab": l, "ba": l}));
        agents.push(json!({"agent": format!("c{i}"), "host": s, "kind": "cbr", "dst": format!("10.0.{i}.2:5000"), "size": 500, "rate_bps": 200_000}));
        agents.push(json!({"agent": format!("k{i}"), "host": d, "kind": "sink", "port": 5000}));
        requests.push(json!({"at_ns": 1_000_000 * (i as u64 + 1), "cmd": "agent", "agent": format!("c{i}"), "action": "start"}));
    }
    requests.insert(
        0,
        json!({"at_ns": 0, "cmd": "apply", "hosts": hosts, "links": links, "agents": agents}),
    );
    json!({"seed": 5, "until_ns": 3 * S, "sample_interval_ns": S, "requests": requests})
}

#[test]
fn independent_parts_run_on_threads_of_their_own_with_the_bytes_of_one() {
    // No link joins two pairs: nothing is cut, the partitions need no synchronisation
    // (infinite lookahead) and must still run on the threads asked for.
    let d = dir("pairs");
    let mut results = Vec::new();
    for t in ["1", "2", "3"] {
        let (o, out) = run_with(&d, &format!("t{t}"), &isolated_pairs(8), &["--threads", t]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains(&format!(" {t} thread(s)")), "{err}");
        results.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
    let r: Value = serde_json::from_slice(&results[0]).unwrap();
    assert!(r["stats"]["agents"]["k7"]["pkts"].as_u64().unwrap() > 100);
}

/// a —1 ms— r1 —20 ms, 4 Mbit/s— r2 —15 ms, 3 Mbit/s— r3 —1 ms— b, overrun both ways by CBR
/// (1000-byte payloads at 5 and 4.5 Mbit/s) to the end, with full statistics every 7 ms.
fn busy_chain() -> Value {
    let ip = |n: &str, p: &str, m: u8, ip: &str| json!({"port": format!("{n}{p}"), "mac": format!("02:00:00:00:{m:02x}:00"), "ip": ip});
    let rt = |dst: &str, via: &str| json!({"dst": dst, "via": via});
    let edge = json!({"delay_us": 1000});
    let l1 = json!({"bandwidth_bps": 4_000_000, "delay_us": 20_000});
    let l2 = json!({"bandwidth_bps": 3_000_000, "delay_us": 15_000});
    json!({"seed": 2, "until_ns": S, "sample_interval_ns": 7_000_000, "requests": [
        {"at_ns": 0, "cmd": "apply",
         "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                   {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
         "routers": [
            {"router": "r1", "interfaces": [ip("r1", "a", 1, "10.1.1.1/24"), ip("r1", "b", 2, "10.0.1.1/30")],
             "routes": [rt("10.1.2.0/24", "10.0.1.2")]},
            {"router": "r2", "interfaces": [ip("r2", "a", 3, "10.0.1.2/30"), ip("r2", "b", 4, "10.0.2.1/30")],
             "routes": [rt("10.1.2.0/24", "10.0.2.2"), rt("10.1.1.0/24", "10.0.1.1")]},
            {"router": "r3", "interfaces": [ip("r3", "a", 5, "10.0.2.2/30"), ip("r3", "b", 6, "10.1.2.1/24")],
             "routes": [rt("10.1.1.0/24", "10.0.2.1")]}],
         "links": [{"link": "la", "a": "pa", "b": "r1a", "ab": edge, "ba": edge},
                   {"link": "l1", "a": "r1b", "b": "r2a", "ab": l1, "ba": l1},
                   {"link": "l2", "a": "r2b", "b": "r3a", "ab": l2, "ba": l2},
                   {"link": "lb", "a": "r3b", "b": "pb", "ab": edge, "ba": edge}],
         "agents": [{"agent": "ca", "host": "a", "kind": "cbr", "dst": "10.1.2.2:5000", "size": 1000, "rate_bps": 5_000_000},
                    {"agent": "ka", "host": "b", "kind": "sink", "port": 5000},
                    {"agent": "cb", "host": "b", "kind": "cbr", "dst": "10.1.1.2:5000", "size": 1000, "rate_bps": 4_500_000},
                    {"agent": "kb", "host": "a", "kind": "sink", "port": 5000}]},
        {"at_ns": 100_000_000, "cmd": "agent", "agent": "ca", "action": "start"},
        {"at_ns": 100_000_000, "cmd": "agent", "agent": "cb", "action": "start"}
    ]})
}

#[test]
fn statistics_of_busy_cut_links_are_the_same_on_1_2_and_3_threads() {
    // A direction run by one thread records a frame's queueing delay when next looked at;
    // one cut between threads records it when the frame starts: every sample, taken while
    // the long links' queues are full, must count the same frames either way.
    let d = dir("busy-chain");
    let mut results = Vec::new();
    for t in ["1", "2", "3"] {
        let (o, out) = run_with(&d, &format!("t{t}"), &busy_chain(), &["--threads", t]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains(&format!(" {t} thread(s)")), "{err}");
        results.push(std::fs::read(&out).unwrap());
    }
    let r: Value = serde_json::from_slice(&results[0]).unwrap();
    for (l, dir) in [("l1", "ab"), ("l2", "ab"), ("l2", "ba")] {
        let s = &r["stats"]["links"][l][dir];
        assert!(s["drop_queue"].as_u64().unwrap() > 0, "{l} {dir}: {s}");
        assert!(
            s["sojourn"]["count"].as_u64().unwrap() > 100,
            "{l} {dir}: {s}"
        );
    }
    assert!(r["samples"].as_array().unwrap().len() > 100);
    assert!(results[0] == results[1], "1 and 2 threads differ");
    assert!(results[0] == results[2], "1 and 3 threads differ");
    let _ = std::fs::remove_dir_all(&d);
}
