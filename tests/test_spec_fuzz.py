"""A spec fuzzer: random and mutated experiment descriptions in all three front ends.

For every case the front end must either return a valid Experiment (which then plans,
or fails planning with a SpecError) or raise a WanlabError with a message: never
another exception (a traceback for the user), never hang past ``LIMIT_S``, and never
leave a process or a file behind. Cases are generated from fixed seeds, so a failure
replays exactly (the assertion message carries the offending text). Parsing only,
except a handful of mutated valid specs that are swapped in and terminated (root).
"""

from __future__ import annotations

import json
import os
import random
import signal
import textwrap

import pytest
import yaml
from conftest import leftovers, needs_root

from wanlab.errors import WanlabError
from wanlab.frontends import load
from wanlab.model.ir import Experiment
from wanlab.plan.plan import make_plan

LIMIT_S = 20            # a parse that takes longer is a hang
N_TCL, N_YAML, N_PY, N_BUILDER = 120, 300, 60, 200

WEIRD = ["-5", "0", "1e300", "-1e300", "nan", "inf", "1e-300", "", "''", "{}", "[]", "\\",
         "\"", "$", "99999999999999999999999", "0x10", "Ω", "10Mbx", "-5Mb", "1.5.5",
         "a" * 300, "10ms", "5Mb", "0.5", "1", "{{", "]]", ";", "#", "\x00", "\t"]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def check(path: str, text: str) -> Experiment | None:
    """Load ``path``; a result or a WanlabError is fine, anything else fails the test."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        exp = load(path)
        make_plan(exp, "0000")
        return exp
    except WanlabError as e:
        assert str(e).strip(), f"empty error message for:\n{text[:2000]}"
        return None
    except Hang:
        pytest.fail(f"parse took more than {LIMIT_S} s for:\n{text[:2000]}")
    except Exception as e:  # noqa: BLE001 - the point of the fuzzer
        pytest.fail(f"{type(e).__name__}: {e} (not a WanlabError) for:\n{text[:2000]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- generators of valid specs ------------------------------------------------------------
def bw(r):
    return r.choice(["100Mb", "10Mb", "1.5Mb", "64kb", "1Gb", "0"])


def delay(r):
    return r.choice(["0ms", "1ms", "10ms", "25ms", "100ms"])


def tcl_spec(r: random.Random) -> str:
    n = r.randint(1, 6)
    lines = ["set ns [new Simulator]", "source tb_compat.tcl"]
    lines += [f"set n{i} [$ns node]" for i in range(n)]
    links = []
    for i in range(1, n):
        j = r.randrange(i)
        links.append(f"l{i}")
        lines.append(f"set l{i} [$ns duplex-link $n{i} $n{j} {bw(r)} {delay(r)} "
                     f"{r.choice(['DropTail', 'RED'])}]")
    if n >= 3 and r.random() < 0.5:
        members = " ".join(f"$n{i}" for i in r.sample(range(n), 3))
        lines.append(f'set lan0 [$ns make-lan "{members}" {bw(r)} {delay(r)}]')
    if links and r.random() < 0.6:
        lk = r.choice(links)
        lines.append(f"tb-set-link-loss ${lk} {r.choice(['0.01', '0', '0.5'])}")
        lines.append(f'$ns at {r.randint(0, 20)} "${lk} down"')
        lines.append(f'$ns at {r.randint(0, 20)}.5 "${lk} bandwidth {bw(r)}"')
    if r.random() < 0.3:
        lines.append(f'tb-set-node-startcmd $n0 "echo {r.randint(0, 9)}"')
    if r.random() < 0.3:
        lines.append(f"$ns rtproto {r.choice(['Static', 'Session'])}")
    lines.append("$ns run")
    return "\n".join(lines) + "\n"


def yaml_spec(r: random.Random) -> dict:
    n = r.randint(1, 6)
    nodes = [f"n{i}" for i in range(n)]
    links = [{"name": f"l{i}", "nodes": [f"n{i}", f"n{r.randrange(i)}"], "bandwidth": bw(r),
              "delay": delay(r)} for i in range(1, n)]
    d: dict = {"name": f"fz{r.randint(0, 999)}", "nodes": nodes, "links": links}
    if n >= 3 and r.random() < 0.5:
        d["lans"] = [{"name": "lan0", "nodes": r.sample(nodes, 3), "bandwidth": bw(r),
                      "delay": delay(r)}]
    if links and r.random() < 0.5:
        d["events"] = [{"at": r.randint(0, 30), "target": links[0]["name"],
                        "action": r.choice(["down", "up"])}]
    return d


def py_spec(r: random.Random) -> str:
    n = r.randint(1, 5)
    lines = ["from wanlab.frontends.builder import ExperimentBuilder",
             f'b = ExperimentBuilder("fz{r.randint(0, 99)}")']
    lines += [f'n{i} = b.node("n{i}")' for i in range(n)]
    lines += [f'b.link(n{i}, n{r.randrange(i)}, bandwidth="{bw(r)}", delay="{delay(r)}")'
              for i in range(1, n)]
    lines.append("experiment = b")
    return "\n".join(lines) + "\n"


# -- mutations -------------------------------------------------------------------------------
def mutate_text(r: random.Random, text: str) -> str:
    """One to three edits: replace, drop or duplicate a token or line, truncate, splice
    bytes."""
    for _ in range(r.randint(1, 3)):
        op = r.randrange(7)
        toks = text.split(" ")
        lines = text.splitlines(keepends=True)
        if op == 0 and toks:
            toks[r.randrange(len(toks))] = r.choice(WEIRD)
            text = " ".join(toks)
        elif op == 1 and len(toks) > 1:
            del toks[r.randrange(len(toks))]
            text = " ".join(toks)
        elif op == 2 and lines:
            i = r.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "".join(lines)
        elif op == 3 and lines:
            del lines[r.randrange(len(lines))]
            text = "".join(lines)
        elif op == 4:
            text = text[:r.randrange(len(text) + 1)]
        elif op == 5:
            i = r.randrange(len(text) + 1)
            text = text[:i] + "".join(chr(r.randrange(1, 0x250)) for _ in range(r.randint(1, 8))) \
                + text[i:]
        else:
            i = r.randrange(len(text) + 1)
            text = text[:i] + r.choice(WEIRD) + text[i:]
    return text


def mutate_value(r: random.Random, v):
    """Replace one leaf of a YAML document with something odd."""
    if isinstance(v, dict) and v:
        k = r.choice(list(v))
        v = dict(v)
        choice = r.randrange(4)
        if choice == 0:
            del v[k]
        elif choice == 1:
            v[k] = mutate_value(r, v[k])
        elif choice == 2:
            v[r.choice(["bogus", "ips", "queue", "loss", "at", "netmask", k + "x"])] = \
                r.choice([None, -1, 1e300, "x", [], {}, True])
        else:
            v[k] = r.choice([None, -1, 1e300, float("nan"), "Ω", [], {}, True, "a" * 200])
        return v
    if isinstance(v, list) and v:
        v = list(v)
        i = r.randrange(len(v))
        if r.random() < 0.3:
            del v[i]
        elif r.random() < 0.5:
            v.append(v[i])
        else:
            v[i] = mutate_value(r, v[i])
        return v
    return r.choice([None, -1, 0, 1e300, "nan", "10Mb", "-5ms", "Ω", [], {"a": 1}, "x" * 100])


# -- the cases -------------------------------------------------------------------------------
def test_fuzz_tcl(tmp_path):
    r = random.Random(17)
    for i in range(N_TCL):
        text = tcl_spec(r)
        if i % 4:
            text = mutate_text(r, text)
        p = tmp_path / f"c{i}.tcl"
        p.write_text(text)
        check(str(p), text)


def test_fuzz_yaml(tmp_path):
    r = random.Random(23)
    for i in range(N_YAML):
        doc = yaml_spec(r)
        for _ in range(i % 3):
            doc = mutate_value(r, doc)
        text = yaml.safe_dump(doc, allow_unicode=True) if i % 5 else \
            mutate_text(r, yaml.safe_dump(yaml_spec(r)))
        p = tmp_path / f"c{i}.yaml"
        p.write_text(text)
        check(str(p), text)


def test_fuzz_python_files(tmp_path):
    r = random.Random(29)
    for i in range(N_PY):
        text = py_spec(r)
        if i % 3:
            text = mutate_text(r, text)
        p = tmp_path / f"c{i}.py"
        p.write_text(text)
        check(str(p), text)


def test_fuzz_builder_calls():
    """The builder's methods with odd arguments: WanlabError or a valid Experiment."""
    from wanlab.frontends.builder import ExperimentBuilder
    r = random.Random(31)
    odd = [None, -1, 0, 1.5, 1e300, float("nan"), "", "Ω", "10Mb", "-5ms", "x" * 100, [], {},
           True, object()]
    for i in range(N_BUILDER):
        try:
            b = ExperimentBuilder(r.choice(["fz", "Ω", "", "a" * 40, "ok-name"]))
            nodes = [b.node(r.choice([f"n{k}", r.choice(odd)]) if r.random() < 0.2
                            else f"n{k}") for k in range(r.randint(1, 4))]
            for k in range(1, len(nodes)):
                kw = {r.choice(["bandwidth", "delay", "loss", "queue", "ip_a", "netmask"]):
                      r.choice(odd)} if r.random() < 0.7 else {}
                b.link(nodes[k], nodes[r.randrange(k)], **kw)
            if len(nodes) > 2 and r.random() < 0.3:
                b.lan(nodes[:3], bandwidth=r.choice(odd + ["100Mb"]))
            make_plan(b.build(), "0000")
        except WanlabError as e:
            assert str(e).strip()
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"case {i}: {type(e).__name__}: {e}")


