"""The result of attribution: `Times` per operation, `ProcessBreakdown`, `Breakdown`.

Plain dataclasses of integer nanoseconds and counts; `to_dict()` gives JSON-ready values
(renderers and `rlsys report` read those). `rlsys.profiler.breakdown` fills them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from rlsys.trace import Category

NO_OPERATION = "(no operation)"
"""The pseudo-operation that owns traced time outside every operation."""

RESOURCES = ("cpu_only", "gpu_only", "cpu_gpu", "idle")
"""Wall time split by what was busy: a CPU thread, the GPU, both, or neither."""

CPU_CATEGORIES = tuple(c for c in Category if c not in (Category.OPERATION, Category.GPU_KERNEL))
"""The categories of thread time (every category but operations and GPU activity)."""


def _zeros(keys: Collection[Any]) -> dict[str, int]:
    return {str(key): 0 for key in keys}


@dataclass
class Times:
    """Where the time of one operation, or of a whole process, went. All times are integer ns.

    - `wall_ns`: wall time owned by it (the main thread's innermost operation owns each
      instant); over the operations of a process these sum to the traced total.
    - `resource_ns`: `wall_ns` split by `RESOURCES`; the four sum to `wall_ns`.
    - `gpu_ns`: part of `wall_ns` with any GPU activity (gpu_only + cpu_gpu).
    - `cpu_ns`: thread time per CPU category, summed over threads (thread-ns, like CPU time
      versus wall time: a single-threaded process has sum(cpu_ns) == wall_ns).
    - `events`: events per category that started while this operation was innermost.
    - `cost_events`: like `events`, but where each event's recording cost fell, which
      calibration subtracts (`rlsys.profiler.calibrate`): an operation's own bookkeeping runs
      just outside its interval, so it counts in the operation around it; other events count
      where they start, as in `events`.
    - `transitions`: (from, to) category changes along a thread, e.g. ("python", "backend"),
      counted in the operation the thread is in right after the change.
    - `calls`: how many times this operation ran (0 for `NO_OPERATION`; summed in totals).
    """

    calls: int = 0
    wall_ns: int = 0
    gpu_ns: int = 0
    cpu_ns: dict[str, int] = field(default_factory=lambda: _zeros(CPU_CATEGORIES))
    resource_ns: dict[str, int] = field(default_factory=lambda: _zeros(RESOURCES))
    events: dict[str, int] = field(default_factory=lambda: _zeros(Category))
    cost_events: dict[str, int] = field(default_factory=lambda: _zeros(Category))
    transitions: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, other: Times) -> None:
        """Add `other` into this one (used for process totals and the combined total)."""
        self.calls += other.calls
        self.wall_ns += other.wall_ns
        self.gpu_ns += other.gpu_ns
        for mine, theirs in [
            (self.cpu_ns, other.cpu_ns),
            (self.resource_ns, other.resource_ns),
            (self.events, other.events),
            (self.cost_events, other.cost_events),
            (self.transitions, other.transitions),
        ]:
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "wall_ns": self.wall_ns,
            "gpu_ns": self.gpu_ns,
            "cpu_ns": dict(self.cpu_ns),
            "resource_ns": dict(self.resource_ns),
            "events": dict(self.events),
            "cost_events": dict(self.cost_events),
            "transitions": {f"{a}->{b}": n for (a, b), n in sorted(self.transitions.items())},
        }


def sum_times(parts: Collection[Times]) -> Times:
    total = Times()
    for part in parts:
        total.add(part)
    return total


@dataclass
class ProcessBreakdown:
    """The attribution of one process, from its first event to its last (any thread, GPU)."""

    pid: int
    parent_pid: int | None  # None when the session has no ProcessInfo for this pid
    command: str | None
    start_ns: int
    end_ns: int
    main_tid: int | None  # the thread whose operations own wall time (it may have no events)
    threads: tuple[int, ...]
    operations: dict[str, Times]  # by operation name, in order of first appearance
    phases: dict[str, int]  # phase name -> wall time inside it (phases never own time)
    total: Times  # the sum of `operations`

    @property
    def total_ns(self) -> int:
        """The traced total: wall time from the first to the last event of the process."""
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "parent_pid": self.parent_pid,
            "command": self.command,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "total_ns": self.total_ns,
            "main_tid": self.main_tid,
            "threads": list(self.threads),
            "operations": {name: t.to_dict() for name, t in self.operations.items()},
            "phases": dict(self.phases),
            "total": self.total.to_dict(),
        }


@dataclass
class Breakdown:
    """One `ProcessBreakdown` per process, plus their sums (per operation name and overall)."""

    processes: dict[int, ProcessBreakdown]
    operations: dict[str, Times]  # by operation name, summed over processes
    total: Times  # summed over processes: process-ns, not wall time, when processes overlap
    complete: bool = True  # False when some process died before closing its trace

    @property
    def total_ns(self) -> int:
        """Sum of the traced totals of all processes."""
        return sum(p.total_ns for p in self.processes.values())

    @classmethod
    def combine(cls, processes: Collection[ProcessBreakdown], complete: bool = True) -> Breakdown:
        operations: dict[str, Times] = {}
        for process in processes:
            for name, times in process.operations.items():
                operations.setdefault(name, Times()).add(times)
        return cls(
            processes={p.pid: p for p in processes},
            operations=operations,
            total=sum_times([p.total for p in processes]),
            complete=complete,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "total_ns": self.total_ns,
            "total": self.total.to_dict(),
            "operations": {name: t.to_dict() for name, t in self.operations.items()},
            "processes": {str(pid): p.to_dict() for pid, p in self.processes.items()},
        }
