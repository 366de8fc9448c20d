"""The portal in a real browser (Debian's headless Chromium driven by Selenium), against a
real ``wanlab serve`` and a real experiment: log in, create Netbed's Figure 2 from the
page's form, see its topology, open a console on ``source`` and ping ``dest``, click
``link1`` and set it down, watch the ping stop, set it up, watch it resume; switch one
direction to a trace uploaded with it and back to a fixed rate; terminate from
the page. The audit log then holds who did it.

Screenshots of the topology and console go to $WANLAB_PORTAL_SHOTS when it is set
(docs/portal/ holds the committed ones), else to the test's temporary folder."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import ROOT, needs_root

selenium = pytest.importorskip("selenium")
pytest.importorskip("fastapi")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
STATIC = os.path.join(ROOT, "wanlab", "portal", "static", "index.html")
PASSWORD = "s3cret-pass"

pytestmark = [needs_root, pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
    "(make install)"), pytest.mark.skipif(not os.path.exists(STATIC), reason="portal pages "
                                          "not built (make install runs npm in web/)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def admin(home, *argv, stdin=None):
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", home, "portal", *argv],
                       input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def server(tmp_path):
    home = str(tmp_path / "home")
    admin(home, "user", "add", "alice", stdin=PASSWORD + "\n")
    admin(home, "project", "add", "testbed")
    admin(home, "member", "add", "testbed", "alice", "--role", "leader")
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "--home", home, "serve",
                             "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=log,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        log.seek(0)
        if "listening on" in log.read():
            break
        assert proc.poll() is None and time.monotonic() < deadline, open(log.name).read()
        time.sleep(0.1)
    log.seek(0)
    assert f"listening on {url}/ (local connections only)" in log.read()
    yield home, url
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # to see CSP reports
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(DRIVER))
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def wait(driver, what, timeout=60, message=""):
    # a live update may replace an element between finding it and reading it: look again
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: what(d), message)


def pings(driver) -> int:
    """Echo replies the console shows so far."""
    text = driver.execute_script("return window.wanlab.console ? "
                                 "window.wanlab.console.text() : ''")
    return text.count("bytes from")


def click_edge(driver, edge_id: str) -> None:
    """A real mouse click on the middle of a drawn link (the graph fully in view first:
    an element's offsets count from the centre of its visible part)."""
    driver.execute_script("document.getElementById('cy').scrollIntoView()")
    x, y, w, h = driver.execute_script(
        "const cy = window.wanlab.cy, p = cy.getElementById(arguments[0]).renderedMidpoint();"
        "const r = cy.container().getBoundingClientRect();"
        "return [p.x, p.y, r.width, r.height];", edge_id)
    cy = driver.find_element(By.ID, "cy")
    ActionChains(driver).move_to_element_with_offset(cy, int(x - w / 2), int(y - h / 2)) \
        .click().perform()


def test_log_in_create_see_topology_set_a_link_down_and_up_under_a_console_ping(
        default_image, server, browser, tmp_path):
    # default_image: Figure 2's source names an Emulab OS, so it runs the default image
    home, url = server
    shots = os.environ.get("WANLAB_PORTAL_SHOTS") or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    d = browser
    d.get(f"{url}/#/login")
    wait(d, lambda d: d.find_elements(By.ID, "user"))
    d.find_element(By.ID, "user").send_keys("alice")
    d.find_element(By.ID, "password").send_keys(PASSWORD)
    d.find_element(By.ID, "login-button").click()
    wait(d, lambda d: d.find_elements(By.ID, "create"), message="no experiment list")

    # a broken script: the parser's error is shown at its line, and nothing is created
    with open(os.path.join(ROOT, "examples", "figure2.tcl")) as f:
        spec = f.read()
    bad = spec.replace("$router $dest", "$router $nosuch", 1)
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "$nosuch" in t)
    d.execute_script("document.getElementById('spec-text').value = arguments[0];"
                     "document.getElementById('spec-filename').value = 'figure2.tcl';", bad)
    d.find_element(By.ID, "spec-check").click()
    wait(d, lambda d: d.find_element(By.ID, "spec-errors").text, timeout=30)
    shown = d.find_element(By.ID, "spec-errors").text
    assert shown.startswith(f"figure2.tcl:{line}: ") and "nosuch" in shown
    assert f">{line:4d} | $ns duplex-link $router $nosuch" in shown

    # create Figure 2 from the form (a file's text, as the file chooser would load it), on
    # this host (the form's "on the cluster" box left unticked)
    assert not d.find_element(By.ID, "spec-cluster").is_selected()
    d.execute_script("document.getElementById('spec-text').value = arguments[0];"
                     "document.getElementById('spec-filename').value = 'figure2.tcl';", spec)
    # with a capacity trace the description does not name: kept for the link form
    trace = tmp_path / "cell.down"
    trace.write_text("".join(f"{ms}\n" for ms in range(1, 101)))
    d.find_element(By.ID, "spec-attach").send_keys(str(trace))
    d.find_element(By.ID, "spec-create").click()
    wait(d, lambda d: d.current_url.endswith("#/exp/figure2"), timeout=180,
         message="the experiment page did not open")
    wait(d, lambda d: d.execute_script(
        "return window.wanlab.cy && window.wanlab.cy.edges().length"), timeout=30)
    nodes = d.execute_script("return window.wanlab.cy.nodes().map(n => n.data('label')).sort()")
    assert nodes == ["dest", "router", "source"]
    wait(d, lambda d: d.find_element(By.ID, "exp-state").text == "active", timeout=30)

    # the portal is the one door: a local user without privileges reaches neither the
    # engine's socket nor the store
    sock = os.path.join(home, "exps", "figure2", "engine.sock")
    assert os.path.exists(sock)
    probe = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
         "-c", "import socket, sys\n"
               "s = socket.socket(socket.AF_UNIX)\n"
               "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    pass\n"
               "else:\n    sys.exit('connected')\n"
               "try:\n    open(sys.argv[2])\nexcept PermissionError:\n    pass\n"
               "else:\n    sys.exit('read the store')\n",
         sock, os.path.join(home, "wanlab.db")], capture_output=True, text=True, timeout=30)
    assert probe.returncode == 0, probe.stderr

    # a console on source, pinging dest through link1
    d.execute_script("document.getElementById('console-node').value = 'source'")
    d.find_element(By.ID, "console-open").click()
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#console .xterm-helper-textarea"))
    wait(d, lambda d: "source" in d.execute_script("return window.wanlab.console.text()"),
         timeout=30, message="no shell prompt in the console")
    keys = d.find_element(By.CSS_SELECTOR, "#console .xterm-helper-textarea")
    keys.send_keys("ping -i 0.2 dest" + Keys.ENTER)
    wait(d, lambda d: pings(d) >= 3, timeout=30, message="the ping does not answer")

    # click link1, set it down: the live view draws it down and the ping stops
    click_edge(d, "e:link1")
    try:
        wait(d, lambda d: "link link1" in d.find_element(By.ID, "side").text, timeout=15)
    except Exception:
        d.save_screenshot(str(tmp_path / "failed-click.png"))
        raise
    d.find_element(By.ID, "link-down").click()
    wait(d, lambda d: d.execute_script(
        "return window.wanlab.cy.getElementById('e:link1').data('down')"), timeout=15,
        message="the live view does not show link1 down")
    time.sleep(1.0)             # replies already in flight (≤ 2 x 20 ms) arrive
    stopped_at = pings(d)
    time.sleep(3.0)             # 15 pings sent meanwhile
    assert pings(d) == stopped_at, "the ping went on through a down link"
    d.execute_script("window.scrollTo(0, 0)")
    d.save_screenshot(os.path.join(shots, "topology.png"))

    # set it up again: the ping resumes
    d.find_element(By.ID, "link-up").click()
    wait(d, lambda d: pings(d) >= stopped_at + 3, timeout=30, message="the ping did not resume")
    wait(d, lambda d: not d.execute_script(
        "return window.wanlab.cy.getElementById('e:link1').data('down')"), timeout=15)
    d.execute_script("document.getElementById('console').scrollIntoView()")
    d.save_screenshot(os.path.join(shots, "console.png"))
    keys.send_keys(Keys.CONTROL + "c")

    # a delay change: the link panel shows the value in force and the configured one
    d.find_element(By.ID, "link-delay").send_keys("30ms")
    d.find_element(By.ID, "link-apply").click()
    wait(d, lambda d: d.find_element(By.ID, "link-params").text.count(
        "30.00 ms (configured 20.00 ms)") == 2, timeout=30,
        message="the link panel does not show the delay in force")

    # one direction to the uploaded trace, then back to a fixed rate
    ab = lambda d: d.find_element(By.CSS_SELECTOR, "#link-params .link-ab").text  # noqa: E731
    d.find_element(By.ID, "link-delay").clear()
    d.execute_script("document.getElementById('link-trace').value = 'cell.down';"
                     "document.getElementById('link-dir').value = 'ab';")
    d.find_element(By.ID, "link-apply").click()
    wait(d, lambda d: "trace cell.down (100 opportunities" in ab(d), timeout=30,
         message="the link panel does not show the trace in force")
    assert "trace" not in d.find_element(By.CSS_SELECTOR, "#link-params .link-ba").text
    d.execute_script("document.getElementById('link-trace').value = 'fixed';")
    d.find_element(By.ID, "link-bandwidth").send_keys("5Mb")
    d.find_element(By.ID, "link-apply").click()
    wait(d, lambda d: "trace" not in ab(d) and "5" in ab(d).split(",")[0], timeout=30,
         message="the link panel still shows the trace")

    # a command in a node, and the routing tables
    d.execute_script("document.getElementById('exec-node').value = 'dest'")
    d.find_element(By.ID, "exec-argv").send_keys("hostname")
    d.find_element(By.ID, "exec-run").click()
    wait(d, lambda d: "dest\n(exit 0)" in d.find_element(By.ID, "exec-output").text,
         timeout=30, message="no output of the command")
    d.find_element(By.ID, "routes-show").click()
    wait(d, lambda d: "source:" in d.find_element(By.ID, "exec-output").text, timeout=30)

    # the event log on the page shows the two changes, fired through the scheduler
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#events tr")) >= 2, timeout=15)
    log = d.find_element(By.ID, "events").text
    assert "down" in log and "up" in log

    # who did what
    token = admin(home, "token", "alice").strip()
    req = urllib.request.Request(f"{url}/api/audit",
                                 headers={"Authorization": f"Bearer {token}"})
    actions = [(r["action"], r["experiment"]) for r in
               reversed(json.load(urllib.request.urlopen(req, timeout=30)))]
    assert ("create", "figure2") in actions and ("console", "figure2") in actions
    assert [a for a, e in actions if a == "link"] == ["link"] * 5
    assert ("exec", "figure2") in actions

    # clean up from the page (it ends swapped), then modify the stored description
    d.find_element(By.CSS_SELECTOR, "button.op-cleanup").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: d.find_element(By.ID, "exp-state").text == "swapped", timeout=120,
         message="cleanup did not leave it swapped")
    d.execute_script("document.getElementById('modify-text').value = arguments[0];"
                     "document.getElementById('modify-filename').value = 'figure2.tcl';",
                     spec.replace("1.5Mb 20ms", "1.5Mb 40ms"))
    d.find_element(By.ID, "modify-apply").click()
    wait(d, lambda d: "figure2: modify done" in d.find_element(By.ID, "flash").text,
         timeout=60, message="modify did not finish")
    req = urllib.request.Request(f"{url}/api/experiments/figure2",
                                 headers={"Authorization": f"Bearer {token}"})
    shown = json.load(urllib.request.urlopen(req, timeout=30))
    assert [l["ab"]["delay_s"] for l in shown["links"]] == [0.0, 0.04], shown["links"]

    # terminate from the page
    d.find_element(By.CSS_SELECTOR, "button.op-terminate").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: "figure2: terminate done" in d.find_element(By.ID, "flash").text,
         timeout=120, message="terminate did not finish")
    wait(d, lambda d: "No experiments" in d.find_element(By.ID, "main").text)
    # every page above ran under the portal's Content-Security-Policy, nothing blocked
    blocked = [e["message"] for e in d.get_log("browser")
               if "Content Security Policy" in e["message"]]
    assert not blocked, blocked
