"""Node images: root file systems built with Debian's ``mmdebstrap``, shared read-only.

An image is a stack of *layers* (directories), top first, that becomes the read-only lower
part of each node's overlay root (:mod:`wanlab.backends.emulate.rootfs`). A built image has
one layer, named by the hash of its suite and package list, so building the same list again
(under any name) reuses it; ``save`` puts a copy of a node's writable layer on top of that
node's image as a new image.

Where images live: ``$WANLAB_IMAGES`` if set (tests share one built image across a
session), else ``<state folder>/images`` (root-only, 0700)::

    images/names/<NAME>.json     what NAME is: its layers, suite, packages, build time
    images/layers/<ID>/          one layer (a built root, or a saved node layer)
    images/.lock                 held while building, saving or removing

Names are checked (:func:`check_name`); no part of a path ever comes from user input
otherwise. The mirror is the one this machine's apt uses (``/etc/apt/sources.list*``).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from wanlab.backends.emulate import nodefiles
from wanlab.backends.emulate.idmap import fs_source, idmapped_sources, shift_id
from wanlab.backends.emulate.rootfs import mounted_overlays
from wanlab.errors import WanlabError
from wanlab.model import imageref
from wanlab.model.names import check_image_name

Say = Callable[[str], None]

DEFAULT_IMAGE = "default"
DEFAULT_SUITE = "bookworm"
# the usual tools of a network node (dnsmasq: a DNS/DHCP server for the experiment's
# services); built the first time a node names ``default``
DEFAULT_PACKAGES = ("iproute2", "iputils-ping", "iperf3", "frr", "tcpdump", "python3",
                    "procps", "dnsmasq-base")
# every image has these: umount, which a node's holder runs once inside its new root
BASE_PACKAGES = ("mount",)
VARIANT = "apt"             # Essential packages and apt, then the image's own list

_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,99}$")
_SUITE = re.compile(r"^[a-z]{2,20}$")


def check_name(name: str) -> str:
    """An image name, checked: it becomes a file name, never a path."""
    return check_image_name(name)


def check_packages(packages: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Debian package names, checked (they go to mmdebstrap's and apt's command lines)."""
    for p in packages:
        if not isinstance(p, str) or not _PACKAGE.match(p):
            raise WanlabError(f"{p!r} is not a Debian package name (lower-case letters, "
                              f"digits, '+', '.', '-')")
    return tuple(sorted(set(packages)))


def parse_from(spec: str) -> str:
    """``debian:SUITE`` -> SUITE (the only base wanlab builds from: no container registry)."""
    dist, _, suite = spec.partition(":")
    if dist != "debian" or not _SUITE.match(suite):
        raise WanlabError(f"--from {spec!r}: images are built from Debian with mmdebstrap; "
                          f"give debian:SUITE (e.g. debian:{DEFAULT_SUITE})")
    return suite


def images_dir(home: str) -> str:
    """Where images live: $WANLAB_IMAGES, else ``<home>/images``."""
    return os.path.abspath(os.environ.get("WANLAB_IMAGES") or os.path.join(home, "images"))


def build_hash(suite: str, packages: tuple[str, ...]) -> str:
    """The cache key of a build: its suite, variant and package list (order-free)."""
    key = json.dumps({"suite": suite, "variant": VARIANT,
                      "packages": sorted({*packages, *BASE_PACKAGES})})
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Image:
    name: str
    layers: tuple[str, ...]        # layer ids, top first
    suite: str
    packages: tuple[str, ...]
    created: float
    build_s: float | None = None   # how long the build took (None: reused or saved)
    origin: str | None = None      # "EXP/NODE" for a saved image; an OCI image's reference
    oci: dict | None = None        # an OCI image's manifest digest and config (oci.py)


# -- the host's mirror -------------------------------------------------------------------

def _apt_sources() -> list[tuple[str, list[str], list[str]]]:
    """(URI, suites, components) of each ``deb`` source this machine's apt uses."""
    out: list[tuple[str, list[str], list[str]]] = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        with contextlib.suppress(OSError), open(path) as f:
            for line in f:
                w = line.split("#", 1)[0].split()
                if len(w) >= 4 and w[0] == "deb":
                    w = [x for x in w if not x.startswith("[")]   # [signed-by=...]
                    if len(w) >= 4:
                        out.append((w[1], [w[2]], w[3:]))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with contextlib.suppress(OSError), open(path) as f:
            text = f.read()
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
            if "deb" in fields.get("types", "").split() and fields.get("uris"):
                for uri in fields["uris"].split():
                    out.append((uri, fields.get("suites", "").split(),
                                fields.get("components", "main").split()))
    return out


