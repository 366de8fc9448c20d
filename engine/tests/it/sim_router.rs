//! Simulated routers in virtual time: ARP, forwarding, TTL, ICMP, a chain of three routers,
//! the control protocol, and arbitrary frames (proptest). Hosts are plain ports driven by a
//! small responder in this file (ARP replies, echo replies), stepping event by event so that
//! every answer is injected at the exact instant its trigger was delivered (only inside
//! `Sim::run`: call it after each `send`).

use proptest::prelude::*;
use serde_json::json;

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::exec::Engine;
use wanlab_engine::control::protocol::{parse_request, ApplyReq};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::{Delivered, VirtualTime};
use wanlab_engine::model::network::{Network, PortIdx};
use wanlab_engine::time::Instant;
use wanlab_engine::wire::ethernet::{self, Address};
use wanlab_engine::wire::{arp, icmp, ipv4};

const MS: u64 = 1_000_000;

fn mac(last: u8) -> Address {
    Address([2, 0, 0, 0, 0, last])
}

struct Host {
    port: PortIdx,
    mac: Address,
    ip: [u8; 4],
}

struct Sim {
    vt: VirtualTime,
    hosts: Vec<Host>,
    /// Every frame delivered to a host port, answered or not.
    log: Vec<Delivered>,
}

impl Sim {
    fn new(req: serde_json::Value, hosts: &[(&str, u8, [u8; 4])]) -> Sim {
        let a: ApplyReq = serde_json::from_value(req).unwrap();
        let spec = build_topology(&a).unwrap();
        let mut net = Network::new(1);
        check_topology(&net, &spec).unwrap();
        net.apply(spec, Instant::ZERO);
        let hosts = hosts
            .iter()
            .map(|(p, m, ip)| Host {
                port: net.port_index(p).unwrap(),
                mac: mac(*m),
                ip: *ip,
            })
            .collect();
        Sim {
            vt: VirtualTime::new(net),
            hosts,
            log: Vec::new(),
        }
    }

    fn port(&self, id: &str) -> PortIdx {
        self.vt.net.port_index(id).unwrap()
    }

    /// Run until idle, answering ARP requests and echo requests addressed to the hosts.
    fn run(&mut self) {
        while let Some(d) = self.vt.net.poll_at() {
            self.vt.run_until(d.max(self.vt.now));
            for f in self.vt.take() {
                let reply = self
                    .hosts
                    .iter()
                    .find(|h| h.port == f.port)
                    .and_then(|h| answer(h, &f.data));
                if let Some(r) = reply {
                    self.vt.net.receive(f.port, r, self.vt.now);
                }
                self.log.push(f);
            }
        }
    }

    fn send(&mut self, port: &str, frame: Vec<u8>, at_ms: u64) {
        let p = self.port(port);
        self.vt.inject(p, frame, Instant::from_nanos(at_ms * MS));
    }
}

fn answer(h: &Host, f: &[u8]) -> Option<Vec<u8>> {
    let eth = ethernet::Frame::new_checked(f).ok()?;
    if eth.ethertype() == arp::ETHERTYPE {
        let a = arp::Packet::new_checked(eth.payload()).ok()?;
        if a.operation() == arp::OP_REQUEST && a.target_ip() == h.ip {
            let r = arp::build(arp::OP_REPLY, h.mac, h.ip, a.sender_mac(), a.sender_ip());
            return Some(ethernet::build(a.sender_mac(), h.mac, arp::ETHERTYPE, &r));
        }
        return None;
    }
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    if ip.dst() != h.ip || ip.protocol() != 1 {
        return None;
    }
    let msg = icmp::echo_reply(ip.payload())?;
    let mut p = ipv4::header(h.ip, ip.src(), 1, 64, 99, msg.len()).to_vec();
    p.extend_from_slice(&msg);
    Some(ethernet::build(eth.src(), h.mac, 0x0800, &p))
}

fn echo(
    src_mac: Address,
    dst_mac: Address,
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    seq: u16,
) -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0, 0x12, 0x34];
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(b"wanlab-ping-data");
    let c = ipv4::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut p = ipv4::header(src, dst, 1, ttl, seq, m.len()).to_vec();
    p.extend_from_slice(&m);
    ethernet::build(dst_mac, src_mac, 0x0800, &p)
}

struct Icmp {
    at: u64,
    src: [u8; 4],
    ttl: u8,
    typ: u8,
    code: u8,
    body: Vec<u8>,
}

