"""Mininet scripts on wanlab: a ``mininet`` package of wanlab's own (``compat/mininet``), run
ahead of any installed Mininet by ``wanlab mininet`` and ``wanlab mn`` (docs/mininet.md).

:mod:`build` maps a Mininet graph onto the IR (pure), :mod:`shell` is a node's persistent
shell, :mod:`main` the entry points; the package in ``compat/`` is only ever imported as
``mininet`` (its folder is put first on ``sys.path`` by the entry points).
"""

import os

COMPAT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat")
