"""Kineto and JAX-profiler traces -> CUDA API and GPU events, on hand-made recorded traces.

The traces follow the real formats: Kineto's `export_chrome_trace` (epoch-based timestamps
with baseTimeNanoseconds) and JAX's perfetto_trace.json.gz (profile-relative timestamps,
hashed thread ids, "/device:GPU:N" processes with "Stream" lines).
"""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from rlsys.profiler import breakdown
from rlsys.profiler.collectors import jax_profiler
from rlsys.profiler.collectors.clock import ClockReference, us_to_ns
from rlsys.profiler.collectors.kineto import gpu_track, kineto_events, load_trace, thread_ids
from rlsys.trace import Category, Event, ProcessInfo, Session

PID, TID = 4242, 4242
BASE_NS = 1_790_857_026_000_000_000
CLOCK = ClockReference(wall_ns=BASE_NS + 5_000_000_000, monotonic_ns=1_000_000_000)
# so epoch time BASE + 5 s + x is monotonic 1 s + x


def kineto_trace(base: int | None = BASE_NS) -> dict:
    """ts in us: 5_000_000 us after the base is monotonic 1 s."""
    t0 = 5_000_000.0 if base is not None else (BASE_NS / 1000 + 5_000_000.0)
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": PID, "tid": TID, "ts": t0,
         "dur": 50.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID,
         "ts": t0 + 10.0, "dur": 5.5, "args": {"correlation": 36, "cbid": 211}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": PID, "tid": TID + 1,
         "ts": t0 + 20.0, "dur": 2.0, "args": {"correlation": 40}},
        {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>(...)", "pid": 0, "tid": 7,
         "ts": t0 + 16.0, "dur": 100.25,
         "args": {"device": 0, "stream": 7, "correlation": 36, "registers per thread": 32}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 1,
         "tid": 13, "ts": t0 + 200.0, "dur": 3.0, "args": {"device": 1, "stream": 13}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
         "ts": t0 + 300.0, "dur": 1.0, "args": {"device": 0, "stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 36, "pid": PID, "tid": TID,
         "ts": t0 + 10.0},
    ]  # fmt: skip
    trace = {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}
    if base is not None:
        trace["baseTimeNanoseconds"] = base
    return trace


def test_clock_reference_maps_wall_to_monotonic() -> None:
    ticks = iter(range(100, 10_000, 10))
    reference = ClockReference.now(wall=lambda: 5_000, monotonic=lambda: next(ticks))
    assert reference == ClockReference(5_000, 105)
    assert reference.to_monotonic(6_000) == 1_105
    assert us_to_ns(1_796_059_245_299_496.75) == 1_796_059_245_299_496_750
    assert us_to_ns(2.5) == 2_500


@pytest.mark.parametrize("base", [BASE_NS, None], ids=["baseTimeNanoseconds", "epoch-us ts"])
def test_kineto_events_keep_cuda_api_and_gpu_work_on_the_event_clock(base, tmp_path) -> None:
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps(kineto_trace(base)))
    events, tracks = kineto_events(load_trace(path), CLOCK, PID)
    got = [(e.name, e.category, e.start_ns, e.end_ns, e.tid, e.device) for e in events]
    s = 1_000_000_000
    assert got == [
        ("cudaLaunchKernel", Category.CUDA_API, s + 10_000, s + 15_500, TID, "cpu"),
        ("void gemm_kernel<float>(...)", Category.GPU_KERNEL, s + 16_000, s + 116_250,
         gpu_track(0, 7), "cuda:0"),
        ("cuLaunchKernel", Category.CUDA_API, s + 20_000, s + 22_000, TID + 1, "cpu"),
        ("Memcpy DtoH (Device -> Pageable)", Category.GPU_KERNEL, s + 200_000, s + 203_000,
         gpu_track(1, 13), "cuda:1"),
        ("Memset (Device)", Category.GPU_KERNEL, s + 300_000, s + 301_000, gpu_track(0, 7),
         "cuda:0"),
    ]  # fmt: skip
    assert all(e.pid == PID for e in events)
    assert events[1].attrs == {"correlation": 36, "kind": "kernel", "stream": 7}
    assert tracks == {(PID, gpu_track(0, 7)): "cuda:0 stream 7",
                      (PID, gpu_track(1, 13)): "cuda:1 stream 13"}  # fmt: skip


def test_cupti_thread_ids_move_to_os_thread_ids() -> None:
    # CUPTI's id is the low 32 bits of pthread_self(), which is Python's threading.get_ident()
    ident = 0x7F3A_1C7E_3EC0
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
         "tid": ident & 0xFFFFFFFF, "ts": 10.0, "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": PID,
         "tid": 1976932672, "ts": 20.0, "dur": 1.0},  # a thread Python does not know
    ]}  # fmt: skip
    events, _ = kineto_events(trace, CLOCK, PID, {ident & 0xFFFFFFFF: TID})
    assert [e.tid for e in events] == [TID, 1976932672]
    main = threading.main_thread()
    assert thread_ids()[main.ident & 0xFFFFFFFF] == main.native_id


