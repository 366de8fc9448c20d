"""A WireGuard endpoint on an experiment's edge gateway (VINI's OpenVPN role; docs/edge.md).

An outside client joins the experiment through a tunnel to the gateway and reaches the
nodes on the edge LAN at their edge addresses. The kernel here has no WireGuard module
(``CONFIG_WIREGUARD`` unset, no loadable modules), so the endpoint is ``wireguard-go``,
the user-space implementation (a TUN device), configured with ``wg`` (wireguard-tools);
on a kernel with the module the same ``wg`` configuration would apply to a kernel device.

* Keys: ``wg genkey``/``wg pubkey`` through pipes (never in argv), written 0600 in the
  experiment's folder, ``<folder>/wireguard/`` (0700), once per experiment: the client's
  configuration stays valid across swap-outs. ``wg set`` reads the gateway's private key
  from that file.
* The device ``wl<short>wg`` lives in the gateway's namespace, with 100.96.0.1/24; the
  client is 100.96.0.2. ``<folder>/wireguard/client.conf`` is the client's configuration:
  its key, the gateway's public key, the endpoint (the uplink address and port), and the
  edge LAN as its allowed addresses. The gateway's table masquerades tunnelled traffic
  towards the edge LAN, so nodes answer through the gateway.
* Ownership: the ``wireguard-go`` process is a ``process`` record (pid and start time,
  recorded before it starts); on SIGTERM it removes its device and its control socket
  ``/var/run/wireguard/wl<short>wg.sock``. Its device goes with the gateway's namespace
  in any case.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from collections.abc import Callable

from wanlab.backends.emulate import procs
from wanlab.errors import WanlabError
from wanlab.store.db import ExperimentRow, Store

TUNNEL = ipaddress.IPv4Network("100.96.0.0/24")
GATEWAY_IP = "100.96.0.1"
CLIENT_IP = "100.96.0.2"
SOCKET_DIR = "/var/run/wireguard"


def ifname(short: str) -> str:
    return f"wl{short}wg"


def key_dir(folder: str) -> str:
    return os.path.join(folder, "wireguard")


def _wg(args: list[str], stdin: str | None = None, netns: str | None = None) -> str:
    argv = ["wg", *args]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    except FileNotFoundError:
        raise WanlabError("a WireGuard endpoint needs wg (apt package wireguard-tools, "
                          "installed by make install)") from None
    if p.returncode != 0:
        # the command line holds no secret (keys go through files and pipes)
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")
    return p.stdout.strip()


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def keys(folder: str) -> dict[str, str]:
    """The gateway's and the client's key pairs, made once per experiment (files 0600)."""
    d = key_dir(folder)
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    out = {}
    for who in ("gateway", "client"):
        key = os.path.join(d, f"{who}.key")
        if not os.path.exists(key):
            _write_private(key, _wg(["genkey"]) + "\n")
        with open(key) as f:
            private = f.read().strip()
        out[f"{who}_key_file"] = key
        out[f"{who}_private"] = private
        out[f"{who}_public"] = _wg(["pubkey"], stdin=private + "\n")
    return out


def client_config(k: dict[str, str], endpoint: str, port: int, allowed: str) -> str:
    """The client's configuration (wg-quick form: ``Address`` is wg-quick's)."""
    return (f"# wanlab: a client of this experiment's edge (docs/edge.md)\n"
            f"[Interface]\nPrivateKey = {k['client_private']}\n"
            f"Address = {CLIENT_IP}/32\n\n"
            f"[Peer]\nPublicKey = {k['gateway_public']}\nEndpoint = {endpoint}:{port}\n"
            f"AllowedIPs = {allowed}\nPersistentKeepalive = 25\n")


def build(store: Store, row: ExperimentRow, netns: str, folder: str, port: int,
          endpoint: str, allowed: str, say: Callable[[str], None]) -> str:
    """Start the gateway's endpoint; returns the client configuration's path."""
    k = keys(folder)
    dev = ifname(row.short)
    if os.path.exists(os.path.join(SOCKET_DIR, f"{dev}.sock")):
        # never configure a device that is not ours
        raise WanlabError(f"a WireGuard device {dev} runs already (another wanlab state "
                          f"folder's experiment with id {row.short}?)")
    say(f"starting the WireGuard endpoint {dev} (udp {endpoint}:{port})")
    rid = store.record(row.id, "process", f"wireguard-{row.short}", node="edge", argv=[
        "wireguard-go", "-f", dev], socket=os.path.join(SOCKET_DIR, f"{dev}.sock"))
    log = open(os.path.join(folder, "wireguard", "wireguard-go.log"), "ab")
    try:
        proc = subprocess.Popen(["ip", "netns", "exec", netns, "wireguard-go", "-f", dev],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True, umask=0o077)
    except FileNotFoundError:
        raise WanlabError("a WireGuard endpoint needs wireguard-go (apt package "
                          "wireguard-go, installed by make install)") from None
    finally:
        log.close()
    store.update_resource(rid, "created", pid=proc.pid, started=procs.start_time(proc.pid))
    procs.hold(proc)
    sock = os.path.join(SOCKET_DIR, f"{dev}.sock")
    deadline = time.monotonic() + 15
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise WanlabError(f"wireguard-go did not start its device {dev}; see "
                              f"{os.path.join(key_dir(folder), 'wireguard-go.log')}")
        time.sleep(0.02)
    _wg(["set", dev, "listen-port", str(port), "private-key", k["gateway_key_file"],
         "peer", k["client_public"], "allowed-ips", f"{CLIENT_IP}/32"], netns=netns)
    for args in (["addr", "add", f"{GATEWAY_IP}/{TUNNEL.prefixlen}", "dev", dev],
                 ["link", "set", "dev", dev, "up"]):
        p = subprocess.run(["ip", "-n", netns, *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise WanlabError(f"ip -n {netns} {' '.join(args)}: {p.stderr.strip()}")
    conf = os.path.join(key_dir(folder), "client.conf")
    _write_private(conf, client_config(k, endpoint, port, allowed))
    return conf
