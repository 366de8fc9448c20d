//! Property tests: arbitrary frames (also into a simulated router on the LAN) and arbitrary
//! control input never panic. More router fuzzing: `tests/it/sim_router.rs`.

use proptest::prelude::*;
use serde_json::{json, Value};

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::params::merge_params;
use wanlab_engine::control::protocol::{parse_request, Request, COMMANDS};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::{
    Dir, LanSpec, LinkSpec, MemberSpec, Network, PairSpec, RouterSpec, TopologySpec,
};
use wanlab_engine::model::packet::Packet;
use wanlab_engine::model::params::{LinkParams, LossParams, QueueKind, QueueParams, RedParams};
use wanlab_engine::model::sim::router::{Interface, Route};
use wanlab_engine::time::Instant;
use wanlab_engine::wire::ethernet::Address;
use wanlab_engine::wire::vnet::VnetHdr;
use wanlab_engine::wire::{gso, tcp, udp};

fn arb_params() -> impl Strategy<Value = LinkParams> {
    (
        0u64..50_000_000,
        0u64..5_000_000,
        0u64..2_000_000,
        any::<bool>(),
        1u32..40,
        any::<bool>(),
        0u8..4,
        0.0f64..1.0,
        0.0f64..1.0,
        any::<bool>(),
    )
        .prop_map(
            |(bw, delay, jitter, reorder, limit, in_bytes, loss, p, q, red)| LinkParams {
                bandwidth_bps: bw,
                delay_ns: delay,
                jitter_ns: jitter,
                jitter_reorder: reorder,
                queue: QueueParams {
                    kind: if red {
                        QueueKind::Red(RedParams {
                            thresh: 1.0,
                            maxthresh: f64::from(limit.max(2)),
                            q_weight: 0.1,
                            linterm: 3.0,
                            gentle: in_bytes,
                        })
                    } else {
                        QueueKind::DropTail
                    },
                    limit: Some(limit.max(2)),
                    in_bytes,
                    mean_pktsize: 500,
                },
                loss: match loss {
                    0 => LossParams::None,
                    1 => LossParams::Bernoulli { p, corr: 0.0 },
                    2 => LossParams::Gilbert {
                        p,
                        r: q,
                        k: q,
                        h: p,
                    },
                    _ => LossParams::Ordinals {
                        drop: vec![1, 3, 7],
                    },
                },
                duplicate: p / 4.0,
                corrupt: q / 4.0,
                ..LinkParams::default()
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Frame {
        port: usize,
        at_us: u64,
        data: Vec<u8>,
    },
    Offloaded {
        port: usize,
        at_us: u64,
        vnet: [u8; 12],
        data: Vec<u8>,
    },
    Set {
        which: usize,
        params: Box<LinkParams>,
    },
    Down {
        which: usize,
        up: bool,
    },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..5, 0u64..20_000, proptest::collection::vec(any::<u8>(), 0..200)).prop_map(|(port, at_us, data)| Op::Frame { port, at_us, data }),
        4 => (0usize..5, 0u64..20_000, arb_vnet(), arb_offload_frame()).prop_map(|(port, at_us, vnet, data)| Op::Offloaded { port, at_us, vnet, data }),
        1 => (0usize..8, arb_params()).prop_map(|(which, params)| Op::Set { which, params: Box::new(params) }),
        1 => (0usize..3, any::<bool>()).prop_map(|(which, up)| Op::Down { which, up }),
    ]
}

/// Arbitrary 12-byte vnet headers, or plausible TSO headers with arbitrary sizes and offsets.
fn arb_vnet() -> impl Strategy<Value = [u8; 12]> {
    prop_oneof![
        any::<[u8; 12]>(),
        (
            prop::sample::select(vec![0u8, 1, 3, 4, 5, 0x81, 0x84]),
            0u16..3000,
            prop::sample::select(vec![34u16, 54, 0, 20, 200]),
            any::<bool>()
        )
            .prop_map(|(g, mss, start, csum)| {
                VnetHdr {
                    flags: u8::from(csum),
                    gso_type: g,
                    hdr_len: start + 20,
                    gso_size: mss,
                    csum_start: start,
                    csum_offset: 16,
                }
                .to_bytes()
            }),
    ]
}

