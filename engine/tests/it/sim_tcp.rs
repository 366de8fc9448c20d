//! Simulated TCP between simulated hosts, in virtual time: goodput and RTT on a bottleneck,
//! single and burst losses by ordinal (NewReno vs Reno), CUBIC vs NewReno growth after a
//! loss, determinism, fairness of two flows, the control protocol, and arbitrary segments
//! into hosts with TCP agents (proptest).

use proptest::prelude::*;
use serde_json::{json, Value};

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::exec::Engine;
use wanlab_engine::control::protocol::{parse_request, ApplyReq};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::model::sim::tcp::{self, TcpSample, TxSeg};
use wanlab_engine::time::Instant;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// host a (10.1.1.2) —la— router r —lb— host b (10.1.2.2); `agents` on a and b.
fn topo(la: Value, lb: Value, agents: Vec<Value>) -> Value {
    json!({
        "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                  {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
        "routers": [{"router": "r", "interfaces": [
            {"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
            {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
        "links": [{"link": "la", "a": "pa", "b": "r0", "ab": la, "ba": la},
                  {"link": "lb", "a": "r1", "b": "pb", "ab": lb.clone(), "ba": lb}],
        "agents": agents
    })
}

/// A TCP sender `id` on a to b's port, with extra fields.
fn sender(id: &str, port: u16, extra: Value) -> Value {
    let mut v = json!({"agent": id, "host": "a", "kind": "tcp", "dst": format!("10.1.2.2:{port}")});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn sink(id: &str, port: u16) -> Value {
    json!({"agent": id, "host": "b", "kind": "tcp_sink", "port": port})
}

fn net(req: Value, seed: u64) -> VirtualTime {
    let a: ApplyReq = serde_json::from_value(req).unwrap();
    let spec = build_topology(&a).unwrap();
    let mut net = Network::new(seed);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

fn stats(vt: &VirtualTime, id: &str) -> Value {
    serde_json::to_value(vt.net.agent_stats(id).unwrap()).unwrap()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn fast() -> Value {
    json!({"bandwidth_bps": 100_000_000, "delay_us": 1000})
}

/// Serialization time in ns of `len` bytes at `bps`.
fn ser(len: u64, bps: u64) -> u64 {
    len * 8 * SEC / bps
}

#[test]
fn newreno_goodput_and_rtt() {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 20_000});
    let mut vt = net(
        topo(
            fast(),
            lb,
            vec![
                sender("t1", 5001, json!({"cc": "newreno"})),
                sink("s1", 5001),
            ],
        ),
        1,
    );
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    // The start-up (slow-start overshoot into a 50-frame queue, SACK-less recovery of many
    // losses) is over after a few seconds; measure the steady state from 5 s to 25 s.
    vt.run_until(Instant::from_nanos(5 * SEC));
    let (s0, t0) = (stats(&vt, "s1"), stats(&vt, "t1"));
    vt.run_until(Instant::from_nanos(25 * SEC));
    let s = stats(&vt, "s1");
    let t = stats(&vt, "t1");
    assert_eq!(t["state"], "established");
    assert_eq!(t["cc"], "newreno");
    // Frame = 1000 + 20 TCP + 20 IP + 14 Ethernet = 1054 bytes.
    let max_goodput = 10e6 * 1000.0 / 1054.0;
    let goodput = (u(&s, "bytes") - u(&s0, "bytes")) as f64 * 8.0 / 20.0;
    assert!(
        goodput > 0.97 * max_goodput && goodput <= max_goodput,
        "goodput {goodput} vs {max_goodput}; {t} {s}"
    );
    assert_eq!(
        u(&t, "timeouts"),
        u(&t0, "timeouts"),
        "no timeout in steady state"
    );
    // Over the whole run including start-up: still most of the link.
    let overall = u(&s, "bytes") as f64 * 8.0 / 25.0;
    assert!(overall > 0.9 * max_goodput, "{overall}");
    // ACKs in flight: the sender knows a little less than the sink received.
    assert!(
        u(&t, "acked_bytes") <= u(&s, "bytes") && u(&s, "bytes") - u(&t, "acked_bytes") < 150_000
    );
    // Base RTT of a data segment: 2 × (1 ms + 20 ms) + serialization of 1054 bytes at
    // 100 and 10 Mbit/s and of the 54-byte ACK on the way back; the very first segment waits
    // behind the handshake ACK on la (4.32 µs).
    let base = 2 * 21 * MS
        + ser(1054, 100_000_000)
        + ser(1054, 10_000_000)
        + ser(54, 10_000_000)
        + ser(54, 100_000_000);
    assert_eq!(base, 42_975_040);
    let min = f(&t, "min_rtt_us");
    assert!(
        min >= base as f64 / 1000.0 && min <= (base + ser(54, 100_000_000)) as f64 / 1000.0,
        "min_rtt {min}"
    );
    // The smoothed RTT includes the standing queue (at most 50 frames at the bottleneck).
    let srtt = f(&t, "srtt_us");
    assert!(
        srtt >= base as f64 / 1000.0 && srtt < (base + 51 * ser(1054, 10_000_000)) as f64 / 1000.0,
        "srtt {srtt}"
    );
    assert_eq!(vt.net.host_counters("b").unwrap().dropped_other, 0);
}

/// A `bytes`-limited SACK-less (ns-2) transfer over a 10 Mbit/s, 20 ms bottleneck with a
/// large queue, where `drop` lists ordinals of frames lost on lb (router → b): 1 = the router's ARP request,
/// 2 = SYN, 3 = handshake ACK, 4.. = data segments 1...
fn lossy(cc: &str, drop: &[u64], bytes: u64) -> VirtualTime {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 20_000, "queue": {"limit": 2000}});
    let mut lbab = lb.clone();
    lbab["loss"] = json!({"kind": "ordinals", "drop": drop});
    let mut req = topo(
        fast(),
        lb,
        vec![
            sender(
                "t1",
                5001,
                json!({"cc": cc, "bytes": bytes, "trace_interval_us": 1, "sack": false}),
            ),
            sink("s1", 5001),
        ],
    );
    req["links"][1]["ab"] = lbab;
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(60 * SEC));
    vt
}

/// The first forced sample at a reduction and the sample just before it.
fn reduction(trace: &[TcpSample]) -> (TcpSample, TcpSample) {
    let i = trace
        .windows(2)
        .position(|w| w[1].cwnd < w[0].cwnd)
        .expect("a reduction");
    (trace[i], trace[i + 1])
}

#[test]
fn single_loss_one_fast_retransmit() {
    let vt = lossy("newreno", &[100], 1_000_000);
    let t = stats(&vt, "t1");
    let s = stats(&vt, "s1");
    assert_eq!(t["state"], "done");
    assert_eq!(
        (
            u(&t, "fast_retransmits"),
            u(&t, "timeouts"),
            u(&t, "retransmits")
        ),
        (1, 0, 1),
        "{t}"
    );
    assert_eq!(u(&t, "sent_pkts"), 1001);
    assert_eq!(u(&s, "bytes"), 1_000_000);
    assert_eq!(u(&s, "pkts"), 1000);
    assert_eq!(u(&s, "dup_pkts"), 0);
    assert!(u(&s, "ooo_pkts") > 10, "{s}");
    assert_eq!(
        vt.net.stats(Some("lb"), vt.now).unwrap().links["lb"]
            .ab
            .drop_loss,
        1
    );
    // Halved: ssthresh = FlightSize/2 = cwnd/2 (slow start keeps the window full), and the
    // full ACK ends recovery with cwnd = ssthresh.
    let trace = vt.net.agent_trace("t1").unwrap();
    let (before, at) = reduction(trace);
    assert_eq!(at.ssthresh, before.cwnd / 2.0, "{before:?} {at:?}");
    assert_eq!(at.cwnd, at.ssthresh + 3.0);
    assert_eq!(at.retransmits, 1);
    let exit = trace
        .iter()
        .find(|x| x.t_ns > at.t_ns && x.cwnd < at.cwnd)
        .unwrap();
    assert_eq!(exit.cwnd, at.ssthresh);
}

/// One bulk flow (`extra` fields) through a 2 Mbit/s, 20 ms bottleneck with ns-2's
/// 50-packet DropTail queue (five times the BDP), for 20 s.
fn deep_queue(extra: Value) -> VirtualTime {
    let lb = json!({"bandwidth_bps": 2_000_000, "delay_us": 20_000, "queue": {"limit": 50}});
    let req = topo(
        fast(),
        lb,
        vec![sender("t1", 5001, extra), sink("s1", 5001)],
    );
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(20 * SEC));
    vt
}

#[test]
fn deep_queue_no_spurious_retransmissions() {
    // Slow start overshoots the 60-packet pipe by about as much again: dozens of losses in
    // one window. With SACK (Linux's default) every retransmission replaces a dropped
    // packet and the link stays busy; without it a sender's go-back-N after timeouts
    // used to resend hundreds of segments the sink already had (584 retransmissions for
    // 148 drops, 1.6 Mbit/s).
    for cc in ["newreno", "cubic"] {
        let vt = deep_queue(json!({"cc": cc}));
        let (t, s) = (stats(&vt, "t1"), stats(&vt, "s1"));
        let drops = vt.net.stats(Some("lb"), vt.now).unwrap().links["lb"]
            .ab
            .drop_queue;
        assert!(drops > 5, "{cc}: {drops}");
        assert_eq!(u(&s, "dup_pkts"), 0, "{cc}: {s}");
        // every retransmission replaced a drop (one may still be due when the run ends)
        assert!(u(&t, "retransmits") <= drops, "{cc}: {drops} drops, {t}");
        let mbps = u(&s, "bytes") as f64 * 8.0 / 20e6;
        assert!(mbps > 1.85, "{cc}: {mbps} Mbit/s");
    }
}

fn done_at(vt: &VirtualTime) -> u64 {
    vt.net.agent_trace("t1").unwrap().last().unwrap().t_ns
}

#[test]
fn burst_loss_newreno_vs_reno() {
    let drop = [100, 101, 102];
    let nr = lossy("newreno", &drop, 1_000_000);
    let re = lossy("reno", &drop, 1_000_000);
    let (tn, tr) = (stats(&nr, "t1"), stats(&re, "t1"));
    for (vt, t) in [(&nr, &tn), (&re, &tr)] {
        assert_eq!(t["state"], "done", "{t}");
        assert_eq!(u(&stats(vt, "s1"), "bytes"), 1_000_000);
    }
    // NewReno: one fast retransmit, then the two partial ACKs retransmit the other holes.
    assert_eq!(
        (
            u(&tn, "fast_retransmits"),
            u(&tn, "timeouts"),
            u(&tn, "retransmits")
        ),
        (1, 0, 3),
        "{tn}"
    );
    // Reno leaves recovery on the first partial ACK and waits for the timeout.
    assert!(u(&tr, "timeouts") >= 1, "{tr}");
    assert!(
        done_at(&re) > done_at(&nr) + 150 * MS,
        "reno {} newreno {}",
        done_at(&re),
        done_at(&nr)
    );
    // Tahoe also completes.
    let ta = lossy("tahoe", &drop, 1_000_000);
    let tt = stats(&ta, "t1");
    assert_eq!(tt["state"], "done", "{tt}");
    assert_eq!(u(&stats(&ta, "s1"), "bytes"), 1_000_000);
    assert_eq!(u(&tt, "fast_retransmits"), 1);
}

/// One loss (frame `drop` on the bottleneck) on a 100 Mbit/s, 50 ms path, run for `secs`.
fn high_bdp(cc: &str, secs: u64) -> VirtualTime {
    let lb = json!({"bandwidth_bps": 100_000_000, "delay_us": 50_000, "queue": {"limit": 10000}});
    let mut lbab = lb.clone();
    lbab["loss"] = json!({"kind": "ordinals", "drop": [1500]});
    let la = json!({"bandwidth_bps": 1_000_000_000, "delay_us": 1000});
    let mut req = topo(
        la,
        lb,
        vec![
            sender("t1", 5001, json!({"cc": cc, "trace_interval_us": 1})),
            sink("s1", 5001),
        ],
    );
    req["links"][1]["ab"] = lbab;
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(secs * SEC));
    vt
}

#[test]
fn cubic_grows_faster_than_newreno() {
    let secs = 6;
    let cu = high_bdp("cubic", secs);
    let nr = high_bdp("newreno", secs);
    let (tc, tn) = (stats(&cu, "t1"), stats(&nr, "t1"));
    assert_eq!(tc["cc"], "cubic");
    for t in [&tc, &tn] {
        assert_eq!((u(t, "fast_retransmits"), u(t, "timeouts")), (1, 0), "{t}");
    }
    let (bc, ac) = reduction(cu.net.agent_trace("t1").unwrap());
    assert_eq!(ac.ssthresh, bc.cwnd * 0.7, "CUBIC β = 0.7: {bc:?} {ac:?}");
    let (bn, an) = reduction(nr.net.agent_trace("t1").unwrap());
    assert_eq!(an.ssthresh, bn.cwnd / 2.0);
    // HyStart ends CUBIC's slow start when the ACK train spans half the RTT: the loss
    // finds it in congestion avoidance with a smaller window
    assert!(
        bc.cwnd < bn.cwnd,
        "HyStart: cubic {} vs newreno {}",
        bc.cwnd,
        bn.cwnd
    );
    // Growth since the reduction.
    let gc = f(&tc, "cwnd") - ac.ssthresh;
    let gn = f(&tn, "cwnd") - an.ssthresh;
    eprintln!(
        "loss at cwnd {}: cubic ssthresh {} now {} (+{gc}); newreno ssthresh {} now {} (+{gn})",
        bc.cwnd,
        ac.ssthresh,
        f(&tc, "cwnd"),
        an.ssthresh,
        f(&tn, "cwnd")
    );
    assert!(gn > 0.0 && gc > 3.0 * gn, "cubic +{gc}, newreno +{gn}");
    assert!(u(&stats(&cu, "s1"), "bytes") > u(&stats(&nr, "s1"), "bytes"));
}

fn random_loss_run(seed: u64, cc: &str) -> (Value, Vec<TcpSample>) {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 10_000, "loss": {"kind": "bernoulli", "p": 0.01}, "jitter_us": 200});
    let mut vt = net(
        topo(
            fast(),
            lb,
            vec![
                sender("t1", 5001, json!({"cc": cc, "trace_interval_us": 10_000})),
                sink("s1", 5001),
            ],
        ),
        seed,
    );
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(5 * SEC));
    let st = serde_json::to_value(vt.net.stats(None, vt.now).unwrap()).unwrap();
    (st, vt.net.take_agent_trace("t1").unwrap())
}

