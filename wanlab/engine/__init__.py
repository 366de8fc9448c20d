"""The Python side of ``wanlab-engine``: where its binary is and what its requests mean.

* :mod:`binary` — which ``wanlab-engine`` to run.
* :mod:`link_events` — link and LAN events as engine requests (shared by the live
  scheduler and the simulation back end).

Both back ends (:mod:`wanlab.backends.emulate`, :mod:`wanlab.backends.simulate`) build on
this package; it knows nothing of them.
"""