/// Arbitrary bytes, or an IPv4/IPv6 TCP super-frame (possibly truncated or with a damaged byte).
fn arb_offload_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        (
            any::<bool>(),
            0usize..4000,
            0usize..4100,
            any::<(usize, u8)>(),
            0u8..16
        )
            .prop_map(|(v6, payload, cut, (at, val), doff)| {
                let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
                if v6 {
                    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 6, 64]);
                    f.extend_from_slice(&[0xfd; 32]);
                } else {
                    f.extend_from_slice(&[
                        0x08, 0x00, 0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0,
                        0, 2,
                    ]);
                }
                f.extend_from_slice(&[
                    0x03,
                    0xe8,
                    0x07,
                    0xd0,
                    0,
                    0,
                    0,
                    1,
                    0,
                    0,
                    0,
                    1,
                    doff << 4,
                    0x99,
                    0xff,
                    0xff,
                    0,
                    0,
                    0,
                    0,
                ]);
                f.extend((0..payload).map(|i| i as u8));
                if at % 3 == 0 {
                    let i = at % f.len();
                    f[i] = val;
                }
                if cut < f.len() && at % 5 == 0 {
                    f.truncate(cut);
                }
                f
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_frames_and_changes_never_panic(ab in arb_params(), ba in arb_params(), lan in arb_params(), mut ops in proptest::collection::vec(arb_op(), 0..120)) {
        let mut net = Network::new(3);
        let m = |p: &str| MemberSpec { port: p.into(), to_lan: lan.clone(), from_lan: lan.clone() };
        let spec = TopologySpec {
            ports: ["a", "b", "c", "d", "e"].iter().map(|s| s.to_string()).collect(),
            links: vec![LinkSpec { id: "l".into(), a: "a".into(), b: "b".into(), ab, ba }],
            lans: vec![LanSpec {
                id: "lan".into(),
                members: vec![m("c"), m("d"), m("e"), m("rc")],
                // Per-pair channels on some pairs (c->d, d->c, e->rc): the rest go direct.
                pairs: [(0, 1), (1, 0), (2, 3)]
                    .into_iter()
                    .map(|(from, to)| PairSpec { from, to, params: lan.clone() })
                    .collect(),
            }],
            // A simulated router on the LAN: flooded and unicast frames reach it, and what it
            // sends (ARP, ICMP, forwarded packets) goes back through the LAN pipelines.
            routers: vec![RouterSpec {
                id: "r".into(),
                interfaces: vec![
                    ("rc".into(), Interface { mac: Address([2, 0, 0, 0, 0, 0x10]), ip: [10, 0, 0, 1], prefix: 8, ip6: None }),
                    ("rg".into(), Interface { mac: Address([2, 0, 0, 0, 0, 0x11]), ip: [192, 168, 0, 1], prefix: 24, ip6: None }),
                ],
                routes: vec![Route { dst: [0, 0, 0, 0], prefix: 0, via: [10, 0, 0, 2] }],
                routes6: vec![],
            }],
            ..Default::default()
        };
        check_topology(&net, &spec).unwrap();
        net.apply(spec, Instant::ZERO);
        let mut vt = VirtualTime::new(net);
        ops.sort_by_key(|o| match o { Op::Frame { at_us, .. } | Op::Offloaded { at_us, .. } => *at_us, _ => 0 });
        let mut t = Instant::ZERO;
        for op in ops {
            match op {
                Op::Frame { port, at_us, data } => {
                    t = t.max(Instant::from_micros(at_us));
                    vt.inject(port, data, t);
                }
                Op::Offloaded { port, at_us, vnet, data } => {
                    t = t.max(Instant::from_micros(at_us));
                    let vnet = VnetHdr::parse(&vnet).unwrap();
                    let mut out = Vec::new();
                    let _ = gso::to_wire(&vnet, &data, &mut out);
                    let _ = gso::wire_size(&vnet, &data);
                    vt.inject_packet(port, Packet { data, vnet }, t);
                }
                Op::Set { which, params } => {
                    let (target, dir) = [("l", Dir::Ab), ("l", Dir::Ba), ("l", Dir::Both), ("lan", Dir::ToLan), ("lan", Dir::FromLan), ("lan", Dir::Both), ("nope", Dir::Both), ("l", Dir::ToLan)][which];
                    if let Ok(pipes) = vt.net.select(target, None, dir) {
                        for p in pipes { vt.net.set_pipe_params(p, (*params).clone(), t); }
                    }
                }
                Op::Down { which, up } => {
                    let _ = vt.net.set_up(["l", "lan", "zz"][which], None, up, t);
                }
            }
        }
        vt.run_to_idle();
        let s = vt.net.stats(None, vt.now).unwrap();
        // Conservation on the link: nothing appears from nowhere (duplicates aside).
        for c in [s.links["l"].ab.counters, s.links["l"].ba.counters] {
            prop_assert!(c.out_pkts <= c.in_pkts - c.drop_queue - c.drop_down - c.drop_malformed - c.drop_loss + c.duplicated);
            prop_assert_eq!(c.qlen_pkts, 0);
        }
    }

    /// The UDP and TCP views accept or refuse any bytes without panicking, and what they
    /// accept stays within the buffer; what the emitters write parses back.
    #[test]
    fn udp_and_tcp_parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80), src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), ports in any::<(u16, u16)>(), seq in any::<(u32, u32)>(), flags in any::<u8>()) {
        if let Ok(u) = udp::Packet::new_checked(&data[..]) {
            prop_assert!(u.len() >= udp::HEADER_LEN && u.len() <= data.len());
            prop_assert_eq!(u.payload().len(), u.len() - udp::HEADER_LEN);
            let _ = (u.src_port(), u.dst_port(), u.verify_checksum(src, dst));
        }
        if let Ok(t) = tcp::Packet::new_checked(&data[..]) {
            prop_assert!(t.header_len() >= tcp::HEADER_LEN);
            prop_assert_eq!(t.payload().len(), data.len() - t.header_len());
            let _ = (t.seq(), t.ack(), t.flags(), t.window(), t.verify_checksum(src, dst));
        }
        let d = udp::build(src, dst, ports.0, ports.1, &data);
        let u = udp::Packet::new_checked(&d[..]).unwrap();
        prop_assert!(u.verify_checksum(src, dst));
        prop_assert_eq!((u.src_port(), u.dst_port(), u.payload()), (ports.0, ports.1, &data[..]));
        let h = tcp::Header { sport: ports.0, dport: ports.1, seq: seq.0, ack: seq.1, flags, window: 7 };
        let mut seg = vec![0u8; tcp::HEADER_LEN];
        seg.extend_from_slice(&data);
        h.emit(&mut seg, src, dst);
        let t = tcp::Packet::new_checked(&seg[..]).unwrap();
        prop_assert!(t.verify_checksum(src, dst));
        prop_assert_eq!((t.seq(), t.ack(), t.flags(), t.payload()), (seq.0, seq.1, flags, &data[..]));
    }

    #[test]
    fn arbitrary_text_never_panics(line in ".{0,300}") {
        let _ = parse_request(&line);
    }

    #[test]
    fn arbitrary_json_commands_never_panic(cmd in prop::sample::select(COMMANDS.to_vec()), args in arb_json_object(3)) {
        let mut obj = args;
        obj.insert("cmd".into(), json!(cmd));
        obj.insert("id".into(), json!(1));
        let line = Value::Object(obj).to_string();
        let (_, r) = parse_request(&line);
        exercise(r);
    }

    #[test]
    fn plausible_apply_and_set_never_panic(doc in arb_apply_doc()) {
        let (_, r) = parse_request(&doc.to_string());
        exercise(r);
    }
}