#[test]
fn deterministic() {
    for cc in ["newreno", "cubic"] {
        let (s1, t1) = random_loss_run(7, cc);
        let (s2, t2) = random_loss_run(7, cc);
        assert_eq!(s1, s2);
        assert_eq!(t1, t2);
        assert!(t1.len() > 100);
        assert!(s1["agents"]["t1"]["retransmits"].as_u64().unwrap() > 0);
        let (s3, _) = random_loss_run(8, cc);
        assert_ne!(s1, s3);
    }
}

#[test]
fn two_flows_share_fairly() {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 10_000});
    let agents = vec![
        sender("t1", 5001, json!({})),
        sender("t2", 5002, json!({})),
        sink("s1", 5001),
        sink("s2", 5002),
    ];
    let mut vt = net(topo(fast(), lb, agents), 3);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(500 * MS));
    vt.net.agent_action("t2", true, vt.now).unwrap();
    vt.run_until(Instant::from_nanos(60 * SEC));
    let x1 = u(&stats(&vt, "s1"), "bytes") as f64;
    let x2 = u(&stats(&vt, "s2"), "bytes") as f64;
    let jain = (x1 + x2).powi(2) / (2.0 * (x1 * x1 + x2 * x2));
    eprintln!("jain {jain}: {x1} {x2}");
    assert!(jain > 0.9, "jain {jain}: {x1} {x2}");
    let total = (x1 + x2) * 8.0 / 60.0;
    assert!(total > 0.9 * 10e6 * 1000.0 / 1054.0, "{total}");
}

