"""wanlab: a network experimentation facility for one Linux machine.

An experiment (ns-2 Tcl, YAML or Python, :mod:`wanlab.frontends`) becomes an immutable
IR (:mod:`wanlab.model.ir`), is stored (:mod:`wanlab.store`), planned (:mod:`wanlab.plan`:
names, addresses, routes), and either emulated (:mod:`wanlab.backends.emulate`:
namespaces, TAPs wired into ``wanlab-engine``, built in named stages) or simulated
(:mod:`wanlab.backends.simulate`); :mod:`wanlab.run` plays its timeline. The public
Python API is :mod:`wanlab.api`. Packages import only downward (docs/architecture.md,
"Layout and layers").
"""

__version__ = "0.1.0"