/// ICMP messages delivered to `port`, after checking IP and ICMP checksums.
fn icmps(log: &[Delivered], port: PortIdx) -> Vec<Icmp> {
    log.iter()
        .filter(|d| d.port == port && d.data.get(12..14) == Some(&[8, 0]))
        .map(|d| {
            let ip = ipv4::Packet::new_checked(&d.data[14..]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(ipv4::checksum(ip.payload()), 0, "ICMP checksum");
            let p = ip.payload();
            Icmp {
                at: d.at.nanos(),
                src: ip.src(),
                ttl: ip.ttl(),
                typ: p[0],
                code: p[1],
                body: p[8..].to_vec(),
            }
        })
        .collect()
}

const R0: Address = Address([2, 0, 0, 0, 1, 0]);
const A: [u8; 4] = [10, 1, 1, 2];
const B: [u8; 4] = [10, 1, 2, 2];

/// Host A (10.1.1.2, mac ..:0a) —1 ms— r (10.1.1.1 | 10.1.2.1) —1 ms— host B (10.1.2.2, ..:0b).
/// Host ports come from `build_topology` (TAP names are validated but no TAP is created).
fn sim1() -> Sim {
    let ms1 = json!({"delay_us": 1000});
    Sim::new(
        json!({"ports": [{"port": "a", "tap": "ta"}, {"port": "b", "tap": "tb"}],
           "routers": [{"router": "r", "interfaces": [
               {"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
               {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}]}],
           "links": [{"link": "la", "a": "a", "b": "r0", "ab": ms1, "ba": ms1},
                     {"link": "lb", "a": "r1", "b": "b", "ab": ms1, "ba": ms1}]}),
        &[("a", 0x0a, A), ("b", 0x0b, B)],
    )
}

#[test]
fn arp_then_forward_exact() {
    let mut s = sim1();
    let (pa, pb) = (s.port("a"), s.port("b"));
    let req = arp::build(
        arp::OP_REQUEST,
        mac(0x0a),
        A,
        Address([0; 6]),
        [10, 1, 1, 1],
    );
    s.send(
        "a",
        ethernet::build(Address::BROADCAST, mac(0x0a), arp::ETHERTYPE, &req),
        0,
    );
    s.run();
    assert_eq!(s.log.len(), 1);
    let d = &s.log[0];
    assert_eq!((d.at.nanos(), d.port), (2 * MS, pa));
    let expect = arp::build(arp::OP_REPLY, R0, [10, 1, 1, 1], mac(0x0a), A);
    assert_eq!(
        d.data,
        ethernet::build(mac(0x0a), R0, arp::ETHERTYPE, &expect)
    );
    s.log.clear();

    let ping = echo(mac(0x0a), R0, A, B, 64, 1);
    s.send("a", ping.clone(), 10);
    s.run();
    // 11 ms: r ARPs on r1 → B at 12 ms; B answers → r at 13 ms; r forwards → B at 14 ms;
    // B's echo reply reaches r at 15 ms (r learnt A from its ARP request) and A at 16 ms.
    let at_b: Vec<(u64, &[u8])> = s
        .log
        .iter()
        .filter(|d| d.port == pb)
        .map(|d| (d.at.nanos(), &d.data[..]))
        .collect();
    assert_eq!(at_b.len(), 2);
    assert_eq!(at_b[0].0, 12 * MS);
    let a = arp::Packet::new_checked(&at_b[0].1[14..]).unwrap();
    assert_eq!(
        (a.operation(), a.sender_ip(), a.target_ip(), &at_b[0].1[..6]),
        (arp::OP_REQUEST, [10, 1, 2, 1], B, &[0xff; 6][..])
    );
    let (t, f) = at_b[1];
    assert_eq!(t, 14 * MS);
    assert_eq!(&f[..6], &mac(0x0b).0);
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 1, 1]);
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.ttl(), 63);
    assert!(ip.verify_checksum());
    let mut expect = ping[14..].to_vec();
    expect[8] = 63;
    expect[10..12].copy_from_slice(&[0, 0]);
    let c = ipv4::checksum(&expect[..20]);
    expect[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(&f[14..], &expect[..], "only TTL and checksum change");
    let back = icmps(&s.log, pa);
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].at, back[0].src, back[0].ttl, back[0].typ),
        (16 * MS, B, 63, icmp::ECHO_REPLY)
    );
    let c = s.vt.net.router_counters("r").unwrap();
    assert_eq!(
        (c.forwarded, c.arp_replies, c.icmp_sent, c.dropped_other),
        (2, 1, 0, 0)
    );
    let st = s.vt.net.stats(Some("r"), s.vt.now).unwrap();
    assert_eq!(st.routers["r"], c);
    assert!(st.links.is_empty());
}

