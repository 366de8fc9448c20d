"""netem's vocabulary as the front ends write it, and the IR fields it sets.

One table of names for YAML, the Python builder, ns and tevc (docs/impairments.md):

* ``jitter``: ``5ms``, or ``{value: 5ms, distribution: normal, correlation: 25%,
  reorder: true}`` (frames keep their order unless ``reorder``);
* ``loss``: ``1%``, or ``{p: 1%, correlation: 25%}`` (Bernoulli), or
  ``{model: gilbert-elliott, p, r, h, k}``, or ``{model: 4-state, p13, p31, p32, p23, p14}``;
* ``duplicate``, ``corrupt``: probabilities (``10%``, ``0.001``);
* ``reorder``: ``25%`` or ``{probability: 25%, gap: 5}`` (every gap-th frame skips the
  delay with that probability; needs a delay to reorder anything);
* ``overhead``, ``cellsize``, ``cell_overhead``: serialization framing, in bytes.

:func:`fields` turns such a mapping into :class:`~wanlab.model.ir.LinkParams` field values;
errors name the key (``jitter.distribution``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import units
from wanlab.model import ir

KEYS = ("jitter", "duplicate", "corrupt", "reorder", "overhead", "cellsize", "cell_overhead")
JITTER_KEYS = ("value", "distribution", "correlation", "reorder")
REORDER_KEYS = ("probability", "gap")
GE_KEYS = ("p", "r", "h", "k")
STATE_KEYS = ("p13", "p31", "p32", "p23", "p14")
MODEL_NAMES = {"gilbert-elliott": "gilbert-elliott", "gemodel": "gilbert-elliott",
               "gilbert": "gilbert-elliott", "4-state": "4-state", "state": "4-state",
               "bernoulli": "bernoulli", "random": "bernoulli"}


def _f(pre: str, k: str) -> str:
    return f"{pre}.{k}" if pre else k


def _prob(v: Any, field: str, what: str) -> float:
    try:
        return units.parse_loss(v, field=field)
    except SpecError as e:
        raise SpecError(e.message.replace("loss", what, 1), field=field) from None


def _int(v: Any, field: str, what: str) -> int:
    n = units.parse_int(v, what, field=field)
    return n


def _mapping(v: Any, allowed: tuple[str, ...], field: str) -> Mapping[str, Any]:
    for k in v:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            raise SpecError("unknown key" + (f" (did you mean {close[0]}?)" if close else
                                             f"; allowed keys are {', '.join(allowed)}"),
                            field=_f(field, str(k)))
    return v


def jitter(v: Any, field: str = "jitter") -> dict[str, Any]:
    """``5ms`` or ``{value, distribution, correlation, reorder}``."""
    if not isinstance(v, Mapping):
        return {"jitter_s": units.parse_delay(v, field=field, what="jitter")}
    m = _mapping(v, JITTER_KEYS, field)
    out: dict[str, Any] = {}
    if "value" in m:
        out["jitter_s"] = units.parse_delay(m["value"], field=_f(field, "value"),
                                            what="jitter")
    if "distribution" in m:
        d = str(m["distribution"]).lower()
        if d not in ir.JITTER_DISTS:
            raise SpecError(f"distribution {m['distribution']!r} unknown; use one of "
                            f"{', '.join(ir.JITTER_DISTS)}", field=_f(field, "distribution"))
        out["jitter_dist"] = d
    if "correlation" in m:
        out["jitter_correlation"] = _prob(m["correlation"], _f(field, "correlation"),
                                          "correlation")
    if "reorder" in m:
        out["jitter_reorder"] = units.parse_bool(m["reorder"], "reorder",
                                                 field=_f(field, "reorder"))
    return out


def loss(v: Any, field: str = "loss") -> dict[str, Any]:
    """A plain probability, or a loss model (module docs): ``loss``, ``loss_correlation``
    and ``loss_model`` all set, so a new loss replaces the old one whole."""
    if not isinstance(v, Mapping):
        return {"loss": units.parse_loss(v, field=field), "loss_correlation": 0.0,
                "loss_model": None}
    raw = str(v.get("model", "bernoulli")).lower()
    model = MODEL_NAMES.get(raw)
    if model is None:
        raise SpecError(f"loss model {v.get('model')!r} unknown; use bernoulli, "
                        f"gilbert-elliott or 4-state", field=_f(field, "model"))
    if model == "bernoulli":
        m = _mapping(v, ("model", "p", "correlation"), field)
        return {"loss": _prob(m.get("p", 0), _f(field, "p"), "p"),
                "loss_correlation": _prob(m.get("correlation", 0),
                                          _f(field, "correlation"), "correlation"),
                "loss_model": None}
    keys = GE_KEYS if model == "gilbert-elliott" else STATE_KEYS
    m = _mapping(v, ("model", *keys), field)
    vals = {k: _prob(m[k], _f(field, k), k) for k in keys if k in m}
    first = keys[0]
    if first not in vals:
        raise SpecError(f"the {model} model needs {first}", field=_f(field, first))
    if model == "4-state" and "p31" not in vals:
        vals["p31"] = 1.0 - vals["p13"]       # netem's default
    lm = ir.LossModel(model=model, **vals)
    ir.check_impairments(ir.LinkParams(loss_model=lm), field.rsplit(".loss", 1)[0]
                         if field.endswith(".loss") else "")
    return {"loss": 0.0, "loss_correlation": 0.0, "loss_model": lm}


def reorder(v: Any, field: str = "reorder") -> dict[str, Any]:
    """``25%`` or ``{probability, gap}``."""
    if not isinstance(v, Mapping):
        return {"reorder": _prob(v, field, "reorder probability"), "reorder_gap": 1}
    m = _mapping(v, REORDER_KEYS, field)
    if "probability" not in m:
        raise SpecError("reorder needs a probability", field=_f(field, "probability"))
    out = {"reorder": _prob(m["probability"], _f(field, "probability"), "probability"),
           "reorder_gap": 1}
    if "gap" in m:
        g = _int(m["gap"], _f(field, "gap"), "gap")
        if not 1 <= g <= ir.MAX_REORDER_GAP:
            raise SpecError(f"gap {g} must be 1..{ir.MAX_REORDER_GAP}", field=_f(field, "gap"))
        out["reorder_gap"] = g
    return out


def fields(spec: Mapping[str, Any], pre: str = "") -> dict[str, Any]:
    """The LinkParams fields that the impairment keys of ``spec`` (:data:`KEYS`, values
    not None) set; ``pre`` prefixes error fields."""
    out: dict[str, Any] = {}
    for k in KEYS:
        v = spec.get(k)
        if v is None:
            continue
        f = _f(pre, k)
        if k == "jitter":
            out.update(jitter(v, f))
        elif k in ("duplicate", "corrupt"):
            out[k] = _prob(v, f, k)
        elif k == "reorder":
            out.update(reorder(v, f))
        else:
            n = _int(v, f, k)
            lo = 0 if k == "cellsize" else -ir.MAX_FRAMING_BYTES
            if not lo <= n <= ir.MAX_FRAMING_BYTES:
                raise SpecError(f"{k} {n} must be {lo}..{ir.MAX_FRAMING_BYTES} bytes",
                                field=f)
            out[k] = n
    return out


VERBS = ("jitter", "duplicate", "corrupt", "reorder", "overhead", "cellsize", "cell_overhead")
# netem's names of loss models on an event's words (``loss gemodel 1% 30%``)
LOSS_WORDS = ("gemodel", "gilbert-elliott", "state", "4-state", "random", "bernoulli")


def is_verb(action: str, words: list[str]) -> bool:
    """Whether an event's action and words are an impairment (``jitter 5ms normal``,
    ``loss gemodel 1% 30%``) rather than one of the classic link events."""
    return action in VERBS or (action in ("loss", "plr") and bool(words)
                               and words[0].lower() in LOSS_WORDS)


def from_words(action: str, words: list[str], field: str = "") -> dict[str, Any]:
    """An impairment event's words (docs/impairments.md, "At run time") as the IR fields
    it changes; a loss model as a mapping (events carry plain values)."""
    f = field or action

    def need(n: int, what: str) -> None:
        if len(words) < n:
            raise SpecError(f"{action}: needs {what}", field=f)
    if action == "jitter":
        need(1, "a jitter (5ms)")
        out: dict[str, Any] = {"jitter_s": units.parse_delay(words[0], field=f, what="jitter")}
        for w in words[1:]:
            if w.lower() in ir.JITTER_DISTS:
                out["jitter_dist"] = w.lower()
            elif w.lower() == "reorder":
                out["jitter_reorder"] = True
            else:
                out["jitter_correlation"] = _prob(w, f, "correlation")
        return out
    if action in ("duplicate", "corrupt"):
        if len(words) != 1:
            raise SpecError(f"{action}: needs one probability (1%)", field=f)
        return {action: _prob(words[0], f, action)}
    if action == "reorder":
        need(1, "a probability (25%) and optionally gap N")
        rest = [w for w in words[1:] if w.lower() != "gap"]
        if len(rest) > 1:
            raise SpecError("reorder: takes PROBABILITY [gap N]", field=f)
        return reorder({"probability": words[0], **({"gap": rest[0]} if rest else {})}, f)
    if action in ("overhead", "cellsize", "cell_overhead"):
        if len(words) != 1:
            raise SpecError(f"{action}: needs one number of bytes", field=f)
        return fields({action: words[0]}, field)
    model, vals = words[0].lower(), words[1:]
    if model in ("random", "bernoulli"):
        if not 1 <= len(vals) <= 2:
            raise SpecError("loss random: takes P [CORRELATION]", field=f)
        got = loss({"p": vals[0], **({"correlation": vals[1]} if len(vals) > 1 else {})}, f)
    elif model in ("gemodel", "gilbert-elliott"):
        if not 1 <= len(vals) <= 4:
            raise SpecError(f"loss {model}: takes P [R [H [K]]]", field=f)
        ps = [_prob(v, f, n) for v, n in zip(vals, GE_KEYS, strict=False)]
        ge = dict(zip(GE_KEYS, ps, strict=False))
        if model == "gemodel":     # netem's words: p r 1-h 1-k, r defaulting to 1-p
            ge.setdefault("r", round(1.0 - ge["p"], 12))
            ge["h"] = round(1.0 - ge["h"], 12) if "h" in ge else 0.0
            ge["k"] = round(1.0 - ge["k"], 12) if "k" in ge else 1.0
        got = loss({"model": "gilbert-elliott", **ge}, f)
    else:
        if not 1 <= len(vals) <= 5:
            raise SpecError(f"loss {model}: takes P13 [P31 [P32 [P23 [P14]]]]", field=f)
        got = loss({"model": "4-state", **dict(zip(STATE_KEYS, vals, strict=False))}, f)
    lm = got["loss_model"]
    if lm is not None:
        from dataclasses import asdict
        got["loss_model"] = asdict(lm)
    return got


def is_impaired(p: ir.LinkParams) -> bool:
    """Whether ``p`` has any impairment beyond bandwidth, delay, plain loss and queue."""
    base = ir.LinkParams()
    return any(getattr(p, f) != getattr(base, f) for f in ir.IMPAIR_FIELDS)


def describe(p: ir.LinkParams) -> list[str]:
    """``p``'s impairments in the front ends' words (for show)."""
    out = []
    if p.jitter_s:
        j = f"jitter {p.jitter_s * 1e3:g}ms"
        if p.jitter_dist != "uniform":
            j += f" {p.jitter_dist}"
        if p.jitter_correlation:
            j += f" correlation {p.jitter_correlation:g}"
        if p.jitter_reorder:
            j += " reorder"
        out.append(j)
    if p.loss_model is not None:
        out.append(f"loss {p.loss_model.model} " + " ".join(
            f"{k}={v:g}" for k, v in p.loss_model.values().items()))
    elif p.loss_correlation:
        out.append(f"loss correlation {p.loss_correlation:g}")
    for f in ("duplicate", "corrupt"):
        if getattr(p, f):
            out.append(f"{f} {getattr(p, f):g}")
    if p.reorder:
        out.append(f"reorder {p.reorder:g}" + (f" gap {p.reorder_gap}"
                                               if p.reorder_gap != 1 else ""))
    for f in ("overhead", "cellsize", "cell_overhead"):
        if getattr(p, f):
            out.append(f"{f} {getattr(p, f)}")
    if p.trace is not None:
        t = p.trace
        out.append(f"trace {t.file} ({len(t.ms)} opportunities, {t.mean_bps() / 1e6:.3g} "
                   f"Mbit/s mean" + (f", from {t.offset_s:g} s" if t.offset_s else "")
                   + ("" if t.loop else ", once") + ")")
    if p.schedule is not None:
        sc = p.schedule
        cols = [c for c in ("delay", "bandwidth", "loss")
                if getattr(sc, "delay_s" if c == "delay" else
                           "bandwidth_bps" if c == "bandwidth" else c) is not None]
        out.append(f"schedule {sc.file} ({len(sc.times_s)} points of {', '.join(cols)}, "
                   f"{'linear' if sc.linear else 'step'}{', looped' if sc.loop else ''})")
    return out
