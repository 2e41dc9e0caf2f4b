"""JAX profiler traces -> rlsys `Event`s of CUDA API calls and GPU work.

`jax.profiler.start_trace(dir, create_perfetto_trace=True)` ... `stop_trace()` writes
`dir/plugins/profile/<run>/perfetto_trace.json.gz`: {"traceEvents": [...]} in the chrome
format, where metadata events ("ph": "M") name processes ("/host:CPU", "/device:GPU:0") and
threads, and complete events ("ph": "X") have "ts" and "dur" in microseconds *relative to the
start of the profile*, with thread ids that are hashes, not OS ids. Hence:

- Clock: `start_trace` is followed by an anchor annotation (`ANCHOR`, a
  `jax.profiler.TraceAnnotation`) whose event-clock start we note; its "ts" in the trace
  fixes the offset. Without it, ts 0 is taken to be the moment given as `fallback_start_ns`.
- GPU: every complete event of a "/device:GPU:N" process on a thread named "Stream ..."
  (the kernels, memcpys and memsets as CUPTI saw them) becomes GPU_KERNEL on "cuda:N"; the
  device's other lines ("XLA Ops", "XLA Modules", ...) repeat the same time and are skipped,
  unless the device has no stream lines at all.
- CPU: events of host threads whose name is a CUDA call (cu*/cuda*) become CUDA_API. The
  thread named `main_thread_name` maps to `main_tid`; other host threads (XLA's launch
  threads) keep their hashed id, named after the trace's thread name.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

from rlsys.profiler.collectors.clock import us_to_ns
from rlsys.profiler.collectors.kineto import gpu_track
from rlsys.trace import Category, Event

ANCHOR = "rlsys.clock_anchor"
TRACE_FILE = "perfetto_trace.json.gz"

_DEVICE = re.compile(r"/device:GPU:(\d+)")
_CUDA_CALL = re.compile(r"^cu(da)?[A-Z]")


def find_trace(log_dir: str | os.PathLike[str]) -> Path | None:
    """The newest perfetto_trace.json.gz under `log_dir` (None if the profiler wrote none)."""
    paths = sorted(Path(log_dir).glob(f"plugins/profile/*/{TRACE_FILE}"))
    return paths[-1] if paths else None


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _names(records: list[dict[str, Any]]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for r in records:
        if r.get("ph") != "M":
            continue
        if r.get("name") == "process_name":
            processes[r["pid"]] = r.get("args", {}).get("name", "")
        elif r.get("name") == "thread_name":
            threads[(r["pid"], r["tid"])] = r.get("args", {}).get("name", "")
    return processes, threads


def jax_events(
    trace: dict[str, Any],
    *,
    pid: int,
    main_tid: int,
    anchor_ns: int | None,
    fallback_start_ns: int,
    main_thread_name: str = "python",
) -> tuple[list[Event], dict[tuple[int, int], str]]:
    """The CUDA API and GPU events of `trace` on the event clock, as process `pid`.

    Returns (events, thread names for the GPU tracks and foreign host threads).
    """
    records = trace.get("traceEvents", [])
    processes, threads = _names(records)
    complete = [r for r in records if r.get("ph") == "X"]
    offset_ns = _offset(complete, anchor_ns, fallback_start_ns)
    devices = {p: int(m.group(1)) for p, name in processes.items() if (m := _DEVICE.search(name))}
    with_streams = {p for (p, _), name in threads.items() if p in devices and
                    name.startswith("Stream")}  # fmt: skip
    events: list[Event] = []
    names: dict[tuple[int, int], str] = {}
    for r in complete:
        start = offset_ns + us_to_ns(r["ts"])
        end = start + us_to_ns(r.get("dur", 0.0))
        thread = threads.get((r["pid"], r["tid"]), "")
        if r["pid"] in devices:
            if r["pid"] in with_streams and not thread.startswith("Stream"):
                continue
            device = devices[r["pid"]]
            tid = gpu_track(device, r["tid"] % 1000)
            names[(pid, tid)] = f"cuda:{device} {thread or 'GPU'}"
            events.append(Event(r["name"], Category.GPU_KERNEL, start, end, pid, tid,
                                device=f"cuda:{device}", attrs={"line": thread}))  # fmt: skip
        elif _CUDA_CALL.match(r.get("name", "")):
            tid = main_tid if thread == main_thread_name else r["tid"]
            if tid != main_tid:
                names[(pid, tid)] = f"{thread} (XLA)"
            events.append(Event(r["name"], Category.CUDA_API, start, end, pid, tid))
    events.sort(key=lambda e: (e.start_ns, -e.end_ns))
    return events, names


def _offset(complete: list[dict[str, Any]], anchor_ns: int | None, fallback_ns: int) -> int:
    """Event-clock ns of the trace's ts 0."""
    if anchor_ns is not None:
        for r in complete:
            if r.get("name") == ANCHOR:
                return anchor_ns - us_to_ns(r["ts"])
    return fallback_ns