#[test]
fn ttl_1_time_exceeded_quotes_header() {
    let mut s = sim1();
    let pa = s.port("a");
    let ping = echo(mac(0x0a), R0, A, B, 1, 7);
    s.send("a", ping.clone(), 0);
    s.run();
    let got = icmps(&s.log, pa);
    assert_eq!(got.len(), 1);
    let e = &got[0];
    // r ARPs for A first (it never heard from it): reply at 1 ms + 1 ms + (answer) 1 ms + 1 ms.
    assert_eq!(
        (e.at, e.src, e.ttl, e.typ, e.code),
        (4 * MS, [10, 1, 1, 1], 64, icmp::TIME_EXCEEDED, 0)
    );
    assert_eq!(
        e.body,
        ping[14..14 + 28].to_vec(),
        "original header + 8 bytes, TTL 1 as received"
    );
    let c = s.vt.net.router_counters("r").unwrap();
    assert_eq!((c.dropped_ttl, c.icmp_sent, c.forwarded), (1, 1, 0));
}

#[test]
fn no_route_unreachable_and_ping_router() {
    let mut s = sim1();
    let pa = s.port("a");
    let lost = echo(mac(0x0a), R0, A, [10, 200, 0, 1], 64, 1);
    s.send("a", lost.clone(), 0);
    s.run(); // the responder only answers inside run()
    assert_eq!(icmps(&s.log, pa)[0].at, 4 * MS, "r had to ARP for A first");
    s.send("a", echo(mac(0x0a), R0, A, [10, 1, 2, 1], 64, 2), 10);
    s.run();
    let got = icmps(&s.log, pa);
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].src, got[0].typ, got[0].code),
        ([10, 1, 1, 1], icmp::DEST_UNREACHABLE, 0)
    );
    assert_eq!(got[0].body, lost[14..14 + 28].to_vec());
    assert_eq!(
        (got[1].at, got[1].src, got[1].typ, got[1].code),
        (12 * MS, [10, 1, 2, 1], icmp::ECHO_REPLY, 0)
    );
    assert_eq!(&got[1].body[..], b"wanlab-ping-data");
    let c = s.vt.net.router_counters("r").unwrap();
    assert_eq!((c.dropped_no_route, c.icmp_sent, c.forwarded), (1, 2, 0));
    // Other protocols to the router's address and IPv6 are ignored and counted.
    let mut udp = echo(mac(0x0a), R0, A, [10, 1, 1, 1], 64, 3);
    udp[14 + 9] = 17;
    udp[24..26].copy_from_slice(&[0, 0]);
    let cs = ipv4::checksum(&udp[14..34]);
    udp[24..26].copy_from_slice(&cs.to_be_bytes());
    s.send("a", udp, 20);
    s.send("a", ethernet::build(R0, mac(0x0a), 0x86dd, &[0x60; 40]), 20);
    s.run();
    assert_eq!(s.vt.net.router_counters("r").unwrap().dropped_other, 2);
}

/// a (10.0.1.2) — r1 — r2 — r3 — b (10.0.4.2); routers learn each other by ARP.
fn chain() -> Sim {
    let ms1 = json!({"delay_us": 1000});
    let l = |id: &str, a: &str, b: &str| json!({"link": id, "a": a, "b": b, "ab": ms1, "ba": ms1});
    let iface = |p: &str, m: u8, ip: &str| json!({"port": p, "mac": format!("02:00:00:00:02:{m:02x}"), "ip": ip});
    let rt = |dst: &str, via: &str| json!({"dst": dst, "via": via});
    Sim::new(
        json!({"ports": [{"port": "a", "tap": "ta"}, {"port": "b", "tap": "tb"}],
           "routers": [
             {"router": "r1", "interfaces": [iface("r1a", 0x10, "10.0.1.1/24"), iface("r1b", 0x11, "10.0.2.1/24")],
              "routes": [rt("10.0.3.0/24", "10.0.2.2"), rt("10.0.4.0/24", "10.0.2.2")]},
             {"router": "r2", "interfaces": [iface("r2a", 0x20, "10.0.2.2/24"), iface("r2b", 0x21, "10.0.3.1/24")],
              "routes": [rt("10.0.1.0/24", "10.0.2.1"), rt("10.0.4.0/24", "10.0.3.2")]},
             {"router": "r3", "interfaces": [iface("r3a", 0x30, "10.0.3.2/24"), iface("r3b", 0x31, "10.0.4.1/24")],
              "routes": [rt("10.0.0.0/16", "10.0.3.1")]}],
           "links": [l("l1", "a", "r1a"), l("l2", "r1b", "r2a"), l("l3", "r2b", "r3a"), l("l4", "r3b", "b")]}),
        &[("a", 0x0a, [10, 0, 1, 2]), ("b", 0x0b, [10, 0, 4, 2])],
    )
}

