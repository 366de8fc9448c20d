"""wanlab: a network experimentation facility for one Linux machine.

An experiment (ns-2 Tcl, YAML or Python) becomes an immutable IR
(:mod:`wanlab.model.ir`), is stored (:mod:`wanlab.store`), planned
(:mod:`wanlab.plan`: names, addresses, routes) and realized
(:mod:`wanlab.backends.emulate`: namespaces, TAPs wired into ``wanlab-engine``).
The public Python API is :mod:`wanlab.api`.
"""

__version__ = "0.1.0"
