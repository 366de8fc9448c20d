"""Which ``wanlab-engine`` binary to run (both back ends start one)."""

from __future__ import annotations

import os
import shutil

from wanlab.errors import EngineError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def engine_binary() -> str:
    """The engine: $WANLAB_ENGINE, else the workspace's release build, else PATH."""
    env = os.environ.get("WANLAB_ENGINE")
    if env:
        return env
    built = os.path.join(REPO_ROOT, "target", "release", "wanlab-engine")
    if os.path.exists(built):
        return built
    found = shutil.which("wanlab-engine")
    if found:
        return found
    raise EngineError("wanlab-engine not found: run 'make install' (or set WANLAB_ENGINE)")