#[test]
fn chain_of_three_and_traceroute() {
    let mut s = chain();
    let (pa, pb) = (s.port("a"), s.port("b"));
    let r1 = Address([2, 0, 0, 0, 2, 0x10]);
    let (a, b) = ([10, 0, 1, 2], [10, 0, 4, 2]);
    s.send("a", echo(mac(0x0a), r1, a, b, 64, 1), 0);
    s.run();
    let at_b: Vec<&Delivered> = s
        .log
        .iter()
        .filter(|d| d.port == pb && d.data[12..14] == [8, 0])
        .collect();
    assert_eq!(at_b.len(), 1);
    let ip = ipv4::Packet::new_checked(&at_b[0].data[14..]).unwrap();
    assert_eq!((ip.ttl(), ip.verify_checksum()), (61, true));
    let back = icmps(&s.log, pa);
    assert_eq!(
        (back.len(), back[0].typ, back[0].ttl),
        (1, icmp::ECHO_REPLY, 61)
    );
    for r in ["r1", "r2", "r3"] {
        assert_eq!(s.vt.net.router_counters(r).unwrap().forwarded, 2, "{r}");
    }
    s.log.clear();
    for ttl in 1..=4u8 {
        s.send(
            "a",
            echo(mac(0x0a), r1, a, b, ttl, 100 + u16::from(ttl)),
            100 * u64::from(ttl),
        );
        s.run();
    }
    let hops: Vec<([u8; 4], u8, u64)> = icmps(&s.log, pa)
        .iter()
        .map(|e| (e.src, e.typ, e.at))
        .collect();
    let want = [
        ([10, 0, 1, 1], 11),
        ([10, 0, 2, 2], 11),
        ([10, 0, 3, 2], 11),
        ([10, 0, 4, 2], 0),
    ];
    assert_eq!(hops.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>(), want);
    // Everything is resolved now: each probe's answer takes 2 × (hops) ms.
    assert_eq!(
        hops.iter().map(|h| h.2).collect::<Vec<_>>(),
        vec![102 * MS, 204 * MS, 306 * MS, 408 * MS]
    );
}

