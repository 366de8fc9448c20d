//! Per-pair channels on a LAN (a latency matrix) in virtual time: each ordered pair's own
//! delay, queue and serialization; flooding copies per destination through its pair.

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::protocol::{parse_request, Request};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::time::Instant;

const MS: u64 = 1_000_000;

/// Frame of `len` bytes from MAC ..:`src` to ..:`dst` (0xff = broadcast).
fn frame(len: usize, dst: u8, src: u8) -> Vec<u8> {
    let mut f = vec![0u8; len.max(14)];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
    if dst == 0xff {
        f[..6].copy_from_slice(&[0xff; 6]);
    }
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f
}

/// The `apply` request of a 3-member matrix LAN (members p0, p1, p2 with MACs ..:0a, 0b, 0c).
fn matrix_apply(delay_ms: [[u64; 3]; 3], extra: &str) -> String {
    let mut pairs = Vec::new();
    for (i, row) in delay_ms.iter().enumerate() {
        for (j, d) in row.iter().enumerate() {
            if i != j {
                pairs.push(format!(
                    r#"{{"from":"p{i}","to":"p{j}","params":{{"delay_us":{}{extra}}}}}"#,
                    d * 1000
                ));
            }
        }
    }
    format!(
        r#"{{"id":1,"cmd":"apply","ports":[],"lans":[{{"lan":"wan","members":[{{"port":"p0"}},{{"port":"p1"}},{{"port":"p2"}}],"pairs":[{}]}}]}}"#,
        pairs.join(",")
    )
}

