"""The text of ``wanlab show``: each site renders the report its ``show`` returns (this
host's experiment in full, or a summary of a large one; a cluster experiment's placement).
"""

from __future__ import annotations

from typing import Any

from wanlab.errors import WanlabError

SHOW_DETAIL_MAX = 40     # nodes, or links and LANs, above which `show` prints a summary
SHOW_FIRST = 10          # rows of each kind in that summary


def select(info: dict[str, Any], node: str | None = None, links: bool = False
           ) -> dict[str, Any]:
    """The part of ``show``'s report that ``node`` (``--node``: that node, its links and
    LANs) or ``links`` (``--links``: links and LANs, no nodes) selects."""
    if node:
        if node not in info["nodes"]:
            raise WanlabError(f"experiment {info['name']!r} has no node {node!r}")
        return {**info, "nodes": {node: info["nodes"][node]},
                "links": [l for l in info["links"] if node in (l["a"], l["b"])],
                "lans": [l for l in info["lans"] if node in l["members"]]}
    if links:
        return {**info, "nodes": {}}
    return info


def local_lines(info: dict[str, Any], summary: bool = True) -> list[str]:
    """An experiment of this host: its state, nodes, links, LANs, edge, simulated agents
    and the engine's pace; ``summary``: counts and first rows only, if it is large."""
    out: list[str] = []
    if info["state"] == "degraded":
        hint = f"'wanlab swapin --repair {info['name']}' rebuilds it"
        out.append(f"experiment {info['name']} (id {info['id']}): degraded: {info['error']}"
                   + ("" if hint in info["error"] else f" ({hint})"))
    else:
        out.append(f"experiment {info['name']} (id {info['id']}): {info['state']}")
        if info["error"]:
            out.append(f"  last error: {info['error']}")
    out.append(f"  folder: {info['folder']}")
    if summary and _summary(info, out):
        return out
    if info["nodes"]:
        out.append("nodes:")
    for n, d in info["nodes"].items():
        out.append(f"  {n} (" + ("simulated in the engine" if d.get("simulated")
                                 else f"netns {d['netns']}") +
                   (f", image {d['image']}" if d.get("image") else "") + ")")
        if d.get("usage"):
            out.append(f"    {_usage(d['usage'])}")
        for i in d["interfaces"]:
            out.append(f"    {i['ifname']:6} {i['ip'] or '(its own)':18} {i['mac']}  on "
                       f"{i['network']}")
            if i.get("ip6") and i["ip6"] != i["ip"]:
                out.append(f"    {'':6} {i['ip6']}")
        for r in d["routes"]:
            out.append(f"    route {r}")
    stats = info.get("stats", {}).get("links", {})
    if info["links"]:
        out.append("links:")
    for l in info["links"]:
        line = f"  {l['name']}: {l['a']} <-> {l['b']}"
        for d in ("ab", "ba"):
            line += f"  [{d}: {_shaping(l[d])}]"
        st = stats.get(l["name"])
        if st:
            line += (f"  {'up' if st.get('up', True) else 'DOWN'}; frames out "
                     f"ab {st['ab']['out_pkts']} ba {st['ba']['out_pkts']}")
        out.append(line)
        if st:
            out.append("    queueing delay (arrival to start of sending): "
                       + "; ".join(f"{d} {_dist(st[d].get('sojourn'))}" for d in ("ab", "ba")))
    if info["lans"]:
        out.append("lans:")
    for l in info["lans"]:
        varies = ", ".join({"bandwidth_bps": "bandwidth", "delay_s": "delay"}.get(f, f)
                           for f in l.get("varies") or ())
        out.append(f"  {l['name']}: {' '.join(l['members'])}  [{_shaping(l)}]"
                   + (f"  {varies} set per member:" if varies else ""))
        for m, words in (l.get("member_impair") or {}).items():
            out.append(f"    {m} receives: {', '.join(words)}")
        for m, halves in (l.get("changed_members") or {}).items():
            out.append(f"    {m}: " + "  ".join(f"[{d}: {_shaping(halves[d])}]"
                                                for d in ("to_lan", "from_lan")))
        for p in l.get("pairs") or ():
            out.append(f"    pair {p['from']} -> {p['to']}: [{_shaping(p)}]")
        if l.get("switches"):
            out.append("    switches: " + "  ".join(f"{s} ({' '.join(ms) or 'no hosts'})"
                                                   for s, ms in l["switches"].items()))
        for t in l.get("trunks") or ():
            out.append(f"    trunk {t['a']} <-> {t['b']}  [{t['a']}->{t['b']}: "
                       f"{_shaping(t['ab'])}]  [{t['b']}->{t['a']}: {_shaping(t['ba'])}]")
        if l.get("blocked"):
            out.append("    blocked by the spanning tree: " + ", ".join(
                f"{b['port']} (to {b['peer']})" for b in l["blocked"]))
        if l.get("trunks_down"):
            out.append("    down: " + ", ".join(f"{d['a']} <-> {d['b']}"
                                                for d in l["trunks_down"]))
    edge = info.get("edge")
    if edge:
        out.append(f"edge: gateway {edge['gateway']} on {edge['lan']}, reached from outside at "
                   f"{edge['address']} (uplink {edge['uplink']}); egress: "
                   f"{' '.join(edge['egress']) or 'none'}")
        for f in edge["forwards"]:
            out.append(f"  forward {f}")
        if edge.get("wireguard"):
            out.append(f"  wireguard {edge['wireguard']}")
    agents = info.get("stats", {}).get("agents") or {}
    if agents:
        out.append("simulated agents:")
    for name, st in agents.items():
        detail = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in st.items() if k != "kind" and v is not None)
        out.append(f"  {name} ({st.get('kind')}): {detail}")
    eng = info.get("engine")
    if eng:
        out.append(f"engine on CPUs {eng['cpus']} ({eng.get('cpus_why')})" if eng.get("cpus")
                   else f"engine with no CPU of its own ({eng.get('cpus_why')})")
    rt = info.get("stats", {}).get("realtime")
    if rt:
        # "now": the counts are since the start, so a 1024-host start-up flood that put the
        # engine 30 s behind reads as such while the engine keeps pace again
        out.append(f"engine: {'BEHIND real time' if rt.get('behind') else 'keeping pace'} now; "
                   f"since the start, {rt.get('late_events', 0)} of "
                   f"{rt.get('timer_events', 0)} timer events "
                   f"more than {rt.get('threshold_us', 0):g} µs late "
                   f"(max {rt.get('max_late_us', 0):g} µs)")
        if rt.get("lateness"):
            out.append(f"  timer lateness: {_dist(rt['lateness'], 'events')}; wakes "
                       f"{rt.get('wake_estimate_us', 0):g} µs early (measured wake-up latency)")
        if rt.get("departure"):
            out.append(f"  departure lateness: {_dist(rt['departure'])}")
    for p in info.get("stats", {}).get("partitions") or []:
        core = "unpinned" if p.get("core") is None else f"core {p['core']}"
        ports = ", ".join(p.get("ports") or []) or "-"
        sim = f", {p['simulated_nodes']} simulated nodes" if p.get("simulated_nodes") else ""
        out.append(f"  partition {p['partition']} ({core}): busy {p.get('busy', 0) * 100:.0f} %, "
                   f"{p.get('frames_per_s', 0):g} frames/s; ports {ports}{sim}")
    return out


