"""Does the portal's live view keep up? 200 links updated once a second, in a real browser.

The experiment: 200 links, each between two simulated nodes (400 nodes in the engine, no
namespaces), each carrying a CBR flow of 100-1200 kbit/s over 1 Mbit/s with 1-50 ms of
delay, so utilisation differs per link and the overloaded ones drop. A real ``wanlab
serve`` streams the engine's counters once a second; headless Chromium (Debian's, via
Selenium) shows the experiment's page. For ``--seconds`` it records, per live message:

* ``apply``: JavaScript time to turn the counters into rates and restyle all 200 edges
  (message handler, inside one cytoscape batch);
* ``paint``: from the message's arrival to the end of the next animation frame (the update
  is on screen);
* ``latency``: from the server's sample (engine stats read) to the message's arrival in the
  page (same host clock);

and, for responsiveness, every animation frame's interval over the whole run (a long one
would be a stall the user feels). Medians, 95th percentiles and maxima are printed and
written to bench/results/portal-live-latest.{md,json}, with the load average (the machine
may be shared).

    python3 bench/portal_live.py [--links 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RESULTS = os.path.join(ROOT, "bench", "results")
PASSWORD = "bench-password"


def spec(n: int, seed: int = 1) -> str:
    rnd = random.Random(seed)
    lines = [f"name: live{n}", "nodes:"]
    for i in range(n):
        lines += [f"  - {{name: s{i}, kind: simulated}}", f"  - {{name: d{i}, kind: simulated}}"]
    lines.append("links:")
    lines += [f"  - {{name: l{i}, nodes: [s{i}, d{i}], bandwidth: 1Mb, "
              f"delay: {rnd.randint(1, 50)}ms}}" for i in range(n)]
    lines.append("agents:")
    for i in range(n):
        lines += [f"  - {{name: u{i}, kind: Agent/UDP, node: s{i}, peer: n{i}}}",
                  f"  - {{name: n{i}, kind: Agent/Null, node: d{i}, peer: u{i}}}",
                  f"  - {{name: c{i}, kind: Application/Traffic/CBR, attached: u{i}, "
                  f"params: {{packetSize_: 1000, rate_: {rnd.randint(100, 1200)}kb}}}}"]
    lines.append("events:")
    lines += [f"  - {{at: 0.5, target: c{i}, action: start}}" for i in range(n)]
    return "\n".join(lines) + "\n"


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    if not xs:
        return {}
    return {"n": len(xs), "median": statistics.median(xs),
            "p95": xs[min(len(xs) - 1, int(0.95 * len(xs)))], "max": xs[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--links", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from wanlab.lifecycle import Lab
    from wanlab.portal import auth, projects, tables

    tmp = tempfile.mkdtemp(prefix="wanlab-portal-bench-")
    home = os.path.join(tmp, "home")
    lab = Lab(home)
    tables.migrate(lab.store.db)
    projects.add_user(lab.store.db, "bench", PASSWORD)
    projects.add_project(lab.store.db, "bench")
    projects.add_member(lab.store.db, "bench", "bench", "leader")
    token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, "bench"))
    lab.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "serve.log"), "w+")
    server = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "--home", home, "serve",
                               "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=log,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    driver = None
    name = f"live{a.links}"
    try:
        while "listening" not in open(log.name).read():
            if server.poll() is not None:
                raise SystemExit(open(log.name).read())
            time.sleep(0.1)

        def call(method: str, path: str, body=None):
            req = urllib.request.Request(
                url + "/api" + path, method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(req, timeout=300))

        t = time.monotonic()
        call("POST", "/experiments", {"project": "bench", "filename": f"{name}.yaml",
                                      "text": spec(a.links)})
        create_s = time.monotonic() - t
        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium")
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--window-size=1400,1000"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(options=opts,
                                  service=webdriver.ChromeService(shutil.which("chromedriver")))
        driver.get(f"{url}/#/login")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "user"))
        driver.find_element(By.ID, "user").send_keys("bench")
        driver.find_element(By.ID, "password").send_keys(PASSWORD)
        driver.find_element(By.ID, "login-button").click()
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "create"))
        t = time.monotonic()
        driver.get(f"{url}/#/exp/{name}")
        WebDriverWait(driver, 120, 0.05).until(lambda d: d.execute_script(
            "return window.wanlab.cy && window.wanlab.cy.edges().length"))
        first_draw_s = time.monotonic() - t
        # every animation frame's interval from now on, and the live messages' timings
        driver.execute_script("""
            window.benchFrames = []; window.wanlab.perf.length = 0;
            let last = performance.now();
            const tick = (now) => { window.benchFrames.push(now - last); last = now;
                                    if (!window.benchStop) requestAnimationFrame(tick); };
            requestAnimationFrame(tick);""")
        time.sleep(a.seconds)
        frames = driver.execute_script("window.benchStop = true; return window.benchFrames")
        perf = driver.execute_script("return window.wanlab.perf")
        styled = driver.execute_script(
            "return window.wanlab.cy.edges().filter(e => e.data('width') > 2.5).length")
    finally:
        if driver is not None:
            driver.quit()
        try:
            call("POST", f"/experiments/{name}/terminate")
        except Exception as e:        # noqa: BLE001  (report, then clean up by the store)
            print(f"terminate: {e}", file=sys.stderr)
            lab = Lab(home)
            for row in lab.list():
                lab.cleanup(row.name)
                lab.terminate(row.name)
            lab.close()
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    perf = perf[1:]            # the first message has no rates yet (no previous sample)
    res = {
        "links": a.links, "seconds": a.seconds, "messages": len(perf),
        "edges_restyled_by_traffic": styled, "create_s": create_s,
        "first_draw_s": first_draw_s,
        "apply_ms": summary([p["apply_ms"] for p in perf]),
        "paint_ms": summary([p["frame_ms"] for p in perf]),
        "latency_ms": summary([1000 * (p["received"] - p["server_at"]) for p in perf]),
        "frame_interval_ms": summary(frames),
        "long_frames_over_50ms": sum(1 for f in frames if f > 50),
        "loadavg": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "portal-live-latest.json"), "w") as f:
        json.dump(res, f, indent=1)

    def row(label: str, s: dict[str, float]) -> str:
        return f"| {label} | {s['n']} | {s['median']:.1f} | {s['p95']:.1f} | {s['max']:.1f} |"
    md = [f"# Portal live view: {a.links} links updated once a second",
          "",
          f"{res['date']}, load average {' '.join(f'{x:.2f}' for x in res['loadavg'])}; "
          f"headless Chromium, {a.seconds:.0f} s, {len(perf)} live messages; "
          f"{styled} of {a.links} edges restyled by their traffic at the end. "
          f"Create (swap-in of {2 * a.links} simulated nodes) {create_s:.1f} s; page to "
          f"first drawn graph {first_draw_s:.2f} s. Reproduce: "
          f"`python3 bench/portal_live.py --links {a.links} --seconds {a.seconds:.0f}`.",
          "",
          "| measure (ms) | n | median | p95 | max |", "|---|---|---|---|---|",
          row("apply: counters -> rates -> restyle all edges (JS)", res["apply_ms"]),
          row("paint: message arrival -> next frame on screen", res["paint_ms"]),
          row("latency: server's engine sample -> page", res["latency_ms"]),
          row("animation frame interval, whole run", res["frame_interval_ms"]),
          "",
          f"Frames longer than 50 ms: {res['long_frames_over_50ms']} of {len(frames)}."]
    with open(os.path.join(RESULTS, "portal-live-latest.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
