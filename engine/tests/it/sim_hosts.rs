//! Simulated hosts with CBR/UDP traffic agents, in virtual time: exact packet counts and
//! one-way delays through a simulated router, sink loss = bottleneck queue drops,
//! determinism, the control protocol, and arbitrary frames into a host (proptest).

use proptest::prelude::*;
use serde_json::{json, Value};

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::exec::Engine;
use wanlab_engine::control::protocol::{parse_request, ApplyReq};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::model::sim::agent::AgentStats;
use wanlab_engine::model::sim::host::{Family, Host, HostConfig};
use wanlab_engine::time::Instant;
use wanlab_engine::wire::ethernet::Address;

const MS: u64 = 1_000_000;

/// host a (10.1.1.2) —link la— router r —link lb— host b (10.1.2.2); a runs CBR `cbr` to
/// b's sink `sink` on port 5000.
fn topo(la: Value, lb: Value, cbr: Value) -> Value {
    let mut cbr = cbr;
    cbr["agent"] = json!("cbr");
    cbr["host"] = json!("a");
    cbr["kind"] = json!("cbr");
    cbr["dst"] = json!("10.1.2.2:5000");
    json!({
        "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                  {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
        "routers": [{"router": "r", "interfaces": [
            {"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
            {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
        "links": [{"link": "la", "a": "pa", "b": "r0", "ab": la, "ba": la},
                  {"link": "lb", "a": "r1", "b": "pb", "ab": lb, "ba": lb}],
        "agents": [cbr, {"agent": "sink", "host": "b", "kind": "sink", "port": 5000}]
    })
}

fn net(req: Value, seed: u64) -> VirtualTime {
    let a: ApplyReq = serde_json::from_value(req).unwrap();
    let spec = build_topology(&a).unwrap();
    let mut net = Network::new(seed);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

fn sink(vt: &VirtualTime) -> (u64, u64, u64, Option<f64>, Option<f64>) {
    match vt.net.agent_stats("sink").unwrap() {
        AgentStats::Sink {
            pkts,
            bytes,
            lost,
            owd_min_us,
            owd_max_us,
            ..
        } => (pkts, bytes, lost, owd_min_us, owd_max_us),
        s => panic!("{s:?}"),
    }
}

fn sent(vt: &VirtualTime) -> (u64, u64) {
    match vt.net.agent_stats("cbr").unwrap() {
        AgentStats::Cbr {
            sent_pkts,
            sent_bytes,
            ..
        } => (sent_pkts, sent_bytes),
        s => panic!("{s:?}"),
    }
}

/// Serialization time in ns of `len` bytes at 10 Mbit/s.
fn ser10(len: u64) -> u64 {
    len * 8 * 1_000_000_000 / 10_000_000
}

#[test]
fn cbr_through_router_exact() {
    let l = json!({"bandwidth_bps": 10_000_000, "delay_us": 5000});
    let mut vt = net(
        topo(l.clone(), l, json!({"size": 1000, "rate_bps": 1_000_000})),
        1,
    );
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    // Packets leave at k · 8 ms; stop just before 5 s: k = 0..=624.
    vt.run_until(Instant::from_nanos(5000 * MS - 1));
    vt.net.agent_action("cbr", false, vt.now).unwrap();
    vt.run_to_idle();
    assert!(vt.take().is_empty(), "nothing leaves the simulation");
    assert_eq!(sent(&vt), (625, 625_000));
    let (pkts, bytes, lost, min, max) = sink(&vt);
    assert_eq!((pkts, bytes, lost), (625, 625_000, 0));
    // Data frame: 1000 + 8 UDP + 20 IP + 14 Ethernet = 1042 bytes; ARP frame 14 + 28 = 42.
    let d = 5 * MS + ser10(1042);
    assert_eq!(d, 5_833_600);
    assert_eq!(
        min,
        Some((2 * d) as f64 / 1000.0),
        "steady state: 2 × (5 ms + 833.6 µs)"
    );
    // The first packet includes two ARP resolutions (a → r, then r → b): 4 ARP crossings.
    let a = 5 * MS + ser10(42);
    assert_eq!(max, Some((4 * a + 2 * d) as f64 / 1000.0));
    assert_eq!(vt.net.router_counters("r").unwrap().forwarded, 625);
    let hb = vt.net.host_counters("b").unwrap();
    assert_eq!(hb.udp_received, 625);
    assert_eq!(hb.dropped_other, 0);
}

/// [`topo`] over IPv6 only: a fd00:1::2, r fd00:1::1 and fd00:2::1, b fd00:2::2.
fn topo6(l: Value, cbr: Value) -> Value {
    let mut t = topo(l.clone(), l, cbr);
    t["agents"][0]["dst"] = json!("[fd00:2::2]:5000");
    t["hosts"] = json!([
        {"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip6": "fd00:1::2/64", "gateway6": "fd00:1::1"},
        {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip6": "fd00:2::2/64", "gateway6": "fd00:2::1"}]);
    t["routers"][0]["interfaces"] = json!([
        {"port": "r0", "mac": "02:00:00:00:01:00", "ip6": "fd00:1::1/64"},
        {"port": "r1", "mac": "02:00:00:00:01:01", "ip6": "fd00:2::1/64"}]);
    t
}

/// The same CBR over IPv6: every datagram 20 bytes longer, neighbour discovery (86-byte
/// solicitation and advertisement) where ARP was, and nothing else different.
#[test]
fn cbr_through_router_exact_over_ipv6() {
    let l = json!({"bandwidth_bps": 10_000_000, "delay_us": 5000});
    let mut vt = net(topo6(l, json!({"size": 1000, "rate_bps": 1_000_000})), 1);
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(5000 * MS - 1));
    vt.net.agent_action("cbr", false, vt.now).unwrap();
    vt.run_to_idle();
    assert!(vt.take().is_empty(), "nothing leaves the simulation");
    assert_eq!(sent(&vt), (625, 625_000));
    let (pkts, bytes, lost, min, max) = sink(&vt);
    assert_eq!((pkts, bytes, lost), (625, 625_000, 0));
    // 1000 + 8 UDP + 40 IPv6 + 14 Ethernet = 1062 bytes; a neighbour solicitation or
    // advertisement 14 + 40 + 32 = 86.
    let d = 5 * MS + ser10(1062);
    assert_eq!(min, Some((2 * d) as f64 / 1000.0));
    let nd = 5 * MS + ser10(86);
    assert_eq!(max, Some((4 * nd + 2 * d) as f64 / 1000.0));
    assert_eq!(vt.net.router_counters("r").unwrap().forwarded, 625);
    let hb = vt.net.host_counters("b").unwrap();
    assert_eq!((hb.udp_received, hb.dropped_other), (625, 0));
}

/// A —10 Mbit/s, 1 ms— r —1 Mbit/s, 1 ms, DropTail 10— B with a 2 Mbit/s CBR for 2 s, then
/// one marker packet after the queue drained (so tail drops show up as a gap too).
fn bottleneck(seed: u64, la: Value) -> VirtualTime {
    let lb = json!({"bandwidth_bps": 1_000_000, "delay_us": 1000, "queue": {"kind": "droptail", "limit": 10}});
    let mut vt = net(
        topo(la, lb, json!({"size": 1000, "rate_bps": 2_000_000})),
        seed,
    );
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(2000 * MS - 1));
    vt.net.agent_action("cbr", false, vt.now).unwrap();
    vt.run_to_idle();
    let t = vt.now;
    vt.net.agent_action("cbr", true, t).unwrap();
    vt.run_until(t);
    vt.net.agent_action("cbr", false, t).unwrap();
    vt.run_to_idle();
    vt
}

#[test]
fn sink_loss_equals_queue_drops() {
    let vt = bottleneck(1, json!({"bandwidth_bps": 10_000_000, "delay_us": 1000}));
    let drops = vt.net.stats(Some("lb"), vt.now).unwrap().links["lb"]
        .ab
        .drop_queue;
    let (pkts, _, lost, _, _) = sink(&vt);
    assert_eq!(sent(&vt).0, 501);
    assert!(drops > 200, "about half is dropped: {drops}");
    assert_eq!(lost, drops);
    assert_eq!(pkts + lost, 501);
    let AgentStats::Sink {
        expected,
        reordered,
        duplicates,
        ..
    } = vt.net.agent_stats("sink").unwrap()
    else {
        panic!()
    };
    assert_eq!((expected, reordered, duplicates), (501, 0, 0));
    assert_eq!(vt.net.router_counters("r").unwrap().arp_queue_drops, 0);
    assert_eq!(vt.net.host_counters("a").unwrap().arp_queue_drops, 0);
}

/// Reordered and duplicated datagrams are not lost (the definition shared with wanlab-gen,
/// `flowstats`): a jittery link that reorders and duplicates but never drops gives lost 0.
#[test]
fn reordered_and_duplicates_are_not_lost() {
    let la = json!({"bandwidth_bps": 100_000_000, "delay_us": 1000});
    let lb = json!({"bandwidth_bps": 100_000_000, "delay_us": 5000, "jitter_us": 3000,
                    "jitter_reorder": true, "duplicate": 0.1, "queue": {"kind": "droptail", "limit": 10000}});
    let mut vt = net(
        topo(la, lb, json!({"size": 1000, "rate_bps": 8_000_000})),
        3,
    );
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(1000 * MS - 1));
    vt.net.agent_action("cbr", false, vt.now).unwrap();
    vt.run_to_idle();
    let (sent_pkts, _) = sent(&vt);
    assert_eq!(sent_pkts, 1000);
    let AgentStats::Sink {
        pkts,
        expected,
        lost,
        reordered,
        duplicates,
        ..
    } = vt.net.agent_stats("sink").unwrap()
    else {
        panic!()
    };
    assert!(reordered > 100, "the link reorders: {reordered}");
    assert!(duplicates > 50, "the link duplicates: {duplicates}");
    assert_eq!((expected, lost), (1000, 0));
    assert_eq!(pkts, 1000 + duplicates);
}

#[test]
fn deterministic() {
    let la = json!({"bandwidth_bps": 10_000_000, "delay_us": 1000, "jitter_us": 300, "loss": {"kind": "bernoulli", "p": 0.05}});
    let run = |seed| {
        serde_json::to_value(
            bottleneck(seed, la.clone())
                .net
                .stats(None, Instant::ZERO)
                .unwrap(),
        )
        .unwrap()
    };
    let a = run(7);
    assert_eq!(a, run(7));
    assert_ne!(a, run(8));
    assert!(
        a["agents"]["sink"]["lost"].as_u64().unwrap()
            > a["links"]["lb"]["ab"]["drop_queue"].as_u64().unwrap()
    );
}

fn exec(
    e: &mut Engine,
    line: &str,
    now: Instant,
) -> Result<serde_json::Map<String, Value>, String> {
    let (_, r) = parse_request(line);
    e.execute(r?, now).map(|(b, _)| b)
}

#[test]
fn protocol() {
    let mut e = Engine::new(1, 0);
    let l = json!({"delay_us": 1000});
    let mut req = topo(l.clone(), l, json!({"size": 100, "interval_us": 10_000}));
    req["cmd"] = json!("apply");
    exec(&mut e, &req.to_string(), Instant::ZERO).unwrap();
    exec(
        &mut e,
        r#"{"cmd":"agent","agent":"cbr","action":"start"}"#,
        Instant::ZERO,
    )
    .unwrap();
    let end = Instant::from_nanos(100 * MS - 1);
    while let Some(t) = e.net.poll_at().filter(|t| *t <= end) {
        e.poll(t);
    }
    exec(
        &mut e,
        r#"{"cmd":"agent","agent":"cbr","action":"stop"}"#,
        end,
    )
    .unwrap();
    while let Some(t) = e.net.poll_at() {
        e.poll(t);
    }
    let s = exec(&mut e, r#"{"cmd":"stats"}"#, end).unwrap();
    assert_eq!(
        s["agents"]["cbr"],
        json!({"kind": "cbr", "running": false, "sent_pkts": 10, "sent_bytes": 1000})
    );
    assert_eq!(s["agents"]["sink"]["pkts"], json!(10));
    assert_eq!(s["agents"]["sink"]["lost"], json!(0));
    assert_eq!(s["agents"]["sink"]["owd_min_us"], json!(2000.0));
    assert_eq!(s["hosts"]["b"]["udp_received"], json!(10));
    let one = exec(&mut e, r#"{"cmd":"stats","target":"sink"}"#, end).unwrap();
    assert_eq!(one["agents"].as_object().unwrap().len(), 1);

    let err = |line: &str| exec(&mut Engine::new(1, 0), line, Instant::ZERO).unwrap_err();
    let h = r#""hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1/24"}]"#;
    let cases = [
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1"}]}"#,
            "hosts[0] (\"h\").ip",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"ff:ff:ff:ff:ff:ff","ip":"10.0.0.1/24"}]}"#,
            "hosts[0] (\"h\").mac",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip6":"fd00::zz/64"}]}"#,
            "hosts[0] (\"h\").ip6",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip6":"fd00::1/64","gateway6":"fd00:9::1"}]}"#,
            "hosts[0] (\"h\").gateway6",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1/24","gateway6":"fd00::9"}]}"#,
            "hosts[0] (\"h\").gateway6",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01"}]}"#,
            "hosts[0] (\"h\").ip",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1/24","gateway":"10.9.0.1"}]}"#,
            "hosts[0] (\"h\").gateway",
        ),
        (
            r#"{"cmd":"apply","hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1/24","gw":"10.0.0.9"}]}"#,
            "gw",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"nope","kind":"sink","port":9}}]}}"#
            ),
            "agents[0] (\"x\").host",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"sink","port":0}}]}}"#
            ),
            "agents[0] (\"x\").port",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"sink","port":9,"size":5}}]}}"#
            ),
            "agents[0] (\"x\").size",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"sink","port":9}},{{"agent":"y","host":"h","kind":"sink","port":9}}]}}"#
            ),
            "agents[1] (\"y\").port",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"quic"}}]}}"#
            ),
            "agents[0] (\"x\").kind",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2","size":100,"rate_bps":1}}]}}"#
            ),
            "agents[0] (\"x\").dst",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2:9","size":10,"rate_bps":1}}]}}"#
            ),
            "agents[0] (\"x\").size",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2:9","size":100}}]}}"#
            ),
            "agents[0] (\"x\").rate_bps",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2:9","size":100,"rate_bps":5,"interval_us":5}}]}}"#
            ),
            "agents[0] (\"x\").rate_bps",
        ),
        (
            &format!(
                r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2:9","size":100,"interval_us":0}}]}}"#
            ),
            "agents[0] (\"x\").interval_us",
        ),
        (
            r#"{"cmd":"agent","agent":"nope","action":"start"}"#,
            "agent:",
        ),
        (
            r#"{"cmd":"agent","agent":"nope","action":"pause"}"#,
            "action",
        ),
    ];
    for (line, want) in cases {
        let got = err(line);
        assert!(got.contains(want), "{line}: {got} (want {want})");
    }
    // A sink cannot be started; a host's port cannot be removed.
    let mut e = Engine::new(1, 0);
    exec(
        &mut e,
        &format!(
            r#"{{"cmd":"apply",{h},"agents":[{{"agent":"s","host":"h","kind":"sink","port":9}}]}}"#
        ),
        Instant::ZERO,
    )
    .unwrap();
    assert!(exec(
        &mut e,
        r#"{"cmd":"agent","agent":"s","action":"start"}"#,
        Instant::ZERO
    )
    .unwrap_err()
    .contains("sink"));
    assert!(
        exec(&mut e, r#"{"cmd":"remove","ports":["p"]}"#, Instant::ZERO)
            .unwrap_err()
            .contains("host")
    );
    assert!(
        exec(&mut e, &format!(r#"{{"cmd":"apply",{h}}}"#), Instant::ZERO)
            .unwrap_err()
            .contains("hosts[0] (\"h\").host")
    );
}

fn host() -> Host {
    Host::new(HostConfig {
        mac: Address([2, 0, 0, 0, 0, 1]),
        v4: Some(Family {
            ip: [10, 0, 0, 1],
            prefix: 24,
            gateway: Some([10, 0, 0, 254]),
        }),
        v6: None,
    })
}

proptest! {
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec((0u8..4, proptest::collection::vec(any::<u8>(), 0..120)), 1..20)) {
        let mut h = host();
        let l = json!({"delay_us": 10});
        let mut vt = net(topo(l.clone(), l, json!({"size": 16, "interval_us": 100})), 3);
        vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
        let pb = vt.net.port_index("pb").unwrap();
        for (i, (kind, body)) in frames.into_iter().enumerate() {
            // Plausible prefixes: to the host's MAC or broadcast, ARP or IPv4 (with a
            // 20-byte header towards the host), or raw bytes.
            let mut f = match kind {
                0 => vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 8, 6],
                1 => vec![0xff; 6].into_iter().chain([2, 0, 0, 0, 0, 9, 8, 6]).collect(),
                2 => {
                    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 8, 0];
                    let n = body.len();
                    let proto = body.first().map_or(17, |b| if b & 1 == 0 { 17 } else { 1 });
                    f.extend_from_slice(&wanlab_engine::wire::ipv4::header([10, 0, 0, 9], [10, 0, 0, 1], proto, 64, 1, n));
                    f
                }
                _ => Vec::new(),
            };
            f.extend_from_slice(&body);
            let _ = h.receive(&f);
            let _ = h.send_udp([10, 9, 9, 9], 1, 2, &f);
            // Into a simulated host through the network, between CBR packets.
            let mut g = f.clone();
            if g.len() >= 6 {
                g[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
            }
            let at = Instant::from_nanos(i as u64 * 37_000);
            vt.inject(pb, g, at);
            let pa = vt.net.port_index("r1").unwrap();
            vt.inject(pa, f, at);
        }
        vt.run_until(Instant::from_nanos(2 * MS));
        vt.net.agent_action("cbr", false, vt.now).unwrap();
        vt.run_to_idle();
    }
}

