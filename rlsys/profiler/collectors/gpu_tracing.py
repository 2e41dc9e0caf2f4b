"""Start the frameworks' GPU profilers inside a profiled process, and record what they saw.

`rlsys profile` sets `GPU_ENV` for its command only when NVML finds a GPU; the bootstrap then
calls `install()`, which does nothing without it. With it, the first import of

    torch   starts torch.profiler with CUDA activity only (kernels, memcpy/memset, CUDA API
            calls), if torch.cuda.is_available()
    jax     starts jax.profiler.start_trace into a temporary folder (Python tracer off)

and at exit (also after an exception or Ctrl-C) the profiler is stopped, its trace converted
(`kineto`, `jax_profiler`) and the events emitted into this process's recording, before the
recorder closes (atexit runs handlers in reverse order of registration). A process killed
by a signal loses its GPU events; its CPU events stay, as everywhere.

Why a finder of our own rather than `rlsys.profiler.hooks`: hooks patches classes for
operations; this starts profilers, on a GPU only, and must not depend on hooks' patch table.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from rlsys.profiler.collectors import jax_profiler, kineto
from rlsys.profiler.collectors.clock import ClockReference
from rlsys.trace import Event, active_recorder, clock_ns
from rlsys.trace.events import main_thread_native_id

GPU_ENV = "RLSYS_GPU_TRACE"
"""Set to "1" by `rlsys profile` when NVML found a GPU: only then are profilers started."""


def _warn(what: str, err: BaseException) -> None:
    print(f"rlsys profile: no GPU trace from {what} ({type(err).__name__}: {err})",
          file=sys.stderr)  # fmt: skip


def emit(events: list[Event], thread_names: dict[tuple[int, int], str]) -> None:
    """Add converted events to this process's recording (nothing if none is active)."""
    recorder = active_recorder()
    if recorder is None:
        return
    recorder.flush()
    for (pid, tid), name in sorted(thread_names.items()):
        recorder.writer.write_thread(pid, tid, name)
    for event in events:
        recorder.emit(event)
    recorder.flush()


def _start_torch(torch: ModuleType) -> None:
    if not torch.cuda.is_available():
        return
    from torch.profiler import ProfilerActivity, profile

    folder = tempfile.mkdtemp(prefix="rlsys-kineto-")
    clock = ClockReference.now()
    profiler = profile(activities=[ProfilerActivity.CUDA])
    profiler.start()
    atexit.register(_finish_torch, profiler, clock, Path(folder), kineto.thread_ids())


def _finish_torch(profiler: Any, clock: ClockReference, folder: Path, tids: dict[int, int]) -> None:
    try:
        profiler.stop()
        path = folder / f"kineto-{os.getpid()}.json"
        profiler.export_chrome_trace(str(path))
        tids = {**tids, **kineto.thread_ids()}  # and the threads started since
        emit(*kineto.kineto_events(kineto.load_trace(path), clock, os.getpid(), tids))
    except Exception as err:
        _warn("torch.profiler", err)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _thread_comm(tid: int) -> str:
    """The OS name of a thread (what the JAX trace calls it), "python" if unreadable."""
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip() or "python"
    except OSError:
        return "python"


def _start_jax(jax: ModuleType) -> None:
    import jax.profiler

    folder = tempfile.mkdtemp(prefix="rlsys-jax-")
    start_ns = clock_ns()
    options = None
    with contextlib.suppress(Exception):  # ProfileOptions is recent; the default traces Python
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
    if options is not None:
        jax.profiler.start_trace(folder, create_perfetto_trace=True, profiler_options=options)
    else:
        jax.profiler.start_trace(folder, create_perfetto_trace=True)
    with jax.profiler.TraceAnnotation(jax_profiler.ANCHOR):
        anchor_ns = clock_ns()
    atexit.register(_finish_jax, jax, Path(folder), anchor_ns, start_ns)


def _finish_jax(jax: ModuleType, folder: Path, anchor_ns: int, start_ns: int) -> None:
    try:
        jax.profiler.stop_trace()
        path = jax_profiler.find_trace(folder)
        if path is None:
            raise FileNotFoundError(f"no {jax_profiler.TRACE_FILE} under {folder}")
        main = main_thread_native_id() or os.getpid()  # right in a forked child too
        emit(*jax_profiler.jax_events(
            jax_profiler.load_trace(path), pid=os.getpid(), main_tid=main, anchor_ns=anchor_ns,
            fallback_start_ns=start_ns, main_thread_name=_thread_comm(main),
        ))  # fmt: skip
    except Exception as err:
        _warn("jax.profiler", err)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


STARTERS: dict[str, Callable[[ModuleType], None]] = {"torch": _start_torch, "jax": _start_jax}


def _start(name: str, module: ModuleType) -> None:
    try:
        STARTERS[name](module)
    except Exception as err:  # never break the profiled program over a GPU trace
        _warn(name, err)


def install(environ: dict[str, str] | None = None) -> bool:
    """Start GPU tracing when torch or jax is imported (now, if it is), where `GPU_ENV` is
    set; returns whether it was."""
    if (os.environ if environ is None else environ).get(GPU_ENV) != "1":
        return False
    from rlsys.profiler import hooks

    for name in STARTERS:
        hooks.after_import(name, functools.partial(_start, name))
    return True
