//! The real-time driver reports when it falls behind its timers: the real binary with a
//! control socket (no TAPs, no root needed) and simulated hosts and a router. A CBR source at
//! ~780 million packets/s cannot be kept up with: `stats.realtime.late_events` > 0 and a
//! `behind real time` line in the log, while the engine still answers requests. A light
//! source keeps up: no late events, no such line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Engine {
    child: Child,
    dir: PathBuf,
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Engine {
    fn start(name: &str, extra: &[&str]) -> Engine {
        let dir = std::env::temp_dir().join(format!("wl-rt-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("engine.sock");
        let log = dir.join("engine.log");
        let child = Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
            .args([
                "--socket",
                sock.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
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
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Engine {
            child,
            dir,
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn req(&mut self, v: Value) -> Value {
        self.w.write_all(format!("{v}\n").as_bytes()).unwrap();
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        let r: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad reply {l:?}: {e}"));
        assert_eq!(r["ok"], json!(true), "request {v} failed: {r}");
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("engine.log")).unwrap_or_default()
    }

    fn shutdown(mut self) -> String {
        self.req(json!({"cmd": "shutdown"}));
        let t0 = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "engine did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.log()
    }
}

/// host a —la— router r —lb— host b, source `src` (fields given) from a to b's sink.
fn topology(src: Value) -> Value {
    let mut src = src;
    src["agent"] = json!("src");
    src["host"] = json!("a");
    src["kind"] = json!("cbr");
    src["dst"] = json!("10.1.2.2:5000");
    // A 1 Gbit/s link with a short queue in front: the flood is mostly dropped right there,
    // so memory stays bounded however far behind the engine is.
    let la = json!({"bandwidth_bps": 1_000_000_000u64, "queue": {"limit": 100}});
    json!({"cmd": "apply",
        "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                  {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
        "routers": [{"router": "r", "interfaces": [{"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
                                                   {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
        "links": [{"link": "la", "a": "pa", "b": "r0", "ab": la, "ba": la},
                  {"link": "lb", "a": "r1", "b": "pb", "ab": {"delay_us": 100}, "ba": {"delay_us": 100}}],
        "agents": [src, {"agent": "sink", "host": "b", "kind": "sink", "port": 5000}]})
}

#[test]
fn overload_is_reported() {
    let mut e = Engine::start("overload", &[]);
    let s = e.req(json!({"cmd": "stats"}));
    assert_eq!(s["realtime"]["late_events"], json!(0), "{s}");
    assert_eq!(s["realtime"]["threshold_us"], json!(1000.0));
    // 16-byte payloads at 100 Gbit/s: one packet every 1.28 ns.
    e.req(topology(
        json!({"size": 16, "rate_bps": 100_000_000_000u64}),
    ));
    e.req(json!({"cmd": "agent", "agent": "src", "action": "start"}));
    std::thread::sleep(Duration::from_millis(1500));
    // Still answering while behind (the driver polls the network in bounded batches).
    let t0 = Instant::now();
    let s = e.req(json!({"cmd": "stats"}));
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stats took {:?}",
        t0.elapsed()
    );
    let rt = &s["realtime"];
    eprintln!("overloaded: {rt}");
    assert!(rt["late_events"].as_u64().unwrap() > 0, "{rt}");
    assert!(
        rt["timer_events"].as_u64().unwrap() > rt["late_events"].as_u64().unwrap() / 2,
        "{rt}"
    );
    assert!(
        rt["max_late_us"].as_f64().unwrap() > 100_000.0,
        "hopelessly behind: {rt}"
    );
    assert_eq!(rt["behind"], json!(true), "{rt}");
    assert!(rt["behind_since_ns"].as_u64().is_some(), "{rt}");
    e.req(json!({"cmd": "agent", "agent": "src", "action": "stop"}));
    let log = e.shutdown();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("behind real time by"))
        .collect();
    eprintln!("{}", lines.join("\n"));
    assert!(!lines.is_empty(), "no report in the log:\n{log}");
    // At most one report per second (1.5 s behind: 1 or 2 lines, plus slack for a slow exit).
    assert!(lines.len() <= 4, "{log}");
}

#[test]
fn keeping_up_reports_nothing() {
    // A generous threshold: this test runs alongside others on a busy machine.
    let mut e = Engine::start("idle", &["--behind-us", "20000"]);
    e.req(topology(json!({"size": 100, "interval_us": 10_000})));
    e.req(json!({"cmd": "agent", "agent": "src", "action": "start"}));
    std::thread::sleep(Duration::from_millis(1000));
    let s = e.req(json!({"cmd": "stats"}));
    let rt = &s["realtime"];
    eprintln!("keeping up: {rt}");
    assert_eq!(rt["threshold_us"], json!(20000.0));
    assert!(rt["timer_events"].as_u64().unwrap() > 200, "{rt}");
    assert_eq!(rt["late_events"], json!(0), "{rt}");
    assert_eq!(rt["behind"], json!(false), "{rt}");
    assert_eq!(rt["behind_since_ns"], Value::Null, "{rt}");
    assert!(s["agents"]["sink"]["pkts"].as_u64().unwrap() > 80, "{s}");
    let log = e.shutdown();
    assert!(!log.contains("behind real time"), "{log}");
}

/// The same chain under other names and addresses (`p`: a prefix, `net`: the second octet).
fn chain(p: &str, net: u8, src: Value) -> Value {
    let mut t = topology(src);
    let s = t.to_string();
    let s = s
        .replace("\"pa\"", &format!("\"{p}pa\""))
        .replace("\"pb\"", &format!("\"{p}pb\""))
        .replace("\"r0\"", &format!("\"{p}r0\""))
        .replace("\"r1\"", &format!("\"{p}r1\""))
        .replace("\"la\"", &format!("\"{p}la\""))
        .replace("\"lb\"", &format!("\"{p}lb\""))
        .replace("\"agent\":\"src\"", &format!("\"agent\":\"{p}src\""))
        .replace("\"agent\":\"sink\"", &format!("\"agent\":\"{p}sink\""))
        .replace("\"host\":\"a\"", &format!("\"host\":\"{p}a\""))
        .replace("\"host\":\"b\"", &format!("\"host\":\"{p}b\""))
        .replace("\"router\":\"r\"", &format!("\"router\":\"{p}r\""))
        .replace("10.1.", &format!("10.{net}."));
    t = serde_json::from_str(&s).unwrap();
    t
}

/// Two partitions, one hopelessly behind (the 100 Gbit/s source of `overload_is_reported`),
/// the other with a light source: the light one's timers stay on time within a generous
/// bound, which only a shared loop or lock could break (it would be as late as the busy one,
/// seconds after 2 s of overload). The two chains share nothing, so the partitioner puts them
/// on different partitions.
#[test]
fn a_busy_partition_does_not_delay_another() {
    let mut e = Engine::start("isolation", &["--threads", "2"]);
    let hot = chain("h", 1, json!({"size": 16, "rate_bps": 100_000_000_000u64}));
    let calm = chain("c", 2, json!({"size": 100, "interval_us": 10_000}));
    let mut both = hot.clone();
    for k in ["hosts", "routers", "links", "agents"] {
        let extra = calm[k].as_array().unwrap().clone();
        both[k].as_array_mut().unwrap().extend(extra);
    }
    e.req(both);
    let s = e.req(json!({"cmd": "stats"}));
    let parts = s["partitions"].as_array().unwrap().clone();
    assert_eq!(parts.len(), 2, "{s}");
    assert!(
        parts.iter().all(|p| p["simulated_nodes"] == json!(3)),
        "each chain on its own partition: {s}"
    );
    e.req(json!({"cmd": "agent", "agent": "csrc", "action": "start"}));
    e.req(json!({"cmd": "agent", "agent": "hsrc", "action": "start"}));
    std::thread::sleep(Duration::from_millis(2000));
    let s = e.req(json!({"cmd": "stats"}));
    let parts = s["partitions"].as_array().unwrap();
    eprintln!("partitions: {}", json!(parts));
    let late = |p: &Value| p["max_late_us"].as_f64().unwrap();
    let (hot, calm) = if late(&parts[0]) > late(&parts[1]) {
        (&parts[0], &parts[1])
    } else {
        (&parts[1], &parts[0])
    };
    assert!(late(hot) > 1_000_000.0, "the hot partition is behind: {s}");
    assert!(
        late(calm) < 250_000.0,
        "the calm partition kept its timers: {s}"
    );
    // The calm chain delivered its packets meanwhile (≈ 100 per second).
    assert!(s["agents"]["csink"]["pkts"].as_u64().unwrap() > 100, "{s}");
    assert!(calm["timer_events"].as_u64().unwrap() > 200, "{s}");
    // The merged view is behind (one partition is).
    assert_eq!(s["realtime"]["behind"], json!(true), "{s}");
    e.req(json!({"cmd": "agent", "agent": "hsrc", "action": "stop"}));
    e.shutdown();
}