#[test]
fn protocol_apply_stats_remove() {
    let mut e = Engine::new(1, 0);
    let run = |e: &mut Engine, v: serde_json::Value| {
        let (_, r) = parse_request(&v.to_string());
        e.execute(r?, Instant::ZERO).map(|(b, _)| b)
    };
    let good = json!({"cmd": "apply", "routers": [{"router": "r", "interfaces": [
        {"port": "r0", "mac": "02:00:00:00:01:00", "ip": "10.1.1.1/24"},
        {"port": "r1", "mac": "02:00:00:00:01:01", "ip": "10.1.2.1/24"}],
        "routes": [{"dst": "10.9.0.0/16", "via": "10.1.1.2"}]}],
        "links": [{"link": "rr", "a": "r0", "b": "r1"}]});
    let bad = |patch: &dyn Fn(&mut serde_json::Value), want: &str, e: &mut Engine| {
        let mut v = good.clone();
        patch(&mut v);
        let err = run(e, v).unwrap_err();
        assert!(err.contains(want), "{err} should contain {want}");
    };
    bad(
        &|v| v["routers"][0]["interfaces"][1]["mac"] = json!("02:00:00:00:01"),
        "routers[0] (\"r\").interfaces[1].mac",
        &mut e,
    );
    bad(
        &|v| v["routers"][0]["interfaces"][0]["ip"] = json!("10.1.1.1"),
        "routers[0] (\"r\").interfaces[0].ip",
        &mut e,
    );
    bad(
        &|v| v["routers"][0]["routes"][0]["via"] = json!("10.7.1.2"),
        "routers[0] (\"r\").routes[0].via",
        &mut e,
    );
    bad(
        &|v| v["routers"][0]["routes"][0]["dst"] = json!("10.9.0.1/16"),
        "routes[0].dst",
        &mut e,
    );
    bad(
        &|v| v["routers"][0]["interfaces"][0]["colour"] = json!(1),
        "colour",
        &mut e,
    );
    bad(
        &|v| v["links"][0]["link"] = json!("r"),
        "links[0] (\"r\").link: id \"r\" already exists in this request",
        &mut e,
    );
    bad(
        &|v| v["links"][0]["b"] = json!("nope"),
        "unknown port",
        &mut e,
    );
    assert!(
        run(&mut e, json!({"cmd": "stats"})).unwrap()["routers"]
            .as_object()
            .unwrap()
            .is_empty(),
        "nothing added on error"
    );
    run(&mut e, good.clone()).unwrap();
    assert!(run(&mut e, good.clone())
        .unwrap_err()
        .contains("already exists"));
    let st = run(&mut e, json!({"cmd": "stats", "target": "r"})).unwrap();
    assert_eq!(
        st["routers"]["r"],
        json!({"forwarded": 0, "icmp_sent": 0, "arp_replies": 0, "dropped_no_route": 0,
        "dropped_ttl": 0, "dropped_other": 0, "arp_queue_drops": 0})
    );
    assert!(run(&mut e, json!({"cmd": "remove", "ports": ["r0"]}))
        .unwrap_err()
        .contains("simulated router"));
    assert!(run(&mut e, json!({"cmd": "remove", "routers": ["r"]}))
        .unwrap_err()
        .contains("still attached"));
    run(
        &mut e,
        json!({"cmd": "remove", "routers": ["r"], "links": ["rr"]}),
    )
    .unwrap();
    assert!(run(&mut e, json!({"cmd": "stats", "target": "r"})).is_err());
    run(&mut e, good).unwrap(); // ids and ports are free again
}

fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    let dst = prop::sample::select(vec![
        [2u8, 0, 0, 0, 1, 0],
        [0xff; 6],
        [2, 0, 0, 0, 1, 1],
        [1, 2, 3, 4, 5, 6],
    ]);
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        // Ethernet to the router + ARP or IPv4 with arbitrary (often plausible) bytes.
        (
            dst.clone(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..80)
        )
            .prop_map(|(d, is_arp, body)| {
                let mut f = d.to_vec();
                f.extend_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
                f.extend_from_slice(if is_arp {
                    &[8, 6, 0, 1, 8, 0, 6, 4]
                } else {
                    &[8, 0]
                });
                f.extend_from_slice(&body);
                f
            }),
        // Valid IPv4 headers with arbitrary TTL, protocol, addresses and payload.
        (
            dst,
            any::<u8>(),
            any::<u8>(),
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            proptest::collection::vec(any::<u8>(), 0..60)
        )
            .prop_map(|(d, ttl, proto, src, dstip, body)| {
                let mut p = ipv4::header(src, dstip, proto, ttl, 1, body.len()).to_vec();
                p.extend_from_slice(&body);
                ethernet::build(Address(d), mac(0x0a), 0x0800, &p)
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec((0usize..4, 0u64..50, arb_frame()), 1..40)) {
        let mut s = sim1();
        let ports = [s.port("a"), s.port("b"), s.port("r0"), s.port("r1")];
        let mut frames = frames;
        frames.sort_by_key(|f| f.1);
        for (p, at, f) in frames {
            s.vt.inject(ports[p], f, Instant::from_nanos(at * MS / 10));
        }
        s.run();
        let c = s.vt.net.router_counters("r").unwrap();
        prop_assert!(c.forwarded + c.dropped_other + c.dropped_ttl + c.dropped_no_route < 1_000_000);
        // Link pipelines conserve frames whatever the router sent into them.
        let st = s.vt.net.stats(None, s.vt.now).unwrap();
        for l in st.links.values() {
            for d in [&l.ab, &l.ba] {
                prop_assert_eq!(d.in_pkts, d.out_pkts + d.drop_queue + d.drop_malformed);
            }
        }
    }
}
