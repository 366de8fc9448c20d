"""Traffic agents realised as real traffic between the nodes' namespaces.

Applications arrive typed (:class:`~wanlab.model.ir.Traffic`, ns-2's defaults already
applied by the front ends):

* ``cbr`` traffic. The project's generator runs on both ends: ``wanlab-gen
  sink`` on the sink's node and ``wanlab-gen send`` on the source's.
  ``rate_bps`` counts ``packet_size`` bytes of payload, as in ns-2 (the UDP
  payload here, so a frame is 42 bytes longer); or one packet per ``interval_s``.
* ``ftp`` over a TCP transport. iperf3 runs as a bulk transfer: a one-shot
  server on the sink's node and a client on the source's. ``reno`` and
  ``newreno`` use Linux ``reno`` (which recovers as NewReno), ``cubic`` and
  other Linux names themselves; ``tahoe`` (plain ``Agent/TCP``) has no Linux
  equivalent and keeps the host's default. ``mss`` sets the MSS and ``window``
  the socket buffers (window × MSS bytes); ``window_init`` and ``min_rto_s``
  become the ``initcwnd`` and ``rto_min`` of the sender's route to the sink
  (:mod:`wanlab.backends.emulate.tcp_route`). The result keeps Linux's cwnd and
  RTT every 0.1 s from the sender's report.
* ``poisson``, ``exponential`` and ``pareto`` traffic: wanlab-gen with
  ``--pattern`` (the engine's rules for its simulated sources: exponential
  gaps; on/off bursts at the rate with exponential or Pareto burst lengths and
  idle times), seeded from the experiment's seed, the agent and the flow.

On a cluster (docs/cluster.md) the two ends of a flow may be on different machines: each
machine's part has the application, and the end that is not on it is a stub node
(``remote``). Each part then realises its own end only, driven by the same events at the
same times: the sender's part the sender (to the peer's address in the node's hosts file,
which lists the whole experiment; an FTP client retries while the far receiver is not yet
listening), the receiver's part the receiver; each records its half of the flow
(``half``: ``send`` or ``receive``), which the controller merges.

Receivers (and CBR senders, paused until a signal) are started ahead of time,
at t = 0 and after each flow, so a ``start`` event begins the flow at once.
Each ``start`` … ``stop`` is one flow. Stopping sends SIGINT to the sender,
which ends cleanly (wanlab-gen sends its FIN, iperf3 prints its report), then
to the receiver. The flow's result (bytes, packets, loss, throughput over
time) is stored in the ``flows`` table and in
``<folder>/flows/<agent>-<n>.json``. ``set`` on a running agent restarts it
with the new value, which starts a new flow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import zlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wanlab.backends.emulate import netns, nodes, tcp_route
from wanlab.engine.binary import engine_binary
from wanlab.model import ir
from wanlab.model.ir import Agent, Traffic

if TYPE_CHECKING:
    from wanlab.run.context import Context

BASE_PORT = 20000
REMOTE_WAIT_S = 10.0     # how long an FTP client waits for a receiver on another machine
CONNECT_CHECK_S = 1.0    # a client still running after this has connected
LINUX_CC = {"reno": "reno", "newreno": "reno", "tahoe": None}   # the rest by name


def gen_binary() -> str:
    return os.path.join(os.path.dirname(engine_binary()), "wanlab-gen")


class TrafficAgent:
    """One application (CBR or FTP) with its transport agents and peer."""

    def __init__(self, rt: "Context", app: Agent, index: int):
        self.rt, self.app = rt, app
        agents = {a.name: a for a in rt.exp.agents}
        self.transport = agents.get(app.attached or "")
        if self.transport is None or self.transport.node is None:
            raise ValueError(f"application {app.name} is not attached to an agent on a node")
        self.peer = agents.get(self.transport.peer or "")
        if self.peer is None or self.peer.node is None:
            raise ValueError(f"agent {self.transport.name} is not connected to a sink")
        assert app.traffic is not None
        self.kind = app.traffic.pattern
        self.udp = self.kind != "ftp"            # wanlab-gen; ftp: iperf3
        self.port = BASE_PORT + index
        self.initial: Traffic = app.traffic
        self.traffic: Traffic = app.traffic
        self.flows = 0
        self.lock = threading.Lock()
        self.sender: subprocess.Popen | None = None
        self.receiver: subprocess.Popen | None = None
        self.sending = False
        self.started_s = 0.0
        self.base = ""
        self.prepared = False
        # a cluster part holds one end only when the other end's node is a stub there
        self.send_here = not rt.plan.nodes[self.transport.node].remote
        self.receive_here = not rt.plan.nodes[self.peer.node].remote

    # -- helpers ----------------------------------------------------------------
    def _dst_ip(self) -> str:
        if self.receive_here:
            first = self.rt.plan.nodes[self.peer.node].interfaces[0]
            return first.ip or first.ip6 or ""       # IPv6 only: its IPv6 address
        # on another machine: its address in the sending node's hosts file (the whole
        # experiment's)
        ns = self.rt.plan.nodes[self.transport.node].netns
        with open(os.path.join(netns.NETNS_ETC_DIR, ns, "hosts")) as f:
            for line in f:
                words = line.split("#")[0].split()
                if len(words) > 1 and self.peer.node in words[1:]:
                    return words[0]
        raise ValueError(f"no address of {self.peer.node} in {ns}'s hosts file")

    def _spawn(self, node: str, argv: list[str], out: str) -> subprocess.Popen:
        ns = self.rt.plan.nodes[node].netns
        rid = self.rt.record_process(f"agent-{self.app.name}-{self.flows}-{argv[0]}", node)
        with open(out, "wb") as f:
            p = nodes.popen(self.rt.store, self.rt.row, ns, node, argv,
                            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)
        self.rt.process_started(rid, p.pid)
        return p

    def _wait_bound(self, node: str, proto: str) -> None:
        """Wait until the receiver listens, so the sender's first packets are not lost."""
        ns = self.rt.plan.nodes[node].netns
        deadline = time.monotonic() + 5
        while not netns.listening(ns, proto, self.port):
            if self.receiver is not None and self.receiver.poll() is not None:
                raise ValueError(f"the receiver of {self.app.name} exited; see {self.base}"
                                 f".sink.json")
            if time.monotonic() > deadline:
                raise ValueError(f"the receiver of {self.app.name} did not start in 5 s")
            time.sleep(0.005)

    def _cbr_rate_args(self) -> list[str]:
        """Size and rate (mean rate for Poisson, rate during bursts for on/off), and the
        random pattern with a seed of its own: the experiment's, the agent and the flow."""
        t = self.traffic
        size = str(t.packet_size)
        if t.interval_s is not None:
            args = ["--size", size, "--rate", f"{1 / t.interval_s:.9g}"]
        else:
            args = ["--size", size, "--bitrate", str(t.rate_bps), "--bitrate-counts",
                    "payload"]
        if t.pattern != "cbr":
            seed = (self.rt.exp.seed << 32) ^ zlib.crc32(f"{self.app.name}:{self.flows}".encode())
            args += ["--pattern", t.pattern, "--seed", str(seed)]
        if t.pattern in ("exponential", "pareto"):
            args += ["--burst", f"{t.burst_s:.9g}", "--idle", f"{t.idle_s:.9g}"]
        if t.pattern == "pareto":
            args += ["--shape", f"{t.shape:.9g}"]
        return args

    def _amount(self) -> list[str]:
        """ns-2's maxbytes_ (``max_bytes``), else a transfer until the stop event."""
        mb = self.traffic.max_bytes
        return ["-n", str(mb)] if mb is not None else ["-t", "86400"]

    def _tcp_args(self) -> list[str]:
        """Linux congestion control, MSS and buffers from the typed TCP transport."""
        tp = self.transport.transport
        if tp is None or tp.protocol != "tcp":
            raise ValueError(f"FTP {self.app.name} needs a TCP agent, not "
                             f"{self.transport.kind}")
        cc = LINUX_CC.get(tp.cc, tp.cc) if tp.cc else None
        args = ["-C", cc] if cc else []
        if tp.mss is not None:
            args += ["-M", str(tp.mss)]
        if tp.window is not None:
            # ns-2's window_ (packets) as the socket buffers: Linux then caps its window
            args += ["-w", str(tp.window * (tp.mss or ir.LINUX_MSS))]
        return args

    # -- events -------------------------------------------------------------------
    def running(self) -> bool:
        p = self.sender if self.send_here else self.receiver
        return p is not None and p.poll() is None and self.sending

    def prepare(self) -> None:
        """Start the receiver (and, for CBR, a sender waiting for its signal) ahead of time,
        so a ``start`` event costs one signal, not the start-up of two processes."""
        with self.lock:
            self._prepare()

    def _prepare(self) -> None:
        if self.prepared:
            return
        self.flows += 1
        d = os.path.join(self.rt.folder, "flows")
        os.makedirs(d, exist_ok=True)
        self.base = os.path.join(d, f"{self.app.name}-{self.flows}")
        src, sink = self.transport.node, self.peer.node
        assert src is not None and sink is not None
        if self.udp:
            gen = gen_binary()
            if self.receive_here:
                self.receiver = self._spawn(sink, [
                    gen, "sink", "--bind", ("0.0.0.0" if self.rt.plan.nodes[sink].ipv4 else
                                            "[::]") + f":{self.port}", "--duration", "864000",
                    "--interval", "0.1", "--json"], self.base + ".sink.json")
                self._wait_bound(sink, "udp")
            if not self.send_here:
                self.prepared = True
                return
            dst = self._dst_ip()
            argv = [gen, "send", "--dst", f"[{dst}]:{self.port}" if ":" in dst else
                    f"{dst}:{self.port}",
                    *self._cbr_rate_args(), "--duration", "864000", "--wait-signal", "--json"]
            if self.traffic.tos is not None:
                argv += ["--tos", str(self.traffic.tos)]
            if self.traffic.max_packets is not None:      # ns-2 maxpkts_
                argv += ["--count", str(self.traffic.max_packets)]
            self.sender = self._spawn(src, argv, self.base + ".send.json")
            self._wait_signal_ready(self.sender)
        elif self.receive_here:
            self.receiver = self._spawn(sink, ["iperf3", "-s", "-1", "-p", str(self.port),
                                               "-J", "-i", "0.1"], self.base + ".sink.json")
            self._wait_bound(sink, "tcp")
        self.prepared = True

    def start(self) -> tuple[str, str]:
        with self.lock:
            if self.running():
                return "error", f"{self.app.name} is already running"
            self._prepare()
            if not self.send_here:
                pass                # the receiver is ready; the sender's machine sends
            elif self.udp:
                assert self.sender is not None
                os.kill(self.sender.pid, signal.SIGUSR1)
            else:
                self._start_client()
            self.sending = True
            self.started_s = self.rt.now()
            return "ok", (f"flow {self.flows} started ({self.kind} {self.transport.node} -> "
                          f"{self.peer.node})")

    def _start_client(self) -> None:
        """iperf3's client; a receiver on another machine may not listen yet (its part
        prepares it at the same moment): then the client is started again, for a while."""
        argv = ["iperf3", "-c", self._dst_ip(), "-p", str(self.port), *self._amount(), "-J",
                "-i", "0.1", *self._tcp_args()]
        tp = self.transport.transport
        if tp is not None:
            # windowInit_ and minrto_: Linux takes them from the route to the destination
            tcp_route.apply(self.rt.plan.nodes[self.transport.node or ""].netns,
                            self._dst_ip(), tcp_route.metrics(tp.window_init, tp.min_rto_s))
        deadline = time.monotonic() + (0 if self.receive_here else REMOTE_WAIT_S)
        while True:
            self.sender = self._spawn(self.transport.node or "", argv,
                                      self.base + ".send.json")
            if self.receive_here or time.monotonic() > deadline:
                return
            try:
                self.sender.wait(timeout=CONNECT_CHECK_S)
            except subprocess.TimeoutExpired:
                return          # connected: it is sending
            with open(self.base + ".send.json", errors="replace") as f:
                if "refused" not in f.read():
                    return      # another failure: reported with the flow
            time.sleep(0.2)

    def stop(self, prepare_next: bool = True) -> tuple[str, str]:
        with self.lock:
            if not self.sending:
                if not prepare_next:
                    self._discard()
                return "ok", "not running"
            stopped = self.rt.now()
            flow = self.flows
            self._end(self.sender, 0.0)
            self._end(self.receiver, 0.3)
            self.sender = self.receiver = None
            self.sending = self.prepared = False
            result = self._result(stopped - self.started_s)
            self.rt.flow_done(self.app.name, self.kind, self.started_s, stopped, result)
            with open(self.base + ".json", "w") as f:
                json.dump(result, f, indent=2)
        if prepare_next:
            threading.Thread(target=self._prepare_quietly, daemon=True).start()
        if self.udp:
            return "ok", (f"flow {flow}: {result.get('bytes', 0)} bytes, "
                          f"{result.get('packets', 0)} packets, {result.get('lost', 0)} lost")
        return "ok", f"flow {flow}: {result.get('bytes', 0)} bytes received"

    def _prepare_quietly(self) -> None:
        try:
            self.prepare()
        except Exception as e:           # reported again by the next start
            self.rt.log_note(f"{self.app.name}: could not prepare the next flow: {e}")

    def _discard(self) -> None:
        """Stop prepared processes of a flow that never started (at shutdown)."""
        for p in (self.sender, self.receiver):
            self._end(p, 0.0)
        self.sender = self.receiver = None
        self.prepared = False

    @staticmethod
    def _end(p: subprocess.Popen | None, grace: float) -> None:
        if p is None:
            return
        time.sleep(grace)
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    @staticmethod
    def _wait_signal_ready(p: subprocess.Popen) -> None:
        """Wait until the sender (after the exec chain into the node) has
        installed its SIGUSR1 handler: signalling earlier would kill it."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("SigCgt:") and int(line.split()[1], 16) & (
                                1 << (signal.SIGUSR1 - 1)):
                            return
            except FileNotFoundError:
                break
            if p.poll() is not None:
                break
            time.sleep(0.002)
        raise ValueError("the CBR sender did not start")

    def reset(self) -> tuple[str, str]:
        self.stop(prepare_next=False)
        with self.lock:
            self._discard()
            self.traffic = self.initial
        self._prepare_quietly()
        return "ok", "stopped; parameters reset"

    def set(self, key: str, value) -> tuple[str, str]:
        """A typed traffic field (``rate_bps``, ``packet_size``, ``interval_s``, ``tos``,
        ``max_packets``); a running flow restarts with it."""
        was_running = self.running()
        self.stop(prepare_next=False)
        with self.lock:
            self._discard()          # a prepared sender has the old rate: make a new one
            change = {key: value}
            if key == "rate_bps":        # ns-2: setting rate_ drops interval_
                change["interval_s"] = None
            elif key == "interval_s":
                change["rate_bps"] = None
            self.traffic = replace(self.traffic, **change)
        if was_running:
            self.start()
            return "ok", f"{key} = {value} (restarted as flow {self.flows})"
        self._prepare_quietly()
        return "ok", f"{key} = {value}"

    # -- results ------------------------------------------------------------------
    def _result(self, ran_s: float) -> dict[str, Any]:
        r = self._both_ends(ran_s)
        if not (self.send_here and self.receive_here):
            r["half"] = "send" if self.send_here else "receive"
        return r

    def _both_ends(self, ran_s: float) -> dict[str, Any]:
        send = _load_json(self.base + ".send.json")
        sink = _load_json(self.base + ".sink.json")
        if self.udp:
            size = self.traffic.packet_size or 0
            interval = sink.get("interval_s") or 0.1
            series = [[round((i + 1) * interval, 6), n * size * 8 / interval]
                      for i, n in enumerate(sink.get("interval_pkts", []))]
            return {"kind": self.kind, "sent_packets": send.get("sent_pkts"),
                    "sent_bytes": send.get("payload_bytes"), "packets": sink.get("pkts", 0),
                    "bytes": sink.get("bytes", 0), "lost": sink.get("lost", 0),
                    "loss_ratio": sink.get("loss_ratio", 0), "owd_avg_us": sink.get("owd_avg_us"),
                    "throughput_bps": series, "sender": send, "sink": sink}
        recv_intervals = [(iv["sum"]["end"], iv["sum"]["bits_per_second"])
                          for iv in sink.get("intervals", []) if "sum" in iv]
        received = sink.get("end", {}).get("sum_received", {}).get("bytes")
        if not received:
            received = int(sum(bps * 0.1 / 8 for _, bps in recv_intervals))
        # the sender's report has Linux's congestion window and RTT every 0.1 s. iperf3's
        # clock starts after its control exchange, some RTTs after the start event: the
        # test ran for end.sum_sent.end up to the stop, which places its start
        mss = send.get("start", {}).get("tcp_mss_default") or 1448
        test_s = send.get("end", {}).get("sum_sent", {}).get("end") or ran_s
        lag = max(0.0, ran_s - test_s)
        cwnd, rtt = [], []
        for iv in send.get("intervals", []):
            st = (iv.get("streams") or [{}])[0]
            if "snd_cwnd" in st:
                cwnd.append([round(st["end"] + lag, 6), st["snd_cwnd"] / mss])
            if st.get("rtt"):
                rtt.append([round(st["end"] + lag, 6), st["rtt"]])
        sender_end = (send.get("end", {}).get("streams") or [{}])[0].get("sender", {})
        return {"kind": "ftp", "bytes": received,
                "sent_bytes": send.get("end", {}).get("sum_sent", {}).get("bytes"),
                "retransmits": send.get("end", {}).get("sum_sent", {}).get("retransmits"),
                "srtt_us": sender_end.get("mean_rtt"), "cc": send.get("end", {}).get(
                    "sender_tcp_congestion"), "mss": mss, "cwnd": cwnd, "rtt_us": rtt,
                "throughput_bps": [[round(t + lag, 6), bps] for t, bps in recv_intervals],
                "start_lag_s": round(lag, 6), "error": sink.get("error") or None}


def _load_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    # wanlab-gen prints one JSON object on its last line; iperf3 prints one document
    for candidate in (text, text.strip().splitlines()[-1] if text.strip() else ""):
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, IndexError):
            continue
    return {"unparsed": text[-2000:]}
