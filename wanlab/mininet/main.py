"""The entry points: ``wanlab mininet SCRIPT.py [ARGS]``, ``wanlab mininet -m MODULE [ARGS]``
and ``wanlab mn [OPTIONS]`` (run as ``python3 -m wanlab.mininet.main``).

wanlab's ``mininet`` package is put first on ``sys.path`` here, and only here: an installed
Mininet is shadowed for these commands only. Whatever the script leaves running is
terminated at its end; a call wanlab refuses is one line naming the call and the script's
line, exit status 2.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

from wanlab.errors import SpecError, WanlabError
from wanlab.mininet import COMPAT
from wanlab.mininet.refuse import Unsupported

USAGE = ("usage: wanlab mininet SCRIPT.py [ARGS...]\n"
         "       wanlab mininet -m MODULE [ARGS...]\n"
         "       wanlab mn [--topo ...] [--link ...] [--test ...] (wanlab mn --help)")


def _prepare() -> None:
    # a SIGTERM (timeout, kill) ends the script through its finally clauses and ours: the
    # networks it made are terminated
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.path.insert(0, COMPAT)
    for m in [m for m in sys.modules if m == "mininet" or m.startswith("mininet.")]:
        del sys.modules[m]


def _stop_all() -> None:
    mod = sys.modules.get("mininet.net")
    if mod is not None:
        mod.Mininet.stopAll()


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if os.geteuid() != 0:
        print("wanlab mininet: must run as root (as Mininet)", file=sys.stderr)
        return 2
    _prepare()
    try:
        if argv[0] == "-m":
            if len(argv) < 2:
                print(USAGE, file=sys.stderr)
                return 2
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            if not os.path.isfile(script):
                print(f"wanlab mininet: {script}: no such file", file=sys.stderr)
                return 2
            sys.argv = [script, *argv[1:]]
            sys.path.insert(1, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Unsupported as e:
        print(f"wanlab mininet: {e}", file=sys.stderr)
        return 2
    except (SpecError, WanlabError) as e:
        print(f"wanlab mininet: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wanlab mininet: interrupted", file=sys.stderr)
        return 130
    finally:
        _stop_all()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "mn":
        if os.geteuid() != 0:
            print("wanlab mn: must run as root (as Mininet)", file=sys.stderr)
            return 2
        _prepare()
        from wanlab.mininet import mn
        try:
            return mn.main(argv[1:])
        except Unsupported as e:
            print(f"wanlab mn: {e}", file=sys.stderr)
            return 2
        except (SpecError, WanlabError) as e:
            print(f"wanlab mn: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
        finally:
            _stop_all()
    if argv and argv[0] == "mininet":
        argv = argv[1:]
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