#[test]
fn delayed_ack_sink() {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 5_000});
    let mut s = sink("s1", 5001);
    s["delayed_ack"] = json!(true);
    let mut vt = net(
        topo(
            fast(),
            lb,
            vec![sender("t1", 5001, json!({"bytes": 100_001})), s],
        ),
        1,
    );
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(10 * SEC));
    let t = stats(&vt, "t1");
    assert_eq!(t["state"], "done");
    assert_eq!(u(&t, "sent_pkts"), 101, "last segment is 1 byte: {t}");
    assert_eq!(u(&stats(&vt, "s1"), "bytes"), 100_001);
    assert_eq!(u(&t, "retransmits"), 0);
    // Roughly one ACK per two segments (plus handshake, FIN and timer-driven ones).
    let hb = vt.net.host_counters("b").unwrap();
    assert!(hb.tcp_sent < 70, "{hb:?}");
}

#[test]
fn linux_acks_sink() {
    // Linux's receiver: 16 quick ACKs, then one per two segments; ns-2's DelAck with a
    // 100 ms interval_ waits that long for a lone last segment
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 5_000});
    let mut got = Vec::new();
    for acks in [
        json!({"acks": "linux"}),
        json!({"acks": "delayed", "delack_us": 100_000}),
    ] {
        let mut s = sink("s1", 5001);
        s.as_object_mut()
            .unwrap()
            .extend(acks.as_object().unwrap().clone());
        let mut vt = net(
            topo(
                fast(),
                lb.clone(),
                vec![
                    sender("t1", 5001, json!({"bytes": 30 * 1448 + 1, "mss": 1448})),
                    s,
                ],
            ),
            1,
        );
        vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
        vt.run_until(Instant::from_nanos(10 * SEC));
        let t = stats(&vt, "t1");
        assert_eq!(t["state"], "done");
        let k = stats(&vt, "s1");
        assert_eq!(u(&k, "bytes"), 30 * 1448 + 1);
        assert_eq!((u(&t, "retransmits"), u(&k, "ooo_pkts")), (0, 0));
        got.push(u(&k, "acks"));
    }
    // Linux: 16 quick, then one per two segments except two that grow the window (the
    // receiver's RTT from the first echoed timestamp has passed, autotuning raised the
    // window's bound), the 1-byte last one by the timer, the FIN; DelAck: 30/2, the last
    // one by the timer, the FIN
    assert_eq!(got, [27, 15 + 1 + 1]);
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
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 5_000});
    let mut req = topo(
        fast(),
        lb,
        vec![
            sender(
                "t1",
                5001,
                json!({"cc": "cubic", "bytes": 50_000, "trace_interval_us": 1000, "mss": 500}),
            ),
            sink("s1", 5001),
        ],
    );
    req["cmd"] = json!("apply");
    exec(&mut e, &req.to_string(), Instant::ZERO).unwrap();
    let st = exec(&mut e, r#"{"cmd":"stats","target":"t1"}"#, Instant::ZERO).unwrap();
    assert_eq!(st["agents"]["t1"]["state"], "idle");
    assert_eq!(st["agents"]["t1"]["srtt_us"], Value::Null);
    exec(
        &mut e,
        r#"{"cmd":"agent","agent":"t1","action":"start"}"#,
        Instant::ZERO,
    )
    .unwrap();
    while let Some(t) = e
        .net
        .poll_at()
        .filter(|t| *t <= Instant::from_nanos(5 * SEC))
    {
        e.poll(t);
    }
    let st = exec(&mut e, r#"{"cmd":"stats"}"#, Instant::ZERO).unwrap();
    assert_eq!(st["agents"]["t1"]["state"], "done");
    assert_eq!(st["agents"]["t1"]["sent_pkts"], 100);
    assert_eq!(
        st["agents"]["s1"],
        json!({"kind": "tcp_sink", "port": 5001, "pkts": 100, "bytes": 50_000, "dup_pkts": 0, "ooo_pkts": 0, "acks": 101})
    );
    assert_eq!(
        st["hosts"]["b"]["tcp_received"], 103,
        "SYN + ACK + 100 data + FIN: {}",
        st["hosts"]["b"]
    );
    let tr = exec(&mut e, r#"{"cmd":"trace","agent":"t1"}"#, Instant::ZERO).unwrap();
    let samples = tr["samples"].as_array().unwrap();
    assert!(samples.len() > 3);
    let last = samples.last().unwrap().as_array().unwrap();
    assert_eq!(last.len(), 6);
    assert_eq!(last[4], 50_000);
    let tr = exec(
        &mut e,
        r#"{"cmd":"trace","agent":"t1","clear":true}"#,
        Instant::ZERO,
    )
    .unwrap();
    assert_eq!(tr["samples"].as_array().unwrap().len(), samples.len());
    let tr = exec(&mut e, r#"{"cmd":"trace","agent":"t1"}"#, Instant::ZERO).unwrap();
    assert!(tr["samples"].as_array().unwrap().is_empty());
    assert!(
        exec(&mut e, r#"{"cmd":"trace","agent":"s1"}"#, Instant::ZERO)
            .unwrap_err()
            .contains("not a tcp")
    );
    assert!(
        exec(&mut e, r#"{"cmd":"trace","agent":"zz"}"#, Instant::ZERO)
            .unwrap_err()
            .contains("unknown")
    );
    assert!(exec(
        &mut e,
        r#"{"cmd":"agent","agent":"s1","action":"start"}"#,
        Instant::ZERO
    )
    .unwrap_err()
    .contains("tcp_sink"));

    let h = r#""hosts":[{"host":"h","port":"p","mac":"02:00:00:00:00:01","ip":"10.0.0.1/24"}]"#;
    let cases: &[(&str, &str)] = &[
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","cc":"vegas"}"#,
            "agents[0] (\"x\").cc",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","mss":0}"#,
            "agents[0] (\"x\").mss",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","mss":65496}"#,
            "agents[0] (\"x\").mss",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","window":0}"#,
            "agents[0] (\"x\").window",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","size":10}"#,
            "agents[0] (\"x\").size",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp","dst":"10.0.0.2:9","delayed_ack":true}"#,
            "agents[0] (\"x\").delayed_ack",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp"}"#,
            "agents[0] (\"x\").dst",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink"}"#,
            "agents[0] (\"x\").port",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"cc":"reno"}"#,
            "agents[0] (\"x\").cc",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"acks":"sometimes"}"#,
            "agents[0] (\"x\").acks: must be each, delayed or linux",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"acks":"linux","delayed_ack":true}"#,
            "agents[0] (\"x\").acks",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"acks":"linux","delack_us":100}"#,
            "agents[0] (\"x\").delack_us",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"rmem":[4096,87380,16777216]}"#,
            "agents[0] (\"x\").rmem: only with acks \"linux\"",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"acks":"linux","rmem":[4096,87380]}"#,
            "agents[0] (\"x\").rmem: must be [min, default, max]",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"tcp_sink","port":9,"acks":"linux","rmem":[4096,87380,4096]}"#,
            "agents[0] (\"x\").rmem: must be [min, default, max]",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"sink","port":9,"mss":100}"#,
            "agents[0] (\"x\").mss",
        ),
        (
            r#"{"agent":"x","host":"h","kind":"cbr","dst":"10.0.0.2:9","size":100,"rate_bps":1,"bytes":5}"#,
            "agents[0] (\"x\").bytes",
        ),
    ];
    for (agent, want) in cases {
        let line = format!(r#"{{"cmd":"apply",{h},"agents":[{agent}]}}"#);
        let got = exec(&mut Engine::new(1, 0), &line, Instant::ZERO).unwrap_err();
        assert!(got.contains(want), "{line}: {got} (want {want})");
    }
    let two = format!(
        r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"tcp_sink","port":9}},{{"agent":"y","host":"h","kind":"tcp_sink","port":9}}]}}"#
    );
    assert!(exec(&mut Engine::new(1, 0), &two, Instant::ZERO)
        .unwrap_err()
        .contains("agents[1] (\"y\").port"));
    // A UDP sink and a TCP sink may share a port number.
    let both = format!(
        r#"{{"cmd":"apply",{h},"agents":[{{"agent":"x","host":"h","kind":"sink","port":9}},{{"agent":"y","host":"h","kind":"tcp_sink","port":9}}]}}"#
    );
    exec(&mut Engine::new(1, 0), &both, Instant::ZERO).unwrap();
}

