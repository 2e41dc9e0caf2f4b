"""The event model shared by the compiler, the runtime and the profiler.

Imports nothing else of rlsys (checked by the import-layering contract in .importlinter).
"""

from rlsys.trace.annotate import (
    AnnotationNestingError,
    Recorder,
    active_recorder,
    operation,
    phase,
    progress,
    record_operation,
    start_recording,
    stop_recording,
)
from rlsys.trace.chrome import chrome_trace, write_chrome_trace
from rlsys.trace.events import (
    Category,
    Event,
    ProcessInfo,
    Session,
    SessionWriter,
    TraceFormatError,
    clock_ns,
)

__all__ = [
    "AnnotationNestingError",
    "Category",
    "Event",
    "ProcessInfo",
    "Recorder",
    "Session",
    "SessionWriter",
    "TraceFormatError",
    "active_recorder",
    "chrome_trace",
    "clock_ns",
    "operation",
    "phase",
    "progress",
    "record_operation",
    "start_recording",
    "stop_recording",
    "write_chrome_trace",
]
