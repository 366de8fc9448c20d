"""containerlab topology files (``*.clab.yml``) as experiments (docs/containerlab.md).

A YAML document whose ``topology:`` holds ``nodes``, ``links``, ``kinds``, ``defaults`` or
``groups`` is read here (:mod:`wanlab.frontends.yaml_spec` hands it over, with its lines).

* A node's settings are its own over its group's over its kind's over ``defaults``
  (``env`` and ``labels`` merge key by key, ``binds`` by destination).
* ``linux`` nodes are wanlab nodes; ``image:`` is their root (a wanlab image or an OCI
  reference); ``bridge`` and ``ovs-bridge`` nodes are LANs joining the nodes linked to them;
  the router kinds (SR Linux, cEOS, cRPD, XRd, ...) are Linux routers (IP forwarding, FRR's
  tools; their vendor image and startup-config are not used: one warning each).
* ``cmd``, ``entrypoint`` and ``user`` are docker's, over an OCI image's own (a node on
  another root runs ``entrypoint`` + ``cmd``); ``exec`` a Program run at
  t = 0 (every node up), its commands in turn; ``env`` and the labels (``CLAB_LABEL_*``)
  are the node's environment (start command, exec, ``wanlab exec`` and ``shell``).
* ``binds`` (``SRC:DEST[:ro]``) are copies into the node's root, made at swap-in; SRC is
  a file or folder inside the lab's folder (no link leading out) and not wanlab's state.
* ``links``' endpoints keep their interface names; no address is given (the nodes' own
  commands give them; routing is manual). ``delay``, ``loss`` (%), ``rate`` (kbit/s),
  named as ``containerlab tools netem set`` names them, on a link or in its ``vars``,
  shape it both ways.
* The management network is left out: ``wanlab exec``/``shell`` reach every node.

Every key wanlab does not honour is one warning naming it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import imageref, ir
from wanlab.model.names import is_valid

LineOf = Callable[[list[Any]], int | None]

TOPOLOGY_KEYS = ("nodes", "links", "kinds", "defaults", "groups")
LINUX = ("linux",)
BRIDGES = ("bridge", "ovs-bridge")
# network operating systems' kinds: run as Linux routers
ROUTERS = ("nokia_srlinux", "srl", "nokia_sros", "vr-sros", "arista_ceos", "ceos",
           "juniper_crpd", "crpd", "juniper_vmx", "vr-vmx", "juniper_vjunosrouter",
           "juniper_vjunosswitch", "juniper_vjunosevolved", "juniper_vsrx", "cisco_xrd", "xrd",
           "cisco_xrv9k", "vr-xrv9k", "cisco_csr1000v", "cisco_c8000v", "cisco_n9kv",
           "cisco_iol", "cisco_ftdv", "sonic-vs", "sonic-vm", "vyosnetworks_vyos", "vyos",
           "mikrotik_ros", "vr-ros", "fortinet_fortigate", "paloalto_panos", "openbsd",
           "freebsd", "checkpoint_cloudguard", "dell_sonic", "ipinfusion_ocnos",
           "arista_veos", "6wind_vsr", "huawei_vrp", "keysight_ixia-c-one", "ostinato",
           "rare", "cumulus_cvx", "cvx", "generic_vm", "frr")
# the node keys wanlab honours (the rest warn)
HONOURED = ("kind", "group", "image", "cmd", "entrypoint", "user", "exec", "env", "binds",
            "labels", "cpu", "memory", "cpu-set")
# what wanlab does instead, for the keys it knows it leaves out
WHY = {
    "mgmt-ipv4": "there is no management network (wanlab exec reaches every node)",
    "mgmt-ipv6": "there is no management network (wanlab exec reaches every node)",
    "startup-config": "a vendor configuration is not applied (configure the node in exec)",
    "ports": "no host ports are published (see docs/edge.md for port forwards)",
    "network-mode": "every node has its own network namespace",
    "mgmt": "the management network is left out (wanlab exec and shell reach every node)",
    "host": "a link to the host's network namespace is left out",
    "mgmt-net": "a link to the management network is left out",
    "macvlan": "a link to a host interface is left out (see docs/bridge.md)",
    "mtu": "links carry 1500-byte frames",
}


def is_clab(doc: Any) -> bool:
    """Whether a YAML document is a containerlab topology file."""
    return isinstance(doc, dict) and isinstance(doc.get("topology"), dict) and any(
        k in doc["topology"] for k in TOPOLOGY_KEYS)


class _Reader:
    def __init__(self, doc: dict, file: str, line_of: LineOf):
        self.doc, self.file, self.line_of = doc, file, line_of
        self.base = None if file.startswith("<") else os.path.dirname(os.path.abspath(file))
        self.ignored: dict[str, tuple[list[Any], int]] = {}    # key -> (first path, count)
        self.notes: list[str] = []

    def err(self, path: list[Any], msg: str) -> SpecError:
        return SpecError(msg, file=self.file, line=self.line_of(path), field=_path(path))

    def src(self, path: list[Any]) -> ir.Source:
        return ir.Source(self.file, self.line_of(path))

    def ignore(self, key: str, path: list[Any]) -> None:
        first, n = self.ignored.get(key, (path, 0))
        self.ignored[key] = (first, n + 1)

    def note(self, path: list[Any], msg: str) -> None:
        self.notes.append(f"{self.file}:{self.line_of(path)}: {_path(path)}: {msg}")

    def warnings(self) -> list[str]:
        out = []
        for key, (path, n) in self.ignored.items():
            why = WHY.get(key.rsplit(".", 1)[-1], "not honoured by wanlab")
            more = f" (and {n - 1} more)" if n > 1 else ""
            out.append(f"{self.file}:{self.line_of(path)}: {_path(path)}{more}: {why}; "
                       f"ignored")
        return out + self.notes


def _path(path: list[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _mapping(r: _Reader, v: Any, path: list[Any]) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise r.err(path, "must be a mapping")
    return v


def _merge(layers: list[dict]) -> dict:
    """Settings of a node from its layers, lowest first (defaults, kind, group, node)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in layer.items():
            if k in ("env", "labels") and isinstance(v, dict):
                out[k] = {**out.get(k, {}), **v}
            elif k == "binds" and isinstance(v, list):
                by_dest = {str(b).split(":")[1] if ":" in str(b) else str(b): b
                           for b in out.get(k, [])}
                by_dest.update({str(b).split(":")[1] if ":" in str(b) else str(b): b
                                for b in v})
                out[k] = list(by_dest.values())
            else:
                out[k] = v
    return out


