#!/usr/bin/env python3
"""ns-3 dumbbell benchmark: N bulk TCP flows through one DropTail bottleneck.

Topology::

    s0 ─┐                                   ┌─ r0
    s1 ─┤  access      bottleneck   access  ├─ r1
    ... ├── L ───────────── R ──────────────┤ ...
    sN ─┘  (10×B, 1 ms)  (B, D)  (10×B, 1 ms) └─ rN

Flow i: BulkSendApplication on s_i (infinite) -> PacketSink on r_i.

Prints ONE JSON line on stdout (everything else goes to stderr).

Requires the ns-3 Python bindings from PyPI: ``pip install ns3`` (3.44, cppyy based);
imported as ``from ns import ns``.

Modelling choices (all ns-3 attributes set through Config::SetDefault):

* point-to-point links; the traffic-control queue discs that Ipv4AddressHelper::Assign
  installs by default (FqCoDel) are removed, so every queue is the device's own
  DropTailQueue; the bottleneck device queue (both directions) holds ``--queue-pkts``
  packets, default = bandwidth-delay product in 1000-byte segments (min 10);
  access-link device queues hold max(1000, 2*queue) packets so that they never drop.
* TCP: SegmentSize 1000 (payload), InitialCwnd 10, DelAckCount 1, SACK off (``--sack``
  to enable), timestamps off (``--timestamps`` to enable), classic NewReno fast recovery
  (``--recovery prr`` for ns-3's default PRR), socket buffers 4×(BDP+queue), min 1 MiB,
  MinRto 200 ms (``--min-rto-ms``; wanlab's TCP and Linux use 200 ms, ns-3's default is
  1 s, which left one flow at 10 Mb/s in repeated 1-s timeouts after slow start's burst
  losses: 2.95 Mb/s against wanlab's 9.00), initial RTO 1 s as in wanlab.
* Without a queue disc, a packet arriving at a full device queue is dropped by the
  TrafficControlLayer (the device's tx queue is "stopped"), not by DropTailQueue::Enqueue:
  it shows in the TrafficControlLayer Drop trace, not as "d" in the ascii trace.
* Cost warning: at 1 Gbit/s (8500-packet windows) ns-3's wall time is dominated by
  TcpTxBuffer::GetPacketFromList (a linear walk of the sent list per retransmission),
  so a 1 Gbit/s run of more than a few simulated seconds can take many minutes.
* ``events`` = Simulator::GetEventCount(): events popped from the scheduler during
  Run(), INCLUDING events that had been cancelled (EventId::Cancel) and are popped as
  no-ops.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

SEG = 1000          # TCP payload bytes per segment
ACCESS_DELAY_MS = 1.0
PORT = 50000


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flows", type=int, default=10)
    p.add_argument("--bottleneck", type=float, default=10e6, help="bottleneck bit/s")
    p.add_argument("--duration", type=float, default=20.0, help="simulated seconds")
    p.add_argument("--delay-ms", type=float, default=32.0, help="bottleneck one-way delay")
    p.add_argument("--cc", choices=("newreno", "cubic"), default="newreno")
    p.add_argument("--queue-pkts", type=int, default=None,
                   help="bottleneck DropTail size in packets (default BDP, min 10)")
    p.add_argument("--access-bps", type=float, default=None,
                   help="access link bit/s (default max(1e9, 10*bottleneck))")
    p.add_argument("--timestamps", action="store_true", help="enable TCP timestamps")
    p.add_argument("--sack", action="store_true", help="enable SACK (default off)")
    p.add_argument("--recovery", choices=("classic", "prr"), default="classic")
    p.add_argument("--min-rto-ms", type=float, default=200.0,
                   help="TCP minimum RTO (wanlab and Linux: 200 ms; ns-3's default 1000)")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def rate_str(bps: float) -> str:
    return f"{int(round(bps))}bps"


def ms_str(ms: float) -> str:
    return f"{int(round(ms * 1000))}us"


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.flows < 1 or a.bottleneck <= 0 or a.duration <= 0 or a.delay_ms < 0:
        print("bad arguments", file=sys.stderr)
        return 2

    t_import = time.perf_counter()
    from ns import ns  # noqa: E402  (slow: cppyy loads and parses the ns-3 headers)
    import_s = time.perf_counter() - t_import

    access_bps = a.access_bps or max(1e9, 10 * a.bottleneck)
    rtt_s = 2 * (a.delay_ms + 2 * ACCESS_DELAY_MS) / 1000.0
    bdp_pkts = a.bottleneck * rtt_s / 8 / SEG
    queue_pkts = a.queue_pkts if a.queue_pkts is not None else max(10, int(round(bdp_pkts)))
    access_queue = max(1000, 2 * queue_pkts)
    sockbuf = max(1 << 20, int(4 * (bdp_pkts + queue_pkts) * SEG))
    sockbuf = min(sockbuf, (1 << 31) - 1)

    # ---- global defaults -------------------------------------------------------
    ns.RngSeedManager.SetSeed(a.seed)
    ns.RngSeedManager.SetRun(1)
    cc_type = "ns3::TcpNewReno" if a.cc == "newreno" else "ns3::TcpCubic"
    sd = ns.Config.SetDefault
    sd("ns3::TcpL4Protocol::SocketType", ns.StringValue(cc_type))
    sd("ns3::TcpL4Protocol::RecoveryType",
       ns.StringValue("ns3::TcpClassicRecovery" if a.recovery == "classic"
                      else "ns3::TcpPrrRecovery"))
    sd("ns3::TcpSocket::SegmentSize", ns.UintegerValue(SEG))
    sd("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(10))
    sd("ns3::TcpSocket::DelAckCount", ns.UintegerValue(1))
    sd("ns3::TcpSocket::SndBufSize", ns.UintegerValue(sockbuf))
    sd("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(sockbuf))
    sd("ns3::TcpSocketBase::Sack", ns.BooleanValue(bool(a.sack)))
    sd("ns3::TcpSocketBase::Timestamp", ns.BooleanValue(bool(a.timestamps)))
    sd("ns3::TcpSocketBase::WindowScaling", ns.BooleanValue(True))
    sd("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(a.min_rto_ms / 1000.0)))

    # ---- nodes -----------------------------------------------------------------
    n = a.flows
    routers = ns.NodeContainer()
    routers.Create(2)
    senders = ns.NodeContainer()
    senders.Create(n)
    receivers = ns.NodeContainer()
    receivers.Create(n)
    left, right = routers.Get(0), routers.Get(1)

    inet = ns.InternetStackHelper()
    inet.Install(routers)
    inet.Install(senders)
    inet.Install(receivers)

    # ---- links -----------------------------------------------------------------
    bott = ns.PointToPointHelper()
    bott.SetDeviceAttribute("DataRate", ns.StringValue(rate_str(a.bottleneck)))
    bott.SetChannelAttribute("Delay", ns.StringValue(ms_str(a.delay_ms)))
    bott.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                  ns.StringValue(f"{queue_pkts}p"))
    acc = ns.PointToPointHelper()
    acc.SetDeviceAttribute("DataRate", ns.StringValue(rate_str(access_bps)))
    acc.SetChannelAttribute("Delay", ns.StringValue(ms_str(ACCESS_DELAY_MS)))
    acc.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                 ns.StringValue(f"{access_queue}p"))

    tch = ns.TrafficControlHelper()
    addr = ns.Ipv4AddressHelper()

    def link(helper, x, y, net):
        devs = helper.Install(x, y)
        addr.SetBase(ns.Ipv4Address(net), ns.Ipv4Mask("255.255.255.0"))
        ifs = addr.Assign(devs)
        tch.Uninstall(devs)   # drop the default FqCoDel root qdisc: pure device DropTail
        return ifs

    link(bott, left, right, "10.255.0.0")
    rx_addrs = []
    for i in range(n):
        # 10.<hi>.<lo>.0/24 per access link; senders in 10.0-99.x, receivers 10.100-199.x
        link(acc, senders.Get(i), left, f"10.{i // 256}.{i % 256}.0")
        ifs = link(acc, receivers.Get(i), right, f"10.{100 + i // 256}.{i % 256}.0")
        rx_addrs.append(ifs.GetAddress(0))
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    # ---- applications ----------------------------------------------------------
    sinks = []
    any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), PORT).ConvertTo()
    sink_helper = ns.PacketSinkHelper("ns3::TcpSocketFactory", any_addr)
    for i in range(n):
        apps = sink_helper.Install(receivers.Get(i))
        apps.Start(ns.Seconds(0.0))
        sinks.append(apps.Get(0))
        dst = ns.InetSocketAddress(rx_addrs[i], PORT).ConvertTo()
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", dst)
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))       # infinite
        bulk.SetAttribute("SendSize", ns.UintegerValue(64 * SEG))  # fewer app writes
        sapps = bulk.Install(senders.Get(i))
        # all flows start at t=0.1 s, 1 ms apart at most, so that handshakes are not
        # perfectly synchronised
        sapps.Start(ns.Seconds(0.1 + 0.001 * (i % 100) / max(1, min(n, 100))))
    ns.Simulator.Stop(ns.Seconds(a.duration))

    # ---- run -------------------------------------------------------------------
    ev0 = ns.Simulator.GetEventCount()
    setup_s = time.perf_counter() - t_import - import_s
    t0 = time.perf_counter()
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    events = int(ns.Simulator.GetEventCount()) - int(ev0)

    per_flow_bytes = []
    for s in sinks:
        sink = s.GetObject[ns.PacketSink]()
        per_flow_bytes.append(int(sink.GetTotalRx()))
    ns.Simulator.Destroy()

    total = sum(per_flow_bytes)
    delivered = total / SEG
    try:
        from importlib.metadata import version
        ver = version("ns3")
    except Exception:  # pragma: no cover
        ver = "3.44"
    out = {
        "simulator": "ns-3",
        "version": ver,
        "flows": n,
        "bottleneck_bps": a.bottleneck,
        "delay_ms": a.delay_ms,
        "duration_s": a.duration,
        "cc": a.cc,
        "queue_pkts": queue_pkts,
        "wall_s": round(wall, 4),
        "events": events,
        "events_per_s": round(events / wall) if wall > 0 else None,
        "delivered_pkts": delivered,
        "delivered_pkts_per_wall_s": round(delivered / wall) if wall > 0 else None,
        "goodput_bps": total * 8 / a.duration,
        "per_flow_bps": [b * 8 / a.duration for b in per_flow_bytes],
        "import_s": round(import_s, 2),
        "setup_s": round(setup_s, 4),
        "min_rto_ms": a.min_rto_ms,
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
