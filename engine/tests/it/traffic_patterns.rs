//! Poisson and on/off (exponential, Pareto) sources in virtual time: mean rates, the
//! coefficient of variation of Poisson gaps, the Pareto heavy tail, determinism per seed, and
//! the same sources end to end through a simulated router to a UDP sink.

use serde_json::{json, Value};

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::protocol::ApplyReq;
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::model::sim::agent::{AgentStats, Cbr, CbrSpec, OnOffDist, Pattern};
use wanlab_engine::rng::stream_seed;
use wanlab_engine::time::Instant;

const MS: f64 = 1_000_000.0;

/// 1000-byte payloads at 1 Mbit/s: period 8 ms.
fn spec(pattern: Pattern) -> CbrSpec {
    CbrSpec {
        dst: [10, 0, 0, 2].into(),
        dport: 9,
        size: 1000,
        period_num: 1000 * 8 * 1_000_000_000,
        period_den: 1_000_000,
        pattern,
    }
}

/// The first `n` departure times (ns) of a source started at 0.
fn departures(pattern: Pattern, seed: u64, n: usize) -> Vec<u64> {
    let mut c = Cbr::new(spec(pattern), 1, seed);
    c.start(Instant::ZERO);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let t = c.poll_at().unwrap();
        let p = c.poll(t).unwrap();
        assert_eq!(
            u64::from_be_bytes(p[8..16].try_into().unwrap()),
            t.nanos(),
            "timestamp in the payload"
        );
        assert_eq!(p.len(), 1000);
        out.push(t.nanos());
    }
    out
}

fn gaps(d: &[u64]) -> Vec<f64> {
    d.windows(2).map(|w| (w[1] - w[0]) as f64).collect()
}

/// Mean payload rate in bit/s of departures `d` (n packets over [0, last departure]).
fn rate_bps(d: &[u64]) -> f64 {
    d.len() as f64 * 8000.0 / (*d.last().unwrap() as f64 / 1e9)
}

#[test]
fn poisson_mean_rate_and_cv() {
    let d = departures(Pattern::Poisson, stream_seed(1, "agent:p"), 200_000);
    let g = gaps(&d);
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / g.len() as f64;
    let cv = var.sqrt() / mean;
    eprintln!(
        "poisson: mean gap {:.4} ms, cv {cv:.4}, rate {:.0} bit/s",
        mean / MS,
        rate_bps(&d)
    );
    assert!((mean / (8.0 * MS) - 1.0).abs() < 0.01, "mean gap {mean}");
    assert!(
        (rate_bps(&d) / 1e6 - 1.0).abs() < 0.01,
        "rate {}",
        rate_bps(&d)
    );
    assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
    // Memoryless: the first departure is one exponential draw after the start, not at it.
    assert!(d[0] > 0);
}

/// Burst lengths in packets: a new burst starts after a gap longer than the ON period.
fn bursts(d: &[u64]) -> Vec<u64> {
    let mut out = vec![1u64];
    for g in gaps(d) {
        if g > 8.0 * MS + 1.0 {
            out.push(1);
        } else {
            *out.last_mut().unwrap() += 1;
        }
    }
    out.pop(); // the last burst may be cut short
    out
}

fn onoff(dist: OnOffDist) -> Pattern {
    // ON 400 ms (50 packets at 8 ms), OFF 600 ms: long-run 1 Mbit/s · 0.4.
    Pattern::OnOff {
        on_ns: 400.0 * MS,
        off_ns: 600.0 * MS,
        dist,
    }
}

#[test]
fn onoff_exponential_mean_rate() {
    let d = departures(
        onoff(OnOffDist::Exponential),
        stream_seed(1, "agent:e"),
        500_000,
    );
    let r = rate_bps(&d);
    let b = bursts(&d);
    let mean_burst = b.iter().sum::<u64>() as f64 / b.len() as f64;
    let max_burst = *b.iter().max().unwrap();
    eprintln!("exponential on/off: rate {r:.0} bit/s, {} bursts, mean {mean_burst:.2} pkts, max {max_burst}", b.len());
    assert!((r / 400_000.0 - 1.0).abs() < 0.03, "rate {r}");
    assert!(
        (mean_burst / 50.0 - 1.0).abs() < 0.03,
        "mean burst {mean_burst}"
    );
    assert!(
        max_burst < 20 * 50,
        "exponential has no heavy tail: {max_burst}"
    );
    // ns-2: the first packet leaves one period plus an idle time after the start.
    assert!(d[0] > 8_000_000);
}

