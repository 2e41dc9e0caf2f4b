"""Annotation overhead: what does `with rlsys.operation(name):` cost per call?

The annotations are meant to stay in users' code, in the inner loop, also when nothing
records; this case checks that claim with numbers. Each system times `batches` batches of
`calls` calls with `time.perf_counter_ns` and reports the median batch as `ns_per_call`,
loop overhead included (what a user's loop pays), and `ns_per_call_minus_loop`, with an
empty loop timed in the same process, batch by batch, subtracted (the annotation alone).

The calls are written exactly as a user would (`rlsys.operation("x")`: a module attribute
lookup, a call and a `with`), not with pre-bound local names that would flatter the numbers.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import rlsys
from rlsys.bench import Case, System, child_main, report

BATCHES = 7


def _empty(n: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - start


def _operation(n: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(n):
        with rlsys.operation("x"):
            pass
    return time.perf_counter_ns() - start


def _progress(n: int) -> int:
    start = time.perf_counter_ns()
    for i in range(n):
        rlsys.progress(i, n)
    return time.perf_counter_ns() - start


LOOPS = {"empty": _empty, "operation": _operation, "progress": _progress}


def run(*, quick: bool, seed: int, loop: str, record: bool, calls: tuple[int, int]) -> None:
    del seed  # nothing random here
    n = calls[1] if quick else calls[0]
    timed = LOOPS[loop]
    tmp = tempfile.mkdtemp(prefix="rlsys-annotation-overhead-") if record else None
    try:
        if tmp is not None:
            rlsys.start_recording(tmp)
        timed(n // 10)  # warm up
        per_call, per_call_minus_loop, total_ns = [], [], 0
        for _ in range(BATCHES):
            empty_ns = _empty(n)
            ns = timed(n)
            total_ns += ns
            per_call.append(ns / n)
            per_call_minus_loop.append((ns - empty_ns) / n)
        if tmp is not None:
            rlsys.stop_recording()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report(
        env_steps=BATCHES * n,
        seconds=total_ns / 1e9,
        ns_per_call=statistics.median(per_call),
        ns_per_call_minus_loop=statistics.median(per_call_minus_loop),
    )


CASE = Case(
    name="annotation_overhead",
    description=(
        "Cost per call of `with rlsys.operation(name): pass` with no recorder, while "
        "recording, and of `rlsys.progress(i, n)` with no recorder, against an empty loop."
    ),
    baseline="empty-loop",
    unit="calls",
    systems=[
        System(
            "empty-loop",
            run=run,
            params={"loop": "empty", "record": False, "calls": (2_000_000, 200_000)},
            description="`for _ in range(n): pass`",
        ),
        System(
            "operation-disabled",
            run=run,
            params={"loop": "operation", "record": False, "calls": (500_000, 50_000)},
            description="`with rlsys.operation('x'): pass`, nothing recording",
        ),
        System(
            "operation-recording",
            run=run,
            params={"loop": "operation", "record": True, "calls": (20_000, 2_000)},
            description="the same while rlsys.start_recording(tmpdir) is active",
        ),
        System(
            "progress-disabled",
            run=run,
            params={"loop": "progress", "record": False, "calls": (1_000_000, 100_000)},
            description="`rlsys.progress(i, n)`, nothing recording",
        ),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
