"""Markdown rendering of fidelity-suite results (see bench/README.md for columns)."""

from measure import fmt


def pf(ok):
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def _within(err, bound):
    return None if err is None else err <= bound


def _pct(x):
    return None if x is None else x * 100


def _scaled(x, unit):
    return None if x is None else x / unit


def rate_name(bps):
    if bps >= 1e6:
        return f"{bps/1e6:g} Mbit/s"
    return f"{bps/1e3:g} kbit/s"


def low_rate_table(rows):
    """The low-rate rows side by side: veth, the TAP relay (what the TAP path alone costs at
    that rate) and the engine, with the engine's wake-ups per round trip."""
    rates = sorted({r["rate_pps"] for r in rows if r.get("rate_pps")})
    if not rates:
        return []
    L = ["Low rates, side by side (RTT in µs, 64 B; relay: `tap_relay`, the same TAPs copied "
         "into each other with no engine; wake-ups: the engine's sleeps per round trip):", "",
         "| rate (pps) | veth | relay | engine 0 ms | engine − relay | wake-ups/RTT 0 ms "
         "| engine 10 ms adjusted error (µs) | wake-ups/RTT 10 ms |",
         "|---|---|---|---|---|---|---|---|"]

    def at(path, rate, d=0):
        return next((r for r in rows if r["path"] == path and r.get("rate_pps") == rate
                     and r["delay_ms"] == d), {})
    for rate in rates:
        v, y, e0, e10 = at("veth", rate), at("relay", rate), at("engine", rate), \
            at("engine", rate, 10)
        gap = (e0["rtt_us"] - y["rtt_us"]) if e0.get("rtt_us") is not None and \
            y.get("rtt_us") is not None else None
        L.append(f"| {rate} | {fmt(v.get('rtt_us'), 1)} | {fmt(y.get('rtt_us'), 1)} "
                 f"| {fmt(e0.get('rtt_us'), 1)} | {fmt(gap, 1)} "
                 f"| {fmt(e0.get('wakeups_per_rtt'), 1)} | {fmt(e10.get('adj_error_us'), 1)} "
                 f"| {fmt(e10.get('wakeups_per_rtt'), 1)} |")
    L.append("")
    return L


