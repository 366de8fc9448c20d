"""Swap-in and teardown of an emulated experiment.

Swap-in runs the named stages of :mod:`wanlab.backends.emulate.stages` over the whole
plan; a failed stage undoes what the run built. Teardown removes every resource the
store recorded for the experiment through the registry of resource kinds
(:mod:`wanlab.backends.emulate.resources`): exactly the recorded ones, in the registry's
order, skipping what is already gone.
"""

from __future__ import annotations

from collections.abc import Sequence

from wanlab.backends.emulate import resources, stages
from wanlab.backends.emulate.stages import Build, Progress, Stage
from wanlab.plan.plan import make_plan
from wanlab.plan.types import Plan
from wanlab.store.db import ExperimentRow, Store


def swap_in(store: Store, row: ExperimentRow, stage_list: Sequence[Stage] = stages.STAGES,
            progress: Progress | None = None) -> Plan:
    """Build every resource of ``row`` through ``stage_list``; on failure what was built is
    removed and the error raised."""
    say = progress or (lambda msg: None)
    plan = make_plan(row.ir, row.short)
    stages.run(stage_list, Build.everything(store, row, plan, say), f"swap-in of {row.name!r}")
    return plan


def teardown(store: Store, exp_id: int, progress: Progress | None = None) -> None:
    """Remove every recorded, not yet removed resource of the experiment."""
    resources.remove(store, exp_id, say=progress)
