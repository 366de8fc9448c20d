"""``wanlab bridge IF_A IF_B``: the experiment that puts the engine between two interfaces.

Two nodes, ``a`` holding host interface IF_A and ``b`` holding IF_B (``Node.external``),
joined by the link ``wire`` with the given shaping both ways. The emulate back end moves
each interface into its node and bridges it with the node's TAP
(:mod:`wanlab.backends.emulate.external`), so frames between whatever is behind IF_A and
IF_B cross ``wire``: a Dummynet-style bridge box. It is an ordinary experiment: ``wanlab
show``, ``tevc NAME now wire delay 50ms``, ``wire`` traces and ``terminate`` (which gives
the interfaces back) work on it.
"""

from __future__ import annotations

from typing import Any

from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir


def bridge_experiment(name: str, if_a: str, if_b: str, *, delay: Any = 0,
                      bandwidth: Any = 0, loss: Any = 0, queue: Any = None) -> ir.Experiment:
    """The validated bridge experiment (errors name the argument)."""
    b = ExperimentBuilder(name)
    a = b.node("a", external=if_a)
    z = b.node("b", external=if_b)
    b.link(a, z, delay=delay, bandwidth=bandwidth, loss=loss, queue=queue, name="wire")
    return b.build()
