"""The Python side of the engine boundary (docs/engine-protocol.md).

* :mod:`wanlab.engine.binary`: which ``wanlab-engine`` to run;
* :mod:`wanlab.engine.protocol`: one typed request per command;
* :mod:`wanlab.engine.client`: the one JSON-lines client (the event scheduler's socket
  speaks the same framing and uses its transport);
* :mod:`wanlab.engine.encode`: the one encoder from the IR, the plan and typed events to
  requests, used by swap-in, modify, the scheduler (timeline and tevc), the simulation
  scenario and the API.

Both back ends (:mod:`wanlab.backends.emulate`, :mod:`wanlab.backends.simulate`) build on
this package; it knows nothing of them. Starting the engine process stays with the
emulation back end (:mod:`wanlab.backends.emulate.engine`).
"""