def _env_name(k: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", k).upper()


def _run(r: _Reader, s: dict, p: list[Any]) -> dict[str, Any]:
    """A node's ``cmd``, ``entrypoint`` and ``user`` as containerlab gives them to docker:
    each command split as a shell would (an empty one is none), the user as it is; folded
    over an image's own when the experiment is created (docs/oci-images.md)."""
    out: dict[str, Any] = {}
    for key in ("cmd", "entrypoint"):
        v = s.get(key)
        if v is None or v == "":
            continue
        if not isinstance(v, (str, int, float)):
            raise r.err(p + [key], f"{key} is a command line (a string)")
        try:
            argv = shlex.split(str(v))
        except ValueError as e:
            raise r.err(p + [key], f"{key}: {e}") from None
        if argv:
            out[key] = tuple(argv)
    if s.get("user") not in (None, ""):
        user = str(s["user"])
        if not ir.USER_RE.fullmatch(user):
            raise r.err(p + ["user"], f"user {user!r} is not a user (a name or id, then ':' "
                                      f"and a group's name or id if any)")
        out["user"] = user
    return out


def environment(name: str, env: dict, labels: dict) -> dict[str, str]:
    """The node's environment: ``env``, and the labels as ``CLAB_LABEL_*`` (with the node's
    name), as containerlab gives them."""
    out = {str(k): str(v) for k, v in env.items()}
    out.update({f"CLAB_LABEL_{_env_name(k)}": str(v)
                for k, v in {"clab-node-name": name, **labels}.items()})
    return out


def _node_name(r: _Reader, raw: Any, path: list[Any]) -> str:
    name = str(raw)
    if is_valid(name):
        return name
    fixed = re.sub(r"[^A-Za-z0-9-]", "-", name)
    if not is_valid(fixed):
        raise r.err(path, f"node name {name!r}: a node name is a letter, then letters, "
                          f"digits, '_' or '-'")
    r.note(path, f"node {name} is named {fixed} in wanlab (names have no '_' or '.')")
    return fixed


# wanlab's state (the store, the namespaces' files): never a bind's source, nor inside one
STATE_FOLDERS = ("/var/lib/wanlab", "/etc/netns", "/run/netns")


def _state_folders() -> list[str]:
    home = os.environ.get("WANLAB_HOME")
    return [os.path.realpath(p) for p in ((home,) if home else ()) + STATE_FOLDERS]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _binds(r: _Reader, binds: Any, path: list[Any]) -> list[tuple[str, str]]:
    out = []
    if not isinstance(binds, list):
        raise r.err(path, "binds is a list of SRC:DEST[:ro]")
    for i, b in enumerate(binds):
        parts = str(b).split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
            raise r.err(path + [i], f"bind {b!r}: write SRC:DEST[:ro] (DEST absolute)")
        if r.base is None:
            raise r.err(path + [i], "binds need the topology to be a file")
        src = parts[0]
        if os.path.isabs(src) or ".." in src.split("/"):
            raise r.err(path + [i], f"bind {b!r}: SRC must be inside the lab's folder (no "
                                    f"'..', not absolute)")
        full = os.path.realpath(os.path.join(r.base, src))
        if not full.startswith(os.path.realpath(r.base) + os.sep):
            raise r.err(path + [i], f"bind {b!r}: SRC leads out of the lab's folder")
        if not os.path.exists(full):
            raise r.err(path + [i], f"bind {b!r}: no such file or folder {src!r}")
        if not (os.path.isfile(full) or os.path.isdir(full)):
            raise r.err(path + [i], f"bind {b!r}: {src!r} is neither a file nor a folder")
        state = next((s for s in _state_folders() if _within(full, s) or _within(s, full)),
                     None)
        if state is not None:
            raise r.err(path + [i], f"bind {b!r}: SRC is, holds or is inside wanlab's state "
                                    f"({state}), which is never copied into a node")
        if len(parts) == 3 and parts[2] not in ("ro", "rw"):
            r.ignore("binds.options", path + [i])
        out.append((parts[1], full))
    return out


def _shaping(r: _Reader, link: dict, path: list[Any]) -> dict[str, Any]:
    """A link's impairments: ``delay``, ``loss`` (%), ``rate`` (kbit/s), on the link or in
    its ``vars``; ``jitter`` and ``corruption`` warn."""
    out: dict[str, Any] = {}
    for where, m in ((path, link), (path + ["vars"], link.get("vars") or {})):
        if not isinstance(m, dict):
            continue
        for k in ("delay", "loss", "rate"):
            if k in m:
                v = m[k]
                if k == "loss":
                    v = f"{v}%"
                elif k == "rate":
                    v = f"{v}kb" if isinstance(v, (int, float)) else v
                out[{"rate": "bandwidth"}.get(k, k)] = v
        for k in ("jitter", "corruption"):
            if k in m:
                r.ignore(f"links.{k}", where + [k])
    return out


def load(doc: dict, file: str, default_name: str, line_of: LineOf) -> ir.Experiment:
    """The experiment of containerlab document ``doc`` (read from ``file``)."""
    r = _Reader(doc, file, line_of)
    for k in doc:
        if k not in ("name", "topology"):
            r.ignore(str(k), [k])
    topo = doc["topology"]
    for k in topo:
        if k not in TOPOLOGY_KEYS:
            r.ignore(f"topology.{k}", ["topology", k])
    from wanlab.frontends.ns import sanitize_name
    name = sanitize_name(str(doc.get("name") or default_name))
    b = ExperimentBuilder(name, routing="manual")
    defaults = _mapping(r, topo.get("defaults"), ["topology", "defaults"])
    kinds = _mapping(r, topo.get("kinds"), ["topology", "kinds"])
    groups = _mapping(r, topo.get("groups"), ["topology", "groups"])
    nodes = _mapping(r, topo.get("nodes"), ["topology", "nodes"])
    names: dict[str, str] = {}          # containerlab name -> wanlab name
    bridges: dict[str, str] = {}        # bridge name -> its LAN's name
    for raw, spec in nodes.items():
        p = ["topology", "nodes", raw]
        spec = _mapping(r, spec, p)
        group = spec.get("group")
        gspec = _mapping(r, groups.get(group), ["topology", "groups", group]) if group else {}
        if group and group not in groups:
            raise r.err(p + ["group"], f"no group {group!r} under topology.groups")
        kind = spec.get("kind") or gspec.get("kind") or defaults.get("kind")
        if not kind:
            raise r.err(p, f"node {raw}: no kind (give kind:, or defaults.kind)")
        kind = str(kind)
        kspec = _mapping(r, kinds.get(kind), ["topology", "kinds", kind])
        s = _merge([defaults, kspec, gspec, spec])
        wname = _node_name(r, raw, p)
        names[str(raw)] = wname
        for k in s:
            if k not in HONOURED:
                r.ignore(f"nodes.{k}", p + [k])
        if kind in BRIDGES:
            bridges[str(raw)] = wname
            continue
        if kind not in LINUX and kind not in ROUTERS:
            raise r.err(p + ["kind"], f"kind {kind!r} unknown to wanlab (it runs linux, "
                                      f"bridge, ovs-bridge and the router kinds: "
                                      f"docs/containerlab.md)")
        image = s.get("image")
        if kind in ROUTERS:
            unused = f"; its image {image} is not run" if image else ""
            r.note(p + ["kind"], f"{kind} runs as a Linux router (IP forwarding, FRR's "
                                 f"tools){unused}")
            image = None
        execs = s.get("exec") or []
        if isinstance(execs, str):
            execs = [execs]
        if not isinstance(execs, list):
            raise r.err(p + ["exec"], "exec is a list of commands")
        env = _mapping(r, s.get("env"), p + ["env"])
        labels = _mapping(r, s.get("labels"), p + ["labels"])
        copies = _binds(r, s["binds"], p + ["binds"]) if s.get("binds") else []
        run = _run(r, s, p)
        if not (image and imageref.is_ref(str(image))):   # no image's own to go over:
            argv = [*run.pop("entrypoint", ()), *run.pop("cmd", ())]   # the start command
            if argv:
                run["startcmd"] = shlex.join(argv)
        try:
            b.node(wname, image=image, copies=copies, cpu=s.get("cpu"),
                   memory=s.get("memory"), cpus=s.get("cpu-set"),
                   env=environment(wname, env, labels), source=r.src(p), **run)
            if execs:           # once the nodes are up, in turn
                prog = b.program(wname, "\n".join(str(e) for e in execs),
                                 name=f"{wname}-exec", source=r.src(p + ["exec"]))
                b.at(0, prog, "start", source=r.src(p + ["exec"]))
        except SpecError as e:
            raise r.err(p + ([e.field] if e.field else []), e.message) from None
    lan_members: dict[str, list[tuple[str, str, dict, list[Any]]]] = {}
    for i, link in enumerate(topo.get("links") or []):
        p = ["topology", "links", i]
        link = _mapping(r, link, p)
        ltype = link.get("type", "veth")
        if ltype != "veth":
            r.ignore(f"links.type.{ltype}", p + ["type"])
            continue
        for k in link:
            if k not in ("endpoints", "type", "vars", "labels", "delay", "loss", "rate",
                         "jitter", "corruption"):
                r.ignore(f"links.{k}", p + [k])
        ends = link.get("endpoints")
        if not isinstance(ends, list) or len(ends) != 2:
            raise r.err(p + ["endpoints"], "a link has two endpoints, [\"r1:eth1\", "
                                           "\"r2:eth1\"]")
        parsed = []
        for j, e in enumerate(ends):
            if isinstance(e, dict):
                node, ifname = e.get("node"), e.get("interface")
                for k in e:
                    if k not in ("node", "interface"):
                        r.ignore(f"links.endpoints.{k}", p + ["endpoints", j, k])
            else:
                node, _, ifname = str(e).partition(":")
            if not node or not ifname:
                raise r.err(p + ["endpoints", j], f"endpoint {e!r}: write NODE:INTERFACE")
            parsed.append((str(node), str(ifname)))
        special = [n for n, _ in parsed if n in ("host", "mgmt-net", "macvlan")]
        if special:
            r.ignore(f"links.endpoints.{special[0]}", p + ["endpoints"])
            continue
        for j, (node, _) in enumerate(parsed):
            if node not in names:
                raise r.err(p + ["endpoints", j], f"endpoint {ends[j]!r}: no node {node!r} "
                                                  f"under topology.nodes")
        shape = _shaping(r, link, p)
        on_bridge = [(n, f) for n, f in parsed if n in bridges]
        if len(on_bridge) == 2:
            r.ignore("links.bridge-to-bridge", p)
            continue
        if on_bridge:
            br = on_bridge[0][0]
            node, ifname = next((n, f) for n, f in parsed if n not in bridges)
            lan_members.setdefault(br, []).append((names[node], ifname, shape, p))
            continue
        (a, ia), (bb, ib) = parsed
        try:
            b.link(names[a], names[bb], name=f"link{i}", ifnames=(ia, ib),
                   bandwidth=shape.get("bandwidth", 0), delay=shape.get("delay", 0),
                   loss=shape.get("loss", 0), source=r.src(p))
        except SpecError as e:
            raise r.err(p, e.message) from None
    for br, members in lan_members.items():
        lan = b.lan([m for m, _f, _s, _p in members], name=bridges[br],
                    source=r.src(["topology", "nodes", br]))
        for m, f, shape, p in members:
            try:
                b.lan_member(lan, m, ifname=f, bandwidth=shape.get("bandwidth"),
                             delay=shape.get("delay"), loss=shape.get("loss"))
            except SpecError as e:
                raise r.err(p, e.message) from None
    exp = b.build_from(file)
    exp = replace(exp, addressing="none", warnings=tuple(r.warnings()) + exp.warnings)
    return ir.validate(exp)
