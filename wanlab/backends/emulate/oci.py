"""OCI images in the image store: layers unpacked once, by digest, shared between images.

``pull(store, REF)`` copies the image with ``skopeo`` into a staging OCI layout (every
transport of :mod:`wanlab.model.imageref`; a ``docker://`` reference needs a registry this
machine reaches), reads its manifest and config, and unpacks each layer it does not hold
yet into ``layers/oci-<diff id>`` (the layer's uncompressed digest, so an image and another
built on the same base share those layers, however they were compressed). OCI whiteouts
become overlayfs' (a ``.wh.NAME`` file a 0/0 character device, ``.wh..wh..opq`` the
folder's opaque attribute), so the layers stack as overlay lower layers like any image's.
The image is recorded under :func:`wanlab.model.imageref.store_name` of its reference, with
its origin, digest (its config's: the image id) and config (``Env``, ``Entrypoint``,
``Cmd``, ``WorkingDir``, ``User``, and what cannot apply). :func:`apply` folds the config
into a node.

Local transports are read in place (an OCI layout folder, an OCI archive, a docker-save
archive: only the manifest, the config and the layers the store lacks); a ``docker://``
image is copied with ``skopeo`` into a staging layout in the store (root-only) first,
removed afterwards.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import time
import uuid
from dataclasses import replace
from typing import Any

from wanlab.backends.emulate import layer_sandbox
from wanlab.backends.emulate.images import Image, Images, Say
from wanlab.errors import WanlabError
from wanlab.model import imageref
from wanlab.model.ir import Experiment, Node

_SHA = re.compile(r"^sha256:([0-9a-f]{64})$")
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")
# the config keys a node honours; the rest of these are noted once each
HONOURED = ("Env", "Entrypoint", "Cmd", "WorkingDir", "User")
NOTED = {"Volumes": "volumes are not mounted (the node's files are its own layer)",
         "ExposedPorts": "exposed ports are not published (see docs/edge.md for forwards)",
         "Healthcheck": "its health check is not run",
         "StopSignal": "its stop signal is not used (nodes stop with SIGTERM)"}


def layer_id(diff_id: str) -> str:
    """The store's layer id of a layer with uncompressed digest ``diff_id``."""
    m = _SHA.match(diff_id or "")
    if not m:
        raise WanlabError(f"image layer digest {diff_id!r} is not a sha256 digest")
    return "oci-" + m.group(1)[:60]


def _skopeo() -> str:
    exe = shutil.which("skopeo")
    if exe is None:
        raise WanlabError("OCI images need skopeo (apt-get install skopeo; 'make install' "
                          "does it)")
    return exe


