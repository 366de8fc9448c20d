"""The names of an experiment's states, one set for every kind of experiment (this host's
and a cluster's): the life cycle, the cluster's controller, the facility and the portal
all compare against these, never against raw strings.

::

    new ──swapin──> activating ──> active ──swapout──> swapping-out ──> swapped
    active ──modify──> modifying ──> active;   active ──(health check)──> degraded
    any ──terminate──> terminating ──> (forgotten)
"""

from __future__ import annotations

NEW = "new"
ACTIVATING = "activating"
ACTIVE = "active"
MODIFYING = "modifying"
SWAPPING_OUT = "swapping-out"
SWAPPED = "swapped"
DEGRADED = "degraded"
TERMINATING = "terminating"

# states an operation passes through; a crash can leave an experiment in one (cleanup)
TRANSIENT = (ACTIVATING, SWAPPING_OUT, MODIFYING, TERMINATING)
# an experiment in one of these has something running (or being built) for it
RUNNING = (ACTIVATING, ACTIVE, MODIFYING, DEGRADED)
