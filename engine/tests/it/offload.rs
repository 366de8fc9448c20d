//! Offloaded frames (virtio_net_hdr: TSO super-frames, partial checksums) through the model,
//! in virtual time: whole across unlimited links, wire frames everywhere else.

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::params::merge_params;
use wanlab_engine::control::protocol::ParamsSpec;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::{Dir, LinkSpec, Network, TopologySpec};
use wanlab_engine::model::packet::Packet;
use wanlab_engine::model::params::LinkParams;
use wanlab_engine::time::Instant;
use wanlab_engine::wire::gso;
use wanlab_engine::wire::vnet::{VnetHdr, F_NEEDS_CSUM, GSO_TCPV4};

fn params(json: &str) -> LinkParams {
    let spec: ParamsSpec = serde_json::from_str(json).unwrap();
    merge_params(&LinkParams::default(), &spec, "test").unwrap()
}

fn link(ab: &str) -> VirtualTime {
    let mut net = Network::new(1);
    let spec = TopologySpec {
        ports: vec!["a".into(), "b".into()],
        links: vec![LinkSpec {
            id: "l".into(),
            a: "a".into(),
            b: "b".into(),
            ab: params(ab),
            ba: params("{}"),
        }],
        lans: vec![],
        routers: vec![],
        ..Default::default()
    };
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

/// IPv4 TCP super-frame with `segs` × `mss` payload bytes, as the kernel hands it over.
fn super_frame(mss: usize, segs: usize) -> Packet {
    let payload = mss * segs;
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let tot = (40 + payload) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (tot >> 8) as u8,
        tot as u8,
        0,
        1,
        0x40,
        0,
        64,
        6,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ]);
    f.extend_from_slice(&[
        0x03, 0xe8, 0x07, 0xd0, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    f.extend((0..payload).map(|i| (i % 251) as u8));
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: mss as u16,
        csum_start: 34,
        csum_offset: 16,
    };
    Packet { data: f, vnet }
}

const MS: u64 = 1_000_000;

