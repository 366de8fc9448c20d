"""Front ends: ns-2 Tcl scripts, YAML files and Python code, each producing the IR.

:func:`load` picks the front end from the file's extension:

* ``.tcl`` / ``.ns``: an Emulab-style ns-2 script (:mod:`wanlab.frontends.ns`);
* ``.yaml`` / ``.yml``: wanlab's YAML form (:mod:`wanlab.frontends.yaml_spec`,
  docs/yaml.md, schema/experiment.schema.json);
* ``.py``: Python code, run as a module; it must define a module-level
  ``experiment`` that is an :class:`~wanlab.model.ir.Experiment` or an
  :class:`~wanlab.frontends.builder.ExperimentBuilder` (:mod:`wanlab.frontends.builder`),
  or a function returning one, whose keyword arguments are template parameters;
* ``zoo:NAME``: a Topology Zoo, SNDlib or CAIDA map (:mod:`wanlab.frontends.topology`).

Template parameters (Emulab's experiment templates): ns ``define-template-parameter NAME
DEFAULT "description"``, YAML ``parameters:`` with ``${NAME}`` references, Python keyword
arguments or :meth:`~wanlab.frontends.builder.ExperimentBuilder.parameter`. Each binds its
default at parse time unless ``params`` gives a value; they are recorded in the IR
(``Experiment.parameters``) and exported into every node's environment.

Every user mistake is a :class:`~wanlab.errors.SpecError` naming the file and
line or field; the result is always validated with :func:`wanlab.model.ir.validate`.
"""

from __future__ import annotations

import os
from pathlib import Path

from wanlab.errors import SpecError
from wanlab.model.ir import Experiment

SUPPORTED = {".tcl": "ns", ".ns": "ns", ".yaml": "yaml", ".yml": "yaml", ".py": "python"}


def load(path: str | os.PathLike[str], params: dict[str, str] | None = None) -> Experiment:
    """Read an experiment description of any supported format; ``params`` are template
    parameter values (``-p NAME=VALUE``) overriding the defaults the description binds."""
    if isinstance(path, str) and path.startswith("zoo:"):
        from wanlab.frontends import topology
        return topology.load_zoo(path, params=params)
    ext = Path(path).suffix.lower()
    kind = SUPPORTED.get(ext)
    if kind == "ns":
        from wanlab.frontends import ns
        return ns.parse(path, params=params)
    if kind == "yaml":
        from wanlab.frontends import yaml_spec
        return yaml_spec.load_file(path, params=params)
    if kind == "python":
        from wanlab.frontends import pyspec
        return pyspec.load(path, params=params)
    raise SpecError(f"unknown experiment format {ext or '(no extension)'!r}; supported "
                    f"formats are .tcl/.ns (ns-2), .yaml/.yml (YAML) and .py (Python)",
                    file=str(path))


__all__ = ["load", "SUPPORTED"]