/// Frames to host b (10.1.2.2, 02:00:00:00:00:0b) from a plain port "x" linked to its port.
fn fuzz_net() -> (VirtualTime, usize) {
    let req = json!({
        "ports": [],
        "hosts": [{"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24"}],
        "links": [{"link": "l", "a": "x", "b": "pb", "ab": {"delay_us": 10}, "ba": {"delay_us": 10}}],
        "agents": [{"agent": "s", "host": "b", "kind": "tcp_sink", "port": 5001, "delayed_ack": true},
                   {"agent": "t", "host": "b", "kind": "tcp", "dst": "10.1.2.9:80", "mss": 100, "initial_window": 2}]
    });
    let a: ApplyReq = serde_json::from_value(req).unwrap();
    let mut spec = build_topology(&a).unwrap();
    spec.ports.push("x".into());
    let mut net = Network::new(1);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    let x = net.port_index("x").unwrap();
    let mut vt = VirtualTime::new(net);
    vt.net.agent_action("t", true, Instant::ZERO).unwrap();
    (vt, x)
}

fn frame(src: [u8; 4], sport: u16, dport: u16, seg: &TxSeg) -> Vec<u8> {
    let dst = [10, 1, 2, 2];
    let t = tcp::build(src, dst, sport, dport, seg);
    let mut ip = wanlab_engine::wire::ipv4::header(src, dst, 6, 64, 1, t.len()).to_vec();
    ip.extend_from_slice(&t);
    wanlab_engine::wire::ethernet::build(
        wanlab_engine::wire::ethernet::Address([2, 0, 0, 0, 0, 0x0b]),
        wanlab_engine::wire::ethernet::Address([2, 0, 0, 0, 0, 0x99]),
        0x0800,
        &ip,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_segments_never_panic(
        segs in prop::collection::vec((0u8..4, any::<u32>(), 0u32..5000, any::<u8>(), 0usize..1500, 0u64..100_000_000, any::<bool>()), 1..60),
        garbage in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let (mut vt, x) = fuzz_net();
        let mut at = 0u64;
        for (p, seq, ack, flags, len, dt, small) in segs {
            let dport = [5001, 49152 + 1, 49152, 7][usize::from(p)];
            // Small sequence numbers hit the sender's and sink's windows.
            let seq = if small { seq % 4000 } else { seq };
            let ack = if small { ack } else { ack.wrapping_mul(2_654_435_761) };
            at += dt;
            let src = if small { [10, 1, 2, 9] } else { [10, 1, 2, 7] };
            vt.inject(x, frame(src, 80, dport, &TxSeg { seq, ack, flags, len, ..Default::default() }), Instant::from_nanos(at));
        }
        vt.inject(x, garbage, Instant::from_nanos(at));
        vt.run_until(Instant::from_nanos(at + 10 * SEC));
        let _ = vt.net.stats(None, vt.now).unwrap();
    }
}

#[test]
fn tahoe_restarts_from_one() {
    let vt = lossy("tahoe", &[100], 1_000_000);
    let (before, at) = reduction(vt.net.agent_trace("t1").unwrap());
    assert_eq!(at.cwnd, 1.0);
    assert_eq!(at.ssthresh, before.cwnd / 2.0);
    assert_eq!(u(&stats(&vt, "s1"), "bytes"), 1_000_000);
}

#[test]
fn lost_syn_is_retransmitted() {
    // Frame 2 on lb is the SYN (after the router's ARP request).
    let vt = lossy("newreno", &[2], 100_000);
    let t = stats(&vt, "t1");
    assert_eq!(t["state"], "done");
    assert_eq!(
        (u(&t, "retransmits"), u(&t, "timeouts")),
        (0, 0),
        "SYN retransmissions are not data: {t}"
    );
    let trace = vt.net.agent_trace("t1").unwrap();
    // Established after the 1 s initial RTO, with an initial window of 1.
    assert!(
        trace[0].t_ns > SEC && trace[0].t_ns < SEC + 100 * MS,
        "{:?}",
        trace[0]
    );
    assert_eq!(trace[0].cwnd, 1.0);
    assert_eq!(u(&stats(&vt, "s1"), "bytes"), 100_000);
}

#[test]
fn stop_pauses_and_start_resumes() {
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 10_000});
    let mut vt = net(
        topo(
            fast(),
            lb,
            vec![
                sender("t1", 5001, json!({"bytes": 5_000_000})),
                sink("s1", 5001),
            ],
        ),
        1,
    );
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(SEC));
    vt.net.agent_action("t1", false, vt.now).unwrap();
    assert_eq!(stats(&vt, "t1")["state"], "idle");
    vt.run_until(Instant::from_nanos(3 * SEC));
    let sent = u(&stats(&vt, "t1"), "sent_pkts");
    let got = u(&stats(&vt, "s1"), "bytes");
    assert!(got > 100_000 && got < 5_000_000, "{got}");
    vt.run_until(Instant::from_nanos(5 * SEC));
    assert_eq!(
        u(&stats(&vt, "t1"), "sent_pkts"),
        sent,
        "nothing sent while stopped"
    );
    vt.net.agent_action("t1", true, vt.now).unwrap();
    vt.run_until(Instant::from_nanos(30 * SEC));
    let t = stats(&vt, "t1");
    assert_eq!(t["state"], "done", "{t}");
    assert_eq!(u(&stats(&vt, "s1"), "bytes"), 5_000_000);
    assert!(vt.net.poll_at().is_none(), "no timers left");
}

