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
