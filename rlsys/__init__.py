"""rlsys: fast deep-RL training that shows where its time goes.

The public API is re-exported here; everything else may change between releases.
"""

from rlsys.trace import (
    Category,
    Event,
    Session,
    operation,
    phase,
    progress,
    start_recording,
    stop_recording,
)

__version__ = "0.1.0"

__all__ = [
    "Category",
    "Event",
    "Session",
    "__version__",
    "operation",
    "phase",
    "progress",
    "start_recording",
    "stop_recording",
]
