"""Python experiment files, run in a bounded child process.

A ``.py`` spec is code. It never runs inside wanlab's own (root) process:
:func:`load` starts ``python -m wanlab.frontends.pyspec FILE`` in a new
session with a CPU-time, memory, file-size and process-count limit (``setrlimit``)
and a wall-clock timeout, and reads back the experiment's IR as JSON on a pipe of
its own (the script's prints go to stderr). Started by root, the child also
runs in its own PID, network and IPC namespaces (``unshare``: when it ends,
everything it started ends; it has no network) and, once it has read the
file, as user ``nobody`` (so it cannot raise its limits or touch root's files).
Every way the script can fail is one clear line naming the file (and line,
when the script raised):
an exception, a syntax error, ``sys.exit(N)``, the memory or time limit.
On a timeout the child's whole process group is killed, so a background
process the script started does not outlive the parse.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import subprocess
import sys
import threading
from typing import Any

from wanlab.errors import SpecError
from wanlab.model import ir

TIMEOUT_S = 60.0
MEMORY_BYTES = 2 << 30            # address space of the child
MAX_FILE_BYTES = 64 << 20         # any file the script writes
MAX_PROCS = 64                    # processes and threads of user nobody, the child's
NOBODY = 65534                    # the user a root-started child becomes
PARAMS_ENV = "WANLAB_TEMPLATE_PARAMS"      # how the child learns the parameter values
_WANLAB_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path: str | os.PathLike[str], *, timeout: float = TIMEOUT_S,
         memory: int = MEMORY_BYTES, params: dict[str, str] | None = None) -> ir.Experiment:
    """Run the ``.py`` spec at ``path`` in a bounded child; return its validated IR.

    ``params``: template parameter values (the keyword arguments of an ``experiment``
    function, or :meth:`ExperimentBuilder.parameter` calls)."""
    display = str(path)
    if not os.path.isfile(path):
        raise SpecError("no such file", file=display)
    cpu = max(1, int(timeout + 0.999))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (_WANLAB_ROOT, env.get("PYTHONPATH")) if x)
    env[PARAMS_ENV] = json.dumps({str(k): str(v) for k, v in (params or {}).items()})
    rfd, wfd = os.pipe()
    jail = ["unshare", "--pid", "--fork", "--kill-child", "--net", "--ipc", "--"] \
        if os.geteuid() == 0 else []
    try:
        proc = subprocess.Popen(
            [*jail, _child_python(), "-m", "wanlab.frontends.pyspec", "--result-fd", str(wfd),
             "--limits", f"{cpu},{memory}", os.path.abspath(path), display],
            stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), pass_fds=(wfd,), env=env,
            start_new_session=True)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(rfd, chunks), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SpecError(f"the Python spec did not finish within {timeout:g} s (killed)",
                        file=display) from None
    except BaseException:
        _kill_group(proc)
        raise
    _kill_group(proc)                  # whatever it left running in the background
    reader.join(timeout=5)
    return _result(b"".join(chunks), code, display, timeout, memory)


def _others_can_read(path: str) -> bool:
    """Whether a user other than the owner can list ``path`` (every ancestor searchable)."""
    path = os.path.abspath(path)
    try:
        if os.stat(path).st_mode & 0o005 != 0o005:
            return False
        while path != os.path.dirname(path):
            path = os.path.dirname(path)
            if not os.stat(path).st_mode & 0o001:
                return False
    except OSError:
        return False
    return True


def _child_python() -> str:
    """An interpreter ``nobody`` can run: this one if its library is readable by others
    (a root-only installation, e.g. under /root, is not), else the system's."""
    if os.geteuid() != 0 or _others_can_read(os.path.dirname(os.__file__)):
        return sys.executable
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _read_all(fd: int, out: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as f:
        while True:
            b = f.read(1 << 16)
            if not b:
                return
            out.append(b)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _result(data: bytes, code: int, display: str, timeout: float,
            memory: int) -> ir.Experiment:
    try:
        msg = json.loads(data) if data else None
    except ValueError:
        msg = None
    if isinstance(msg, dict) and "error" in msg:
        e = msg["error"]
        raise SpecError(e["message"], file=display, line=e.get("line"), field=e.get("field"))
    if isinstance(msg, dict) and "experiment" in msg and code == 0:
        return ir.validate(ir.Experiment.from_json(msg["experiment"]))
    if code in (-signal.SIGXCPU, -signal.SIGKILL):
        raise SpecError(f"the Python spec used more than {timeout:g} s of CPU time (killed)",
                        file=display)
    if code < 0:
        raise SpecError(f"the Python spec was killed by signal {-code} "
                        f"(memory limit {memory >> 20} MB?)", file=display)
    raise SpecError(f"the Python spec exited with status {code} before defining "
                    f"'experiment'", file=display)


# -- the child ----------------------------------------------------------------------------

def run_in_process(path: str, display: str, source: bytes | None = None) -> ir.Experiment:
    """Run the spec here (only ever in the bounded child); SpecError for any failure.
    ``source``: the file's bytes, read before privileges were dropped."""
    from wanlab.frontends import builder
    from wanlab.frontends.builder import ExperimentBuilder
    builder._OVERRIDES.update(json.loads(os.environ.get(PARAMS_ENV) or "{}"))
    builder._SPEC_DIR = os.path.dirname(os.path.abspath(path))   # its traces, schedules
    sys.path.insert(0, os.path.dirname(path))     # the spec may import its neighbours
    try:
        if source is None:
            g = runpy.run_path(path, run_name="__wanlab_experiment__")
        else:
            import builtins
            g = {"__name__": "__wanlab_experiment__", "__file__": path,
                 "__builtins__": builtins}
            exec(compile(source, path, "exec"), g)  # noqa: S102 - the bounded child
    except SpecError as e:
        if e.file:
            raise
        raise SpecError(e.message, file=display, line=_tb_line(e, path),
                        field=e.field) from None
    except SyntaxError as e:
        raise SpecError(f"Python syntax error: {e.msg}", file=display, line=e.lineno) from None
    except SystemExit as e:
        raise SpecError(f"the Python spec called sys.exit({e.code!r}) before defining "
                        f"'experiment'", file=display, line=_tb_line(e, path)) from None
    except MemoryError as e:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0] >> 20
        raise SpecError(f"the Python spec ran out of memory (limit {limit} MB)", file=display,
                        line=_tb_line(e, path)) from None
    except Exception as e:  # the user's code failed: report it as a spec error
        raise SpecError(f"{type(e).__name__}: {e}", file=display,
                        line=_tb_line(e, path)) from None
    exp = g.get("experiment")
    if callable(exp) and not isinstance(exp, (ExperimentBuilder, ir.Experiment)):
        exp = _call_template(exp, display, path)
    if isinstance(exp, ExperimentBuilder):
        exp = exp.build_from(display)
    if not isinstance(exp, ir.Experiment):
        raise SpecError("a Python experiment file must define a module-level 'experiment' "
                        "(an ExperimentBuilder or an Experiment)", file=display)
    return ir.validate(exp)