def fetch(ref: str, layout: str, timeout: float = 600) -> None:
    """Copy registry image ``ref`` (canonical) into the OCI layout folder ``layout`` (new)."""
    transport, _what, _tag = imageref.split(ref)
    # layers kept uncompressed: nothing is compressed only to be unpacked again
    argv = [_skopeo(), "--insecure-policy", "copy", "--quiet", "--retry-times", "0",
            "--dest-decompress", "--", ref, f"oci:{layout}:image"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise WanlabError(f"image {ref}: fetching it took more than {timeout:.0f} s") from None
    if r.returncode != 0:
        last = [x for x in r.stderr.strip().splitlines() if x.strip()][-1:] or ["(no message)"]
        why = re.sub(r"^time=\"[^\"]*\" level=\w+ msg=", "", last[0])[-300:]
        reach = (" (this machine reaches no container registry: bring the image as a file, "
                 "oci-archive:FILE or docker-archive:FILE, or an oci:DIR layout)"
                 if transport == "docker" else "")
        raise WanlabError(f"image {ref} cannot be fetched: {why}{reach}")


class _Source:
    """Blobs and descriptors of an image, read where they are: an OCI layout folder, an OCI
    archive or a docker-save archive (tar files read in place: only what is needed)."""

    def __init__(self, transport: str, path: str, tag: str | None):
        import tarfile
        self.transport, self.path, self.tag = transport, path, tag
        self.tar = None
        if transport in ("oci-archive", "docker-archive"):
            try:
                self.tar = tarfile.open(path)
            except (tarfile.TarError, OSError) as e:
                raise WanlabError(f"{path} is not a tar archive: {e}") from None
            self.members = {m.name.lstrip("./") if m.name != "." else ".": m
                            for m in self.tar.getmembers()}

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def open(self, name: str):
        """A member file (a path inside the layout or archive, checked)."""
        if name.startswith("/") or ".." in name.split("/"):
            raise WanlabError(f"the image names a file outside it: {name!r}")
        if self.tar is None:
            return open(os.path.join(self.path, name), "rb")
        m = self.members.get(name)
        f = self.tar.extractfile(m) if m is not None and m.isfile() else None
        if f is None:
            raise WanlabError(f"the image has no {name}")
        return f

    def blob(self, digest: str) -> str:
        m = _SHA.match(digest or "")
        if not m:
            raise WanlabError(f"bad digest {digest!r} in the image")
        return f"blobs/sha256/{m.group(1)}"

    def json(self, name: str, digest: str | None = None) -> dict:
        try:
            with self.open(name) as f:
                data = f.read(16 << 20)
        except FileNotFoundError:
            raise WanlabError(f"the image has no {name}") from None
        self.digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if digest and self.digest != digest:
            raise WanlabError(f"image blob {digest[:19]} does not match its digest")
        try:
            return json.loads(data)
        except ValueError:
            raise WanlabError(f"{name} of the image is not JSON") from None

    def image(self) -> tuple[dict, str, list[tuple[str, str]]]:
        """(config, its digest (the image id), [(layer file, its diff id)] bottom first)."""
        if self.transport == "docker-archive":
            entries = self.json("manifest.json")
            if not isinstance(entries, list) or not entries:
                raise WanlabError("the archive's manifest.json lists no image")
            want = self.tag
            pick = [e for e in entries if want is None or want in (e.get("RepoTags") or [])
                    or (":" not in want and f"{want}:latest" in (e.get("RepoTags") or []))]
            if len(pick) != 1:
                tags = sorted(t for e in entries for t in e.get("RepoTags") or [])
                raise WanlabError(f"give one of its images as FILE:NAME:TAG ({', '.join(tags)})"
                                  if not pick or want is None else f"no image {want}")
            config = self.json(pick[0]["Config"])
            files = list(pick[0].get("Layers") or [])
        else:
            index = self.json("index.json")
            ms = index.get("manifests") or []
            if self.tag is not None:
                ms = [m for m in ms if (m.get("annotations") or {}).get(
                    "org.opencontainers.image.ref.name") == self.tag]
            if len(ms) != 1:
                tags = sorted((m.get("annotations") or {}).get(
                    "org.opencontainers.image.ref.name", "?") for m in index.get("manifests")
                    or [])
                raise WanlabError(f"no image tagged {self.tag!r} (tags: {', '.join(tags)})"
                                  if self.tag is not None else
                                  f"it holds {len(tags)} images: give a tag ({', '.join(tags)})")
            man = self.json(self.blob(ms[0]["digest"]), ms[0]["digest"])
            if man.get("manifests"):           # an index of platforms: this machine's
                arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine,
                                                                   os.uname().machine)
                pick = next((x for x in man["manifests"]
                             if (x.get("platform") or {}).get("architecture") == arch), None)
                if pick is None:
                    raise WanlabError(f"the image has no {arch} variant")
                man = self.json(self.blob(pick["digest"]), pick["digest"])
            config = self.json(self.blob(man["config"]["digest"]), man["config"]["digest"])
            files = [self.blob(x["digest"]) for x in man.get("layers") or []]
        image_id = self.digest
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        if len(diff_ids) != len(files) or not files:
            raise WanlabError("its manifest and config disagree on its layers")
        return config, image_id, list(zip(files, diff_ids, strict=True))


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _layer_chunks(f):
    """A layer's tar stream from its file ``f``, in chunks: gzip unpacked here, zstd by
    the ``zstd`` program (Python's standard library has no zstd before 3.14)."""
    head = f.peek(4)[:4] if hasattr(f, "peek") else b""
    if not head:
        import io
        f = io.BufferedReader(f)
        head = f.peek(4)[:4]
    if head == ZSTD_MAGIC:
        yield from _unzstd(f)
        return
    stream = gzip.GzipFile(fileobj=f, mode="rb") if head[:2] == b"\x1f\x8b" else f
    while chunk := stream.read(1 << 20):
        yield chunk


