"""Hand-made profile summaries for the report tests: exact timelines through the real pipeline.

A timeline is a list of (operation, start_s, end_s, category or None); a category adds one
event of that category spanning the operation, so its time is attributed to that category.
"""

from __future__ import annotations

from typing import Any

from rlsys.profiler import breakdown
from rlsys.profiler.summary import build_summary
from rlsys.trace import Category, Event, ProcessInfo, Session

PID = 100
NS = 1_000_000_000


def process() -> ProcessInfo:
    return ProcessInfo(PID, 1, "python train.py", ("train.py",), "box", "3.11", None, None,
                       1.7e9, 0)  # fmt: skip


def timeline_events(timeline: list[tuple[str, float, float, Category | None]]) -> list[Event]:
    events = []
    for name, start, end, category in timeline:
        start_ns, end_ns = int(start * NS), int(end * NS)
        events.append(Event(name, Category.OPERATION, start_ns, end_ns, PID, PID))
        if category is not None:
            events.append(Event(f"{name} work", category, start_ns, end_ns, PID, PID))
    return events


def summary_of(
    events: list[Event],
    *,
    complete: bool = True,
    stopped_by: str | None = None,
    command: tuple[str, ...] = ("python", "train.py"),
) -> dict[str, Any]:
    session = Session((process(),), sorted(events, key=lambda e: (e.start_ns, -e.end_ns)),
                      complete=complete)  # fmt: skip
    return build_summary(breakdown(session), command=list(command), exit_code=0,
                         stopped_by=stopped_by, wall_seconds=1.0)  # fmt: skip


def make_summary(timeline, **options: Any) -> dict[str, Any]:
    return summary_of(timeline_events(timeline), **options)


SIMULATION_HEAVY = [
    ("simulation", 0.0, 0.78, Category.SIMULATOR),
    ("inference", 0.78, 0.90, None),
    ("backpropagation", 0.90, 1.0, Category.BACKEND),
]


def gpu_summary() -> dict[str, Any]:
    """A run whose GPU ran 30 ms of every 100 ms while NVML read 90%."""
    from rlsys.profiler.collectors.nvml import Sample
    from rlsys.profiler.gpu import gpu_section

    ms = 1_000_000
    events = [Event("train", Category.OPERATION, 0, 1000 * ms, PID, PID)]
    events += [Event("k", Category.GPU_KERNEL, w * 100 * ms, w * 100 * ms + 30 * ms, PID, 1,
                     device="cuda:0") for w in range(10)]  # fmt: skip
    samples = [Sample((w + 1) * 100 * ms, 0, 90.0, 0.0) for w in range(10)]
    summary = summary_of(events)
    summary["gpu"] = gpu_section(Session((process(),), events), samples, period_s=0.1)
    return summary
