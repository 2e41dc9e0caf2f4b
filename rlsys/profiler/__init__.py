"""The cross-stack profiler (after RL-Scope, arXiv 2102.04285): where an RL run's time goes.

`breakdown(session)` attributes the events of a recorded `rlsys.trace.Session` to
(process, operation, CPU category, CPU/GPU resource); `overlap` is the sweep-line that does
the work, usable on its own. Imports nothing of rlsys but `rlsys.trace`.
"""

from rlsys.profiler.breakdown import (
    CPU_PRECEDENCE,
    IDLE_CATEGORIES,
    UNCOVERED_CATEGORY,
    ProfileError,
    breakdown,
    resolve,
)
from rlsys.profiler.overlap import overlap, sweep, union_length
from rlsys.profiler.result import (
    NO_OPERATION,
    RESOURCES,
    Breakdown,
    ProcessBreakdown,
    Times,
)

__all__ = [
    "CPU_PRECEDENCE",
    "IDLE_CATEGORIES",
    "NO_OPERATION",
    "RESOURCES",
    "UNCOVERED_CATEGORY",
    "Breakdown",
    "ProcessBreakdown",
    "ProfileError",
    "Times",
    "breakdown",
    "overlap",
    "resolve",
    "sweep",
    "union_length",
]