def test_converted_events_feed_the_breakdown() -> None:
    events, _ = kineto_events(kineto_trace(), CLOCK, PID)
    s = 1_000_000_000
    work = Event("backpropagation", Category.OPERATION, s, s + 400_000, PID, TID)
    info = ProcessInfo(PID, 1, "python t.py", ("t.py",), "box", "3.11", None, None, 1.7e9, 0)
    session = Session((info,), sorted([work, *events], key=lambda e: (e.start_ns, -e.end_ns)))
    times = breakdown(session).operations["backpropagation"]
    assert times.cpu_ns["cuda_api"] == 5_500 + 2_000  # two threads, one call each
    assert times.gpu_ns == 100_250 + 3_000 + 1_000


def jax_trace(with_anchor: bool = True) -> dict:
    host, gpu = 701, 1
    python, xla = 14110952, 2134581346
    meta = [
        {"ph": "M", "pid": host, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": host, "tid": python, "name": "thread_name", "args": {"name": "python"}},
        {"ph": "M", "pid": host, "tid": xla, "name": "thread_name",
         "args": {"name": "tf_XLAPjRtGpuClient/1"}},
        {"ph": "M", "pid": gpu, "name": "process_name",
         "args": {"name": "/device:GPU:0 (NVIDIA H100)"}},
        {"ph": "M", "pid": gpu, "tid": 13, "name": "thread_name",
         "args": {"name": "Stream #13(Compute)"}},
        {"ph": "M", "pid": gpu, "tid": 200, "name": "thread_name", "args": {"name": "XLA Ops"}},
    ]  # fmt: skip
    x = [
        {"ph": "X", "pid": host, "tid": python, "ts": 30.0, "dur": 4.0,
         "name": "cuStreamSynchronize"},
        {"ph": "X", "pid": host, "tid": python, "ts": 25.0, "dur": 40.0,
         "name": "PjitFunction(f)"},
        {"ph": "X", "pid": host, "tid": xla, "ts": 40.0, "dur": 6.0, "name": "cuLaunchKernel"},
        {"ph": "X", "pid": gpu, "tid": 13, "ts": 50.0, "dur": 20.5, "name": "gemm_fusion"},
        {"ph": "X", "pid": gpu, "tid": 200, "ts": 50.0, "dur": 20.5, "name": "dot.1"},
    ]  # fmt: skip
    if with_anchor:
        x.append({"ph": "X", "pid": host, "tid": python, "ts": 20.0, "dur": 3.0,
                  "name": jax_profiler.ANCHOR})  # fmt: skip
    return {"displayTimeUnit": "ns", "traceEvents": meta + x}


def write_jax_trace(log_dir: Path, trace: dict) -> Path:
    run = log_dir / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    with gzip.open(run / jax_profiler.TRACE_FILE, "wt") as f:
        json.dump(trace, f)
    return run / jax_profiler.TRACE_FILE


@pytest.mark.parametrize("with_anchor", [True, False], ids=["anchor", "fallback"])
def test_jax_events_keep_streams_and_cuda_calls(with_anchor: bool, tmp_path: Path) -> None:
    path = write_jax_trace(tmp_path, jax_trace(with_anchor))
    assert jax_profiler.find_trace(tmp_path) == path
    # anchor: ts 20 us is monotonic 1_000_020_000 -> ts 0 at 1 s; fallback: ts 0 at 1 s too
    events, names = jax_profiler.jax_events(
        jax_profiler.load_trace(path), pid=PID, main_tid=TID,
        anchor_ns=1_000_020_000 if with_anchor else None, fallback_start_ns=1_000_000_000,
    )  # fmt: skip
    s = 1_000_000_000
    got = [(e.name, e.category, e.start_ns, e.end_ns, e.tid, e.device) for e in events]
    assert got == [
        ("cuStreamSynchronize", Category.CUDA_API, s + 30_000, s + 34_000, TID, "cpu"),
        ("cuLaunchKernel", Category.CUDA_API, s + 40_000, s + 46_000, 2134581346, "cpu"),
        ("gemm_fusion", Category.GPU_KERNEL, s + 50_000, s + 70_500, gpu_track(0, 13),
         "cuda:0"),
    ]  # fmt: skip
    assert names == {(PID, gpu_track(0, 13)): "cuda:0 Stream #13(Compute)",
                     (PID, 2134581346): "tf_XLAPjRtGpuClient/1 (XLA)"}  # fmt: skip


def test_a_device_without_stream_lines_keeps_all_its_lines() -> None:
    trace = jax_trace()
    trace["traceEvents"] = [r for r in trace["traceEvents"]
                            if not (r.get("tid") == 13 and r.get("pid") == 1)]  # fmt: skip
    events, _ = jax_profiler.jax_events(trace, pid=PID, main_tid=TID, anchor_ns=None,
                                        fallback_start_ns=0)  # fmt: skip
    assert [e.name for e in events if e.category is Category.GPU_KERNEL] == ["dot.1"]


def test_no_trace_under_an_empty_folder(tmp_path: Path) -> None:
    assert jax_profiler.find_trace(tmp_path) is None