def _summary(info: dict[str, Any], out: list[str]) -> bool:
    """For a large experiment: counts and the first rows of each kind (every detail would
    be tens of thousands of lines), added to ``out``. True if it was."""
    nodes, links, lans = info["nodes"], info["links"], info["lans"]
    if len(nodes) <= SHOW_DETAIL_MAX and len(links) + len(lans) <= SHOW_DETAIL_MAX:
        return False
    sim = sum(1 for d in nodes.values() if d.get("simulated"))
    out.append(f"  {len(nodes)} nodes" + (f" ({sim} simulated)" if sim else "") +
               f", {len(links)} links, {len(lans)} LANs, "
               f"{sum(len(d['interfaces']) for d in nodes.values())} interfaces, "
               f"{sum(len(d['routes']) for d in nodes.values())} routes")
    name = info["name"]
    out.append(f"nodes (first {min(SHOW_FIRST, len(nodes))}; one in full: wanlab show {name} "
               f"--node NODE):")
    for n, d in list(nodes.items())[:SHOW_FIRST]:
        ifs = d["interfaces"]
        out.append(f"  {n}: " + ", ".join(f"{i['ifname']} {i['ip'] or '(its own)'} on "
                                          f"{i['network']}" for i in ifs[:4])
                   + (f", ... ({len(ifs)} interfaces)" if len(ifs) > 4 else ""))
    nets = [f"{l['name']}: {l['a']} <-> {l['b']}" for l in links] + \
        [f"{l['name']}: {' '.join(l['members'][:8])}" + (" ..." if len(l["members"]) > 8
                                                          else "") for l in lans]
    out.append(f"links and LANs (first {min(SHOW_FIRST, len(nets))}; all: wanlab show {name} "
               f"--links):")
    for line in nets[:SHOW_FIRST]:
        out.append(f"  {line}")
    out.append(f"(a summary: {name} is large; wanlab show {name} --all prints everything)")
    return True