def test_fuzz_left_nothing_behind(tmp_path):
    """Parsing makes no process and no file outside its own temp folder."""
    before = set(os.listdir(tmp_path))
    r = random.Random(37)
    for i in range(20):
        text = mutate_text(r, tcl_spec(r))
        p = tmp_path / f"c{i}.tcl"
        p.write_text(text)
        check(str(p), text)
    assert set(os.listdir(tmp_path)) - before == {f"c{i}.tcl" for i in range(20)}
    mine = str(tmp_path).encode()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    assert mine not in f.read(), f"process {d} outlived its parse"
            except (FileNotFoundError, ProcessLookupError):
                pass


@needs_root
def test_mutated_valid_specs_swap_in_and_leave_nothing(lab, tmp_path):
    """A handful of mutated specs that still parse: each swaps in (or fails with a
    WanlabError) and terminates with nothing left."""
    r = random.Random(41)
    done = 0
    for i in range(200):
        if done == 4:
            break
        text = mutate_text(r, tcl_spec(r))
        p = tmp_path / f"s{i}.tcl"
        p.write_text(text)
        exp = check(str(p), text)
        if exp is None or not exp.nodes or exp.rtproto != "static":
            continue        # (routing daemons would only add their convergence time)
        exp = exp.with_name(f"fz{i}")
        done += 1
        try:
            row = lab.create(exp)
        except WanlabError:
            continue
        lab.terminate(row.name)
        assert leftovers(row.short) == [], textwrap.shorten(text, 500)
    assert done == 4
    assert json.dumps([x.name for x in lab.list()]) == "[]"
