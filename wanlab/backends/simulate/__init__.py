"""Simulation back end: whole experiments run inside the engine in virtual time
(``wanlab run --simulate``, ``wanlab compare``).

* :mod:`scenario` — an experiment's topology and timeline as one virtual-time scenario.
* :mod:`runner` — runs a scenario with ``wanlab-engine simulate`` and writes the results.

``wanlab compare`` (the same spec emulated and simulated) is run by the life cycle, which
has both back ends; :mod:`wanlab.report.compare` puts the results side by side.

Simulated *nodes* (a node kind, usable in live experiments too) are planned in
:mod:`wanlab.plan.sim_nodes` and :mod:`wanlab.plan.sim_flows`.
"""
