"""torch.profiler (Kineto) chrome traces -> rlsys `Event`s of CUDA API calls and GPU work.

The format (`prof.export_chrome_trace(path)`): {"baseTimeNanoseconds": B, "traceEvents":
[...]} where complete events ("ph": "X") carry "ts" and "dur" in microseconds; a timestamp is
Unix-epoch ns = B + 1000 * ts (B is absent, i.e. 0, in older versions, whose ts are epoch us).
What we keep, by "cat":

    cuda_runtime, cuda_driver    CPU time in a CUDA call: CUDA_API on the calling thread
                                 ("tid" is CUPTI's thread id: see `thread_ids`)
    kernel, gpu_memcpy,          GPU work: GPU_KERNEL on device "cuda:<args.device>", one
    gpu_memset                   track per (device, stream) (there "pid" is the device index
                                 and "tid" the stream)

Everything else (cpu_op, python_function, flows, user annotations) is left out: rlsys records
operations itself, and the C-call collectors cover the CPU side.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from rlsys.profiler.collectors.clock import ClockReference, us_to_ns
from rlsys.trace import Category, Event

CUDA_API_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

GPU_TRACK_BASE = 1_000_000_000
"""GPU tracks get tid GPU_TRACK_BASE + 1000 * device + stream: no clash with OS thread ids."""


def gpu_track(device: int, stream: int) -> int:
    return GPU_TRACK_BASE + 1000 * device + stream


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    with Path(path).open(encoding="utf-8") as f:
        return json.load(f)


def thread_ids() -> dict[int, int]:
    """CUPTI's thread id -> OS thread id, for this process's Python threads now alive.

    With CPU activity off, Kineto leaves a CUDA call's "tid" as CUPTI recorded it, which is
    not the OS id (seen on an H200: 478035648 in a process whose main thread was 723). CUPTI's
    id is the low 32 bits of the calling thread's `pthread_self()` (Kineto matches it so
    when CPU activity is on), which `threading.get_ident()` returns whole; this mapping has
    not yet run on a GPU. Threads that Python does not know (PyTorch's autograd device
    threads) keep CUPTI's id.
    """
    return {t.ident & 0xFFFFFFFF: t.native_id for t in threading.enumerate()
            if t.ident is not None and t.native_id is not None}  # fmt: skip


def kineto_events(
    trace: dict[str, Any], clock: ClockReference, pid: int, tids: dict[int, int] | None = None
) -> tuple[list[Event], dict[tuple[int, int], str]]:
    """The CUDA API and GPU events of `trace`, on the event clock, as process `pid`; CUDA
    calls on a thread of `tids` (see `thread_ids`) move to its OS thread id.

    Returns (events, thread names of the GPU tracks).
    """
    tids = tids or {}
    base_ns = trace.get("baseTimeNanoseconds", 0)
    events: list[Event] = []
    tracks: dict[tuple[int, int], str] = {}
    for record in trace.get("traceEvents", []):
        cat = record.get("cat")
        if record.get("ph") != "X" or (cat not in CUDA_API_CATS and cat not in GPU_CATS):
            continue
        start = clock.to_monotonic(base_ns + us_to_ns(record["ts"]))
        end = start + us_to_ns(record.get("dur", 0.0))
        args = record.get("args", {})
        attrs = {"correlation": args["correlation"]} if "correlation" in args else {}
        if cat in CUDA_API_CATS:
            tid = int(record["tid"])
            tid = tids.get(tid & 0xFFFFFFFF, tid)
            events.append(Event(record["name"], Category.CUDA_API, start, end, pid, tid,
                                attrs=attrs or None))  # fmt: skip
            continue
        device = int(args.get("device", record.get("pid", 0)))
        stream = int(args.get("stream", record.get("tid", 0)))
        tid = gpu_track(device, stream)
        tracks[(pid, tid)] = f"cuda:{device} stream {stream}"
        attrs.update(kind=GPU_CATS[cat], stream=stream)
        events.append(Event(record["name"], Category.GPU_KERNEL, start, end, pid, tid,
                            device=f"cuda:{device}", attrs=attrs))  # fmt: skip
    events.sort(key=lambda e: (e.start_ns, -e.end_ns))
    return events, tracks