fn network(apply: &str) -> VirtualTime {
    let Request::Apply(req) = parse_request(apply).1.unwrap() else {
        panic!("not an apply")
    };
    let mut net = Network::new(1);
    // Simulated-free test: the ports are plain ports created by the spec.
    let mut spec = build_topology(&req).unwrap();
    spec.ports = vec!["p0".into(), "p1".into(), "p2".into()];
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

fn deliveries(vt: &mut VirtualTime) -> Vec<(u64, usize)> {
    let mut d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    d.sort();
    d
}

#[test]
fn each_ordered_pair_has_its_delay_and_flooding_uses_it() {
    let mut vt = network(&matrix_apply([[0, 10, 20], [11, 0, 30], [21, 31, 0]], ""));
    // Broadcast from p0 (like an ARP request): a copy per destination through its pair.
    vt.inject(0, frame(60, 0xff, 0x0a), Instant::ZERO);
    vt.run_to_idle();
    assert_eq!(deliveries(&mut vt), vec![(10 * MS, 1), (20 * MS, 2)]);
    // p1 and p2 answer by unicast to p0 (learned): d(1,0) and d(2,0).
    vt.inject(1, frame(60, 0x0a, 0x0b), Instant::from_millis(100));
    vt.inject(2, frame(60, 0x0a, 0x0c), Instant::from_millis(100));
    vt.run_to_idle();
    assert_eq!(deliveries(&mut vt), vec![(111 * MS, 0), (121 * MS, 0)]);
    // Now all are known: p1 -> p2 is d(1,2) = 30 ms, p2 -> p1 is 31 ms.
    vt.inject(1, frame(60, 0x0c, 0x0b), Instant::from_millis(200));
    vt.inject(2, frame(60, 0x0b, 0x0c), Instant::from_millis(200));
    vt.run_to_idle();
    assert_eq!(deliveries(&mut vt), vec![(230 * MS, 2), (231 * MS, 1)]);
    // Stats name each pair by its destination.
    let s = vt.net.stats(Some("wan"), vt.now).unwrap();
    assert_eq!(s.lans["wan"]["p0"].pairs["p1"].out_pkts, 1);
    assert_eq!(s.lans["wan"]["p1"].pairs["p2"].out_pkts, 1);
    assert_eq!(s.lans["wan"]["p2"].pairs.len(), 2);
}

#[test]
fn pairs_serialize_independently() {
    // 1 Mbit/s per pair: 1250-byte frames take 10 ms each. p0 sends 3 to p1 and 3 to p2 at
    // once: each pair serializes its own, so p2's first frame is not behind p1's.
    let mut vt = network(&matrix_apply(
        [[0, 5, 5], [5, 0, 5], [5, 5, 0]],
        r#","bandwidth_bps":1000000"#,
    ));
    // Teach the switch where p1 and p2 are.
    vt.inject(1, frame(60, 0xff, 0x0b), Instant::ZERO);
    vt.inject(2, frame(60, 0xff, 0x0c), Instant::ZERO);
    vt.run_to_idle();
    vt.take();
    let t0 = 100 * MS;
    for _ in 0..3 {
        vt.inject(0, frame(1250, 0x0b, 0x0a), Instant(t0));
        vt.inject(0, frame(1250, 0x0c, 0x0a), Instant(t0));
    }
    vt.run_to_idle();
    let d = deliveries(&mut vt);
    let at = |port| -> Vec<u64> {
        d.iter()
            .filter(|x| x.1 == port)
            .map(|x| (x.0 - t0) / 1000)
            .collect()
    };
    assert_eq!(at(1), vec![15_000, 25_000, 35_000]);
    assert_eq!(at(2), vec![15_000, 25_000, 35_000]);
}

#[test]
fn bad_pairs_are_field_errors() {
    let bad = |pairs: &str| {
        let line = format!(
            r#"{{"id":1,"cmd":"apply","lans":[{{"lan":"wan","members":[{{"port":"p0"}},{{"port":"p1"}}],"pairs":[{pairs}]}}]}}"#
        );
        let Request::Apply(req) = parse_request(&line).1.unwrap() else {
            panic!("not an apply")
        };
        build_topology(&req).unwrap_err()
    };
    let e = bad(r#"{"from":"p0","to":"px"}"#);
    assert!(
        e.contains("pairs[0]") && e.contains(".to") && e.contains("not a member"),
        "{e}"
    );
    let e = bad(r#"{"from":"p1","to":"p1"}"#);
    assert!(e.contains("the same port"), "{e}");
    let e = bad(r#"{"from":"p0","to":"p1"},{"from":"p0","to":"p1"}"#);
    assert!(e.contains("pairs[1]") && e.contains("twice"), "{e}");
    let e = bad(r#"{"from":"p0","to":"p1","params":{"delay_us":-1}}"#);
    assert!(e.contains("pairs[0]") && e.contains("delay_us"), "{e}");
}

#[test]
fn one_pair_changes_at_run_time_and_the_others_keep_theirs() {
    let mut vt = network(&matrix_apply([[0, 10, 20], [11, 0, 30], [21, 31, 0]], ""));
    // the `set` a tevc of one pair sends: member = the sender, to = the receiver
    let Request::Set(set) = parse_request(
        r#"{"id":2,"cmd":"set","target":"wan","member":"p0","to":"p1","params":{"delay_us":50000}}"#,
    )
    .1
    .unwrap() else {
        panic!("not a set")
    };
    assert_eq!(set.to.as_deref(), Some("p1"));
    let pipes = vt.net.select_pair("wan", Some("p0"), "p1").unwrap();
    assert_eq!(pipes.len(), 1);
    let mut p = vt.net.pipe_params(pipes[0]).cloned().unwrap();
    p.delay_ns = 50 * MS;
    vt.net.set_pipe_params(pipes[0], p, Instant::ZERO);
    vt.inject(0, frame(60, 0xff, 0x0a), Instant::ZERO);
    vt.run_to_idle();
    assert_eq!(deliveries(&mut vt), vec![(20 * MS, 2), (50 * MS, 1)]);
    // errors name the field
    let err = |m: Option<&str>, to: &str| vt.net.select_pair("wan", m, to).unwrap_err();
    assert!(err(None, "p1").starts_with("member:"));
    assert!(err(Some("p0"), "p9").starts_with("to:"));
    assert!(err(Some("p0"), "p0").starts_with("to:"));
    assert!(vt
        .net
        .select_pair("nowhere", Some("p0"), "p1")
        .unwrap_err()
        .starts_with("target:"));
}