/// `topo` with a plain port `x` (a TAP in emulation) behind a third interface of the
/// router, `dx` µs away.
fn topo_with_plain_port(la: Value, dx: u64) -> Value {
    let mut t = topo(la.clone(), la, json!({"size": 1000, "rate_bps": 1_000_000}));
    t["ports"] = json!([{"port": "x", "tap": "x"}]);
    t["routers"][0]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"port": "r2", "mac": "02:00:00:00:01:02", "ip": "10.1.3.1/24"}));
    t["links"].as_array_mut().unwrap().push(
        json!({"link": "lx", "a": "r2", "b": "x", "ab": {"delay_us": dx}, "ba": {"delay_us": dx}}),
    );
    t
}

#[test]
fn timers_far_from_every_plain_port_let_a_real_time_driver_sleep() {
    use wanlab_engine::model::network::timers::LAZY_GRACE_NS;
    let grace = Instant::from_nanos(LAZY_GRACE_NS);
    // Nothing leads out of the model: the source's timer may run up to the grace late.
    let l = json!({"bandwidth_bps": 10_000_000, "delay_us": 5000});
    let mut vt = net(
        topo(
            l.clone(),
            l.clone(),
            json!({"size": 1000, "rate_bps": 1_000_000}),
        ),
        1,
    );
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    assert_eq!(vt.net.poll_at(), Some(Instant::ZERO));
    assert_eq!(vt.net.wake_at(), Some(grace));
    // A plain port 100 µs behind the router: host a is 5.1 ms from the outside (lazy), the
    // router 0.1 ms (its deliveries are not).
    let mut vt = net(topo_with_plain_port(l.clone(), 100), 1);
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    assert_eq!(vt.net.wake_at(), Some(grace));
    // a's ARP request reaches the router 5 ms + 42 bytes at 10 Mbit/s later: a plain timer.
    vt.run_until(Instant::from_millis(1));
    let arp = Instant::from_nanos(5 * MS + ser10(42));
    assert_eq!(vt.net.poll_at(), Some(arp));
    assert_eq!(vt.net.wake_at(), Some(arp));
    // Host a 1.5 ms from the router: 1.6 ms from the outside, under the 2 ms bound.
    let near = json!({"bandwidth_bps": 10_000_000, "delay_us": 1500});
    let mut vt = net(topo_with_plain_port(near, 100), 1);
    vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
    assert_eq!(vt.net.wake_at(), Some(Instant::ZERO));
    // Results do not depend on it: the same run with and without the plain port delivers
    // the same packets at the same times.
    let run = |t: Value| {
        let mut vt = net(t, 3);
        vt.net.agent_action("cbr", true, Instant::ZERO).unwrap();
        vt.run_until(Instant::from_millis(500));
        sink(&vt)
    };
    assert_eq!(
        run(topo(
            l.clone(),
            l.clone(),
            json!({"size": 1000, "rate_bps": 1_000_000})
        )),
        run(topo_with_plain_port(l, 100))
    );
}