def _unzstd(f):
    import threading
    exe = shutil.which("zstd")
    if exe is None:
        raise WanlabError("a zstd-compressed layer needs zstd (apt-get install zstd; "
                          "'make install' does it)")
    p = subprocess.Popen([exe, "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)

    def feed():
        try:
            while chunk := f.read(1 << 20):
                p.stdin.write(chunk)
        except (BrokenPipeError, OSError, ValueError):
            pass                          # zstd stopped: its status says why
        finally:
            with contextlib.suppress(OSError):
                p.stdin.close()
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        while chunk := p.stdout.read(1 << 20):
            yield chunk
    finally:
        p.stdout.close()
        if p.poll() is None and t.is_alive():
            p.kill()
        p.wait()
        t.join()
        err = p.stderr.read().decode(errors="replace").strip()
        p.stderr.close()
    if p.returncode != 0:
        raise WanlabError(f"zstd: {err[-200:] or f'exit status {p.returncode}'}")


def _whiteouts(top: str) -> None:
    """OCI whiteouts in the unpacked layer ``top`` as overlayfs reads them."""
    for d, dirs, files in os.walk(top):
        for f in files + [x for x in dirs if x.startswith(".wh.")]:
            if not f.startswith(".wh."):
                continue
            p = os.path.join(d, f)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
            if f == ".wh..wh..opq":
                os.setxattr(d, "trusted.overlay.opaque", b"y", follow_symlinks=False)
            else:
                target = os.path.join(d, f[4:])
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
                os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))
        dirs[:] = [x for x in dirs if not x.startswith(".wh.")]


def _unpack(store: Images, src: _Source, name: str, diff_id: str, say: Say) -> str:
    """The layer in ``src``'s file ``name`` in ``store`` (unpacked unless held); its id."""
    lid = layer_id(diff_id)
    final = store.layer_path(lid)
    if os.path.isdir(final):
        return lid
    say(f"  unpacking layer {diff_id[7:19]}")
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:12]}"
    os.mkdir(tmp, 0o700)
    try:
        # the layer is unpacked by an unprivileged child confined to tmp (layer_sandbox)
        try:
            p = layer_sandbox.start(tmp)
        except layer_sandbox.SandboxError as e:
            raise WanlabError(f"unpacking image layer {diff_id[7:19]}: {e}") from None
        assert p.stdin is not None
        h = hashlib.sha256()
        alive = True
        try:
            with src.open(name) as raw:
                for chunk in _layer_chunks(raw):
                    h.update(chunk)
                    try:
                        p.stdin.write(chunk)
                    except BrokenPipeError:
                        alive = False      # the child failed (it reads all on success):
                        break              # its error is below
            # an end of archive, for layers written without one (umoci's whiteout-only
            # layers); after a complete archive tarfile reads no further
            with contextlib.suppress(BrokenPipeError):
                if alive:
                    p.stdin.write(b"\0" * 10240)
        except BaseException:
            p.kill()
            p.wait()
            raise
        try:
            left = layer_sandbox.finish(p, tmp)
        except layer_sandbox.SandboxError as e:
            raise WanlabError(f"unpacking image layer {diff_id[7:19]}: {e}") from None
        if "sha256:" + h.hexdigest() != diff_id:
            raise WanlabError(f"image layer {diff_id[7:19]} does not match its digest")
        for key, what in (("devices", "device nodes left out"),
                          ("owners", "files owned by ids above 65535 given to root")):
            if left.get(key):
                say(f"  layer {diff_id[7:19]}: {left[key]} {what}")
        _whiteouts(tmp)
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lid