def mirrors(suite: str) -> list[str]:
    """One-line sources for ``suite`` on the mirrors this machine's apt uses (Debian's own
    archive and its security archive), else deb.debian.org."""
    found: list[str] = []
    for uri, suites, _comps in _apt_sources():
        for s in suites:
            base = s.split("-", 1)[0].split("/", 1)[0]
            if base != DEFAULT_SUITE and base != suite:
                continue
            tail = s[len(base):]                 # "", "-updates", "-security", "/updates"
            line = f"deb {uri} {suite}{tail} main"
            if line not in found:
                found.append(line)
    return found or [f"deb http://deb.debian.org/debian {suite} main"]


def _apt_options() -> list[str]:
    """The host's apt proxy and validity settings, for mmdebstrap's apt."""
    try:
        dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    opts = []
    for line in dump.splitlines():
        k, _, v = line.partition(" ")
        if re.match(r"^Acquire::(https?|ftp)::Proxy(::[^ ]+)?$", k, re.I) or \
                k == "Acquire::Check-Valid-Until":
            opts.append(f"--aptopt={k} {v}")
    return opts


# -- the store of images -------------------------------------------------------------------

class Images:
    """The images under one folder."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def _names(self) -> str:
        return os.path.join(self.root, "names")

    def layer_path(self, layer: str) -> str:
        if not re.match(r"^[a-z0-9-]{8,64}$", layer):
            raise WanlabError(f"image store: bad layer id {layer!r}")
        return os.path.join(self.root, "layers", layer)

    def _meta_path(self, name: str) -> str:
        return os.path.join(self._names(), check_name(name) + ".json")

    def _prepare(self) -> None:
        for d in (self.root, self._names(), os.path.join(self.root, "layers")):
            os.makedirs(d, mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self._prepare()
        with open(os.path.join(self.root, ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def get(self, name: str) -> Image | None:
        """Image ``name`` (or an OCI reference's, under its store name), if held."""
        if imageref.is_ref(name):        # checked, then its store name (never a path)
            name = imageref.store_name(imageref.canonical(name))
        try:
            with open(self._meta_path(name)) as f:
                d = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise WanlabError(f"image {name}: its record is unreadable: {e}") from None
        img = Image(name=d["name"], layers=tuple(d["layers"]), suite=d["suite"],
                    packages=tuple(d["packages"]), created=d["created"],
                    build_s=d.get("build_s"), origin=d.get("origin"), oci=d.get("oci"))
        if not all(os.path.isdir(self.layer_path(x)) for x in img.layers):
            return None                  # a layer went missing: as good as absent
        return img

    def need(self, name: str) -> Image:
        img = self.get(name)
        if img is None and imageref.is_ref(name):
            raise WanlabError(f"image {name} is not in the store (wanlab image pull {name})")
        if img is None:
            raise WanlabError(f"no image named {name!r} (see 'wanlab image list'; build it "
                              f"with 'wanlab image build {name} --packages ...')")
        return img

    def list(self) -> list[Image]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for f in sorted(os.listdir(self._names())):
                if f.endswith(".json"):
                    with contextlib.suppress(WanlabError):
                        img = self.get(f[:-5])
                        if img:
                            out.append(img)
        return out

    def _write(self, img: Image) -> None:
        path = self._meta_path(img.name)
        tmp = path + ".new"
        with open(tmp, "w") as f:
            json.dump(img.__dict__, f, indent=1)
        os.replace(tmp, path)

    def lowerdirs(self, name: str) -> list[str]:
        """The layer folders of image ``name``, top first (an overlay's lowerdir)."""
        return [self.layer_path(x) for x in self.need(name).layers]

    # -- build
    def build(self, name: str, packages: tuple[str, ...] | list[str] = (),
              suite: str = DEFAULT_SUITE, say: Say | None = None) -> Image:
        """Build image ``name`` (or reuse the root of an identical build) and return it."""
        say = say or (lambda m: None)
        check_name(name)
        pk = check_packages(tuple(packages))
        if not _SUITE.match(suite):
            raise WanlabError(f"suite {suite!r} is not a Debian suite name")
        h = build_hash(suite, pk)
        with self.locked():
            layer = self.layer_path(h)
            took = None
            if os.path.isdir(layer):
                say(f"image {name}: reusing the build of the same packages ({h})")
            else:
                took = self._mmdebstrap(layer, suite, pk, say)
                say(f"image {name}: built in {took:.0f} s")
            old = self.get(name)
            img = Image(name=name, layers=(h,), suite=suite, packages=pk,
                        created=time.time(), build_s=took)
            self._write(img)
            if old is not None:
                self._collect(old.layers)
            return img

    def _collect(self, layers: tuple[str, ...]) -> None:
        """Remove those of ``layers`` no image names and no mounted root uses."""
        keep = {x for other in self.list() for x in other.layers}
        for x in layers:
            if x not in keep and not self.in_use(x):
                shutil.rmtree(self.layer_path(x), ignore_errors=True)

    def _mmdebstrap(self, layer: str, suite: str, packages: tuple[str, ...], say: Say) -> float:
        exe = shutil.which("mmdebstrap")
        if exe is None:
            raise WanlabError("building an image needs mmdebstrap (apt-get install "
                              "mmdebstrap; 'make install' does it)")
        tmp = f"{layer}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        argv = [exe, "--mode=root", f"--variant={VARIANT}",
                "--include=" + ",".join(sorted({*BASE_PACKAGES, *packages})),
                *_apt_options(), suite, tmp, *mirrors(suite)]
        say(f"building an image with mmdebstrap ({suite}: {', '.join(packages) or 'base'}); "
            f"this takes a minute or two, once")
        t0 = time.monotonic()
        tail: list[str] = []
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace",
                             preexec_fn=lambda: os.umask(0o022))
        try:
            assert p.stdout is not None
            for line in p.stdout:
                line = line.rstrip()
                tail = [*tail[-19:], line]
                if line.startswith("I: "):          # mmdebstrap's progress lines
                    say(f"  {line[3:]}")
            p.wait()
        except BaseException:
            p.kill()
            p.wait()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            last = "; ".join(x for x in tail[-4:] if x)
            raise WanlabError(f"mmdebstrap failed (exit {p.returncode}): {last}")
        os.chmod(tmp, 0o755)
        os.rename(tmp, layer)
        return time.monotonic() - t0

    def ensure(self, name: str, say: Say | None = None) -> Image:
        """Image ``name``; the default image is built the first time it is needed (and
        again when wanlab's list of its packages changed)."""
        img = None if imageref.is_ref(name) else self.get(name)
        if name == DEFAULT_IMAGE and (img is None or (
                img.origin is None and img.packages != check_packages(DEFAULT_PACKAGES))):
            what = "is not built yet" if img is None else "is of an older package list"
            (say or (lambda m: None))(f"the default image {what}: building it "
                                      f"({', '.join(DEFAULT_PACKAGES)})")
            return self.build(name, DEFAULT_PACKAGES, DEFAULT_SUITE, say)
        return self.need(name)

    # -- remove, export, save
    def in_use(self, layer: str) -> bool:
        """Whether a mounted overlay on this machine has the layer below it, directly or
        as an experiment's idmapped mount of it."""
        path = self.layer_path(layer)
        for opts in mounted_overlays().values():
            for o in opts:
                for kv in o.split(","):
                    if kv.startswith("lowerdir=") and path in kv[9:].split(":"):
                        return True
        with contextlib.suppress(OSError):
            return fs_source(path) in idmapped_sources()
        return False

    def remove(self, name: str) -> None:
        with self.locked():
            img = self.need(name)
            keep = {x for other in self.list() if other.name != name for x in other.layers}
            busy = [x for x in img.layers if x not in keep and self.in_use(x)]
            if busy:
                raise WanlabError(f"image {name} is in use by a swapped-in node; swap its "
                                  f"experiments out first")
            os.unlink(self._meta_path(name))
            self._collect(img.layers)

    def export(self, name: str, dest: str) -> int:
        """Write image ``name`` as a tar archive to ``dest`` (a new file); its size."""
        lowers = self.lowerdirs(name)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                if len(lowers) == 1:
                    argv = ["tar", "--numeric-owner", "--xattrs", "-C", lowers[0], "-cf", "-",
                            "."]
                else:
                    # several layers: their merged view, in a private mount namespace (the
                    # mount goes with it, whatever happens)
                    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                            'd=$(mktemp -d) && mount -t overlay -o "lowerdir=$0" wanlab-export '
                            '"$d" && exec tar --numeric-owner --xattrs -C "$d" -cf - .',
                            ":".join(lowers)]
                r = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True)
            if r.returncode not in (0, 1):     # 1: a file changed while read
                raise WanlabError(f"exporting image {name}: {r.stderr.strip()}")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(dest)
            raise
        return os.path.getsize(dest)

    def save(self, name: str, base: str, upper: str, origin: str,
             drop: tuple[str, ...] = (), uid_base: int = 0) -> Image:
        """A new image ``name``: a copy of a node's writable layer ``upper`` over image
        ``base``. ``drop``: paths (inside the layer) to leave out when only empty folders
        (mount points wanlab made for the node). ``uid_base``: the host uid the layer
        stores as the node's root (its user namespace's range): the copy's owners are
        shifted back by it, so the image's are 0-based like every image's."""
        check_name(name)
        with self.locked():
            if self.get(name) is not None:
                raise WanlabError(f"an image named {name!r} exists (wanlab image rm {name})")
            b = self.need(base)
            layer_id = "snap-" + uuid.uuid4().hex[:16]
            layer = self.layer_path(layer_id)
            tmp = layer + ".tmp"
            # the layer is the node's, and it may change it meanwhile: read beneath it, no
            # link followed (nodefiles), whiteouts, owners and attributes kept
            def exact(_rel: str, st: os.stat_result) -> int:
                return stat.S_IMODE(st.st_mode)
            try:
                nodefiles.copy_tree(upper, tmp, file_mode=exact, dir_mode=exact, exact=True,
                                    ids=lambda i: shift_id(i, uid_base, 0))
            except OSError as e:
                shutil.rmtree(tmp, ignore_errors=True)
                raise WanlabError(f"saving image {name}: {e}") from None
            for rel in drop:
                _prune_empty(tmp, rel)
            os.rename(tmp, layer)
            img = Image(name=name, layers=(layer_id, *b.layers), suite=b.suite,
                        packages=b.packages, created=time.time(), origin=origin)
            self._write(img)
            return img


