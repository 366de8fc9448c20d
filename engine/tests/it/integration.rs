//! End-to-end: the real binary, two TAPs in two network namespaces this test creates, ping
//! through a 10 ms link, carrier on down, a capture file. Needs root, `ip` and `ping`;
//! skipped (with a message) otherwise. Only namespaces created here carry traffic, and they are
//! deleted at the end even on failure.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Fixture {
    engine: Child,
    namespaces: Vec<String>,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.engine.kill();
        let _ = self.engine.wait();
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn connect(path: &PathBuf) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = UnixStream::connect(path) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return Client {
                    r: BufReader::new(s.try_clone().unwrap()),
                    w: s,
                };
            }
            assert!(Instant::now() < deadline, "engine socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn line(&mut self) -> Value {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad reply {l:?}: {e}"))
    }
    fn raw(&mut self, line: &str) -> Value {
        self.w.write_all(line.as_bytes()).unwrap();
        self.w.write_all(b"\n").unwrap();
        loop {
            let v = self.line();
            if v.get("event").is_none() {
                return v;
            }
        }
    }
    fn req(&mut self, v: Value) -> Value {
        let r = self.raw(&v.to_string());
        assert_eq!(r["ok"], json!(true), "request {v} failed: {r}");
        r
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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

/// The minimum RTT of `count` pings: the floor the link's delay sets (a loaded machine
/// only adds to single samples, so the average is no measure of the engine).
fn ping_min_ms(ns: &str, dst: &str, count: u32) -> f64 {
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "ping",
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        "-W",
        "2",
        dst,
    ]);
    // "rtt min/avg/max/mdev = 20.1/20.2/20.4/0.1 ms"
    let line = out
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .unwrap_or_else(|| panic!("no rtt in {out}"));
    let nums = line
        .split('=')
        .nth(1)
        .unwrap()
        .trim()
        .split('/')
        .collect::<Vec<_>>();
    nums[0].parse().unwrap()
}

#[test]
fn two_namespaces_through_a_10ms_link() {
    ten_ms_link(1);
}

/// The same with two partitions: each end's port on its own thread (pinned), each direction
/// of the link run by the thread that reads its sending port, captures shared.
#[test]
fn two_namespaces_through_a_10ms_link_on_two_threads() {
    ten_ms_link(2);
}

