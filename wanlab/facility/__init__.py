"""The facility: what turns single experiments into a researcher's loop.

Emulab's experiment templates (Eide et al., NSDI '07), Netbed's batch experiments and
its idle swap, on one machine. Every module drives :class:`wanlab.lifecycle.Lab`:

* :mod:`~wanlab.facility.params`: ``-p NAME=VALUE`` and ``-p NAME=V1,V2`` lists, CSV rows;
* :mod:`~wanlab.facility.templates`: a template's versions (each change of its source is a
  new one) and the facts every run records (engine hash, kernel);
* :mod:`~wanlab.facility.sweep`: a sweep: the cartesian product (or CSV rows) of parameter
  values, each point repeated, emulated and/or simulated, into ``runs.csv`` and plots;
  ``--rerun RUNID`` reproduces one run;
* :mod:`~wanlab.facility.batch`: the batch queue (posted -> activating -> running ->
  terminating -> done/failed) and :mod:`~wanlab.facility.worker`, which runs one batch;
* :mod:`~wanlab.facility.idle`: per-experiment activity and the idle / max-duration swap;
* :mod:`~wanlab.facility.daemon`: the loop that starts batches as capacity allows and
  swaps idle experiments out (``wanlab batch daemon``, packaging/wanlab-batch.service);
* :mod:`~wanlab.facility.commands`: the CLI's subcommands (``sweep``, ``template``,
  ``batch``).

The records live in the store (:mod:`wanlab.store.facility`). See docs/facility.md.
"""
