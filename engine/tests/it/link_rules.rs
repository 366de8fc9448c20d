//! Per-destination rules on a link (hitbox's point-to-point mode by address), in virtual
//! time: IPv4 and IPv6 frames to a rule's prefix take its pipelines, everything else the
//! link's.

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::protocol::{parse_request, Request};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::time::Instant;

const MS: u64 = 1_000_000;

fn apply(rules: &str) -> Result<VirtualTime, String> {
    let line = format!(
        r#"{{"id":1,"cmd":"apply","links":[{{"link":"l","a":"a","b":"b","ab":{{"delay_us":10000}},"ba":{{"delay_us":10000}},"rules":[{rules}]}}]}}"#
    );
    let Request::Apply(req) = parse_request(&line).1? else {
        panic!("not an apply")
    };
    let mut spec = build_topology(&req)?;
    spec.ports = vec!["a".into(), "b".into()];
    let mut net = Network::new(1);
    check_topology(&net, &spec)?;
    net.apply(spec, Instant::ZERO);
    Ok(VirtualTime::new(net))
}

/// An IPv4 frame (ethertype 0x0800, 20-byte header) to `dst`, or an ARP frame.
fn frame(dst: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    match dst {
        Some(d) => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[30..34].copy_from_slice(&d);
        }
        None => f[12..14].copy_from_slice(&[0x08, 0x06]),
    }
    f
}

/// An IPv6 frame (ethertype 0x86dd, 40-byte header) to `dst`.
fn frame6(dst: &str) -> Vec<u8> {
    let d: std::net::Ipv6Addr = dst.parse().unwrap();
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[38..54].copy_from_slice(&d.octets());
    f
}

fn arrivals(vt: &mut VirtualTime) -> Vec<(u64, usize)> {
    let mut d: Vec<(u64, usize)> = vt.take().iter().map(|d| (d.at.nanos(), d.port)).collect();
    d.sort();
    d
}

#[test]
fn longest_prefix_rule_wins_and_other_frames_take_the_link() {
    let mut vt = apply(
        r#"{"dst":"10.9.0.0/16","ab":{"delay_us":50000},"ba":{"delay_us":70000}},
           {"dst":"10.9.8.0/24","ab":{"delay_us":30000}}"#,
    )
    .unwrap();
    vt.inject(0, frame(Some([10, 9, 1, 1])), Instant::ZERO); // /16: 50 ms
    vt.inject(0, frame(Some([10, 9, 8, 7])), Instant::ZERO); // /24: 30 ms (rule default ba)
    vt.inject(0, frame(Some([10, 8, 0, 1])), Instant::ZERO); // no rule: the link's 10 ms
    vt.inject(0, frame(None), Instant::ZERO); // ARP: the link's 10 ms
    vt.inject(1, frame(Some([10, 9, 0, 2])), Instant::ZERO); // b -> a, /16: 70 ms
    vt.run_to_idle();
    assert_eq!(
        arrivals(&mut vt),
        vec![
            (10 * MS, 1),
            (10 * MS, 1),
            (30 * MS, 1),
            (50 * MS, 1),
            (70 * MS, 0)
        ]
    );
    let s = vt.net.stats(Some("l"), vt.now).unwrap();
    assert_eq!(s.links["l"].rules["10.9.0.0/16"].ab.out_pkts, 1);
    assert_eq!(s.links["l"].rules["10.9.0.0/16"].ba.out_pkts, 1);
    assert_eq!(s.links["l"].ab.out_pkts, 2);
    // the rules go down with the link
    vt.net.set_up("l", None, false, vt.now).unwrap();
    vt.inject(0, frame(Some([10, 9, 1, 1])), Instant::from_millis(100));
    vt.run_to_idle();
    assert!(arrivals(&mut vt).is_empty());
}

#[test]
fn ipv6_rules_match_ipv6_frames_only() {
    let mut vt = apply(
        r#"{"dst":"fd00:9::/32","ab":{"delay_us":50000}},
           {"dst":"fd00:9:8::/48","ab":{"delay_us":30000}},
           {"dst":"0.0.0.0/0","ab":{"delay_us":90000}}"#,
    )
    .unwrap();
    vt.inject(0, frame6("fd00:9:1::1"), Instant::ZERO); // /32: 50 ms
    vt.inject(0, frame6("fd00:9:8::7"), Instant::ZERO); // /48: 30 ms
    vt.inject(0, frame6("fd00:8::1"), Instant::ZERO); // no IPv6 rule: the link's 10 ms
    vt.inject(0, frame(Some([10, 8, 0, 1])), Instant::ZERO); // IPv4's 0/0: 90 ms
    vt.run_to_idle();
    assert_eq!(
        arrivals(&mut vt),
        vec![(10 * MS, 1), (30 * MS, 1), (50 * MS, 1), (90 * MS, 1)]
    );
    let s = vt.net.stats(Some("l"), vt.now).unwrap();
    assert_eq!(s.links["l"].rules["fd00:9::/32"].ab.out_pkts, 1);
    assert_eq!(s.links["l"].rules["fd00:9:8::/48"].ab.out_pkts, 1);
    let e = apply(r#"{"dst":"fd00::/129"}"#).err().unwrap();
    assert!(e.contains("rules[0].dst"), "{e}");
}

#[test]
fn bad_rules_are_field_errors() {
    let e = apply(r#"{"dst":"10.9.0.0/33"}"#).err().unwrap();
    assert!(e.contains("rules[0].dst"), "{e}");
    let e = apply(r#"{"dst":"10.9.0.0/16"},{"dst":"10.9.0.0/16"}"#)
        .err()
        .unwrap();
    assert!(e.contains("rules[1].dst") && e.contains("twice"), "{e}");
}
