#!/usr/bin/env bash
# `make demo`: run Netbed's Figure 2 experiment end to end (see examples/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# a previous interrupted demo may have left its experiment recorded: remove it first
wanlab terminate demo-figure2 >/dev/null 2>&1 || true
exec python3 examples/demo.py
