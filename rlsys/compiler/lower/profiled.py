"""Compiled calls as `rlsys profile` sees them: Backend time, and an operation if named.

While a recorder is active (`rlsys profile`, or `rlsys.trace.start_recording`), a call waits
for its results (JAX runs asynchronously; the wait is part of the work) and records a
BACKEND interval on the calling thread, plus the operation `name` (e.g. "inference" for the
act stage's segments, "backpropagation" for the learn stage's). Otherwise it is the bare
call, after one attribute test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from rlsys.trace import Category, active_recorder, clock_ns, record_operation

_BACKEND = str(Category.BACKEND)


def profiled_call(name: str | None, function: Callable[..., Any], *args: Any) -> Any:
    recorder = active_recorder()
    if recorder is None:
        return function(*args)
    start = clock_ns()
    result = jax.block_until_ready(function(*args))
    end = clock_ns()
    recorder.emit_raw("compiled call", _BACKEND, start, end, recorder.thread_state().tid)
    if name is not None:
        record_operation(name, start, end)
    return result