def markdown(res):
    m = res["meta"]
    L = [f"# wanlab fidelity & capacity ({'quick' if m.get('quick') else 'full'} run)", "",
         f"{m.get('date')} · kernel {m.get('kernel')} · {m.get('cpus')} CPUs · git {m.get('git')} "
         "· "
         f"engine built: {m.get('engine_built')} (binary {m.get('engine_sha256')}, "
         f"{m.get('engine_mtime')}) · busy-poll variant: {m.get('busy_poll_variant')} · "
         f"total {m.get('total_s')} s · load average at start/end "
         f"{fmt((m.get('loadavg_start') or [None])[0], 2)}/"
         f"{fmt((m.get('loadavg_end') or [None])[0], 2)} "
         "(other work on the host skews capacity numbers)", ""]
    if res["delay"]:
        L += ["## Delay (RTT through one link, wanlab-gen ping; 1000 pps unless a rate is given)",
              "",
              "Goal: adjusted error <= max(0.5 %, 50 us); engine base RTT <= veth RTT + 30 us "
              "(veth at the same rate).", "",
              "| path | rate (pps) | one-way delay (ms) | frame (B) | observed RTT (ms) "
              "| stdev (ms) | error % | adjusted RTT (ms) | adjusted error % | goal |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["delay"]:
            if r.get("delay_ms") == 0:
                veth = r.get("veth_rtt_us")
                goal = pf(r.get("base_goal")) + (f" (veth {fmt(veth / 1e3, 4)})" if veth else "")
            else:
                goal = pf(r.get("goal"))
            L.append(f"| {r['path']} | {r.get('rate_pps', 1000)} | {r['delay_ms']} "
                     f"| {r['frame']} | "
                     f"{fmt(_scaled(r['rtt_us'], 1e3), 4)} "
                     f"| {fmt(_scaled(r['stdev_us'], 1e3), 4)} | "
                     f"{fmt(r.get('error_pct'), 3)} | {fmt(_scaled(r.get('adj_rtt_us'), 1e3), 4)} "
                     "| "
                     f"{fmt(r.get('adj_error_pct'), 3)} | {goal} |")
        L.append("")
        L += low_rate_table(res["delay"])
    if res["bandwidth"]:
        L += ["## Bandwidth (Ethernet frame bytes; offered 3 % above the rate)", "",
              "Goal: |error| <= 0.5 % (sink-measured).", "",
              "| family | configured | frame (B) | offered | measured at sink | error % | engine "
              "out_bytes rate | engine error % | goal |",
              "|---|---|---|---|---|---|---|---|---|"]
        for r in res["bandwidth"]:
            note = " (offered < rate)" if r.get("offered_short") else ""
            L.append(f"| IPv{r.get('family', 4)} | {rate_name(r['rate_bps'])} | {r['frame']} | "
                     f"{fmt(r['offered_bps']/1e6, 4)} Mbit/s | "
                     f"{fmt(r['measured_bps']/1e6, 5)} Mbit/s | {fmt(r['error_pct'], 3)} | "
                     f"{fmt(r['engine_bps']/1e6, 5)} Mbit/s | "
                     f"{fmt(r['engine_error_pct'], 3)} | {pf(r.get('goal'))}{note} |")
        L.append("")
    if res["loss"]:
        L += ["## Loss (Bernoulli, measured by sequence gaps at the sink)", "",
              "| configured | frame (B) | packets | lost | measured % | 99 % interval % | inside | "
              "engine drop_loss/in_pkts % | engine inside | queue drops |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["loss"]:
            L.append(f"| {r['p']*100:g} % | {r['frame']} | {r['expected']} | {r['lost']} | "
                     f"{fmt(r['measured']*100 if r['measured'] is not None else None, 3)} | "
                     f"{fmt(r['lo']*100, 3)} – {fmt(r['hi']*100, 3)} | {pf(r['inside'])} | "
                     f"{fmt(_pct(r['engine_measured']), 3)}"
                     f" | {pf(r.get('engine_inside'))} | {r['engine_drop_queue']} |")
        L.append("")
    if res.get("impair"):
        L += ["## Impairments (one engine link, measured on the wire)", "",
              "Each goal is its row's error bound (bench/fidelity_impair.py).", "",
              "| impairment | measured | goal | |", "|---|---|---|---|"]
        for r in res["impair"]:
            L.append(f"| {r['row']} | {r['measured']} | {r['goal']} | {pf(r['ok'])} |")
        L.append("")
    if res["capacity"]:
        L += ["## Capacity: 64-byte frames, wanlab-gen send --max (median of 3)", "",
              "Goal (engine): >= 1 Mpps and >= kernel router.", "",
              "Relay: the same TAPs copied by a program with nothing else in it "
              "(`engine/examples/tap_relay.rs`), the ceiling of a TAP forwarder.", "",
              "| path | received Mpps | sent Mpps | loss % | vs veth | vs router | vs relay "
              "| goal |",
              "|---|---|---|---|---|---|---|---|"]
        for r in res["capacity"]:
            L.append(f"| {r['path']} | {fmt(_scaled(r['pps_median'], 1e6), 3)} | "
                     f"{fmt(_scaled(r['tx_pps_median'], 1e6), 3)} | "
                     f"{fmt(r['loss_median']*100 if r['loss_median'] is not None else None, 2)} | "
                     f"{fmt(r.get('ratio_veth'), 2)} | "
                     f"{fmt(r.get('ratio_router'), 2)} | {fmt(r.get('ratio_relay'), 2)} | "
                     f"{pf(r.get('goal'))} |")
        L.append("")
    if res["tcp"]:
        L += ["## TCP throughput, iperf3 (median of 3)", "",
              "| path | streams | Gbit/s | vs veth | vs router | vs relay |",
              "|---|---|---|---|---|---|"]
        for r in res["tcp"]:
            L.append(f"| {r['path']} | {r['parallel']} | "
                     f"{fmt(r['bps_median']/1e9 if r['bps_median'] else None, 3)} | "
                     f"{fmt(r.get('ratio_veth'), 2)} | {fmt(r.get('ratio_router'), 2)} | "
                     f"{fmt(r.get('ratio_relay'), 2)} |")
        L.append("")
    sc = res.get("scale") or {}
    if sc:
        L += ["## Scale", "",
              f"{sc.get('links')} configured links ({sc.get('taps')} TAPs; {sc.get('active')} "
              "placed in namespaces with traffic, "
              "the rest unplaced).", "",
              "| metric | value | goal |", "|---|---|---|",
              f"| apply time | {fmt(sc.get('apply_s'), 2)} s | |",
              f"| engine idle CPU over 5 s | {fmt(sc.get('idle_cpu_pct'), 2)} % | "
              f"{pf(sc.get('idle_goal'))} (<= 1 %) |",
              f"| engine CPU with 10 × 10 Mbit/s streams | {fmt(sc.get('busy_cpu_pct'), 1)} % | |",
              "| bandwidth error, 10 links at 10 Mbit/s, 1518 B (max abs) | "
              f"{fmt(sc.get('bw_max_abs_error_pct'), 3)} % | "
              f"{pf(_within(sc.get('bw_max_abs_error_pct'), 0.5))} |",
              "| same, single-link table (10 Mbit/s, 1518 B) | "
              f"{fmt(sc.get('ref_single_bw_error_pct'), 3)} % | |",
              "| adjusted RTT error, 10 links at 10 ms one-way (max abs) | "
              f"{fmt(sc.get('rtt_max_abs_adj_error_pct'), 3)} % | "
              f"{pf(_within(sc.get('rtt_max_abs_adj_error_pct'), 0.5))} |",
              "| same, single-link table (10 ms, 64 B) | "
              f"{fmt(sc.get('ref_single_rtt_adj_error_pct'), 3)} % | |", ""]
    if res["errors"]:
        L += ["## Errors", ""] + [f"- {e}" for e in res["errors"]] + [""]
    return "\n".join(L)