def pull(store: Images, ref: str, say: Say | None = None) -> Image:
    """Image ``ref`` (any form :func:`wanlab.model.imageref.canonical` takes) in ``store``:
    read (a registry's through skopeo), its new layers unpacked, recorded under its store
    name."""
    say = say or (lambda m: None)
    ref = imageref.canonical(ref)
    name = imageref.store_name(ref)
    transport, what, tag = imageref.split(ref)
    store._prepare()
    staging = None
    try:
        if transport == "docker":
            staging = os.path.join(store.root, "staging", uuid.uuid4().hex[:16])
            os.makedirs(os.path.dirname(staging), mode=0o700, exist_ok=True)
            say(f"image {ref}: fetching it with skopeo")
            fetch(ref, staging)
            src = _Source("oci", staging, "image")
        else:
            if not os.path.exists(what):
                raise WanlabError(f"no such {'folder' if transport == 'oci' else 'file'} "
                                  f"{what}")
            src = _Source(transport, what, tag)
        try:
            config, image_id, layers = src.image()
            with store.locked():
                ids = [_unpack(store, src, f, d, say) for f, d in layers]
                old = store.get(name)
                img = Image(name=name, layers=tuple(reversed(ids)), suite="oci", packages=(),
                            created=time.time(), origin=ref,
                            oci={"digest": image_id, "config": _config(config)})
                store._write(img)
                if old is not None and old.layers != img.layers:
                    store._collect(old.layers)
        finally:
            src.close()
        say(f"image {ref}: {name} ({len(ids)} layers)")
        return img
    except WanlabError as e:
        msg = str(e)
        raise WanlabError(msg if msg.startswith(f"image {ref}") else
                          f"image {ref}: {msg}") from None
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)


def _config(config: dict) -> dict:
    c = config.get("config") or {}
    out = {k: c.get(k) for k in HONOURED if c.get(k)}
    out["noted"] = sorted(k for k in NOTED if c.get(k))
    return out


def is_oci_archive(path: str) -> bool:
    """Whether the tar file ``path`` holds an OCI layout (an ``oci-layout`` member), not
    what ``docker save`` writes."""
    import tarfile
    try:
        with tarfile.open(path) as t:
            return any(m.name.lstrip("./") == "oci-layout" for m in t)
    except (tarfile.TarError, OSError):
        return False


def ensure(store: Images, ref: str, say: Say | None = None) -> Image:
    """Image ``ref`` from the store, pulled the first time."""
    img = store.get(imageref.store_name(ref))
    return img if img is not None else pull(store, ref, say)


# -- a node on an OCI image ----------------------------------------------------------------

def run_config(cfg: dict, node: Node) -> tuple[list[str], str | None]:
    """The argv and user the node runs by docker's rules: its own ``entrypoint`` replaces
    the image's Entrypoint and drops the image's Cmd; its own ``cmd`` replaces the image's
    Cmd; its own ``user`` the image's User."""
    if node.entrypoint is not None:
        argv = [*node.entrypoint, *(node.cmd or ())]
    else:
        argv = [*(cfg.get("Entrypoint") or []),
                *(node.cmd if node.cmd is not None else cfg.get("Cmd") or [])]
    return argv, node.user or cfg.get("User") or None