#[test]
fn onoff_pareto_heavy_tail() {
    let d = departures(
        onoff(OnOffDist::Pareto { shape: 1.5 }),
        stream_seed(1, "agent:p"),
        1_000_000,
    );
    let r = rate_bps(&d);
    let b = bursts(&d);
    let mean_burst = b.iter().sum::<u64>() as f64 / b.len() as f64;
    let max_burst = *b.iter().max().unwrap();
    let long = b.iter().filter(|&&x| x > 20 * 50).count();
    eprintln!("pareto on/off: rate {r:.0} bit/s, {} bursts, mean {mean_burst:.2} pkts, max {max_burst}, {long} bursts > 20× mean", b.len());
    assert!((r / 400_000.0 - 1.0).abs() < 0.15, "rate {r}");
    assert!(
        (mean_burst / 50.0 - 1.0).abs() < 0.15,
        "mean burst {mean_burst}"
    );
    // P(X > 20·mean) = (1/60)^1.5 ≈ 0.2 %: dozens of such bursts, where exponential has none.
    assert!(long >= 5, "{long}");
    assert!(max_burst > 50 * 50, "max burst {max_burst}");
    // Pareto bursts are at least scale = mean·(shape−1)/shape ≈ 16.7 → 17 packets.
    assert!(*b.iter().min().unwrap() >= 16);
}

#[test]
fn same_seed_same_departures() {
    for p in [
        Pattern::Poisson,
        onoff(OnOffDist::Exponential),
        onoff(OnOffDist::Pareto { shape: 1.2 }),
    ] {
        let a = departures(p, stream_seed(1, "agent:x"), 2000);
        assert_eq!(a, departures(p, stream_seed(1, "agent:x"), 2000));
        assert_ne!(a, departures(p, stream_seed(2, "agent:x"), 2000));
        assert_ne!(a, departures(p, stream_seed(1, "agent:y"), 2000));
    }
    // CBR ignores the seed.
    assert_eq!(
        departures(Pattern::Cbr, 1, 100),
        departures(Pattern::Cbr, 2, 100)
    );
}

#[test]
fn stop_and_restart_continue_sequence() {
    let mut c = Cbr::new(spec(Pattern::Poisson), 1, 5);
    c.start(Instant::ZERO);
    for _ in 0..10 {
        let t = c.poll_at().unwrap();
        c.poll(t).unwrap();
    }
    c.stop();
    assert_eq!(c.poll_at(), None);
    let s = Instant::from_nanos(10_000_000_000);
    c.start(s);
    let t = c.poll_at().unwrap();
    assert!(t > s);
    let p = c.poll(t).unwrap();
    assert_eq!(u64::from_be_bytes(p[0..8].try_into().unwrap()), 10);
}

