//! Patches in virtual time: two LANs joined by a patch are one switched network, and a
//! shaped trunk (the patch port's `from_lan` on each side) is one queue that every flow
//! crossing it shares, unlike per-pair channels.

use serde_json::{json, Value};

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::exec::Engine;
use wanlab_engine::control::protocol::{parse_request, ApplyReq};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::model::sim::agent::AgentStats;
use wanlab_engine::time::Instant;

const S: u64 = 1_000_000_000;

fn host(name: &str, n: u8) -> Value {
    json!({"host": name, "port": format!("p{name}"), "mac": format!("02:00:00:00:00:{n:02x}"),
           "ip": format!("10.0.0.{n}/24")})
}

/// LAN s1 {h1, h2, t1} and LAN s2 {h3, h4, t2}, patch t = (t1, t2); `trunk` shapes both
/// directions of the trunk (each side's `from_lan` towards the patch). CBR flows of
/// `rate_bps` h1 -> h3 and, with `two`, h2 -> h4: the `apply` request.
fn apply(trunk: Value, rate_bps: u64, two: bool) -> Value {
    let cbr = |name: &str, from: &str, dst: &str| {
        json!({"agent": name, "host": from, "kind": "cbr", "dst": format!("{dst}:5000"),
               "size": 1000, "rate_bps": rate_bps})
    };
    let mut agents = vec![
        cbr("c1", "h1", "10.0.0.3"),
        json!({"agent": "k3", "host": "h3", "kind": "sink", "port": 5000}),
        json!({"agent": "k4", "host": "h4", "kind": "sink", "port": 5000}),
    ];
    if two {
        agents.push(cbr("c2", "h2", "10.0.0.4"));
    }
    let member = |p: &str| json!({"port": p});
    json!({
        "hosts": [host("h1", 1), host("h2", 2), host("h3", 3), host("h4", 4)],
        "patches": [{"patch": "t", "ports": ["t1", "t2"]}],
        "lans": [
            {"lan": "s1", "members": [member("ph1"), member("ph2"),
                                      {"port": "t1", "from_lan": trunk}]},
            {"lan": "s2", "members": [member("ph3"), member("ph4"),
                                      {"port": "t2", "from_lan": trunk}]}],
        "agents": agents,
    })
}

/// [`apply`] run for 2 s of virtual time.
fn topo(trunk: Value, rate_bps: u64, two: bool) -> VirtualTime {
    let a: ApplyReq = serde_json::from_value(apply(trunk, rate_bps, two)).unwrap();
    let spec = build_topology(&a).unwrap();
    let mut net = Network::new(1);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    let mut vt = VirtualTime::new(net);
    for c in ["c1", "c2"].iter().take(if two { 2 } else { 1 }) {
        vt.net.agent_action(c, true, Instant::ZERO).unwrap();
    }
    vt.run_until(Instant::from_nanos(2 * S));
    vt
}

fn received_bytes(vt: &VirtualTime, sink: &str) -> u64 {
    match vt.net.agent_stats(sink).unwrap() {
        AgentStats::Sink { bytes, .. } => bytes,
        s => panic!("{s:?}"),
    }
}

#[test]
fn frames_cross_the_patch_both_ways() {
    // unshaped: ARP across the patch resolves and every datagram arrives
    let vt = topo(json!({}), 1_000_000, true);
    assert!(received_bytes(&vt, "k3") > 200_000);
    assert!(received_bytes(&vt, "k4") > 200_000);
}

#[test]
fn flows_share_a_shaped_trunk() {
    let trunk = json!({"bandwidth_bps": 10_000_000});
    // one 8 Mbit/s flow fits the 10 Mbit/s trunk
    let one = topo(trunk.clone(), 8_000_000, false);
    let alone = received_bytes(&one, "k3") as f64 * 8.0 / 2.0;
    assert!(alone > 6.5e6, "{alone}");
    // two of them do not: together they get the trunk's 10 Mbit/s, not 16
    let two = topo(trunk, 8_000_000, true);
    let sum = (received_bytes(&two, "k3") + received_bytes(&two, "k4")) as f64 * 8.0 / 2.0;
    assert!(sum < 10.5e6, "{sum}");
    assert!(sum > 8.0e6, "{sum}");
}

