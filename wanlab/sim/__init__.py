"""Simulation inside the engine: simulated nodes and traffic agents, and whole
experiments run in virtual time (``wanlab run --simulate``, ``wanlab compare``).

* :mod:`nodes` — simulated nodes of a plan as engine hosts and routers.
* :mod:`flows` — ns-2 agents and applications as engine traffic agents.
* :mod:`scenario` — an experiment's topology and timeline as one virtual-time scenario.
* :mod:`runner` — runs a scenario with ``wanlab-engine simulate`` and writes the results.
* :mod:`compare` — the same spec emulated and simulated, side by side.
"""
