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

from dataclasses import replace
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import units
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir

RULE_KEYS = ("delay", "bandwidth", "loss")


def parse_rule(text: str) -> ir.LinkRule:
    """``PREFIX:delay=100ms,bandwidth=1Mb,loss=0.01`` (keys optional, each way alike):
    frames to PREFIX (IPv4 or IPv6: ``fd00:9::/32:delay=5ms``; the settings begin at the
    first colon after its ``/``) get these instead of the wire's (hitbox's point-to-point
    mode)."""
    slash = text.find("/")
    cut = text.find(":", slash) if slash >= 0 else text.find(":")
    prefix, rest = (text, "") if cut < 0 else (text[:cut], text[cut + 1:])
    kw: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq or k not in RULE_KEYS:
            raise SpecError(f"{item!r}: write key=value with keys {', '.join(RULE_KEYS)}",
                            field=f"rule {text}")
        kw[k] = v
    p = ir.LinkParams(
        delay_s=units.parse_delay(kw.get("delay", 0), field=f"rule {text}"),
        bandwidth_bps=units.parse_bandwidth(kw.get("bandwidth", 0), field=f"rule {text}"),
        loss=units.parse_loss(kw.get("loss", 0), field=f"rule {text}"))
    return ir.LinkRule(dst=prefix.strip(), ab=p, ba=p)


def bridge_experiment(name: str, if_a: str, if_b: str, *, delay: Any = 0,
                      bandwidth: Any = 0, loss: Any = 0, queue: Any = None,
                      rules: tuple[str, ...] = ()) -> ir.Experiment:
    """The validated bridge experiment (errors name the argument); ``rules`` are
    per-destination rules as :func:`parse_rule` reads them."""
    b = ExperimentBuilder(name)
    a = b.node("a", external=if_a)
    z = b.node("b", external=if_b)
    b.link(a, z, delay=delay, bandwidth=bandwidth, loss=loss, queue=queue, name="wire")
    exp = b.build()
    if rules:
        wire = replace(exp.links[0], rules=tuple(parse_rule(r) for r in rules))
        exp = ir.validate(replace(exp, links=(wire,)))
    return exp