#[test]
fn captured_segments_are_valid_tcp() {
    use wanlab_engine::model::network::{Dir, Output};
    use wanlab_engine::wire::{ethernet, ipv4};
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 1_000});
    let mut vt = net(
        topo(
            fast(),
            lb,
            vec![
                sender("t1", 5001, json!({"bytes": 20_000, "mss": 1460})),
                sink("s1", 5001),
            ],
        ),
        1,
    );
    for p in vt.net.select("lb", None, Dir::Both).unwrap() {
        vt.net.set_capture(p, true);
    }
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    let mut frames = Vec::new();
    while let Some(t) = vt.net.poll_at() {
        vt.net.poll(t, |o| {
            if let Output::Capture { data, .. } = o {
                frames.push(data.to_vec());
            }
        });
    }
    let mut flags = Vec::new();
    let mut payload = 0;
    for f in &frames {
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        if eth.ethertype() != 0x0800 {
            continue;
        }
        let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.protocol(), 6);
        let seg = tcp::parse(ip.src(), ip.dst(), ip.payload()).expect("valid TCP checksum");
        payload += seg.payload_len;
        flags.push(seg.flags);
    }
    assert_eq!(payload, 20_000);
    assert_eq!(&flags[..3], &[tcp::SYN, tcp::SYN | tcp::ACK, tcp::ACK]);
    assert!(flags.contains(&(tcp::FIN | tcp::ACK)));
    // 14 data segments (13 × 1460 + 440) and their 14 ACKs, handshake, FIN and its ACK.
    assert_eq!(flags.len(), 3 + 14 + 14 + 2);
}

