//! Ports moved between the real-time engine's partitions at run time (`driver/fanout.rs`,
//! `driver/allocator.rs`): the real binary with two partitions, real TAPs in network
//! namespaces this test creates (deleted at the end, even on failure). Needs root and `ip`;
//! skipped (with a message) otherwise.
//!
//! * `move_port` moves a port while a paced UDP stream with bursts (so frames wait in the
//!   link's queue and in its delay line at the moment of the move) crosses it: every
//!   datagram arrives, in order, and the link counts no drop.
//! * The allocator moves a port by itself off a partition that a simulated source keeps
//!   saturated, to the idle one, and says so in its log; traffic goes on through the port.

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Engine {
    child: Child,
    dir: PathBuf,
    namespaces: Vec<String>,
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Drop for Engine {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("engine log:\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Engine {
    fn start(name: &str) -> Engine {
        Engine::start_with(name, &[])
    }

    /// With `extra` arguments after `--threads 2` (a later `--threads` wins).
    fn start_with(name: &str, extra: &[&str]) -> Engine {
        let dir = std::env::temp_dir().join(format!("wl-mv-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("engine.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
            .args([
                "--socket",
                sock.to_str().unwrap(),
                "--threads",
                "2",
                "--log",
                dir.join("engine.log").to_str().unwrap(),
            ])
            .args(extra)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let s = loop {
            if let Ok(s) = UnixStream::connect(&sock) {
                break s;
            }
            assert!(Instant::now() < deadline, "engine socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        };
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Engine {
            child,
            dir,
            namespaces: Vec::new(),
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn raw(&mut self, v: Value) -> Value {
        self.w.write_all(format!("{v}\n").as_bytes()).unwrap();
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad reply {l:?}: {e}"))
    }

    fn req(&mut self, v: Value) -> Value {
        let r = self.raw(v.clone());
        assert_eq!(r["ok"], json!(true), "request {v} failed: {r}");
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("engine.log")).unwrap_or_default()
    }

    /// Partition of each port, from `stats`.
    fn owner(&mut self) -> std::collections::HashMap<String, u64> {
        let s = self.req(json!({"cmd": "stats"}));
        let mut out = std::collections::HashMap::new();
        for p in s["partitions"].as_array().unwrap() {
            for port in p["ports"].as_array().unwrap() {
                out.insert(
                    port.as_str().unwrap().to_string(),
                    p["partition"].as_u64().unwrap(),
                );
            }
        }
        out
    }

    /// A namespace holding TAP `tap` with address `addr`/24.
    fn namespace(&mut self, ns: &str, tap: &str, addr: &str) {
        sh(&["ip", "netns", "add", ns]);
        self.namespaces.push(ns.to_string());
        sh(&["ip", "link", "set", tap, "netns", ns]);
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            tap,
        ]);
        sh(&["ip", "-n", ns, "link", "set", tap, "up"]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !root || !ip {
        eprintln!("skipping: needs root and ip");
    }
    root && ip
}

/// Each side knows the other's MAC: no ARP traffic in the stream.
fn neighbours(ns_a: &str, tap_a: &str, ip_a: &str, ns_b: &str, tap_b: &str, ip_b: &str) {
    let mac = |ns: &str, tap: &str| {
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{tap}/address"),
        ])
        .trim()
        .to_string()
    };
    let (ma, mb) = (mac(ns_a, tap_a), mac(ns_b, tap_b));
    sh(&[
        "ip",
        "-n",
        ns_a,
        "neigh",
        "replace",
        ip_b,
        "lladdr",
        &mb,
        "dev",
        tap_a,
        "nud",
        "permanent",
    ]);
    sh(&[
        "ip",
        "-n",
        ns_b,
        "neigh",
        "replace",
        ip_a,
        "lladdr",
        &ma,
        "dev",
        tap_b,
        "nud",
        "permanent",
    ]);
}

/// Run `f` on a thread inside network namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        // SAFETY: setns with a valid namespace fd changes only this thread's namespace.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Receive numbered datagrams on `addr` until `n` came or nothing came for 3 s.
fn receiver(ns: &str, addr: &'static str, n: u32) -> std::thread::JoinHandle<Vec<u32>> {
    in_ns(ns, move || {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < n as usize {
            match s.recv(&mut buf) {
                Ok(k) if k >= 4 => got.push(u32::from_be_bytes(buf[..4].try_into().unwrap())),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        got
    })
}

/// Send `n` numbered 100-byte datagrams to `to`, in bursts of 10 every 10 ms.
fn sender(ns: &str, to: &'static str, n: u32) -> std::thread::JoinHandle<()> {
    in_ns(ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let t0 = Instant::now();
        for i in 0..n {
            if i % 10 == 0 {
                let due = t0 + Duration::from_millis(u64::from(i));
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
            }
            let mut d = [0u8; 100];
            d[..4].copy_from_slice(&i.to_be_bytes());
            s.send_to(&d, to).unwrap();
        }
    })
}

#[test]
fn a_port_moved_at_run_time_loses_and_reorders_nothing() {
    if !can_run() {
        return;
    }
    let mut e = Engine::start("explicit");
    let pid = std::process::id();
    let (ta, tb, tc, td) = (
        format!("wm{pid}a"),
        format!("wm{pid}b"),
        format!("wm{pid}c"),
        format!("wm{pid}d"),
    );
    // l1: 2 Mbit/s and 2 ms: a burst of ten 142-byte frames queues for ~5 ms, so frames are
    // queued, being sent and in flight whenever the port moves.
    e.req(json!({"cmd": "apply",
        "ports": [{"port": "a", "tap": ta}, {"port": "b", "tap": tb},
                  {"port": "c", "tap": tc}, {"port": "d", "tap": td}],
        "links": [
            {"link": "l1", "a": "a", "b": "b",
             "ab": {"bandwidth_bps": 2_000_000, "delay_us": 2000}, "ba": {"delay_us": 2000}},
            {"link": "l2", "a": "c", "b": "d", "ab": {"delay_us": 1000}, "ba": {"delay_us": 1000}}]}));
    let (na, nb) = (format!("wm{pid}-a"), format!("wm{pid}-b"));
    e.namespace(&na, &ta, "10.233.1.1");
    e.namespace(&nb, &tb, "10.233.1.2");
    neighbours(&na, &ta, "10.233.1.1", &nb, &tb, "10.233.1.2");
    let before = e.owner();
    assert_eq!((before["a"], before["b"]), (0, 1), "{before:?}");

    // Refused moves say why.
    for (req, want) in [
        (
            json!({"cmd": "move_port", "port": "zz", "partition": 1}),
            "no such port",
        ),
        (
            json!({"cmd": "move_port", "port": "a", "partition": 2}),
            "must be below 2",
        ),
        (
            json!({"cmd": "move_port", "port": "a", "partition": 0}),
            "already",
        ),
    ] {
        let r = e.raw(req.clone());
        let err = r["error"].as_str().unwrap_or_default();
        assert!(r["ok"] == json!(false) && err.contains(want), "{req}: {r}");
    }

    const N: u32 = 3000;
    let rx = receiver(&nb, "10.233.1.2:9000", N);
    std::thread::sleep(Duration::from_millis(100));
    let tx = sender(&na, "10.233.1.2:9000", N);
    // a from the first partition to the second, b from the second to the first, a back:
    // each while the stream runs.
    let mut moved = Vec::new();
    for (port, to) in [("a", 1), ("b", 0), ("a", 0)] {
        std::thread::sleep(Duration::from_millis(700));
        let r = e.req(json!({"cmd": "move_port", "port": port, "partition": to}));
        assert_eq!(r["to"], json!(to), "{r}");
        assert!(r["pipelines"].as_u64().unwrap() >= 1, "{r}");
        moved.push(r);
    }
    tx.join().unwrap();
    let got = rx.join().unwrap();
    let missing = N as usize - got.len();
    let out_of_order = got.windows(2).filter(|w| w[1] <= w[0]).count();
    assert!(
        missing == 0 && out_of_order == 0,
        "{missing} datagrams lost, {out_of_order} out of order; moves {moved:?}"
    );
    assert_eq!(got, (0..N).collect::<Vec<u32>>());
    let s = e.req(json!({"cmd": "stats", "target": "l1"}));
    let ab = &s["links"]["l1"]["ab"];
    assert!(ab["out_pkts"].as_u64().unwrap() >= u64::from(N), "{s}");
    assert_eq!(ab["in_pkts"], ab["out_pkts"], "{s}");
    assert_eq!(ab["drop_queue"], json!(0), "{s}");
    assert!(
        ab["peak_qlen_pkts"].as_u64().unwrap() >= 2,
        "the bursts queued: {s}"
    );
    let after = e.owner();
    assert_eq!((after["a"], after["b"]), (0, 0), "{after:?}");
    // Every frame a link delivered to a TAP had its departure measured by the partition that
    // wrote it, and the merged stats hold them all.
    let s = e.req(json!({"cmd": "stats"}));
    let written: u64 = ["l1", "l2"]
        .iter()
        .flat_map(|l| ["ab", "ba"].map(|d| s["links"][l][d]["out_pkts"].as_u64().unwrap()))
        .sum();
    let dep = &s["realtime"]["departure"];
    assert!(written >= u64::from(N), "{s}");
    assert_eq!(dep["count"].as_u64(), Some(written), "{dep}");
    assert!(dep["p50_us"].as_f64() <= dep["max_us"].as_f64(), "{dep}");
    let log = e.log();
    assert!(
        log.contains("port a moved from partition 0") && log.contains("port b moved"),
        "{log}"
    );
}

/// A simulated chain (host, router, host) whose source sends with `params`: at 100 Gbit/s
/// of 16-byte packets no engine keeps up (the shape of `realtime_behind.rs`).
fn chain(p: &str, net: u8, params: Value) -> Value {
    let mut src = params;
    src["agent"] = json!(format!("{p}src"));
    src["host"] = json!(format!("{p}a"));
    src["kind"] = json!("cbr");
    src["dst"] = json!(format!("10.{net}.2.2:5000"));
    let la = json!({"bandwidth_bps": 1_000_000_000u64, "queue": {"limit": 100}});
    json!({"cmd": "apply",
        "hosts": [{"host": format!("{p}a"), "port": format!("{p}pa"), "mac": format!("02:00:00:00:{net:02x}:0a"), "ip": format!("10.{net}.1.2/24"), "gateway": format!("10.{net}.1.1")},
                  {"host": format!("{p}b"), "port": format!("{p}pb"), "mac": format!("02:00:00:00:{net:02x}:0b"), "ip": format!("10.{net}.2.2/24"), "gateway": format!("10.{net}.2.1")}],
        "routers": [{"router": format!("{p}r"), "interfaces": [
            {"port": format!("{p}r0"), "mac": format!("02:00:00:{net:02x}:01:00"), "ip": format!("10.{net}.1.1/24")},
            {"port": format!("{p}r1"), "mac": format!("02:00:00:{net:02x}:01:01"), "ip": format!("10.{net}.2.1/24")}]}],
        "links": [{"link": format!("{p}la"), "a": format!("{p}pa"), "b": format!("{p}r0"), "ab": la, "ba": la},
                  {"link": format!("{p}lb"), "a": format!("{p}r1"), "b": format!("{p}pb"), "ab": {"delay_us": 100}, "ba": {"delay_us": 100}}],
        "agents": [src, {"agent": format!("{p}sink"), "host": format!("{p}b"), "kind": "sink", "port": 5000}]})
}

#[test]
fn the_allocator_moves_a_port_off_a_saturated_partition() {
    if !can_run() {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipping: needs two CPUs (partitions on one core do not move ports)");
        return;
    }
    let mut e = Engine::start("auto");
    // Two simulated chains of equal weight: one per partition (the calm one, first by
    // name, on partition 0; the hot one on 1).
    let hot = chain("h", 1, json!({"size": 16, "rate_bps": 100_000_000_000u64}));
    let calm = chain("c", 2, json!({"size": 100, "interval_us": 10_000}));
    let mut both = hot.clone();
    for k in ["hosts", "routers", "links", "agents"] {
        let extra = calm[k].as_array().unwrap().clone();
        both[k].as_array_mut().unwrap().extend(extra);
    }
    e.req(both);
    let pid = std::process::id();
    let taps: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|p| format!("wn{pid}{p}"))
        .collect();
    e.req(json!({"cmd": "apply",
        "ports": [{"port": "a", "tap": taps[0]}, {"port": "b", "tap": taps[1]},
                  {"port": "c", "tap": taps[2]}, {"port": "d", "tap": taps[3]}],
        "links": [{"link": "l1", "a": "a", "b": "b"}, {"link": "l2", "a": "c", "b": "d"}]}));
    let start = e.owner();
    // Traffic both ways on both links: each port carries frames.
    let nss: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|p| format!("wn{pid}-{p}"))
        .collect();
    let ips = ["10.234.1.1", "10.234.1.2", "10.234.2.1", "10.234.2.2"];
    for k in 0..4 {
        e.namespace(&nss[k], &taps[k], ips[k]);
    }
    neighbours(&nss[0], &taps[0], ips[0], &nss[1], &taps[1], ips[1]);
    neighbours(&nss[2], &taps[2], ips[2], &nss[3], &taps[3], ips[3]);
    e.req(json!({"cmd": "agent", "agent": "csrc", "action": "start"}));
    e.req(json!({"cmd": "agent", "agent": "hsrc", "action": "start"}));
    let pings: Vec<Child> = [(0, 1), (1, 0), (2, 3), (3, 2)]
        .iter()
        .map(|&(from, to)| {
            Command::new("ip")
                .args([
                    "netns", "exec", &nss[from], "ping", "-q", "-i", "0.01", "-w", "12", ips[to],
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now_at = start.clone();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        now_at = e.owner();
        if now_at != start {
            break;
        }
    }
    // The saturated partition is the one whose timers are late (seconds behind).
    let s = e.req(json!({"cmd": "stats"}));
    let parts = s["partitions"].as_array().unwrap().clone();
    let late = |p: &Value| p["max_late_us"].as_f64().unwrap_or(0.0);
    let hot_part = parts
        .iter()
        .max_by(|a, b| late(a).total_cmp(&late(b)))
        .map(|p| p["partition"].as_u64().unwrap())
        .unwrap();
    e.req(json!({"cmd": "agent", "agent": "hsrc", "action": "stop"}));
    for mut p in pings {
        let _ = p.kill();
        let _ = p.wait();
    }
    let log = e.log();
    let moved: Vec<&String> = start.keys().filter(|p| start[*p] != now_at[*p]).collect();
    assert_eq!(
        moved.len(),
        1,
        "one port moved: {start:?} -> {now_at:?}\n{log}"
    );
    let p = moved[0];
    assert_eq!(
        start[p], hot_part,
        "it left the saturated partition: {parts:?}\n{log}"
    );
    assert!(
        log.contains(&format!("port {p} moved from partition {hot_part}")) && log.contains("busy"),
        "{log}"
    );
    // Frames still cross the moved port's link (both ends answer).
    let (k, other) = match p.as_str() {
        "a" => (0, 1),
        "b" => (1, 0),
        "c" => (2, 3),
        _ => (3, 2),
    };
    let out = Command::new("ip")
        .args([
            "netns", "exec", &nss[k], "ping", "-c", "3", "-i", "0.2", "-W", "2", ips[other],
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn cpus_confine_the_engine_and_pin_even_one_partition() {
    if !can_run() {
        return;
    }
    let mut allowed = Vec::new();
    for l in std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
    {
        if let Some(v) = l.strip_prefix("Cpus_allowed_list:") {
            allowed = wanlab_engine::driver::allocator::parse_cpulist(v.trim()).unwrap();
        }
    }
    let last = allowed.last().unwrap().to_string();
    let mut e = Engine::start_with("cpus", &["--threads", "1", "--cpus", &last]);
    let s = e.req(json!({"cmd": "stats"}));
    let parts = s["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 1, "{s}");
    assert_eq!(parts[0]["core"].to_string(), last, "{s}");
    // every thread of the process (the control thread too) stays on that CPU
    let pid = e.child.id();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let st = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        let line = st
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap();
        assert_eq!(line.split_whitespace().last(), Some(last.as_str()), "{st}");
    }
    // a CPU list it may not use, or not a list: a clear error at start
    let outside = (allowed.last().unwrap() + 1).to_string();
    for (bad, want) in [
        ("99999", "not a CPU list"),
        ("x", "not a CPU list"),
        (outside.as_str(), "not among the CPUs"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
            .args(["--socket", "/nonexistent/s", "--cpus", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{bad}: {err}");
    }
}