def _prune_empty(top: str, rel: str) -> None:
    """Remove ``top/rel`` and its parents up to ``top`` while they are empty folders (never
    through a link: the copied layer is a node's)."""
    parts = [x for x in rel.split("/") if x and x not in (".", "..")]
    path = top
    for x in parts:
        path = os.path.join(path, x)
        if os.path.islink(path) or not os.path.isdir(path):
            return
    while path != top:
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)


def disk_usage(path: str) -> int:
    """Bytes used under ``path`` (each inode once), without following links."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for d, dirs, files in os.walk(path):
        for f in [*dirs, *files]:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(d, f))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def sizes(store: Images, imgs: list[Image]) -> tuple[dict[str, dict[str, int]], int]:
    """Bytes on disk of each image of ``imgs``: ``size`` (all its layers), ``unique`` (its
    layers no other image uses: what removing it frees) and ``shared`` (the rest); and of
    all of them (each layer measured once)."""
    users: dict[str, int] = {}
    for i in imgs:
        for layer in set(i.layers):
            users[layer] = users.get(layer, 0) + 1
    usage = {layer: disk_usage(store.layer_path(layer)) for layer in users}
    out = {}
    for i in imgs:
        mine = set(i.layers)
        unique = sum(usage[x] for x in mine if users[x] == 1)
        shared = sum(usage[x] for x in mine if users[x] > 1)
        out[i.name] = {"size": unique + shared, "unique": unique, "shared": shared}
    return out, sum(usage.values())


# -- moving layers by digest (a cluster's machines receive images from the controller) ----
#
# A layer's digest is the SHA-256 of its tar stream (:data:`TAR_CREATE`: members sorted by
# name, numeric owners, extended attributes, no access or change times), so the same files
# give the same digest on any host. A machine keeps a received layer under its digest
# (``layers/<digest>``) and an image's record names its layers by digest; a layer it holds
# already is never sent again. The controller caches its own layers' digests in
# ``digests/<layer id>.json``, with what changes when anything in the layer changes (its
# inode, its entries' count and latest change time): a changed or rebuilt layer is hashed
# again.

TAR_CREATE = ("tar", "--sort=name", "--numeric-owner", "--xattrs", "--format=posix",
              "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
              "-cf", "-", ".")
TAR_EXTRACT = ("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*",
               "--same-owner", "-xpf", "-")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 8 << 20             # bytes of a layer's stream per message


def check_digest(digest: str) -> str:
    """A layer digest (64 hex digits), checked: it becomes a layer id, never a path."""
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise WanlabError(f"image store: bad layer digest {digest!r}")
    return digest


@contextlib.contextmanager
def layer_stream(path: str) -> Iterator[Iterator[bytes]]:
    """The tar stream of the layer folder ``path``, in chunks of :data:`CHUNK` bytes."""
    p = subprocess.Popen(TAR_CREATE, cwd=path, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None

    def chunks() -> Iterator[bytes]:
        while True:
            data = p.stdout.read(CHUNK)
            if not data:
                break
            yield data
        err = p.stderr.read().decode(errors="replace").strip()
        if p.wait() not in (0, 1):        # 1: a file changed while read
            raise WanlabError(f"reading image layer {path}: {err}")
    try:
        yield chunks()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def _tree_key(path: str) -> dict:
    """What changes when anything in the folder ``path`` changes: its inode, how many
    entries it holds and their latest change time (a stat of each, no reading)."""
    newest, count = os.lstat(path).st_ctime_ns, 0
    for d, dirs, files in os.walk(path):
        for f in (*dirs, *files):
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(d, f)).st_ctime_ns)
                count += 1
    return {"ino": os.lstat(path).st_ino, "entries": count, "ctime_ns": newest}


def layer_digest(store: Images, layer: str) -> str:
    """The digest of layer ``layer`` of ``store`` (computed once, then cached)."""
    path = store.layer_path(layer)
    if _DIGEST.match(layer):
        return layer                      # received: kept under its digest
    key = _tree_key(path)
    cache = os.path.join(store.root, "digests", layer + ".json")
    with contextlib.suppress(OSError, ValueError):
        with open(cache) as f:
            d = json.load(f)
        if {k: d.get(k) for k in key} == key and _DIGEST.match(d.get("digest", "")):
            return d["digest"]
    h = hashlib.sha256()
    with layer_stream(path) as chunks:
        for data in chunks:
            h.update(data)
    os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
    tmp = f"{cache}.{os.getpid()}.new"
    with open(tmp, "w") as f:
        json.dump({**key, "digest": h.hexdigest()}, f)
    os.replace(tmp, cache)
    return h.hexdigest()


def manifest(store: Images, name: str) -> dict:
    """What a machine needs to hold image ``name`` of ``store``: its record, with its
    layers named by digest (top first), and where each digest's layer is (``sources``)."""
    img = store.need(name)
    digests = [layer_digest(store, x) for x in img.layers]
    return {"name": img.name, "layers": digests, "suite": img.suite,
            "packages": list(img.packages), "created": img.created, "origin": img.origin,
            "oci": img.oci, "sources": dict(zip(digests, img.layers, strict=True))}