#[test]
fn linux_sink_lets_cubic_leave_slow_start_in_time() {
    // One CUBIC flow through 10 Mbit/s, 20 ms and a queue of one BDP (35 packets) into
    // Linux's receiver. Its window grows by two segments per segment in slow start, and
    // Linux ACKs every segment that grows it: an ACK train HyStart ends slow start on at
    // about cwnd 60, as Linux does (61). With one ACK per two segments throughout, no
    // train formed (ACKs 2.4 ms apart, HyStart's limit is 2 ms), slow start overshot to
    // cwnd 142 and 544 segments were sent again.
    let lb = json!({"bandwidth_bps": 10_000_000, "delay_us": 20_000, "queue": {"limit": 35}});
    let mut s = sink("s1", 5001);
    s["acks"] = json!("linux");
    let req = topo(
        fast(),
        lb,
        vec![
            sender(
                "t1",
                5001,
                json!({"cc": "cubic", "mss": 1448, "trace_interval_us": 10_000}),
            ),
            s,
        ],
    );
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(10 * SEC));
    let trace = vt.net.agent_trace("t1").unwrap();
    let exit = trace.iter().find(|x| x.ssthresh < 1e6).unwrap();
    assert_eq!(
        exit.retransmits, 0,
        "slow start ended by HyStart, not a loss"
    );
    assert!((55.0..66.0).contains(&exit.ssthresh), "{exit:?}");
    let (t, k) = (stats(&vt, "t1"), stats(&vt, "s1"));
    assert!(u(&t, "retransmits") <= 10, "{t}");
    let mbps = u(&k, "bytes") as f64 * 8.0 / 10e6;
    assert!(mbps > 9.3, "{mbps} Mbit/s");
}