fn ten_ms_link(threads: u32) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") {
        eprintln!("skipping: needs root and ip");
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !have("ping") {
        assert!(Instant::now() < deadline, "ping never appeared");
        std::thread::sleep(Duration::from_secs(1));
    }
    let pid = format!("{}{threads}", std::process::id());
    let dir = std::env::temp_dir().join(format!("wlt-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let engine = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args([
            "--socket",
            sock.to_str().unwrap(),
            "--threads",
            &threads.to_string(),
            "--seed",
            "7",
            "--log",
            dir.join("engine.log").to_str().unwrap(),
            "--capture-dir",
            dir.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let (nsa, nsb) = (format!("wlt-{pid}-a"), format!("wlt-{pid}-b"));
    let mut fx = Fixture {
        engine,
        namespaces: vec![],
        dir: dir.clone(),
    };
    let mut c = Client::connect(&sock);

    let hello = c.req(json!({"id": "h", "cmd": "hello"}));
    assert_eq!(hello["protocol"], json!(1));
    assert_eq!(hello["id"], json!("h"));

    // Bad requests get errors and the connection stays usable.
    let bad = c.raw("{not json");
    assert_eq!(bad["ok"], json!(false));
    let bad = c.raw(r#"{"id":2,"cmd":"apply","links":[{"link":"x","a":"nope","b":"nope2"}]}"#);
    assert!(bad["error"].as_str().unwrap().contains("nope"), "{bad}");

    let (ta, tb) = (format!("wlt{pid}a"), format!("wlt{pid}b"));
    let r = c.req(json!({"id": 3, "cmd": "apply",
        "ports": [{"port": "a", "tap": ta}, {"port": "b", "tap": tb}],
        "links": [{"link": "l", "a": "a", "b": "b", "ab": {"delay_us": 10000}, "ba": {"delay_us": 10000}}]}));
    assert!(r["ports"]["a"]["ifindex"].as_u64().unwrap() > 0);

    for (ns, tap, addr) in [(&nsa, &ta, "10.231.0.1/24"), (&nsb, &tb, "10.231.0.2/24")] {
        sh(&["ip", "netns", "add", ns]);
        fx.namespaces.push(ns.clone());
        sh(&["ip", "link", "set", tap, "netns", ns]);
        sh(&["ip", "-n", ns, "addr", "add", addr, "dev", tap]);
        sh(&["ip", "-n", ns, "link", "set", tap, "up"]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }

    // The TAPs carry frames as soon as `apply` answered, with no further request to wake
    // the engine (its sliced apply once left them out of the epoll set until then).
    // A reply at all proves it (the bug left ping unanswered); the link's 20 ms RTT is a
    // lower bound the engine keeps, the upper bound is loose because load delays ARP too.
    let first = ping_min_ms(&nsa, "10.231.0.2", 1);
    assert!((19.9..1000.0).contains(&first), "first ping {first} ms");

    let pcap = dir.join("ab.pcap");
    c.req(
        json!({"cmd": "capture_start", "target": "l", "dir": "ab", "path": pcap.to_str().unwrap()}),
    );
    // Captures never overwrite a file and stay inside --capture-dir.
    for (path, want) in [
        ("ab.pcap", "already exists"),
        ("engine.log", "already exists"),
        ("../escape.pcap", "no \"..\""),
        ("/tmp/escape.pcap", "outside the capture directory"),
    ] {
        let r = c.raw(
            &json!({"cmd": "capture_start", "target": "l", "dir": "ba", "path": path}).to_string(),
        );
        let e = r["error"].as_str().unwrap_or_default();
        assert!(e.starts_with("path: ") && e.contains(want), "{path}: {r}");
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    }
    c.req(json!({"cmd": "subscribe", "interval_ms": 50}));

    // First ping resolves ARP; then RTT ≈ 2 × 10 ms.
    let _ = ping_min_ms(&nsa, "10.231.0.2", 1);
    let min = ping_min_ms(&nsa, "10.231.0.2", 5);
    // The engine guarantees the lower bound; the upper one must hold on a loaded host too
    // (a load of 49 on 2 cores saw 23.3 ms): how close to 20 ms is bench/fidelity.py's.
    assert!((19.9..35.0).contains(&min), "rtt min {min} ms");

    c.req(json!({"cmd": "capture_snapshot"}));
    let bytes = std::fs::read(&pcap).unwrap();
    assert!(bytes.len() > 24 + 16);
    assert_eq!(
        u32::from_ne_bytes(bytes[..4].try_into().unwrap()),
        0xa1b2_c3d4
    );

    // A subscription event arrived meanwhile.
    let ev = c.line();
    assert_eq!(ev["event"], json!("stats"), "{ev}");

    let carrier = |ns: &str, tap: &str| {
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{tap}/carrier"),
        ])
        .trim()
        .to_string()
    };
    assert_eq!(carrier(&nsa, &ta), "1");
    c.req(json!({"cmd": "down", "target": "l"}));
    assert_eq!(carrier(&nsa, &ta), "0");
    assert_eq!(carrier(&nsb, &tb), "0");
    c.req(json!({"cmd": "up", "target": "l"}));
    assert_eq!(carrier(&nsa, &ta), "1");

    // Run-time change: 30 ms one way.
    c.req(json!({"cmd": "set", "target": "l", "dir": "ab", "params": {"delay_us": 30000}}));
    // Carrier loss flushed the neighbour cache: the first ping resolves ARP again.
    let _ = ping_min_ms(&nsa, "10.231.0.2", 1);
    let min = ping_min_ms(&nsa, "10.231.0.2", 3);
    assert!((39.9..55.0).contains(&min), "rtt min after set {min} ms");

    let s = c.req(json!({"cmd": "stats", "target": "l"}));
    assert!(
        s["links"]["l"]["ab"]["out_pkts"].as_u64().unwrap() >= 9,
        "{s}"
    );
    // Both directions counted (each may run on another partition: the merge adds them).
    assert!(
        s["links"]["l"]["ba"]["out_pkts"].as_u64().unwrap() >= 9,
        "{s}"
    );
    let parts = s["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), threads as usize, "{s}");
    if threads == 2 {
        // The two ports of the link are read by different partitions.
        assert_eq!(parts[0]["ports"].as_array().unwrap().len(), 1, "{s}");
        assert_eq!(parts[1]["ports"].as_array().unwrap().len(), 1, "{s}");
        assert!(s["realtime"]["timer_events"].as_u64().unwrap() > 0, "{s}");
    }

    c.req(json!({"cmd": "shutdown"}));
    let t0 = Instant::now();
    loop {
        if let Some(st) = fx.engine.try_wait().unwrap() {
            assert!(st.success());
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "engine did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!sock.exists(), "socket file left behind");
    // The TAPs went away with the engine.
    let links = sh(&["ip", "-n", &nsa, "link"]);
    assert!(!links.contains(&ta), "{links}");
}

/// SO_PEERCRED: a root client in another network namespace (as a node's program is) is
/// refused with a logged reason; the host's client is served.
#[test]
fn clients_in_other_network_namespaces_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") || !have("python3") {
        eprintln!("skipping: needs root, ip and python3");
        return;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("wlt-peer-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let log = dir.join("engine.log");
    let engine = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args([
            "--socket",
            sock.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let ns = format!("wlt-{pid}-peer");
    let mut fx = Fixture {
        engine,
        namespaces: vec![],
        dir: dir.clone(),
    };
    let mut c = Client::connect(&sock);
    c.req(json!({"cmd": "hello"}));
    sh(&["ip", "netns", "add", &ns]);
    fx.namespaces.push(ns.clone());
    // Connect from the namespace and print whatever comes back (nothing: closed).
    let script = "import socket,sys\n\
s=socket.socket(socket.AF_UNIX)\n\
s.connect(sys.argv[1])\n\
s.settimeout(5)\n\
try:\n    s.sendall(b'{\"cmd\":\"down\",\"target\":\"x\"}\\n')\nexcept OSError:\n    pass\n\
try:\n    print(repr(s.recv(4096)))\nexcept OSError as e:\n    print('error', e)\n";
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "python3",
        "-c",
        script,
        sock.to_str().unwrap(),
    ]);
    assert!(
        out.trim() == "b''" || out.contains("error"),
        "a client in {ns} got an answer: {out}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("refused a control connection") && text.contains("another network namespace"),
        "{text}"
    );
    // The host's client is still served.
    c.req(json!({"cmd": "hello"}));
    // Without --capture-dir, captures are refused with the reason.
    let r = c.raw(r#"{"cmd":"capture_start","target":"x","dir":"ab","path":"x.pcap"}"#);
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .starts_with("path: captures are disabled"),
        "{r}"
    );
    c.req(json!({"cmd": "shutdown"}));
    let _ = fx.engine.wait();
}

/// The queueing-delay distribution: pings sent faster than a 1 Mbit/s direction serializes
/// them wait in its queue (p99 well above 0), while the answers on the 100 Mbit/s direction,
/// spaced by the slow one, never wait (p99 ~0). The timer lateness distribution is reported.
#[test]
fn a_queue_build_up_shows_in_the_sojourn_distribution() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") || !have("ping") {
        eprintln!("skipping: needs root, ip and ping");
        return;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("wlq-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let engine = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args(["--socket", sock.to_str().unwrap()])
        .args(["--log", dir.join("engine.log").to_str().unwrap()])
        .spawn()
        .unwrap();
    let (nsa, nsb) = (format!("wlq-{pid}-a"), format!("wlq-{pid}-b"));
    let mut fx = Fixture {
        engine,
        namespaces: vec![],
        dir: dir.clone(),
    };
    let mut c = Client::connect(&sock);
    let (ta, tb) = (format!("wlq{pid}a"), format!("wlq{pid}b"));
    c.req(json!({"cmd": "apply",
        "ports": [{"port": "a", "tap": ta}, {"port": "b", "tap": tb}],
        "links": [{"link": "l", "a": "a", "b": "b",
                   "ab": {"bandwidth_bps": 1_000_000, "queue": {"kind": "droptail", "limit": 100}},
                   "ba": {"bandwidth_bps": 100_000_000}}]}));
    for (ns, tap, addr) in [(&nsa, &ta, "10.232.0.1/24"), (&nsb, &tb, "10.232.0.2/24")] {
        sh(&["ip", "netns", "add", ns]);
        fx.namespaces.push(ns.clone());
        sh(&["ip", "link", "set", tap, "netns", ns]);
        sh(&["ip", "-n", ns, "addr", "add", addr, "dev", tap]);
        sh(&["ip", "-n", ns, "link", "set", tap, "up"]);
    }
    // ARP first, then 10 pings of 1442-byte frames sent at once (preload): each takes 11.5 ms
    // to serialize at 1 Mbit/s, so the 10th waits ~100 ms.
    let _ = ping_min_ms(&nsa, "10.232.0.2", 1);
    let _ = sh(&[
        "ip",
        "netns",
        "exec",
        &nsa,
        "ping",
        "-c",
        "10",
        "-i",
        "0.002",
        "-s",
        "1400",
        "-W",
        "3",
        "10.232.0.2",
    ]);
    let s = c.req(json!({"cmd": "stats"}));
    let ab = &s["links"]["l"]["ab"]["sojourn"];
    let ba = &s["links"]["l"]["ba"]["sojourn"];
    assert!(ab["count"].as_u64().unwrap() >= 11, "{ab}");
    // However ping spaces its sends, frames wait behind one another's 11.5 ms: at least
    // hundreds of µs for the slowest.
    assert!(ab["p99_us"].as_f64().unwrap() > 500.0, "{ab}");
    assert!(ab["max_us"].as_f64().unwrap() > 500.0, "{ab}");
    assert!(ba["count"].as_u64().unwrap() >= 11, "{ba}");
    assert!(ba["p99_us"].as_f64().unwrap() < 1_000.0, "{ba}");
    let late = &s["realtime"]["lateness"];
    assert!(late["count"].as_u64().unwrap() > 0, "{s}");
    assert!(late["p50_us"].as_f64().is_some(), "{s}");
    c.req(json!({"cmd": "shutdown"}));
    let _ = fx.engine.wait();
}

/// Ping from a to b over a link whose a→b direction runs at `ab_bps` (100-frame queue at
/// 1 Mbit/s, 1000 otherwise) and b→a at least 100 Mbit/s (10 ms each way); returns the
/// engine's stats and ping's output.
fn ping_behind_a_queue(ab_bps: u64, ping: &[&str]) -> (Value, String) {
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("wld-{pid}-{ab_bps}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let engine = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args(["--socket", sock.to_str().unwrap()])
        .args(["--log", dir.join("engine.log").to_str().unwrap()])
        .spawn()
        .unwrap();
    let tag = if ab_bps == 1_000_000 { "d" } else { "e" };
    let (nsa, nsb) = (format!("wl{tag}-{pid}-a"), format!("wl{tag}-{pid}-b"));
    let mut fx = Fixture {
        engine,
        namespaces: vec![],
        dir: dir.clone(),
    };
    let mut c = Client::connect(&sock);
    let (ta, tb) = (format!("wl{tag}{pid}a"), format!("wl{tag}{pid}b"));
    let limit = if ab_bps == 1_000_000 { 100 } else { 1000 };
    c.req(json!({"cmd": "apply",
        "ports": [{"port": "a", "tap": ta}, {"port": "b", "tap": tb}],
        "links": [{"link": "l", "a": "a", "b": "b",
                   "ab": {"bandwidth_bps": ab_bps, "delay_us": 10_000,
                          "queue": {"kind": "droptail", "limit": limit}},
                   "ba": {"bandwidth_bps": ab_bps.max(100_000_000), "delay_us": 10_000}}]}));
    for (ns, tap, addr) in [(&nsa, &ta, "10.233.0.1/24"), (&nsb, &tb, "10.233.0.2/24")] {
        sh(&["ip", "netns", "add", ns]);
        fx.namespaces.push(ns.clone());
        sh(&["ip", "link", "set", tap, "netns", ns]);
        sh(&["ip", "-n", ns, "addr", "add", addr, "dev", tap]);
        sh(&["ip", "-n", ns, "link", "set", tap, "up"]);
    }
    let _ = ping_min_ms(&nsa, "10.233.0.2", 1);
    let mut args = vec!["ip", "netns", "exec", &nsa, "ping"];
    args.extend_from_slice(ping);
    args.push("10.233.0.2");
    let out = sh(&args);
    let s = c.req(json!({"cmd": "stats"}));
    c.req(json!({"cmd": "shutdown"}));
    let _ = fx.engine.wait();
    (s, out)
}

/// A port whose link direction holds a long queue is read without wake-ups of its own
/// (`driver/defer.rs`): its frames are read late and none is lost.
#[test]
fn a_port_behind_a_long_queue_is_read_without_wake_ups_of_its_own() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") || !have("ping") {
        eprintln!("skipping: needs root, ip and ping");
        return;
    }
    // 20 echo requests of 1442-byte frames 2 ms apart: each takes 11.5 ms on the wire, so
    // from the second on they queue and port a's direction stays busy for far more than 2 ms.
    let ping = ["-c", "20", "-i", "0.002", "-s", "1400", "-W", "5"];
    let (s, out) = ping_behind_a_queue(1_000_000, &ping);
    let rt = &s["realtime"];
    assert!(rt["deferred_reads"].as_u64().unwrap() >= 5, "{rt}\n{out}");
    let ab = &s["links"]["l"]["ab"];
    assert_eq!(ab["drop_queue"], json!(0), "{ab}");
    let replies = out.lines().filter(|l| l.contains("time=")).count();
    assert_eq!(replies, 20, "{out}");
    // none lost: what went in came out, but for the namespace's own background frames (IPv6
    // solicitations, ARP) of which one may still be on the wire when the stats are read
    let (inp, outp) = (
        ab["in_pkts"].as_u64().unwrap(),
        ab["out_pkts"].as_u64().unwrap(),
    );
    let queued = ab["qlen_pkts"].as_u64().unwrap();
    assert!(outp <= inp && inp - outp <= queued + 1, "{ab}");
}

/// A long queue of frames that serialize fast (250 Mbit/s: 46 µs per 1442-byte frame, under
/// `DEFER_MIN_FRAME_NS`) is not deferred: the loop is awake every few frames anyway, and a
/// deferred TAP's one frame per turn would let the link idle.
#[test]
fn a_long_queue_of_fast_frames_keeps_its_tap_read_as_usual() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") || !have("ping") {
        eprintln!("skipping: needs root, ip and ping");
        return;
    }
    // 300 requests sent at once (preload): 13.8 ms of work at 250 Mbit/s.
    let ping = ["-c", "300", "-l", "300", "-s", "1400", "-W", "5", "-q"];
    let (s, out) = ping_behind_a_queue(250_000_000, &ping);
    let rt = &s["realtime"];
    assert_eq!(rt["deferred_reads"], json!(0), "{rt}\n{out}");
    let ab = &s["links"]["l"]["ab"];
    assert!(ab["out_pkts"].as_u64().unwrap() >= 300, "{ab}\n{out}");
    // The queue did hold more than DEFER_MIN_NS (2 ms, 44 such frames) of work at its peak:
    // only the frames' size kept the TAP from being deferred.
    assert!(ab["peak_qlen_pkts"].as_u64().unwrap() > 44, "{ab}\n{out}");
}

/// `--rps`: the packet thread is pinned, and each TAP's receive queue steers to the other
/// cores, whether the engine created it in its own namespace or in a node's (where the
/// namespace's default for new devices is put back afterwards).
#[test]
fn rps_steers_the_taps_receive_processing_away_from_the_packet_thread() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("ip") {
        eprintln!("skipping: needs root and ip");
        return;
    }
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    let cpus = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        libc::CPU_COUNT(&set)
    };
    if cpus < 2 {
        eprintln!("skipping: --rps needs two cores");
        return;
    }
    let pid = format!("{}r", std::process::id());
    let dir = std::env::temp_dir().join(format!("wlt-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let engine = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
        .args(["--socket", sock.to_str().unwrap(), "--rps"])
        .args(["--log", dir.join("engine.log").to_str().unwrap()])
        .spawn()
        .unwrap();
    let ns = format!("wlt-{pid}");
    let mut fx = Fixture {
        engine,
        namespaces: vec![],
        dir: dir.clone(),
    };
    sh(&["ip", "netns", "add", &ns]);
    fx.namespaces.push(ns.clone());
    let before = sh(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "cat",
        "/proc/sys/net/core/rps_default_mask",
    ]);
    let mut c = Client::connect(&sock);
    let (ta, tb) = (format!("wlt{pid}a"), format!("wlt{pid}b"));
    c.req(json!({"id": 1, "cmd": "apply",
        "ports": [{"port": "a", "tap": ta, "netns": format!("/run/netns/{ns}")},
                  {"port": "b", "tap": tb}],
        "links": [{"link": "l", "a": "a", "b": "b"}]}));
    let s = c.req(json!({"id": 2, "cmd": "stats"}));
    let core = s["partitions"][0]["core"]
        .as_u64()
        .unwrap_or_else(|| panic!("packet thread not pinned: {s}"));
    let rps_a = sh(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "cat",
        &format!("/sys/class/net/{ta}/queues/rx-0/rps_cpus"),
    ]);
    let rps_b =
        std::fs::read_to_string(format!("/sys/class/net/{tb}/queues/rx-0/rps_cpus")).unwrap();
    for m in [&rps_a, &rps_b] {
        // 32-bit groups, most significant first: group k from the right holds CPUs 32k..
        let groups: Vec<u32> = m
            .trim()
            .rsplit(',')
            .map(|g| u32::from_str_radix(g, 16).unwrap())
            .collect();
        assert!(groups.iter().any(|&g| g != 0), "no core to steer to: {m}");
        let c = core as usize;
        let on_core = groups.get(c / 32).is_some_and(|g| g & (1 << (c % 32)) != 0);
        assert!(!on_core, "steered to the packet thread's core {core}: {m}");
    }
    let after = sh(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "cat",
        "/proc/sys/net/core/rps_default_mask",
    ]);
    assert_eq!(
        before, after,
        "the namespace's default mask was not put back"
    );
    drop(fx);
}