def missing(store: Images, digests: list[str]) -> list[str]:
    """Those of ``digests`` ``store`` holds no layer of."""
    return [d for d in digests if not os.path.isdir(store.layer_path(check_digest(d)))]


def adopt(store: Images, record: dict) -> Image:
    """Record image ``record["name"]`` in ``store`` over layers it received (every one
    must be there); an older record of the name is replaced and its unused layers go."""
    name = check_name(record["name"])
    layers = tuple(check_digest(d) for d in record["layers"])
    with store.locked():
        gone = missing(store, list(layers))
        if gone:
            raise WanlabError(f"image {name}: layers {', '.join(x[:12] for x in gone)} "
                              f"have not arrived")
        old = store.get(name)
        img = Image(name=name, layers=layers, suite=str(record["suite"]),
                    packages=check_packages(tuple(record["packages"])),
                    created=float(record["created"]), origin=record.get("origin"),
                    oci=record.get("oci"))
        if old != img:
            store._write(img)
            if old is not None:
                store._collect(old.layers)
        return img


class Receiver:
    """One layer arriving in store ``images`` as its tar stream: unpacked into a private
    folder while its SHA-256 is computed; kept under ``digest`` only if they match."""

    def __init__(self, images: Images, digest: str):
        self.images = images
        self.digest = check_digest(digest)
        images._prepare()
        self.final = images.layer_path(digest)
        self.tmp = f"{self.final}.tmp-{uuid.uuid4().hex[:12]}"
        os.mkdir(self.tmp, 0o700)
        self.hash = hashlib.sha256()
        self.proc = subprocess.Popen([*TAR_EXTRACT, "-C", self.tmp],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)

    def feed(self, data: bytes) -> None:
        self.hash.update(data)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except BrokenPipeError:
            pass                            # tar failed: said at finish

    def finish(self) -> None:
        """Keep the layer (or find it kept by another transfer meanwhile)."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        err = self.proc.stderr.read().decode(errors="replace").strip()
        code = self.proc.wait()
        self.proc.stderr.close()
        try:
            if code != 0:
                raise WanlabError(f"unpacking image layer {self.digest[:12]}: {err}")
            if self.hash.hexdigest() != self.digest:
                raise WanlabError(f"image layer {self.digest[:12]} arrived damaged (its "
                                  f"digest is {self.hash.hexdigest()[:12]})")
            os.chmod(self.tmp, 0o755)
            with self.images.locked():
                if not os.path.isdir(self.final):
                    os.rename(self.tmp, self.final)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
