"""An uploaded experiment description (ns-2 Tcl or YAML text) to the IR, in a bounded child.

The server never parses an upload itself. It checks the upload's size (:data:`MAX_BYTES`)
and format, then hands the text to a child process (``python3 -m wanlab.portal.specs``)
that runs the ordinary front ends: the ns script in wanlab's restricted Tcl interpreter,
YAML against its schema. The child

* has :data:`MEMORY_BYTES` of address space, :data:`CPU_S` of CPU time and no core file
  (rlimits, inherited by the ns front end's tclsh), and is killed, with everything it
  started, after :data:`TIMEOUT_S` (its own PID and network namespaces when root starts it,
  else its process group);
* refuses a description of more than :data:`MOST` nodes, links, LANs or events as soon as a
  front end has counted them, before the IR is built and validated
  (:mod:`wanlab.frontends.bounds`), then makes its plan (addresses, routes), so a
  ``check_only`` costs the server nothing but the IR's JSON;
* writes the IR back as JSON on its stdout.

At most :data:`PARSES` children run at once; a request that cannot get one within
:data:`QUEUE_S` is told the portal is busy (503), so parses cannot hold every worker.

Python descriptions are refused: they are code, and the portal runs as root. A mistake
comes back as :class:`UploadError` with the parser's message and line, and the uploaded
file's name in place of the temporary path.
"""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from wanlab.errors import SpecError, WanlabError
from wanlab.model.ir import Experiment

FORMATS = {".tcl": ".tcl", ".ns": ".tcl", ".yaml": ".yaml", ".yml": ".yaml"}
MAX_BYTES = 1 << 20
MOST = {"nodes": 2000, "links": 4000, "lans": 1000, "events": 50000}
TIMEOUT_S = 30.0                 # wall clock of one parse
CPU_S = 30                       # CPU time of one parse (tclsh's included)
MEMORY_BYTES = 1 << 30           # address space of the child, and of its tclsh
PARSES = 2                       # children at once
QUEUE_S = 2.0                    # how long a request waits for one
_slots = threading.BoundedSemaphore(PARSES)


class UploadError(WanlabError):
    """The description does not parse; ``line`` is where (None when unknown)."""

    def __init__(self, message: str, file: str, line: int | None = None):
        self.message, self.file, self.line = message, file, line
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")


class Busy(WanlabError):
    """Every parse child is taken: try again shortly (503)."""


def parse(filename: str, text: str, name: str | None = None,
          files: dict[str, str] | None = None) -> tuple[Experiment, list[str], str]:
    """The IR of an uploaded description, its warnings (citing the uploaded name), and the
    child's folder the description was read in: a file named by a plain name (a file sent
    with the upload, :mod:`wanlab.portal.files`) resolved to a path in it. ``files`` (plain
    name -> base64, checked by the caller) are written beside the description there, so
    a capacity trace or schedule it names, read into the IR, is read from them."""
    shown = os.path.basename(filename or "") or "upload"
    ext = os.path.splitext(shown)[1].lower()
    if ext not in FORMATS:
        raise UploadError(f"unknown format {ext or '(no extension)'!r}: upload an ns-2 script "
                          f"(.tcl, .ns) or a YAML file (.yaml, .yml); Python descriptions "
                          f"run as code and are accepted from the root CLI only", shown)
    data = text.encode()
    if len(data) > MAX_BYTES:
        raise UploadError(f"{len(data)} bytes: larger than the {MAX_BYTES} an upload may "
                          f"have", shown)
    stem = re.sub(r"[^A-Za-z0-9-]", "-", os.path.splitext(shown)[0]).strip("-")[:32]
    if not stem or not stem[0].isalpha():
        stem = "exp-" + stem if stem else "exp"
    if not _slots.acquire(timeout=QUEUE_S):
        raise Busy(f"the portal is busy reading {PARSES} other uploads; try again shortly")
    try:
        out = _run_child({"file": stem + FORMATS[ext], "text": text, "files": files or {}},
                         shown)
    finally:
        _slots.release()
    if "error" in out:
        raise UploadError(out["error"], shown, out.get("line"))
    exp = Experiment.from_json(out["ir"])
    return (exp.with_name(name) if name else exp), out["warnings"], out["base"]


