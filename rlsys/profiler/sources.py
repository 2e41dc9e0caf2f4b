"""The profiler's instrumentation sources, and the switch that turns each on or off.

A *source* is one kind of instrumentation, with its own cost per recorded event:

    annotations  operations: automatic ones (`rlsys.profiler.hooks`) and the user's own
                 `rlsys.operation(...)`; events of category OPERATION
    ccalls       C-call interception: intervals inside native code, SIMULATOR (environment
                 step/reset) and BACKEND (torch ops, jitted JAX calls); `collectors/`
    gpu          CUDA API and GPU kernel intervals; not collected yet (needs a GPU)

`rlsys profile` turns all of them on. `rlsys profile --calibrate` runs the command with
subsets (`rlsys.profiler.calibrate`) by setting RLSYS_PROFILE_SOURCES in its environment,
e.g. "annotations" alone; the bootstrap reads it once at startup (`enabled()`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from rlsys.trace import Category

SOURCES_ENV = "RLSYS_PROFILE_SOURCES"
TEST_EVENT_COST_ENV = "RLSYS_PROFILE_TEST_EVENT_COST_NS"

ANNOTATIONS = "annotations"
CCALLS = "ccalls"
GPU = "gpu"
SOURCES = (ANNOTATIONS, CCALLS, GPU)

SOURCE_OF: dict[Category, str] = {
    Category.OPERATION: ANNOTATIONS,
    Category.SIMULATOR: CCALLS,
    Category.BACKEND: CCALLS,
    Category.CUDA_API: GPU,
    Category.GPU_KERNEL: GPU,
}
"""The source that records each category of event (categories not listed cost nothing)."""


def parse(text: str) -> frozenset[str]:
    """ "annotations,ccalls" -> the set; ValueError (one line) for an unknown name."""
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(names - set(SOURCES))
    if unknown:
        raise ValueError(
            f"{SOURCES_ENV}: unknown source {unknown[0]!r}; known: {', '.join(SOURCES)}"
        )
    return names


def enabled(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The sources this process records (all of them unless RLSYS_PROFILE_SOURCES says)."""
    environ = os.environ if environ is None else environ
    text = environ.get(SOURCES_ENV)
    return frozenset(SOURCES) if text is None else parse(text)


def environment(sources: Iterable[str]) -> dict[str, str]:
    """The environment variables that make a profiled command record only `sources`."""
    return {SOURCES_ENV: ",".join(sorted(parse(",".join(sources))))}


def install_test_event_cost(environ: Mapping[str, str] | None = None) -> None:
    """Test only: with RLSYS_PROFILE_TEST_EVENT_COST_NS=N, every event recorded through
    `Recorder.emit_raw` (all but torch's buffered BACKEND intervals) busy-waits N ns.

    The calibration test injects a known cost this way and checks that it is recovered. N=0
    installs the same wrapper without the wait: the test's baseline, so that the difference
    between N and 0 is the wait alone, not the wrapper's own call.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(TEST_EVENT_COST_ENV)
    if not text:
        return
    cost = int(text)
    from rlsys.trace.annotate import Recorder

    emit_raw = Recorder.emit_raw
    clock = time.perf_counter_ns

    def emit_raw_with_cost(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        until = clock() + cost
        while clock() < until:
            pass
        return emit_raw(self, *args, **kwargs)

    Recorder.emit_raw = emit_raw_with_cost  # type: ignore[method-assign]
