"""One boundary for live experiments: :func:`of` says where an experiment lives, and the
:class:`~wanlab.site.base.Site` it returns answers every verb (create, swapin, swapout,
modify, terminate, cleanup, show, exec and shell, routes, tevc, stats, events, flows,
captures) with one meaning, whether the experiment runs on this host
(:class:`~wanlab.site.local.LocalSite`, over :class:`wanlab.lifecycle.Lab`) or on the
current cluster (:class:`~wanlab.site.cluster.ClusterSite`, over :mod:`wanlab.cluster`).

The front doors (the CLI, the Python API, the portal, the facility) call only this
package: none of them asks "cluster or local" itself.
"""

from __future__ import annotations

from collections.abc import Callable

from wanlab.lifecycle import Lab
from wanlab.site.base import Site
from wanlab.site.cluster import ClusterSite
from wanlab.site.local import LocalSite
from wanlab.store.db import ExperimentRow, Store

__all__ = ["Site", "LocalSite", "ClusterSite", "of", "for_new", "listing"]


def is_cluster(lab: Lab, name: str) -> bool:
    """Whether experiment ``name`` is placed on the cluster (a look at the store: its
    parts are recorded before they are made; no Ray)."""
    return placed(lab.store, name)


def placed(store: Store, name: str) -> bool:
    """:func:`is_cluster` for a bare store (the portal's live view keeps one open)."""
    from wanlab.cluster.experiment import is_cluster_experiment
    return is_cluster_experiment(store, name)


def of(lab: Lab, name: str, say: Callable[[str], None] | None = None) -> Site:
    """The site of existing experiment ``name`` (``say``: the cluster's progress
    messages; default stdout)."""
    if is_cluster(lab, name):
        return ClusterSite(lab, say=say or print)
    return LocalSite(lab)


def for_new(lab: Lab, cluster: bool = False, say: Callable[[str], None] | None = None) -> Site:
    """Where a new experiment goes: the current cluster (``cluster``), else this host."""
    return ClusterSite(lab, say=say or print) if cluster else LocalSite(lab)


def listing(lab: Lab) -> list[ExperimentRow]:
    """Every experiment, each active one health-checked by its own site first (this
    host's: engine, scheduler, namespaces; a cluster's: every machine asked about its
    part); a broken one is listed degraded, with the reason."""
    rows = lab.store.list()
    return [of(lab, r.name).checked(r) for r in rows]