def _call_template(fn: Any, display: str, path: str) -> Any:
    """``experiment`` as a function: its keyword arguments with defaults are the template
    parameters (a description in ``Annotated[type, "text"]``); values given as text are
    converted to the default's type."""
    import inspect
    import typing

    from wanlab.frontends import builder
    given = dict(builder._OVERRIDES)
    builder._OVERRIDES.clear()       # they are the function's, not a builder's inside it
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True) if fn.__annotations__ else {}
    kwargs, params = {}, []
    for p in sig.parameters.values():
        if p.default is inspect.Parameter.empty:
            raise SpecError(f"experiment(): argument {p.name!r} needs a default (template "
                            f"parameters are keyword arguments with defaults)", file=display)
        meta = getattr(hints.get(p.name), "__metadata__", ())
        desc = next((m for m in meta if isinstance(m, str)), "")
        value = p.default
        if p.name in given:
            value = _convert(given.pop(p.name), p.default, p.name, display)
        kwargs[p.name] = value
        params.append(ir.Parameter(name=ir.check_parameter_name(p.name), default=_text(p.default),
                                   value=_text(value), description=desc))
    if given:
        raise SpecError(f"parameter {sorted(given)[0]!r} is not a keyword argument of "
                        f"experiment() (its parameters: {', '.join(sig.parameters) or 'none'})",
                        file=display)
    try:
        exp = fn(**kwargs)
    except SpecError:
        raise
    except Exception as e:
        raise SpecError(f"{type(e).__name__}: {e}", file=display, line=_tb_line(e, path)) from None
    if isinstance(exp, builder.ExperimentBuilder):
        exp = exp.build_from(display)
    if isinstance(exp, ir.Experiment):
        from dataclasses import replace
        exp = replace(exp, parameters=(*params, *exp.parameters))
    return exp


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _convert(text: str, default: Any, name: str, display: str) -> Any:
    """``-p NAME=TEXT`` in the type of the keyword's default."""
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        raise SpecError(f"parameter {name}={text!r}: not a {type(default).__name__} like its "
                        f"default {default!r}", file=display) from None
    return text


def _tb_line(e: BaseException, path: Any) -> int | None:
    target = os.path.abspath(str(path))
    line = None
    tb = e.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _limit(cpu: int, memory: int) -> None:
    """Bound this process (the child) before any of the script runs."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # a fork bomb stops here: counted per user (nobody, after the drop), so parses running
    # side by side share the bound
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCS, MAX_PROCS))


def _drop_privileges() -> None:
    """Root reads the file, then becomes nobody (no supplementary groups) for good."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def main(argv: list[str]) -> int:
    fd, path, display = int(argv[1]), argv[4], argv[5]
    cpu, memory = (int(x) for x in argv[3].split(","))
    _limit(cpu, memory)
    out = os.fdopen(fd, "w")
    os.set_inheritable(fd, False)      # the script's own children do not hold the pipe
    try:
        source = None
        if os.geteuid() == 0:
            with open(path, "rb") as f:
                source = f.read()
            _drop_privileges()
        exp = run_in_process(path, display, source)
        reply: dict[str, Any] = {"experiment": exp.to_json()}
    except SpecError as e:
        reply = {"error": {"message": e.message, "line": e.line, "field": e.field}}
    except BaseException as e:  # noqa: BLE001 - e.g. an error while validating
        reply = {"error": {"message": f"{type(e).__name__}: {e}", "line": None,
                           "field": None}}
    out.write(json.dumps(reply))
    out.close()
    os._exit(0)          # skip atexit handlers and threads the script may have left


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "--result-fd" or sys.argv[3] != "--limits":
        print("usage: python -m wanlab.frontends.pyspec --result-fd FD --limits CPU_S,BYTES "
              "FILE DISPLAY",
              file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1:])
