"""Back ends: what turns a plan into a running experiment.

* :mod:`wanlab.backends.emulate` — namespaces, TAPs wired into the engine, FRR and processes.
* :mod:`wanlab.backends.simulate` — the whole experiment in the engine, in virtual time.
"""