/// One flow of `cc` into Linux's receiver through `bps` and `delay_us` with a queue of
/// `limit` packets, `secs` seconds; the sink's extra fields in `sink_extra`.
fn linux_sink_run(cc: &str, bps: u64, delay_us: u64, limit: u64, secs: u64) -> VirtualTime {
    let lb = json!({"bandwidth_bps": bps, "delay_us": delay_us, "queue": {"limit": limit}});
    let mut s = sink("s1", 5001);
    s["acks"] = json!("linux");
    let req = topo(
        fast(),
        lb,
        vec![
            sender(
                "t1",
                5001,
                json!({"cc": cc, "mss": 1448, "trace_interval_us": 10_000}),
            ),
            s,
        ],
    );
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(secs * SEC));
    vt
}

#[test]
fn linux_sink_window_follows_the_queueing_delay() {
    // 10 Mbit/s, 5 ms: a 12 ms round trip holds 10 segments; the queue holds 40 more. Linux's
    // receiver measures its RTT from the timestamps the sender echoes, so its estimate
    // grows with the queue and autotuning keeps the window ahead of the flight: the flight
    // fills the queue (RTT near 60 ms) and overflows it, as Linux's does. With the
    // handshake's 12 ms as the receiver's RTT the window stopped the flight near twice the
    // path's capacity (RTT below 30 ms, no loss).
    let vt = linux_sink_run("reno", 10_000_000, 5_000, 40, 5);
    let trace = vt.net.agent_trace("t1").unwrap();
    let max_srtt = trace.iter().filter_map(|x| x.srtt_us).fold(0.0, f64::max);
    assert!(max_srtt > 45_000.0, "max srtt {max_srtt} µs");
    let drops = vt.net.stats(Some("lb"), vt.now).unwrap().links["lb"]
        .ab
        .drop_queue;
    assert!(drops > 0, "the queue never overflowed");
    let mbps = u(&stats(&vt, "s1"), "bytes") as f64 * 8.0 / 5e6;
    assert!(mbps > 9.0, "{mbps} Mbit/s");
}