/// Run a parsed request against a TAP-less network as far as the model goes.
fn exercise(r: Result<Request, String>) {
    let mut net = Network::new(1);
    match r {
        Ok(Request::Apply(a)) => {
            if let Ok(spec) = build_topology(&a) {
                if check_topology(&net, &spec).is_ok() {
                    net.apply(spec, Instant::ZERO);
                    let _ = net.stats(None, Instant::ZERO);
                }
            }
        }
        Ok(Request::Set(s)) => {
            let _ = merge_params(&LinkParams::default(), &s.params, "params");
        }
        _ => {}
    }
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)),
        prop::sample::select(vec![
            "a",
            "b",
            "l",
            "lan",
            "ab",
            "ba",
            "both",
            "to_lan",
            "red",
            "droptail",
            "bernoulli",
            "gilbert",
            "ordinals",
            "none",
            ""
        ])
        .prop_map(Value::from),
    ]
}

const KEYS: &[&str] = &[
    "ports",
    "links",
    "lans",
    "port",
    "tap",
    "link",
    "lan",
    "a",
    "b",
    "ab",
    "ba",
    "members",
    "to_lan",
    "from_lan",
    "target",
    "dir",
    "member",
    "params",
    "bandwidth_bps",
    "delay_us",
    "jitter_us",
    "queue",
    "kind",
    "limit",
    "thresh",
    "maxthresh",
    "loss",
    "p",
    "r",
    "k",
    "h",
    "drop",
    "duplicate",
    "corrupt",
    "interval_ms",
    "path",
    "snaplen",
    "bogus",
];

fn arb_json(depth: u32) -> BoxedStrategy<Value> {
    if depth == 0 {
        return arb_scalar().boxed();
    }
    prop_oneof![
        3 => arb_scalar(),
        1 => proptest::collection::vec(arb_json(depth - 1), 0..4).prop_map(Value::Array),
        2 => arb_json_object(depth - 1).prop_map(Value::Object),
    ]
    .boxed()
}

fn arb_json_object(depth: u32) -> BoxedStrategy<serde_json::Map<String, Value>> {
    proptest::collection::vec((prop::sample::select(KEYS.to_vec()), arb_json(depth)), 0..5)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        .boxed()
}

/// Mostly-valid apply documents with random parameter values, to reach deep validation.
fn arb_apply_doc() -> impl Strategy<Value = Value> {
    (arb_json(1), arb_json(1), arb_json(1), arb_scalar(), arb_scalar()).prop_map(|(q, loss, d, bw, lim)| {
        json!({"id": 1, "cmd": "apply",
            "ports": [{"port": "a", "tap": "t1"}, {"port": "b", "tap": "t2"}, {"port": "c", "tap": "t3"}],
            "links": [{"link": "l", "a": "a", "b": "b", "ab": {"bandwidth_bps": bw, "queue": q, "loss": loss, "delay_us": d},
                       "ba": {"queue": {"kind": "red", "limit": lim}}}],
            "lans": [{"lan": "n", "members": [{"port": "c", "to_lan": {"loss": {"kind": "ordinals", "drop": [1, 2]}}}]}]})
    })
}
