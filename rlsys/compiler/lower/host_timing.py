"""Operations inside a compiled call, timed by its host callbacks (for `rlsys profile`).

A program stepping a host (gymnasium) environment runs each iteration as one compiled call:
acting (policy forward, then the environment's step through an ordered host callback, T
times), then learning. The profiler cannot see inside XLA, but the host callbacks mark the
boundaries. While a recorder is active, `HostCallLog.timed` notes each callback's start and
end, and after the call (`HostCallLog.record`) the calling thread gets these operations:

    simulation       each host callback
    inference        from the call's start to the first callback, and between consecutive
                     callbacks of one iteration (the policy computing the next action)
    backpropagation  from an iteration's last callback to the next iteration's first one (or
                     the end of the call): returns, the loss, its gradient, the update

Each iteration makes the same number of callbacks (len(calls) // iterations). Approximate at
one place: the next iteration's first policy forward is counted as backpropagation. When
nothing records, a callback costs one attribute test more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from rlsys.trace import Category, active_recorder, clock_ns, record_operation

SIMULATION, INFERENCE, BACKPROPAGATION = "simulation", "inference", "backpropagation"


class HostCallLog:
    """The (start, end) times of one program's host callbacks during its latest call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def timed(self, host: Callable[..., Any]) -> Callable[..., Any]:
        """`host`, noting its times while a recorder is active."""
        calls = self.calls

        def call(*args: Any) -> Any:
            if active_recorder() is None:
                return host(*args)
            start = clock_ns()
            try:
                return host(*args)
            finally:
                calls.append((start, clock_ns()))

        return call

    def begin(self) -> int | None:
        """Before a call: its start time, or None when nothing records."""
        if active_recorder() is None:
            return None
        self.calls.clear()
        return clock_ns()

    def record(self, started: int | None, iterations: int, outputs: Any) -> None:
        """After a call begun at `started`: wait for `outputs`, record the operations."""
        if started is None:
            return
        jax.block_until_ready(outputs)
        ended = clock_ns()
        recorder = active_recorder()
        if recorder is not None:  # the calling thread was inside JAX all along: Backend
            tid = recorder.thread_state().tid
            recorder.emit_raw("compiled call", str(Category.BACKEND), started, ended, tid)
        for name, start, end in split(started, ended, sorted(self.calls), iterations):
            record_operation(name, start, end)


def split(
    start: int, end: int, calls: list[tuple[int, int]], iterations: int
) -> list[tuple[str, int, int]]:
    """The operations of a call [start, end) of `iterations` iterations (module docstring)."""
    per = len(calls) // iterations if iterations else 0
    if per == 0:
        return []  # no host callbacks: nothing marks the parts of the call
    parts = []
    cursor = start
    for k, (call_start, call_end) in enumerate(calls):
        first_of_iteration = k % per == 0
        gap = INFERENCE if k == 0 or not first_of_iteration else BACKPROPAGATION
        if call_start > cursor:
            parts.append((gap, cursor, call_start))
        parts.append((SIMULATION, call_start, call_end))
        cursor = call_end
    if end > cursor:
        parts.append((BACKPROPAGATION, cursor, end))
    return parts