#[test]
fn patch_ids_and_ports_are_checked() {
    let mut e = Engine::new(1, 0);
    let run = |e: &mut Engine, line: &str| {
        let req = parse_request(line).1?;
        e.execute(req, Instant::ZERO).map(|_| ())
    };
    run(
        &mut e,
        r#"{"cmd":"apply","patches":[{"patch":"t","ports":["a","b"]}]}"#,
    )
    .unwrap();
    let err = run(
        &mut e,
        r#"{"cmd":"apply","patches":[{"patch":"t","ports":["c","d"]}]}"#,
    );
    assert!(err.unwrap_err().contains("patches[0] (\"t\").patch"));
    let err = run(
        &mut e,
        r#"{"cmd":"apply","patches":[{"patch":"u","ports":["a","e"]}]}"#,
    );
    assert!(err
        .unwrap_err()
        .contains("patches[0] (\"u\").ports[0]: port \"a\" already exists"));
    let err = run(
        &mut e,
        r#"{"cmd":"apply","patches":[{"patch":"v","ports":["x","x"]}]}"#,
    );
    assert!(err.unwrap_err().contains("ports[1]"));
    let err = run(&mut e, r#"{"cmd":"remove","ports":["a"]}"#);
    assert!(err.unwrap_err().contains("belongs to a patch"));
}

#[test]
fn joined_lans_stay_on_one_partition() {
    // a pair x -5 ms- y beside them gives the partitioner a cut: on 2 threads the pair goes
    // to one partition and the LANs joined by the patch (a node of both LANs' groups) to
    // the other, never apart, so the run is the run of one thread
    let d = std::env::temp_dir().join(format!("wl-patch-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let mut req = apply(json!({"bandwidth_bps": 10_000_000}), 8_000_000, true);
    req["at_ns"] = json!(0);
    req["cmd"] = json!("apply");
    let pair = |n: &str, i: u8| {
        json!({"host": n, "port": format!("p{n}"), "mac": format!("02:00:00:00:01:{i:02x}"),
               "ip": format!("10.9.0.{i}/24")})
    };
    let hosts = req["hosts"].as_array_mut().unwrap();
    hosts.extend([pair("x", 1), pair("y", 2)]);
    let l = json!({"delay_us": 5000});
    req["links"] = json!([{"link": "xy", "a": "px", "b": "py", "ab": l, "ba": l}]);
    let agents = req["agents"].as_array_mut().unwrap();
    agents.push(
        json!({"agent": "cx", "host": "x", "kind": "cbr", "dst": "10.9.0.2:5000",
                       "size": 500, "rate_bps": 1_000_000}),
    );
    agents.push(json!({"agent": "ky", "host": "y", "kind": "sink", "port": 5000}));
    let start =
        |c: &str| json!({"at_ns": 1_000_000, "cmd": "agent", "agent": c, "action": "start"});
    let sc = json!({"seed": 3, "until_ns": S,
                    "requests": [req, start("c1"), start("c2"), start("cx")]});
    let path = d.join("sc.json");
    std::fs::write(&path, sc.to_string()).unwrap();
    let mut out = Vec::new();
    for t in ["1", "2"] {
        let res = d.join(format!("t{t}.json"));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_wanlab-engine"))
            .args([
                "simulate",
                path.to_str().unwrap(),
                "--out",
                res.to_str().unwrap(),
            ])
            .args(["--threads", t])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains(&format!(" {t} thread(s)")), "{err}");
        out.push(std::fs::read(&res).unwrap());
    }
    let r: Value = serde_json::from_slice(&out[0]).unwrap();
    let k3 = r["stats"]["agents"]["k3"]["bytes"].as_u64().unwrap();
    let k4 = r["stats"]["agents"]["k4"]["bytes"].as_u64().unwrap();
    assert!(k3 > 100_000 && k4 > 100_000, "{k3} {k4}");
    assert!(out[0] == out[1], "1 and 2 threads differ");
    let _ = std::fs::remove_dir_all(&d);
}
