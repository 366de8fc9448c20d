//! A cluster's cut link: two engines joined by a tunnel port (`wire/stamp`). The sending
//! engine shapes the direction and lets each frame go as soon as it is serialized, with its
//! due time; the receiving engine holds it until then, whatever the path between them took.

use wanlab_engine::control::check::check_topology;
use wanlab_engine::control::protocol::{parse_request, Request};
use wanlab_engine::control::topology::build_topology;
use wanlab_engine::driver::virtual_time::VirtualTime;
use wanlab_engine::model::network::Network;
use wanlab_engine::time::Instant;
use wanlab_engine::wire::stamp;

const MS: u64 = 1_000_000;
/// Unix time of each engine's instant 0 (one host: one clock; the receiver started first).
const WALL_SENDER: u64 = 1_764_000_000_000_000_000;
const WALL_RECEIVER: u64 = WALL_SENDER - 3 * MS;

/// An engine with node port `n` and tunnel port `t` on link `l`: `n -> t` shaped as
/// `ab`, `t -> n` unshaped (the cluster's split).
fn engine(ab: &str, wall: u64) -> VirtualTime {
    let line = format!(
        r#"{{"id":1,"cmd":"apply","ports":[{{"port":"n","tap":"e0"}},{{"port":"t","tap":"e1","tunnel":true}}],"links":[{{"link":"l","a":"n","b":"t","ab":{ab}}}]}}"#
    );
    let Request::Apply(req) = parse_request(&line).1.unwrap() else {
        panic!("not an apply")
    };
    let spec = build_topology(&req).unwrap();
    assert_eq!(spec.tunnels, vec!["t".to_string()]);
    let mut net = Network::new(1);
    net.set_wall_offset(wall);
    check_topology(&net, &spec).unwrap();
    net.apply(spec, Instant::ZERO);
    VirtualTime::new(net)
}

fn frame(n: u8) -> Vec<u8> {
    let mut f = vec![n; 100];
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f
}

#[test]
fn the_receiving_engine_delivers_at_the_senders_due_time_whatever_the_path_took() {
    // 10 ms, 8 Mbit/s: a 100-byte frame takes 100 us to serialize
    let mut tx = engine(r#"{"delay_us":10000,"bandwidth_bps":8000000}"#, WALL_SENDER);
    let mut rx = engine("{}", WALL_RECEIVER);
    tx.inject(0, frame(1), Instant::ZERO);
    tx.inject(0, frame(2), Instant::ZERO);
    tx.run_to_idle();
    let sent = tx.take();
    // each leaves at the end of its serialization, not 10 ms later, with its due time
    assert_eq!(
        sent.iter()
            .map(|d| (d.at.nanos(), d.port))
            .collect::<Vec<_>>(),
        vec![(100_000, 1), (200_000, 1)]
    );
    let mut dues = Vec::new();
    for (k, d) in sent.into_iter().enumerate() {
        let mut data = d.data;
        let due = stamp::strip(&mut data).expect("a due-time trailer");
        assert_eq!(data, frame(k as u8 + 1), "the frame itself unchanged");
        dues.push(due);
        // the receiver reads it after a path of 0.7 ms
        let read = (WALL_SENDER + d.at.nanos() + 700_000) - WALL_RECEIVER;
        let mut wire = data;
        stamp::append(&mut wire, due);
        rx.inject(1, wire, Instant(read));
    }
    assert_eq!(
        dues,
        vec![WALL_SENDER + 10_100_000, WALL_SENDER + 10_200_000]
    );
    rx.run_to_idle();
    let got = rx.take();
    // delivered to the node at the due time in the receiver's own time, trailer removed
    assert_eq!(
        got.iter()
            .map(|d| (d.at.nanos() + WALL_RECEIVER, d.port, d.data.clone()))
            .collect::<Vec<_>>(),
        vec![
            (WALL_SENDER + 10_100_000, 0, frame(1)),
            (WALL_SENDER + 10_200_000, 0, frame(2))
        ]
    );
    // the counters count the frame, not its trailer
    let s = tx.net.stats(Some("l"), tx.now).unwrap();
    assert_eq!(s.links["l"].ab.out_bytes, 200);
}

#[test]
fn a_frame_that_arrives_after_its_due_time_or_without_one_is_delivered_at_once() {
    let mut rx = engine("{}", WALL_RECEIVER);
    let mut late = frame(1);
    stamp::append(&mut late, WALL_RECEIVER + 5 * MS);
    rx.inject(1, late, Instant(6 * MS));
    rx.inject(1, frame(2), Instant(7 * MS));
    rx.run_to_idle();
    let got = rx.take();
    assert_eq!(
        got.iter()
            .map(|d| (d.at.nanos(), d.data.clone()))
            .collect::<Vec<_>>(),
        vec![(6 * MS, frame(1)), (7 * MS, frame(2))]
    );
}

#[test]
fn a_far_clock_ahead_is_taken_off_its_due_times_and_only_tunnels_take_an_offset() {
    use wanlab_engine::control::command::{validate, Command};
    let mut rx = engine("{}", WALL_RECEIVER);
    // the sender's clock is 4 ms ahead of ours: its "due at U" is U - 4 ms here
    let Request::TunnelClock(req) =
        parse_request(r#"{"id":2,"cmd":"tunnel_clock","port":"t","offset_ns":4000000}"#)
            .1
            .unwrap()
    else {
        panic!("not a tunnel_clock")
    };
    let Ok(Command::TunnelClock { port, offset_ns }) = validate(Request::TunnelClock(req)) else {
        panic!("refused")
    };
    rx.net.set_tunnel_clock(&port, offset_ns).unwrap();
    let mut f = frame(1);
    stamp::append(&mut f, WALL_RECEIVER + 20 * MS);
    rx.inject(1, f, Instant(MS));
    rx.run_to_idle();
    let got = rx.take();
    assert_eq!(
        got.iter().map(|d| d.at.nanos()).collect::<Vec<_>>(),
        vec![16 * MS]
    );
    // behind (negative): held longer
    rx.net.set_tunnel_clock("t", -2 * MS as i64).unwrap();
    let mut f = frame(2);
    stamp::append(&mut f, WALL_RECEIVER + 30 * MS);
    rx.inject(1, f, Instant(20 * MS));
    rx.run_to_idle();
    assert_eq!(
        rx.take().iter().map(|d| d.at.nanos()).collect::<Vec<_>>(),
        vec![32 * MS]
    );
    // a node's port is no tunnel; an unknown port is named; an absurd offset is refused
    assert!(rx
        .net
        .set_tunnel_clock("n", 1)
        .unwrap_err()
        .contains("not a tunnel"));
    assert!(rx
        .net
        .set_tunnel_clock("x", 1)
        .unwrap_err()
        .contains("no port"));
    let Request::TunnelClock(big) =
        parse_request(r#"{"id":3,"cmd":"tunnel_clock","port":"t","offset_ns":61000000000}"#)
            .1
            .unwrap()
    else {
        panic!("not a tunnel_clock")
    };
    assert!(validate(Request::TunnelClock(big))
        .unwrap_err()
        .starts_with("offset_ns:"));
    let (_, bad) = parse_request(r#"{"id":4,"cmd":"tunnel_clock","port":"t","offset":1}"#);
    assert!(bad.unwrap_err().contains("offset"));
}