def placed_lines(info: dict[str, Any]) -> list[str]:
    """A cluster experiment's (its site's ``show``): where each node runs, each machine's
    part's fault, the wide-area mapping."""
    from wanlab.cluster import wide
    out = [f"experiment {info['name']}: {info['state']} on the cluster"]
    by_machine: dict[str, list[str]] = {}
    for node, m in sorted(info["machine_of"].items()):
        by_machine.setdefault(m, []).append(node)
    for m, nodes in sorted(by_machine.items()):
        err = info["parts"].get(m, {}).get("error")
        out.append(f"  machine {m}: {', '.join(nodes)}" + (f"  ({err})" if err else ""))
    for line in wide.lines(info["wide_area"]) if info.get("wide_area") else []:
        out.append("  " + line)
    return out


def _usage(u: dict[str, Any]) -> str:
    """A node's use of its cgroup, for people: its CPUs and how they were chosen, CPU seconds
    and recent cores, memory, pids."""
    def mb(b):
        return "-" if b is None else f"{b / 2**20:.1f} MB"
    cpu = "-" if u.get("cpu_usec") is None else f"{u['cpu_usec'] / 1e6:.2f} s"
    if u.get("cpu_share") is not None:
        cpu += f" (now {u['cpu_share']:.2f} cores)"
    mem = mb(u.get("memory")) + (f" of {mb(u['memory_max'])}" if u.get("memory_max") else "")
    pids = f"{u.get('pids', '-')}" + (f" of {u['pids_max']}" if u.get("pids_max") else "")
    oom = f", OOM kills {u['oom_kills']}" if u.get("oom_kills") else ""
    where = ""
    if u.get("cpus"):
        how = f" ({u['cpus_policy']})" if u.get("cpus_policy") else ""
        where = f"on CPUs {u['cpus']}{how}, "
    return f"{where}cpu {cpu}, memory {mem}, pids {pids}{oom}"


def _dist(h: dict | None, what: str = "frames") -> str:
    """A latency distribution from the engine's stats (µs) in one phrase."""
    if not h or not h.get("count"):
        return f"no {what}"
    f = lambda us: f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} µs"  # noqa: E731
    return (f"p50 {f(h['p50_us'])}, p99 {f(h['p99_us'])}, max {f(h['max_us'])} "
            f"({h['count']} {what})")


def _shaping(p: dict) -> str:
    """Bandwidth, delay and loss in force, each with its configured value where that
    differs (``show``'s ``configured``)."""
    cfg = p.get("configured") or {}

    def was(key: str, text) -> str:
        return f" (configured {text(cfg[key])})" if key in cfg else ""

    def ms(s: float) -> str:
        return f"{s * 1000:g} ms"
    imp = "".join(f", {w}" for w in p.get("impair", ()))
    if "impair" in cfg:
        imp += f" (configured {', '.join(cfg['impair']) or 'no impairments'})"
    return (f"{_bw(p['bandwidth_bps'])}{was('bandwidth_bps', _bw)}, {ms(p['delay_s'])}"
            f"{was('delay_s', ms)}, loss {p['loss']:g}{was('loss', lambda v: f'{v:g}')}"
            f"{imp}")


def _bw(bps: int) -> str:
    if bps == 0:
        return "unlimited"
    for unit, f in (("Gb", 1e9), ("Mb", 1e6), ("kb", 1e3)):
        if bps >= f:
            return f"{bps / f:g}{unit}"
    return f"{bps}b"