def start_command(cfg: dict, node: Node) -> tuple[str | None, list[str]]:
    """The node's start command under image config ``cfg`` (``{}``: no OCI image): its
    ``startcmd`` if it has one, else the argv of :func:`run_config`; run in the image's
    ``WorkingDir`` (made if missing) as the user of :func:`run_config`; and notes."""
    notes = []
    argv, user = run_config(cfg, node)
    if node.startcmd is None and not argv:
        if node.user:
            notes.append(f"user {node.user}: there is no start command to run as it")
        return None, notes
    body = node.startcmd if node.startcmd is not None else shlex.join(argv)
    wd = cfg.get("WorkingDir")
    if user and user not in ("root", "0", "0:0"):
        uid, _, gid = str(user).partition(":")
        if not USER.fullmatch(str(user)):
            notes.append(f"User {user!r} is not a user name or id; it runs as root")
        else:
            # setpriv (util-linux) from the image, as docker runs a user: the group given,
            # else the user's own (0 if the image does not know it), its groups if known;
            # without setpriv, root, said in its log
            u = shlex.quote(uid)
            group = shlex.quote(gid) if gid else f'"$(id -g -- {u} 2>/dev/null || echo 0)"'
            body = (f"if command -v setpriv >/dev/null; then g={group}; "
                    f"if id -- {u} >/dev/null 2>&1; then s=--init-groups; "
                    f"else s=--clear-groups; fi; exec setpriv --reuid={u} --regid=\"$g\" $s "
                    f"sh -c {shlex.quote(body)}; else echo 'wanlab: the image has no "
                    f"setpriv: running as root, not {user}' >&2; fi; {body}")
            notes.append(f"User {user}: the start command runs as it (setpriv); wanlab exec, "
                         f"shell and programs run as root")
    if wd:
        body = f"mkdir -p -- {shlex.quote(wd)} && cd -- {shlex.quote(wd)} && {body}"
    return body, notes


# the first line of a start command made from an image's config or the node's Entrypoint,
# Cmd and User (so it is made once)
APPLIED = "# wanlab: the start command of image "


def apply(exp: Experiment, store: Images, say: Say | None = None) -> Experiment:
    """``exp`` with every node on an OCI image given that image (pulled now, so a reference
    that cannot be fetched fails before anything is built) and its config: ``Env`` (the
    node's environment), ``Entrypoint``/``Cmd`` (its start command unless it has one),
    ``WorkingDir``, ``User``, under the node's own ``entrypoint``, ``cmd`` and ``user``
    (which a node on another root gets too); a note for each part that cannot apply."""
    nodes: list[Node] = []
    notes: list[str] = []
    seen: dict[str, Image] = {}
    changed = False
    for n in exp.nodes:
        oci = bool(n.image and imageref.is_ref(n.image))
        if not (oci or n.user or n.entrypoint is not None or n.cmd is not None) or (
                n.startcmd or "").startswith(APPLIED):
            nodes.append(n)        # nothing to fold in, or it is in already (a part of a
            continue               # cluster's experiment, created again on its machine)
        cfg: dict = {}
        if oci:
            img = seen.get(n.image) or ensure(store, n.image, say)
            seen[n.image] = img
            cfg = (img.oci or {}).get("config") or {}
        env = tuple(tuple(e.split("=", 1)) for e in cfg.get("Env") or [] if "=" in e)
        mine = dict(n.env)
        env = tuple((k, v) for k, v in env if k not in mine) + n.env
        cmd, why = start_command(cfg, n)
        cmd = f"{APPLIED}{n.image or 'of the node'}\n{cmd}" if cmd else cmd
        for w in why + [NOTED[k] for k in cfg.get("noted") or []]:
            notes.append(f"node {n.name}: image {n.image}: {w}" if oci else
                         f"node {n.name}: {w}")
        nodes.append(replace(n, env=env, startcmd=cmd))
        changed = True
    if not changed:
        return exp
    return replace(exp, nodes=tuple(nodes), warnings=exp.warnings + tuple(notes))


def describe(img: Image) -> dict[str, Any]:
    """What ``image list`` shows of an OCI image: its manifest digest and origin."""
    return {"digest": (img.oci or {}).get("digest"), "origin": img.origin}