#[test]
fn cubic_after_hystart_grows_five_percent_per_round_trip() {
    // 10 Mbit/s, 20 ms, a one-BDP queue, Linux's receiver: HyStart ends slow start near
    // cwnd 60 with no loss, so W_max is 0 and Linux's CUBIC grows by at least 5 % per round
    // trip (cnt ≤ 20) until the queue overflows near 70. Following the cubic curve from
    // cwnd 60 alone (W_max = 0: C·t³, 0.4 segments after the first second) it crept up
    // by about one segment per round trip from the Reno-friendly estimate.
    let vt = linux_sink_run("cubic", 10_000_000, 20_000, 35, 3);
    let trace = vt.net.agent_trace("t1").unwrap();
    let i = trace.iter().position(|x| x.ssthresh < 1e6).unwrap();
    let exit = trace[i];
    assert_eq!(exit.retransmits, 0, "HyStart, not a loss: {exit:?}");
    let rtt_ns = exit.srtt_us.unwrap() * 1000.0;
    // three round trips later (one more for the ACKs of the growth to return): 5 % per
    // round trip from the exit, within half a segment
    let at = exit.t_ns + (4.0 * rtt_ns) as u64;
    let later = trace[i..]
        .iter()
        .take_while(|x| x.retransmits == 0)
        .find(|x| x.t_ns >= at)
        .expect("no loss within four round trips of the exit");
    let want = exit.cwnd * 1.05f64.powi(3);
    eprintln!("exit {exit:?}, srtt {rtt_ns} ns, later {later:?}, want {want}");
    assert!(later.cwnd >= want - 0.5, "{later:?} < {want}");
}

#[test]
fn cubic_follows_its_curve_after_a_loss() {
    // One loss on a 100 Mbit/s, 50 ms path with a deep queue: after the reduction to
    // β·W_max, cwnd follows W(t) = C·(t − K)³ + W_max, K = ∛(W_max·(1 − β)/C), t from the
    // start of congestion avoidance (recovery's end), within 1 % of W_max (the curve is
    // aimed at one least RTT ahead and reached within one RTT)
    let vt = high_bdp("cubic", 16);
    let trace = vt.net.agent_trace("t1").unwrap();
    let (before, at) = reduction(trace);
    let w_max = before.cwnd;
    let k = (w_max * 0.3 / 0.4).cbrt();
    let j = trace
        .iter()
        .position(|x| x.t_ns > at.t_ns && x.cwnd <= at.ssthresh + 0.5)
        .unwrap();
    let t0 = trace[j].t_ns;
    let mut worst = 0.0f64;
    let mut n = 0;
    for x in &trace[j..] {
        let t = (x.t_ns - t0) as f64 / 1e9;
        let w = 0.4 * (t - k).powi(3) + w_max;
        worst = worst.max((x.cwnd - w).abs() / w_max);
        n += 1;
    }
    let last = trace.last().unwrap();
    eprintln!(
        "w_max {w_max} k {k} from {:?} to {last:?}: {n} samples, worst {worst}",
        trace[j]
    );
    let st = stats(&vt, "t1");
    assert_eq!(
        (u(&st, "retransmits"), u(&st, "timeouts")),
        (1, 0),
        "one loss: {st}"
    );
    assert!((last.t_ns - t0) as f64 / 1e9 > 1.3 * k, "past the plateau");
    assert!(worst < 0.01, "worst {worst}");
}

/// The grid's 200M-20ms-q4 cell (bench/tcp_acks.py) for `secs` seconds: 1 Gbit/s access,
/// 200 Mbit/s × 20 ms with a 4-BDP queue (2800 packets), one flow of `cc` into Linux's
/// receiver with a 32 MiB tcp_rmem ceiling, so the flight overflows the queue.
fn linux_sink_200m(cc: &str, secs: u64) -> VirtualTime {
    let la = json!({"bandwidth_bps": 1_000_000_000, "delay_us": 1000});
    let lb = json!({"bandwidth_bps": 200_000_000, "delay_us": 20_000, "queue": {"limit": 2800}});
    let mut s = sink("s1", 5001);
    s["acks"] = json!("linux");
    s["rmem"] = json!([4096, 131_072, 33_554_432]);
    let req = topo(
        la,
        lb,
        vec![sender("t1", 5001, json!({"cc": cc, "mss": 1448})), s],
    );
    let mut vt = net(req, 1);
    vt.net.agent_action("t1", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(secs * SEC));
    vt
}

#[test]
fn linux_sink_high_bdp_retransmits_only_drops() {
    // Hundreds of drops in one window leave hundreds of holes, and Linux's receiver
    // compresses its ACKs (one per millisecond, 17 segments here) and sends 3 SACK blocks.
    // It remembers 4 blocks and sends a held-back ACK before it forgets one, so every
    // block reaches the sender once and the sender retransmits about once per drop. The
    // sink used to derive its blocks from its last 6 arrivals (one block when they all
    // extended it) and to drop blocks while an ACK was held: the sender never heard of
    // segments that had arrived, RACK marked them lost, and each spurious retransmission,
    // once cumulatively acknowledged, advanced RACK past segments still queued (6 s:
    // CUBIC 2230 retransmissions for 468 drops, NewReno 13027 for 6971).
    for cc in ["cubic", "newreno"] {
        let vt = linux_sink_200m(cc, 6);
        let (t, s) = (stats(&vt, "t1"), stats(&vt, "s1"));
        let drops = vt.net.stats(Some("lb"), vt.now).unwrap().links["lb"]
            .ab
            .drop_queue;
        let retx = u(&t, "retransmits");
        eprintln!("{cc}: {drops} drops, {t}, {s}");
        assert!(drops > 50, "{cc}: the queue overflowed only {drops} times");
        assert!(
            retx as f64 <= 1.2 * drops as f64 + 5.0,
            "{cc}: {retx} retransmissions for {drops} drops"
        );
        assert!(u(&s, "dup_pkts") <= 5, "{cc}: {s}");
    }
}
