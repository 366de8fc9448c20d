"""Applications between simulated nodes of a running (mixed) experiment.

Their traffic is generated inside the engine (:mod:`wanlab.plan.sim_flows`), so an event is
one engine ``agent`` command. While a flow runs, a thread samples its sink every 0.1 s
for throughput over time; at ``stop`` the flow's result — the same fields as an
emulated flow's, plus the TCP cwnd trace — goes to the ``flows`` table.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from wanlab.backends.emulate import engine
from wanlab.engine.protocol import AgentAction, Stats, Trace
from wanlab.plan.sim_flows import SimFlow

if TYPE_CHECKING:
    from wanlab.run.context import Context

SAMPLE_S = 0.1


class SimTrafficAgent:
    """One simulated application, driven through the engine's control socket."""

    def __init__(self, rt: "Context", flow: SimFlow):
        self.rt, self.flow = rt, flow
        self.kind = "ftp" if flow.kind == "tcp" else flow.kind
        self.lock = threading.Lock()
        self.sending = False
        self.flows = 0
        self.started_s = 0.0
        self.start_stats: dict[str, Any] = {}
        self.series: list[list[float]] = []
        self.stop_sampling = threading.Event()
        self.sampler: threading.Thread | None = None
        self.engine_now_ns = self.t0_ns = 0

    def _stats(self, c: engine.Client) -> tuple[dict[str, Any], dict[str, Any]]:
        r = c.send(Stats(target=self.flow.app))
        self.engine_now_ns = r.get("now_ns", 0)
        sink = c.send(Stats(target=self.flow.sink_id))["agents"]
        return r["agents"].get(self.flow.app, {}), sink.get(self.flow.sink_id, {})

    def running(self) -> bool:
        return self.sending

    def _prepare_quietly(self) -> None:
        """Nothing to prepare: the engine's agents exist from swap-in."""

    def start(self) -> tuple[str, str]:
        with self.lock:
            if self.sending:
                return "error", f"{self.flow.app} is already running"
            with engine.Client(self.rt.sock) as c:
                if self.flow.kind == "tcp":
                    c.send(Trace(agent=self.flow.app, clear=True))
                c.send(AgentAction(agent=self.flow.app, action="start"))
                self.started_s = self.rt.now()
                self.start_stats = dict(zip(("source", "sink"), self._stats(c), strict=True))
                self.t0_ns = self.engine_now_ns
            self.flows += 1
            self.sending = True
            self.series = []
            self.stop_sampling.clear()
            self.sampler = threading.Thread(target=self._sample, daemon=True)
            self.sampler.start()
        return "ok", (f"flow {self.flows} started (simulated {self.flow.kind} "
                      f"{self.flow.src_node} -> {self.flow.dst_node})")

    def _sample(self) -> None:
        prev = self.start_stats["sink"].get("bytes") or 0
        t_prev = self.started_s
        while not self.stop_sampling.wait(SAMPLE_S):
            try:
                with engine.Client(self.rt.sock) as c:
                    sink = c.send(Stats(target=self.flow.sink_id))["agents"][
                        self.flow.sink_id]
            except Exception:            # engine gone: the flow ends with the experiment
                return
            now = self.rt.now()
            b = sink.get("bytes") or 0
            self.series.append([round(now - self.started_s, 6),
                                (b - prev) * 8 / max(now - t_prev, 1e-6)])
            prev, t_prev = b, now

    def stop(self, prepare_next: bool = True) -> tuple[str, str]:
        with self.lock:
            if not self.sending:
                return "ok", "not running"
            self.stop_sampling.set()
            try:
                with engine.Client(self.rt.sock) as c:
                    c.send(AgentAction(agent=self.flow.app, action="stop"))
                    stopped = self.rt.now()
                    src, sink = self._stats(c)
                    trace = (c.send(Trace(agent=self.flow.app)).get("samples", [])
                             if self.flow.kind == "tcp" else [])
            finally:
                self.sending = False
            if self.sampler is not None:
                self.sampler.join(timeout=1)
            result = self._result(src, sink, trace)
            self.rt.flow_done(self.flow.app, self.kind, self.started_s, stopped, result)
            d = os.path.join(self.rt.folder, "flows")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"{self.flow.app}-{self.flows}.json"), "w") as f:
                json.dump(result, f, indent=2)
        return "ok", f"flow {self.flows}: {result['bytes']} bytes received (simulated)"

    def _result(self, src: dict[str, Any], sink: dict[str, Any],
                trace: list[list[Any]]) -> dict[str, Any]:
        s0, a0 = self.start_stats["sink"], self.start_stats["source"]
        d = lambda a, b, k: (b.get(k) or 0) - (a.get(k) or 0)   # noqa: E731
        res: dict[str, Any] = {"simulated": True, "bytes": d(s0, sink, "bytes"),
                               "sent_bytes": d(a0, src, "sent_bytes"),
                               "packets": d(s0, sink, "pkts"),
                               "sent_packets": d(a0, src, "sent_pkts"),
                               "throughput_bps": self.series}
        if self.flow.kind == "tcp":
            # trace times are engine ns; t0_ns is the engine's clock at our start
            t0 = self.t0_ns
            res.update(kind="ftp", cc=self.flow.transport.cc,
                       mss=self.flow.transport.mss or 1000,     # the engine's default
                       retransmits=d(a0, src, "retransmits"), timeouts=d(a0, src, "timeouts"),
                       srtt_us=src.get("srtt_us"),
                       cwnd=[[(t - t0) / 1e9, c] for t, c, *_ in trace])
        else:
            lost = d(s0, sink, "lost")
            # flowstats' definition, as wanlab-gen's: lost / expected (duplicates count once)
            expected = d(s0, sink, "expected")
            res.update(kind=self.flow.kind, lost=lost,
                       loss_ratio=lost / expected if expected else 0,
                       owd_avg_us=sink.get("owd_avg_us"))
        return res

    def reset(self) -> tuple[str, str]:
        self.stop(prepare_next=False)
        return "ok", "stopped"

    def set(self, args: list[str]) -> tuple[str, str]:
        return "error", (f"{self.flow.app}: set on a simulated application is not supported "
                         f"(its parameters are fixed at swap-in)")