#[test]
fn super_frame_on_shaped_link_leaves_as_wire_frames_at_exact_times() {
    let sf = super_frame(1000, 3);
    let segs = sf.clone().into_wire().unwrap();
    assert_eq!(segs.iter().map(Vec::len).collect::<Vec<_>>(), vec![1054; 3]);

    let mut vt = link(r#"{"bandwidth_bps":1000000,"delay_us":10000}"#);
    vt.inject_packet(0, sf, Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();

    let mut reference = link(r#"{"bandwidth_bps":1000000,"delay_us":10000}"#);
    for s in &segs {
        reference.inject(0, s.clone(), Instant::ZERO);
    }
    reference.run_to_idle();
    let want = reference.take();

    // 1054 B at 1 Mbit/s = 8.432 ms each, + 10 ms.
    let times: Vec<u64> = got.iter().map(|d| d.at.nanos()).collect();
    assert_eq!(times, vec![18_432_000, 26_864_000, 35_296_000]);
    assert_eq!(got, want);
    assert!(got
        .iter()
        .all(|d| d.vnet == VnetHdr::default() && d.port == 1));
    let c = vt.net.stats(Some("l"), vt.now).unwrap().links["l"]
        .ab
        .counters;
    assert_eq!(
        (c.in_pkts, c.out_pkts, c.in_bytes, c.out_bytes),
        (3, 3, 3162, 3162)
    );
}

#[test]
fn super_frame_crosses_a_fast_shaped_link_whole_when_its_last_frame_would_arrive() {
    // 40 × (54 + 1448) B at 10 Gbit/s: 48.064 µs on the wire, under WHOLE_NS.
    let sf = super_frame(1448, 40);
    let bytes = 40 * (54 + 1448);
    let wire_ns = (bytes * 8 * 1_000_000_000u64).div_ceil(10_000_000_000);
    assert!(wire_ns <= wanlab_engine::model::pipeline::WHOLE_NS);
    let mut vt = link(r#"{"bandwidth_bps":10000000000,"delay_us":1000}"#);
    vt.inject_packet(0, sf.clone(), Instant::ZERO);
    // a second one right behind it waits for the first's wire frames
    vt.inject_packet(0, sf.clone(), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 2);
    assert_eq!((&got[0].data, got[0].vnet), (&sf.data, sf.vnet));
    assert_eq!(got[0].at.nanos(), MS + wire_ns);
    assert_eq!(got[1].at.nanos(), MS + 2 * wire_ns);
    let l = &vt.net.stats(Some("l"), vt.now).unwrap().links["l"].ab;
    let c = l.counters;
    assert_eq!(
        (c.in_pkts, c.out_pkts, c.out_bytes, c.peak_qlen_pkts),
        (80, 80, 2 * bytes, 40)
    );
    // one queueing sample per wire frame: 40 waited nothing, 40 one super-frame's time
    assert_eq!(l.sojourn.count, 80);

    // The same at 1 Gbit/s takes 481 µs: cut into its wire frames, each at its own time.
    let mut vt = link(r#"{"bandwidth_bps":1000000000,"delay_us":1000}"#);
    vt.inject_packet(0, sf.clone(), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 40);
    assert_eq!(got[0].at.nanos(), MS + 12_016);
    assert!(got.iter().all(|d| d.vnet == VnetHdr::default()));
}

#[test]
fn a_super_frame_that_does_not_fit_the_queue_whole_is_cut_and_tail_dropped_exactly() {
    // Room for 30 wire frames: the first segment starts on the wire, the next 30 queue and
    // the last 9 are dropped, as they would be had the sender's NIC cut them.
    let mut vt = link(r#"{"bandwidth_bps":10000000000,"delay_us":1000,"queue":{"limit":30}}"#);
    vt.inject_packet(0, super_frame(1448, 40), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 31, "the first starts on the wire, 30 wait");
    assert!(got.iter().all(|d| d.vnet == VnetHdr::default()));
    let c = vt.net.stats(Some("l"), vt.now).unwrap().links["l"]
        .ab
        .counters;
    assert_eq!((c.in_pkts, c.out_pkts, c.drop_queue), (40, 31, 9));

    // Loss on the link: cut, whatever the rate.
    let mut vt = link(r#"{"bandwidth_bps":10000000000,"loss":{"kind":"ordinals","drop":[2]}}"#);
    vt.inject_packet(0, super_frame(1448, 40), Instant::ZERO);
    vt.run_to_idle();
    assert_eq!(vt.take().len(), 39);

    // A capture: cut, so each wire frame is captured (and arrives) at its own time.
    let mut vt = link(r#"{"bandwidth_bps":10000000000}"#);
    let pipe = vt.net.select("l", None, Dir::Ab).unwrap()[0];
    vt.net.set_capture(pipe, true);
    vt.inject_packet(0, super_frame(1448, 40), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 40);
    assert_eq!(
        got[1].at.nanos() - got[0].at.nanos(),
        1202,
        "1502 B at 10 Gbit/s"
    );
}

#[test]
fn super_frame_crosses_unlimited_link_whole() {
    let sf = super_frame(1448, 40);
    let mut vt = link(r#"{"delay_us":1000}"#);
    vt.inject_packet(0, sf.clone(), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].at.nanos(), &got[0].data, got[0].vnet),
        (MS, &sf.data, sf.vnet)
    );
    // Counted as the 40 wire frames it stands for.
    let c = vt.net.stats(Some("l"), vt.now).unwrap().links["l"]
        .ab
        .counters;
    assert_eq!(
        (c.in_pkts, c.out_pkts, c.out_bytes),
        (40, 40, 40 * (54 + 1448))
    );
}

#[test]
fn per_packet_effects_and_captures_see_wire_frames() {
    // Ordinal loss on an unlimited link: segmented on arrival, the 2nd segment is dropped.
    let mut vt = link(r#"{"loss":{"kind":"ordinals","drop":[2]}}"#);
    vt.inject_packet(0, super_frame(500, 3), Instant::ZERO);
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 2);
    assert_eq!(&got[1].data[38..42], &(1 + 1000u32).to_be_bytes()); // 3rd segment's seq

    // Loss set while the super-frame is in flight: decided per wire frame on delivery.
    let mut vt = link(r#"{"delay_us":1000}"#);
    vt.inject_packet(0, super_frame(500, 3), Instant::ZERO);
    let pipe = vt.net.select("l", None, Dir::Ab).unwrap()[0];
    vt.net.set_pipe_params(
        pipe,
        params(r#"{"delay_us":1000,"loss":{"kind":"ordinals","drop":[1]}}"#),
        Instant(10),
    );
    vt.run_to_idle();
    let got = vt.take();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|d| d.vnet == VnetHdr::default()));

    // Capture on an unlimited link: the capture and the receiver get the wire frames.
    let mut vt = link("{}");
    vt.net.set_capture(pipe, true);
    vt.inject_packet(0, super_frame(500, 3), Instant::ZERO);
    vt.run_to_idle();
    assert_eq!(vt.take().len(), 3);
}

#[test]
fn partial_checksum_completed_on_shaped_link() {
    let mut p = super_frame(100, 1);
    p.vnet.gso_type = 0;
    // Put the pseudo-header sum in the field, as the sending kernel does.
    let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 120];
    p.data[50..52].copy_from_slice(&gso::fold(gso::sum(&pseudo, 0)).to_be_bytes());
    let mut vt = link(r#"{"bandwidth_bps":100000000}"#);
    vt.inject_packet(0, p, Instant::ZERO);
    vt.run_to_idle();
    let d = vt.take();
    assert_eq!(d.len(), 1);
    let s = &d[0].data;
    assert_eq!(
        !gso::fold(gso::sum(&s[34..], gso::sum(&pseudo, 0))),
        0,
        "TCP checksum verifies"
    );
}