def _limits() -> None:
    """In the child, before exec: its own session, bounded memory and CPU, no core."""
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_child(request: dict, shown: str) -> dict:
    argv = [sys.executable, "-m", "wanlab.portal.specs"]
    if os.geteuid() == 0 and shutil.which("unshare"):
        # when the child ends, so does everything it started (tclsh); no network
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--net", "--"] + argv
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_limits,
                            env={**os.environ, "PYTHONPATH": _package_root()})
    try:
        out, err = proc.communicate(json.dumps(request).encode(), timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise UploadError(f"reading it took longer than {TIMEOUT_S:g} s (an endless loop?)",
                          shown) from None
    except BaseException:
        _kill(proc)
        raise
    try:
        return json.loads(out)
    except ValueError:
        if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGKILL):
            why = f"used more than {CPU_S} s of CPU time"
        elif b"MemoryError" in err or b"alloc" in err:
            why = f"needed more than {MEMORY_BYTES >> 20} MB"
        else:
            lines = err.decode(errors="replace").strip().splitlines()
            why = "stopped without a result" + (f" ({lines[-1]})" if lines else "")
        raise UploadError(f"reading it {why}", shown) from None


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _package_root() -> str:
    """The folder that holds this wanlab package (the child imports the same code)."""
    import wanlab
    return os.path.dirname(os.path.dirname(os.path.abspath(wanlab.__file__)))


# -- the child ------------------------------------------------------------------------
def child(request: dict) -> dict:
    """Parse one upload (in the bounded child): ``{"ir", "warnings"}`` or
    ``{"error", "line"}``."""
    from wanlab.frontends import bounds, load
    from wanlab.plan.plan import make_plan

    if os.path.splitext(str(request.get("file")))[1] not in set(FORMATS.values()):
        # Python (a spec, a Mininet script) is code, run as root: never from the portal
        return {"error": "only ns-2 and YAML descriptions are read here", "line": None}
    with tempfile.TemporaryDirectory(prefix="wanlab-upload-") as d:
        path = os.path.join(d, os.path.basename(request["file"]))
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(request["text"])
        shown = request["file"]
        for fname, data in (request.get("files") or {}).items():
            # plain names (the server checked them): the files sent with the description
            if os.path.basename(fname) != fname or fname in (".", ".."):
                return {"error": f"{fname!r} is not a plain file name", "line": None}
            try:
                fd = os.open(os.path.join(d, fname),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                return {"error": f"a file sent with it is named {fname}, as the description "
                                 f"is read here: rename it", "line": None}
            with open(fd, "wb") as f:
                f.write(base64.b64decode(data))

        def hide(text: str) -> str:          # the upload's temporary folder is the host's
            return text.replace(path, shown).replace(d, ".")
        try:
            with bounds.limited(**MOST):
                exp = load(path)
            make_plan(exp, "0000")        # addresses and routes: the plan can be made
        except SpecError as e:
            msg = hide(e.message if e.field is None else f"{e.field}: {e.message}")
            if e.file and os.path.abspath(e.file) != path:     # a trace or schedule sent
                other = os.path.relpath(e.file, d) if e.file.startswith(d + "/") \
                    else hide(e.file)
                return {"error": f"{other}" + (f":{e.line}" if e.line else "") + f": {msg}",
                        "line": None}
            return {"error": msg, "line": e.line}
        except WanlabError as e:
            return {"error": hide(str(e)), "line": None}
        except MemoryError:
            return {"error": f"reading it needed more than {MEMORY_BYTES >> 20} MB",
                    "line": None}
        return {"ir": exp.to_json(), "base": os.path.dirname(os.path.abspath(path)),
                "warnings": [hide(str(w)) for w in exp.warnings]}


def main() -> int:
    request = json.loads(sys.stdin.read())
    out = child(request)
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
