//! Stateful proptest of the control protocol: random sequences of apply / remove / set /
//! down / up / capture_start / capture_stop / stats / agent requests, valid and with one
//! broken field, run through the socket's path (parse → validate → execute, an `apply` in
//! the smallest slices) against an in-process engine with simulated routers and hosts (no
//! TAPs, no root). After every request: no panic; a broken field gets an error naming it;
//! the outcome of link applies and captures is the one a shadow model predicts; the engine
//! holds exactly the model's links, routers, hosts and agents (an error changes nothing, a
//! removed object is gone); captures only ever create new files inside the capture folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{json, Value};
use wanlab_engine::control::command::validate;
use wanlab_engine::control::exec::{Engine, Outcome, Started};
use wanlab_engine::control::protocol::parse_request;
use wanlab_engine::io::capture_file::CaptureDir;
use wanlab_engine::time::Instant;

const ROUTERS: usize = 4;
const LINKS: usize = 4;
const HOSTS: usize = 2;

#[derive(Debug, Clone)]
enum Broken {
    /// Replace the value at this JSON pointer; the error must name `field`.
    Value {
        pointer: &'static str,
        value: Value,
        field: &'static str,
    },
    /// Add an unknown field next to this pointer's object.
    Unknown { pointer: &'static str },
}

#[derive(Debug, Clone)]
enum Op {
    Router(usize),
    Host(usize),
    Link {
        id: usize,
        a: (usize, usize),
        b: (usize, usize),
        delay_us: u32,
    },
    Sink {
        host: usize,
        port: u16,
    },
    RemoveLink(usize),
    RemoveRouter(usize),
    Set {
        link: usize,
        delay_us: u32,
    },
    Down(usize),
    Up(usize),
    CaptureStart {
        link: usize,
        ab: bool,
        name: usize,
    },
    CaptureStop(usize),
    Stats,
    Agent {
        host: usize,
        start: bool,
    },
    /// A request with one broken field.
    Bad(usize, Broken),
}

/// Capture file names: plain new ones, a pre-existing file, escapes.
const NAMES: &[&str] = &[
    "a.pcap",
    "b.pcap",
    "sub/c.pcap",
    "guard.txt",
    "../escape.pcap",
    "/etc/escape.pcap",
    "sub/../../escape.pcap",
    "link/x.pcap",
];

fn router_req(i: usize) -> Value {
    let ifs: Vec<Value> = (0..2)
        .map(|j| {
            json!({"port": format!("r{i}-{j}"), "mac": format!("02:00:00:00:{i:02x}:{j:02x}"),
                   "ip": format!("10.{i}.{j}.1/24")})
        })
        .collect();
    json!({"cmd": "apply", "routers": [{"router": format!("r{i}"), "interfaces": ifs}]})
}

fn host_req(i: usize) -> Value {
    json!({"cmd": "apply", "hosts": [{"host": format!("h{i}"), "port": format!("h{i}-0"),
           "mac": format!("02:00:00:01:00:{i:02x}"), "ip": format!("10.9.{i}.2/24")}]})
}

fn to_json(op: &Op) -> Value {
    match op {
        Op::Router(i) => router_req(*i),
        Op::Host(i) => host_req(*i),
        Op::Link { id, a, b, delay_us } => json!({"cmd": "apply", "links": [{
            "link": format!("l{id}"), "a": format!("r{}-{}", a.0, a.1),
            "b": format!("r{}-{}", b.0, b.1), "ab": {"delay_us": delay_us}}]}),
        Op::Sink { host, port } => json!({"cmd": "apply", "agents": [{
            "agent": format!("s{host}-{port}"), "host": format!("h{host}"), "kind": "sink",
            "port": port}]}),
        Op::RemoveLink(i) => json!({"cmd": "remove", "links": [format!("l{i}")]}),
        Op::RemoveRouter(i) => json!({"cmd": "remove", "routers": [format!("r{i}")]}),
        Op::Set { link, delay_us } => json!({"cmd": "set", "target": format!("l{link}"),
            "params": {"delay_us": delay_us}}),
        Op::Down(i) => json!({"cmd": "down", "target": format!("l{i}")}),
        Op::Up(i) => json!({"cmd": "up", "target": format!("l{i}")}),
        Op::CaptureStart { link, ab, name } => json!({"cmd": "capture_start",
            "target": format!("l{link}"), "dir": if *ab { "ab" } else { "ba" },
            "path": NAMES[*name]}),
        Op::CaptureStop(i) => json!({"cmd": "capture_stop", "target": format!("l{i}")}),
        Op::Stats => json!({"cmd": "stats"}),
        Op::Agent { host, start } => json!({"cmd": "agent", "agent": format!("c{host}"),
            "action": if *start { "start" } else { "stop" }}),
        Op::Bad(base, _) => bad_base(*base),
    }
}

/// Valid requests to break (a field at a known place in each).
fn bad_base(i: usize) -> Value {
    match i % 4 {
        0 => json!({"cmd": "apply", "routers": [{"router": "rx", "interfaces": [
                {"port": "rx-0", "mac": "02:00:00:00:ff:00", "ip": "10.200.0.1/24"}]}],
                "links": [{"link": "lx", "a": "rx-0", "b": "r0-0", "ab": {"delay_us": 5}}]}),
        1 => json!({"cmd": "set", "target": "l0", "dir": "both", "params": {"delay_us": 5,
                "loss": {"kind": "bernoulli", "p": 0.1}, "queue": {"limit": 10}}}),
        2 => json!({"cmd": "apply", "hosts": [{"host": "hx", "port": "hx-0",
                "mac": "02:00:00:02:00:01", "ip": "10.201.0.2/24", "gateway": "10.201.0.1"}],
                "agents": [{"agent": "cx", "host": "hx", "kind": "cbr",
                "dst": "10.201.0.9:9", "size": 100, "rate_bps": 8000}]}),
        _ => json!({"cmd": "capture_start", "target": "l0", "dir": "ab", "path": "x.pcap",
                "snaplen": 96}),
    }
}

fn broken() -> impl Strategy<Value = (usize, Broken)> {
    let v = |base: usize, pointer: &'static str, value: Value, field: &'static str| {
        (
            base,
            Broken::Value {
                pointer,
                value,
                field,
            },
        )
    };
    prop_oneof![
        Just(v(0, "/routers/0/interfaces/0/mac", json!("02:00"), "mac")),
        Just(v(0, "/routers/0/interfaces/0/ip", json!("10.0.0.1"), "ip")),
        Just(v(0, "/links/0/ab/delay_us", json!(-1), "delay_us")),
        Just(v(0, "/links/0/ab/delay_us", json!(1e12), "delay_us")),
        Just(v(0, "/links/0/ab/delay_us", json!("slow"), "delay_us")),
        Just(v(0, "/links/0/link", json!(""), "link")),
        Just(v(1, "/params/loss/p", json!(2), "loss.p")),
        Just(v(1, "/params/queue/limit", json!(0), "queue.limit")),
        Just(v(1, "/dir", json!("sideways"), "dir")),
        Just(v(1, "/params/loss/kind", json!("zipf"), "kind")),
        Just(v(2, "/agents/0/size", json!(3), "size")),
        Just(v(2, "/agents/0/dst", json!("10.201.0.9"), "dst")),
        Just(v(2, "/agents/0/kind", json!("quic"), "kind")),
        Just(v(2, "/hosts/0/gateway", json!("10.99.0.1"), "gateway")),
        Just(v(3, "/path", json!("../../etc/passwd"), "path")),
        Just(v(3, "/snaplen", json!(-5), "snaplen")),
        Just((
            0,
            Broken::Unknown {
                pointer: "/links/0/ab"
            }
        )),
        Just((1, Broken::Unknown { pointer: "/params" })),
        Just((
            2,
            Broken::Unknown {
                pointer: "/agents/0"
            }
        )),
        Just((3, Broken::Unknown { pointer: "" })),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let port = (0..ROUTERS, 0..2usize);
    prop_oneof![
        (0..ROUTERS).prop_map(Op::Router),
        (0..HOSTS).prop_map(Op::Host),
        (0..LINKS, port.clone(), port, 0..50_000u32).prop_map(|(id, a, b, delay_us)| Op::Link {
            id,
            a,
            b,
            delay_us
        }),
        (0..HOSTS, 1..3u16).prop_map(|(host, port)| Op::Sink { host, port }),
        (0..LINKS).prop_map(Op::RemoveLink),
        (0..ROUTERS).prop_map(Op::RemoveRouter),
        (0..LINKS, 0..50_000u32).prop_map(|(link, delay_us)| Op::Set { link, delay_us }),
        (0..LINKS).prop_map(Op::Down),
        (0..LINKS).prop_map(Op::Up),
        (0..LINKS, any::<bool>(), 0..NAMES.len()).prop_map(|(link, ab, name)| Op::CaptureStart {
            link,
            ab,
            name
        }),
        (0..LINKS).prop_map(Op::CaptureStop),
        Just(Op::Stats),
        (0..HOSTS, any::<bool>()).prop_map(|(host, start)| Op::Agent { host, start }),
        broken().prop_map(|(b, k)| Op::Bad(b, k)),
    ]
}

/// What the engine should hold.
#[derive(Default, Debug)]
struct Model {
    routers: BTreeSet<String>,
    hosts: BTreeSet<String>,
    agents: BTreeSet<String>,
    links: BTreeMap<String, (String, String)>,
    /// (link, "ab"/"ba") with a capture running.
    captures: BTreeSet<(String, &'static str)>,
    files: BTreeSet<String>,
}

impl Model {
    fn port_exists(&self, p: &str) -> bool {
        p.split_once('-')
            .is_some_and(|(r, _)| self.routers.contains(r) || self.hosts.contains(r))
    }
    fn attached(&self, p: &str) -> bool {
        self.links.values().any(|(a, b)| a == p || b == p)
    }
}

/// The socket's path: parse, validate, then execute (an `apply` one slice per step).
fn run(e: &mut Engine, line: &str, now: Instant) -> Outcome {
    let (_, req) = parse_request(line);
    let cmd = req.and_then(validate)?;
    match e.begin(cmd, now) {
        Started::Done(r) => r,
        Started::Apply(mut job) => loop {
            if let Some(r) = job.step(e, now, &mut || false) {
                return r;
            }
        },
    }
}

fn folder(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wl-ctlprop-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("guard.txt"), b"keep me").unwrap();
    std::os::unix::fs::symlink("/tmp", d.join("link")).unwrap();
    d
}

/// Files under the folder (relative names), the fixtures excluded.
fn files_in(d: &std::path::Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for sub in ["", "sub"] {
        for e in std::fs::read_dir(d.join(sub)).unwrap().flatten() {
            let name = if sub.is_empty() {
                e.file_name().to_string_lossy().into_owned()
            } else {
                format!("{sub}/{}", e.file_name().to_string_lossy())
            };
            if !["sub", "guard.txt", "link"].contains(&name.as_str()) {
                out.insert(name);
            }
        }
    }
    out
}

fn check_op(e: &mut Engine, m: &mut Model, op: &Op, line: &str, r: &Outcome) {
    match op {
        Op::Bad(base, broken) => {
            let err = r.as_ref().expect_err(line);
            let want = match broken {
                Broken::Value { field, .. } => *field,
                Broken::Unknown { .. } => "colour",
            };
            // `set` and `capture_start` check their target before values that depend on it.
            let no_target = base % 4 != 0 && base % 4 != 2 && !m.links.contains_key("l0");
            let named = err.contains(want) || (no_target && err.starts_with("target: "));
            assert!(named, "{line}: error {err:?} does not name {want}");
        }
        Op::Router(i) => {
            let id = format!("r{i}");
            assert_eq!(r.is_ok(), !m.routers.contains(&id), "{line}: {r:?}");
            m.routers.insert(id);
        }
        Op::Host(i) => {
            let id = format!("h{i}");
            assert_eq!(r.is_ok(), !m.hosts.contains(&id), "{line}: {r:?}");
            if r.is_ok() {
                // A source on each new host, for `agent` start/stop.
                let c = json!({"cmd": "apply", "agents": [{"agent": format!("c{i}"),
                    "host": id, "kind": "cbr", "dst": "10.9.9.9:9", "size": 100,
                    "interval_us": 1000}]});
                run(e, &c.to_string(), Instant::ZERO).unwrap();
                m.agents.insert(format!("c{i}"));
            }
            m.hosts.insert(id);
        }
        Op::Link { id, a, b, .. } => {
            let (id, a, b) = (
                format!("l{id}"),
                format!("r{}-{}", a.0, a.1),
                format!("r{}-{}", b.0, b.1),
            );
            let ok = !m.links.contains_key(&id)
                && a != b
                && m.port_exists(&a)
                && m.port_exists(&b)
                && !m.attached(&a)
                && !m.attached(&b);
            assert_eq!(r.is_ok(), ok, "{line}: {r:?} (model {m:?})");
            if let Err(err) = r {
                let named = ["link", ".a", ".b", "links[0]"]
                    .iter()
                    .any(|f| err.contains(f));
                assert!(named, "{line}: {err}");
            }
            if ok {
                m.links.insert(id, (a, b));
            }
        }
        Op::Sink { host, port } => {
            let id = format!("s{host}-{port}");
            let ok = m.hosts.contains(&format!("h{host}")) && !m.agents.contains(&id);
            assert_eq!(r.is_ok(), ok, "{line}: {r:?}");
            if ok {
                m.agents.insert(id);
            }
        }
        Op::RemoveLink(i) => {
            let id = format!("l{i}");
            assert_eq!(r.is_ok(), m.links.contains_key(&id), "{line}: {r:?}");
            if r.is_ok() {
                m.links.remove(&id);
                m.captures.retain(|(l, _)| *l != id);
            }
        }
        Op::RemoveRouter(i) => {
            let id = format!("r{i}");
            let ok = m.routers.contains(&id)
                && !m.attached(&format!("{id}-0"))
                && !m.attached(&format!("{id}-1"));
            assert_eq!(r.is_ok(), ok, "{line}: {r:?}");
            if ok {
                m.routers.remove(&id);
            }
        }
        Op::Set { link, .. } | Op::Down(link) | Op::Up(link) => {
            let known = m.links.contains_key(&format!("l{link}"));
            assert_eq!(r.is_ok(), known, "{line}: {r:?}");
            if let Err(err) = r {
                assert!(err.contains("target"), "{line}: {err}");
            }
        }
        Op::CaptureStart { link, ab, name } => {
            let id = format!("l{link}");
            let dir = if *ab { "ab" } else { "ba" };
            let name = NAMES[*name];
            let fresh =
                ["a.pcap", "b.pcap", "sub/c.pcap"].contains(&name) && !m.files.contains(name);
            let ok = m.links.contains_key(&id) && !m.captures.contains(&(id.clone(), dir)) && fresh;
            assert_eq!(r.is_ok(), ok, "{line}: {r:?}");
            if let Err(err) = r {
                assert!(
                    err.starts_with("path: ") || err.starts_with("target: "),
                    "{line}: {err}"
                );
            }
            if ok {
                m.captures.insert((id, dir));
                m.files.insert(name.to_string());
            }
        }
        Op::CaptureStop(link) => {
            let id = format!("l{link}");
            assert_eq!(r.is_ok(), m.links.contains_key(&id), "{line}: {r:?}");
            m.captures.retain(|(l, _)| *l != id);
        }
        Op::Stats => assert!(r.is_ok(), "{line}: {r:?}"),
        Op::Agent { host, .. } => {
            assert_eq!(
                r.is_ok(),
                m.agents.contains(&format!("c{host}")),
                "{line}: {r:?}"
            );
        }
    }
}

/// The engine holds exactly what the model says.
fn check_state(e: &Engine, m: &Model, dir: &std::path::Path) {
    let s = e.stats(None, Instant::ZERO).unwrap();
    let keys =
        |k: &str| -> BTreeSet<String> { s[k].as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys("links"), m.links.keys().cloned().collect(), "links");
    assert_eq!(keys("routers"), m.routers, "routers");
    assert_eq!(keys("hosts"), m.hosts, "hosts");
    assert_eq!(keys("agents"), m.agents, "agents");
    for (a, b) in m.links.values() {
        assert!(e.net.port_index(a).is_some() && e.net.port_index(b).is_some());
    }
    assert_eq!(files_in(dir), m.files, "capture files");
    assert_eq!(std::fs::read(dir.join("guard.txt")).unwrap(), b"keep me");
    assert!(!dir.join("../escape.pcap").exists());
}

fn apply_broken(line: Value, broken: &Broken) -> Value {
    let mut v = line;
    match broken {
        Broken::Value { pointer, value, .. } => *v.pointer_mut(pointer).unwrap() = value.clone(),
        Broken::Unknown { pointer } => {
            let obj = v.pointer_mut(pointer).unwrap().as_object_mut().unwrap();
            obj.insert("colour".into(), json!("blue"));
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_request_sequences_keep_the_engine_consistent(ops in prop::collection::vec(op(), 1..40)) {
        let dir = folder("seq");
        let mut e = Engine::new(1, 0);
        e.capture_dir = Some(CaptureDir::open(&dir).unwrap());
        let mut m = Model::default();
        for op in &ops {
            let v = match op {
                Op::Bad(base, broken) => apply_broken(bad_base(*base), broken),
                _ => to_json(op),
            };
            let line = v.to_string();
            let before = e.stats(None, Instant::ZERO).unwrap();
            let r = run(&mut e, &line, Instant::ZERO);
            check_op(&mut e, &mut m, op, &line, &r);
            if r.is_err() {
                // An error changes nothing.
                let mut after = e.stats(None, Instant::ZERO).unwrap();
                after.remove("now_ns");
                let mut before = before;
                before.remove("now_ns");
                prop_assert_eq!(Value::Object(before), Value::Object(after), "{}", line);
            }
            check_state(&e, &m, &dir);
        }
        e.flush_captures();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
