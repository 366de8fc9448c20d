//! Pipelines, links and LANs in virtual time, with exact expected delivery times.

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::params::merge_params;
use wanlab_engine::control::protocol::ParamsSpec;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::{Dir, LanSpec, LinkSpec, MemberSpec, Network, TopologySpec};
use wanlab_engine::model::params::LinkParams;
use wanlab_engine::time::Instant;

fn params(json: &str) -> LinkParams {
    let spec: ParamsSpec = serde_json::from_str(json).unwrap();
    merge_params(&LinkParams::default(), &spec, "test").unwrap()
}

/// Ethernet frame of `len` bytes, from `src` to `dst` MAC (last byte), sequence in payload.
fn frame(len: usize, dst: u8, src: u8, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; len.max(18)];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f.truncate(len.max(18));
    f
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[14..18].try_into().unwrap())
}

/// Two ports "a", "b" joined by link "l" with the given directions.
fn link(ab: &str, ba: &str) -> VirtualTime {
    let mut net = Network::new(1);
    let spec = TopologySpec {
        ports: vec!["a".into(), "b".into()],
        links: vec![LinkSpec {
            id: "l".into(),
            a: "a".into(),
            b: "b".into(),
            ab: params(ab),
            ba: params(ba),
        }],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

const MS: u64 = 1_000_000;

#[test]
fn rate_and_delay_exact() {
    let mut vt = link(r#"{"bandwidth_bps":1000000,"delay_us":10000}"#, "{}");
    for i in 0..3 {
        vt.inject(0, frame(1000, 2, 1, i), Instant::ZERO);
    }
    vt.run_to_idle();
    let got: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    assert_eq!(got, vec![(18 * MS, 1), (26 * MS, 1), (34 * MS, 1)]);
    let s = vt.net.stats(Some("l"), vt.now).unwrap();
    assert_eq!(s.links["l"].ab.out_pkts, 3);
    assert_eq!(s.links["l"].ab.out_bytes, 3000);
    assert_eq!(s.links["l"].ab.peak_qlen_pkts, 2);
}

#[test]
fn one_timer_per_frame_and_the_queue_as_of_now() {
    // Without jitter a direction needs no event at the end of a serialization: the first
    // timer is the first frame's exit (18 ms), not its serialization end (8 ms) ...
    let mut vt = link(r#"{"bandwidth_bps":1000000,"delay_us":10000}"#, "{}");
    for i in 0..3 {
        vt.inject(0, frame(1000, 2, 1, i), Instant::ZERO);
    }
    assert_eq!(vt.net.poll_at(), Some(Instant::from_millis(18)));
    // ... yet the queue reads as of now: at 12 ms frame 0 is in flight, frame 1 on the wire
    // (since 8 ms), frame 2 queued; and every serialization ended counts as an event.
    vt.run_until(Instant::from_millis(12));
    assert!(vt.take().is_empty());
    let s = vt.net.stats(Some("l"), vt.now).unwrap();
    assert_eq!(
        (s.links["l"].ab.qlen_pkts, s.links["l"].ab.qlen_bytes),
        (1, 1000)
    );
    assert_eq!(vt.net.events(vt.now), 1);
    vt.run_to_idle();
    let got: Vec<u64> = vt.take().iter().map(|d| d.at.nanos()).collect();
    assert_eq!(got, vec![18 * MS, 26 * MS, 34 * MS]);
    assert_eq!(vt.net.events(vt.now), 6, "3 serializations, 3 deliveries");
    // With jitter a frame may leave before `done + delay`: the serialization end is a timer.
    let mut vt = link(
        r#"{"bandwidth_bps":1000000,"delay_us":10000,"jitter_us":1000}"#,
        "{}",
    );
    vt.inject(0, frame(1000, 2, 1, 0), Instant::ZERO);
    assert_eq!(vt.net.poll_at(), Some(Instant::from_millis(8)));
}

#[test]
fn unlimited_bandwidth_only_delay() {
    let mut vt = link(r#"{"delay_us":2500.5}"#, "{}");
    vt.inject(0, frame(1500, 2, 1, 0), Instant::from_millis(1));
    vt.inject(0, frame(1500, 2, 1, 1), Instant::from_millis(1));
    vt.run_to_idle();
    let got: Vec<u64> = vt.take().iter().map(|d| d.at.nanos()).collect();
    assert_eq!(got, vec![MS + 2_500_500, MS + 2_500_500]);
}

#[test]
fn droptail_packets_frame_in_service_not_counted() {
    // limit 2: one frame serializing + 2 queued; the 4th and 5th are dropped.
    let mut vt = link(r#"{"bandwidth_bps":1000000,"queue":{"limit":2}}"#, "{}");
    for i in 0..5 {
        vt.inject(0, frame(1000, 2, 1, i), Instant::ZERO);
    }
    vt.run_to_idle();
    let got: Vec<(u64, u32)> = vt
        .take()
        .iter()
        .map(|d| (d.at.nanos(), seq_of(&d.data)))
        .collect();
    assert_eq!(got, vec![(8 * MS, 0), (16 * MS, 1), (24 * MS, 2)]);
    let c = vt.net.stats(None, vt.now).unwrap().links["l"].ab.counters;
    assert_eq!((c.in_pkts, c.drop_queue, c.out_pkts), (5, 2, 3));
}

#[test]
fn droptail_bytes() {
    // limit 4 × mean_pktsize 500 = 2000 bytes of queue.
    let mut vt = link(
        r#"{"bandwidth_bps":1000000,"queue":{"limit":4,"in_bytes":true,"mean_pktsize":500}}"#,
        "{}",
    );
    vt.inject(0, frame(1000, 2, 1, 0), Instant::ZERO); // serializing
    vt.inject(0, frame(1500, 2, 1, 1), Instant::ZERO); // queued: 1500
    vt.inject(0, frame(600, 2, 1, 2), Instant::ZERO); // 2100 > 2000: dropped
    vt.inject(0, frame(500, 2, 1, 3), Instant::ZERO); // 2000: fits
    vt.run_to_idle();
    let got: Vec<u32> = vt.take().iter().map(|d| seq_of(&d.data)).collect();
    assert_eq!(got, vec![0, 1, 3]);
}

#[test]
fn run_time_delay_decrease_does_not_reorder() {
    let mut vt = link(r#"{"delay_us":50000}"#, "{}");
    vt.inject(0, frame(100, 2, 1, 0), Instant::ZERO); // arrives at 50 ms
    vt.run_until(Instant::from_millis(10));
    let pipes = vt.net.select("l", None, Dir::Ab).unwrap();
    vt.net
        .set_pipe_params(pipes[0], params(r#"{"delay_us":1000}"#), vt.now);
    vt.inject(0, frame(100, 2, 1, 1), Instant::from_millis(10)); // would be 11 ms: held to 50 ms
    vt.inject(0, frame(100, 2, 1, 2), Instant::from_millis(60)); // 61 ms
    vt.run_to_idle();
    let got: Vec<(u64, u32)> = vt
        .take()
        .iter()
        .map(|d| (d.at.nanos(), seq_of(&d.data)))
        .collect();
    assert_eq!(got, vec![(50 * MS, 0), (50 * MS, 1), (61 * MS, 2)]);
}

#[test]
fn run_time_bandwidth_change_applies_from_next_frame() {
    let mut vt = link(r#"{"bandwidth_bps":1000000}"#, "{}");
    vt.inject(0, frame(1000, 2, 1, 0), Instant::ZERO); // 0..8 ms at 1 Mbit/s
    vt.inject(0, frame(1000, 2, 1, 1), Instant::ZERO); // queued
    vt.run_until(Instant::from_millis(4));
    let p = vt.net.select("l", None, Dir::Ab).unwrap()[0];
    vt.net
        .set_pipe_params(p, params(r#"{"bandwidth_bps":2000000}"#), vt.now);
    vt.run_to_idle();
    let got: Vec<u64> = vt.take().iter().map(|d| d.at.nanos()).collect();
    assert_eq!(got, vec![8 * MS, 12 * MS]);
}

#[test]
fn jitter_without_reorder_keeps_order() {
    let mut vt = link(r#"{"delay_us":10000,"jitter_us":5000}"#, "{}");
    for i in 0..2000u32 {
        vt.inject(0, frame(100, 2, 1, i), Instant(u64::from(i) * 100_000));
    }
    vt.run_to_idle();
    let d = vt.take();
    assert_eq!(d.len(), 2000);
    assert!(d
        .windows(2)
        .all(|w| seq_of(&w[0].data) < seq_of(&w[1].data) && w[0].at <= w[1].at));
    // Delays spread over the jitter range: never below 5 ms, at most 15 ms after sending.
    for x in &d {
        let sent = u64::from(seq_of(&x.data)) * 100_000;
        let lat = x.at.nanos() - sent;
        assert!((5 * MS..=15 * MS).contains(&lat), "{lat}");
    }
}

#[test]
fn jitter_with_reorder_reorders() {
    let mut vt = link(
        r#"{"delay_us":10000,"jitter_us":5000,"jitter_reorder":true}"#,
        "{}",
    );
    for i in 0..500u32 {
        vt.inject(0, frame(100, 2, 1, i), Instant(u64::from(i) * 100_000));
    }
    vt.run_to_idle();
    let d = vt.take();
    assert_eq!(d.len(), 500);
    assert!(d
        .windows(2)
        .any(|w| seq_of(&w[0].data) > seq_of(&w[1].data)));
    assert!(d.windows(2).all(|w| w[0].at <= w[1].at));
}

#[test]
fn ordinal_drops_exact() {
    let mut vt = link(r#"{"loss":{"kind":"ordinals","drop":[2,5]}}"#, "{}");
    for i in 1..=6 {
        vt.inject(0, frame(100, 2, 1, i), Instant::ZERO);
    }
    vt.run_to_idle();
    let got: Vec<u32> = vt.take().iter().map(|d| seq_of(&d.data)).collect();
    assert_eq!(got, vec![1, 3, 4, 6]);
    assert_eq!(
        vt.net.stats(None, vt.now).unwrap().links["l"].ab.drop_loss,
        2
    );
}

#[test]
fn bernoulli_within_binomial_bounds_and_deterministic() {
    let run = || {
        let mut vt = link(r#"{"loss":{"kind":"bernoulli","p":0.2}}"#, "{}");
        for i in 0..20_000 {
            vt.inject(0, frame(64, 2, 1, i), Instant(u64::from(i)));
        }
        vt.run_to_idle();
        vt.take()
            .iter()
            .map(|d| seq_of(&d.data))
            .collect::<Vec<u32>>()
    };
    let a = run();
    let lost = 20_000.0 - a.len() as f64;
    let sd = (20_000.0f64 * 0.2 * 0.8).sqrt();
    assert!((lost - 4000.0).abs() < 5.0 * sd, "{lost}");
    assert_eq!(a, run(), "same seed, same losses");
}

#[test]
fn gilbert_elliott_on_link() {
    let mut vt = link(
        r#"{"loss":{"kind":"gilbert","p":0.05,"r":0.5,"k":1,"h":0}}"#,
        "{}",
    );
    for i in 0..50_000 {
        vt.inject(0, frame(64, 2, 1, i), Instant(u64::from(i)));
    }
    vt.run_to_idle();
    let lost = 50_000 - vt.take().len();
    // Stationary bad-state probability p/(p+r) = 0.0909, all lost in bad state.
    let rate = lost as f64 / 50_000.0;
    assert!((rate - 0.0909).abs() < 0.015, "{rate}");
}

#[test]
fn duplicate_and_corrupt() {
    let mut vt = link(r#"{"duplicate":1.0,"corrupt":1.0}"#, "{}");
    let f = frame(100, 2, 1, 7);
    vt.inject(0, f.clone(), Instant::ZERO);
    vt.run_to_idle();
    let d = vt.take();
    assert_eq!(d.len(), 2);
    // One copy corrupted in exactly one bit past the Ethernet header, the duplicate intact.
    let diff_bits = |a: &[u8], b: &[u8]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x ^ y).count_ones())
            .sum::<u32>()
    };
    assert_eq!(diff_bits(&d[0].data, &f), 1);
    assert_eq!(&d[0].data[..14], &f[..14]);
    assert_eq!(d[1].data, f);
    let c = vt.net.stats(None, vt.now).unwrap().links["l"].ab.counters;
    assert_eq!((c.duplicated, c.corrupted, c.out_pkts), (1, 1, 2));
}

#[test]
fn down_drops_everything_and_up_restores() {
    let mut vt = link(r#"{"bandwidth_bps":1000000,"delay_us":10000}"#, "{}");
    for i in 0..4 {
        vt.inject(0, frame(1000, 2, 1, i), Instant::ZERO);
    }
    vt.run_until(Instant::from_millis(12)); // one in flight, one serializing, two queued
    let ports = vt.net.set_up("l", None, false, vt.now).unwrap();
    assert_eq!(ports, vec![0, 1]);
    vt.inject(0, frame(1000, 2, 1, 9), Instant::from_millis(13));
    vt.run_until(Instant::from_millis(100));
    assert!(vt.take().is_empty());
    let s = vt.net.stats(None, vt.now).unwrap();
    assert_eq!(s.links["l"].ab.drop_down, 5);
    assert!(!s.links["l"].up);
    vt.net.set_up("l", None, true, vt.now).unwrap();
    vt.inject(0, frame(1000, 2, 1, 10), Instant::from_millis(100));
    vt.run_to_idle();
    let d = vt.take();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].at.nanos(), 118 * MS);
}

#[test]
fn malformed_frames_counted() {
    let mut vt = link("{}", "{}");
    for n in 0..14 {
        vt.inject(0, vec![0xff; n], Instant::ZERO);
    }
    vt.run_to_idle();
    assert!(vt.take().is_empty());
    assert_eq!(
        vt.net.stats(None, vt.now).unwrap().links["l"]
            .ab
            .drop_malformed,
        14
    );
}

#[test]
fn lan_learning_flooding_and_member_delays() {
    let mut net = Network::new(1);
    let m = |p: &str, to: &str| MemberSpec {
        port: p.into(),
        to_lan: params(to),
        from_lan: params("{}"),
    };
    let spec = TopologySpec {
        ports: vec!["p0".into(), "p1".into(), "p2".into()],
        links: vec![],
        lans: vec![LanSpec {
            id: "lan".into(),
            members: vec![
                m("p0", r#"{"delay_us":1000}"#),
                m("p1", r#"{"delay_us":2000}"#),
                m("p2", r#"{"delay_us":3000}"#),
            ],
            pairs: vec![],
        }],
        routers: vec![],
        ..Default::default()
    };
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    let mut vt = VirtualTime::new(net);
    // p0 (MAC ..:0a) to unknown ..:0b: flooded to p1 and p2 after p0's 1 ms.
    vt.inject(0, frame(100, 0x0b, 0x0a, 0), Instant::ZERO);
    vt.run_to_idle();
    let mut d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    d.sort();
    assert_eq!(d, vec![(MS, 1), (MS, 2)]);
    // p1 answers from ..:0b to ..:0a: known, unicast to p0 only, after p1's 2 ms.
    vt.inject(1, frame(100, 0x0a, 0x0b, 1), Instant::from_millis(10));
    vt.run_to_idle();
    let d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    assert_eq!(d, vec![(12 * MS, 0)]);
    // Now ..:0b is known too: p0 → ..:0b goes to p1 only.
    vt.inject(0, frame(100, 0x0b, 0x0a, 2), Instant::from_millis(20));
    vt.run_to_idle();
    let d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    assert_eq!(d, vec![(21 * MS, 1)]);
    // Broadcast from p2 floods to p0 and p1; member p1 down drops its copy.
    vt.net.set_up("lan", Some("p1"), false, vt.now).unwrap();
    let mut bc = frame(100, 0xff, 0x0c, 3);
    bc[..6].copy_from_slice(&[0xff; 6]);
    vt.inject(2, bc, Instant::from_millis(30));
    vt.run_to_idle();
    let d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    assert_eq!(d, vec![(33 * MS, 0)]);
    let s = vt.net.stats(Some("lan"), vt.now).unwrap();
    assert_eq!(s.lans["lan"]["p1"].from_lan.drop_down, 1);
}

#[test]
fn red_queue_on_link_drops_before_limit() {
    // 10 Mbit/s bottleneck fed at 20 Mbit/s: RED (gentle) keeps the queue well under the limit.
    let mut vt = link(
        r#"{"bandwidth_bps":10000000,"queue":{"kind":"red","limit":200,"thresh":5,"maxthresh":15,"q_weight":0.02,"gentle":true}}"#,
        "{}",
    );
    for i in 0..5000u32 {
        vt.inject(0, frame(1250, 2, 1, i), Instant(u64::from(i) * 500_000));
    }
    vt.run_to_idle();
    let c = vt.net.stats(None, vt.now).unwrap().links["l"].ab.counters;
    assert!(c.drop_queue > 2000 && c.drop_queue < 3000, "{c:?}");
    assert!(c.peak_qlen_pkts < 60, "{c:?}");
}

#[test]
fn deterministic_event_order_across_runs() {
    let run = || {
        let mut vt = link(
            r#"{"bandwidth_bps":5000000,"delay_us":3000,"jitter_us":2000,"loss":{"kind":"bernoulli","p":0.1},"duplicate":0.05}"#,
            r#"{"delay_us":3000,"jitter_us":2000,"jitter_reorder":true}"#,
        );
        for i in 0..3000u32 {
            vt.inject(
                (i % 2) as usize,
                frame(200 + (i as usize % 1000), 2, 1, i),
                Instant(u64::from(i) * 37_000),
            );
        }
        vt.run_to_idle();
        vt.take()
    };
    assert_eq!(run(), run());
}

#[test]
fn remove_requires_detached_ports_and_is_atomic() {
    let mut vt = link(r#"{"delay_us":1000}"#, "{}");
    vt.inject(0, frame(100, 2, 1, 0), Instant::ZERO);
    // Port still attached to "l": refused, nothing removed.
    assert!(vt
        .net
        .remove(&[], &[], &["a".into()])
        .unwrap_err()
        .contains("attached"));
    assert!(vt.net.has_link("l"));
    assert!(vt
        .net
        .remove(&["zz".into()], &[], &[])
        .unwrap_err()
        .contains("zz"));
    // Link and ports together: fine; the frame in flight is discarded.
    let gone = vt
        .net
        .remove(&["l".into()], &[], &["a".into(), "b".into()])
        .unwrap();
    assert_eq!(gone, vec![0, 1]);
    vt.run_to_idle();
    assert!(vt.take().is_empty());
    assert!(vt.net.port_index("a").is_none());
    // Ids can be reused after removal.
    let spec = TopologySpec {
        ports: vec!["a".into()],
        links: vec![],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    check_topology(&vt.net, &spec).unwrap();
}

#[test]
fn apply_checks_references_and_double_attachment() {
    let vt = link("{}", "{}");
    let l = |id: &str, a: &str, b: &str| LinkSpec {
        id: id.into(),
        a: a.into(),
        b: b.into(),
        ab: params("{}"),
        ba: params("{}"),
    };
    let spec = TopologySpec {
        ports: vec!["c".into()],
        links: vec![l("l2", "a", "c")],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    assert!(check_topology(&vt.net, &spec)
        .unwrap_err()
        .contains("already attached"));
    let spec = TopologySpec {
        ports: vec!["c".into(), "d".into()],
        links: vec![l("l", "c", "d")],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    assert!(check_topology(&vt.net, &spec)
        .unwrap_err()
        .contains("already exists"));
    let spec = TopologySpec {
        ports: vec!["c".into()],
        links: vec![l("l3", "c", "nope")],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    assert!(check_topology(&vt.net, &spec).unwrap_err().contains("nope"));
    // Two attachments of one port in a request are found before the network is asked.
    let req: wanlab_engine::control::protocol::ApplyReq = serde_json::from_str(
        r#"{"ports":[{"port":"c","tap":"tc"},{"port":"d","tap":"td"},{"port":"e","tap":"te"}],
            "links":[{"link":"l4","a":"c","b":"d"},{"link":"l5","a":"d","b":"e"}]}"#,
    )
    .unwrap();
    let err = wanlab_engine::control::topology::build_topology(&req).unwrap_err();
    assert!(
        err.contains("links[1] (\"l5\").a: link \"l5\": port \"d\" is also used by link \"l4\""),
        "{err}"
    );
}