/// host a —1 ms— router —1 ms— host b; `src` on a sends to b's sink on port 5000.
fn net(src: Value, seed: u64) -> VirtualTime {
    let mut src = src;
    src["agent"] = json!("src");
    src["host"] = json!("a");
    src["dst"] = json!("10.1.2.2:5000");
    let l = json!({"delay_us": 1000});
    let req = json!({
        "hosts": [{"host": "a", "port": "pa", "mac": "02:00:00:00:00:0a", "ip": "10.1.1.2/24", "gateway": "10.1.1.1"},
                  {"host": "b", "port": "pb", "mac": "02:00:00:00:00:0b", "ip": "10.1.2.2/24", "gateway": "10.1.2.1"}],
        "routers": [{"router": "r", "interfaces": [
            {"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
            {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
        "links": [{"link": "la", "a": "pa", "b": "r0", "ab": l, "ba": l},
                  {"link": "lb", "a": "r1", "b": "pb", "ab": l, "ba": l}],
        "agents": [src, {"agent": "sink", "host": "b", "kind": "sink", "port": 5000}]
    });
    let a: ApplyReq = serde_json::from_value(req).unwrap();
    let spec = build_topology(&a).unwrap();
    let mut net = Network::new(seed);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    let mut vt = VirtualTime::new(net);
    vt.net.agent_action("src", true, Instant::ZERO).unwrap();
    vt.run_until(Instant::from_nanos(20_000_000_000));
    vt.net.agent_action("src", false, vt.now).unwrap();
    vt.run_to_idle();
    vt
}

fn stats(vt: &VirtualTime) -> Value {
    serde_json::to_value(vt.net.stats(None, Instant::ZERO).unwrap()).unwrap()
}

#[test]
fn end_to_end_through_router() {
    let cases = [
        json!({"kind": "poisson", "size": 500, "rate_bps": 400_000}),
        json!({"kind": "onoff", "size": 500, "rate_bps": 1_000_000, "on_us": 100_000, "off_us": 150_000}),
        json!({"kind": "onoff", "size": 500, "rate_bps": 1_000_000, "on_us": 100_000, "off_us": 150_000, "dist": "pareto", "shape": 1.4}),
    ];
    for c in cases {
        let vt = net(c.clone(), 1);
        let (sent, sink) = (
            vt.net.agent_stats("src").unwrap(),
            vt.net.agent_stats("sink").unwrap(),
        );
        let AgentStats::Cbr {
            sent_pkts,
            running: false,
            ..
        } = sent
        else {
            panic!("{sent:?}")
        };
        let AgentStats::Sink {
            pkts,
            lost,
            owd_min_us,
            ..
        } = sink
        else {
            panic!("{sink:?}")
        };
        // 20 s at 400 kbit/s of 500-byte payloads ≈ 2000 packets (Pareto: few long cycles).
        assert!((400..4000).contains(&sent_pkts), "{c}: {sent_pkts}");
        assert_eq!((pkts, lost), (sent_pkts, 0), "{c}");
        assert_eq!(owd_min_us, Some(2.0 * (1000.0)), "{c}");
        let s = stats(&vt);
        assert_eq!(s, stats(&net(c.clone(), 1)), "{c}: same seed");
        assert_ne!(
            s["agents"]["src"],
            stats(&net(c.clone(), 2))["agents"]["src"],
            "{c}: other seed"
        );
    }
}

#[test]
fn validation_names_fields() {
    let h = json!([{"host": "h", "port": "p", "mac": "02:00:00:00:00:01", "ip": "10.0.0.1/24"}]);
    let err = |agent: Value| {
        let mut a = agent;
        a["agent"] = json!("x");
        a["host"] = json!("h");
        // Through the protocol's parser, as on the socket: a field of another kind is refused
        // there, value ranges by `build_topology`.
        let (_, req) = wanlab_engine::control::protocol::parse_request_value(
            json!({"cmd": "apply", "hosts": h, "agents": [a]}),
        );
        match req {
            Err(e) => e,
            Ok(wanlab_engine::control::protocol::Request::Apply(req)) => {
                build_topology(&req).unwrap_err()
            }
            Ok(other) => panic!("{other:?}"),
        }
    };
    let base = |k: &str| json!({"kind": k, "dst": "10.0.0.2:9", "size": 100, "rate_bps": 1000});
    let with = |k: &str, f: &str, v: Value| {
        let mut b = base(k);
        b[f] = v;
        b
    };
    let cases = [
        (with("cbr", "on_us", json!(5)), "agents[0] (\"x\").on_us"),
        (
            with("poisson", "dist", json!("pareto")),
            "agents[0] (\"x\").dist",
        ),
        (base("onoff"), "agents[0] (\"x\").on_us"),
        (
            with("onoff", "on_us", json!(1000)),
            "agents[0] (\"x\").off_us",
        ),
        (
            json!({"kind": "onoff", "dst": "10.0.0.2:9", "size": 100, "rate_bps": 1000, "on_us": -1, "off_us": 5}),
            "on_us",
        ),
        (
            json!({"kind": "onoff", "dst": "10.0.0.2:9", "size": 100, "rate_bps": 1000, "on_us": 1, "off_us": 5, "dist": "zipf"}),
            "dist",
        ),
        (
            json!({"kind": "onoff", "dst": "10.0.0.2:9", "size": 100, "rate_bps": 1000, "on_us": 1, "off_us": 5, "dist": "pareto", "shape": 1.0}),
            "shape",
        ),
        (
            json!({"kind": "onoff", "dst": "10.0.0.2:9", "size": 100, "rate_bps": 1000, "on_us": 1, "off_us": 5, "shape": 2.0}),
            "shape",
        ),
        (
            json!({"kind": "poisson", "dst": "10.0.0.2:9", "size": 100}),
            "rate_bps",
        ),
        (json!({"kind": "sink", "port": 9, "on_us": 5}), "on_us"),
    ];
    for (a, want) in cases {
        let got = err(a.clone());
        assert!(got.contains(want), "{a}: {got} (want {want})");
    }
}
