"""True GPU-busy time against polled utilization, for summary.json, the plot and the trace.

RL-Scope's finding: nvidia-smi's utilization (NVML's `utilization.gpu`) counts a sample
period as busy if any kernel ran in it, so it inflates how busy the GPU really is. Here:

    busy    = measure(union of the device's kernel/memcpy/memset intervals ∩ window) / window
    polled  = the NVML readings taken in that window (`collectors.nvml`)

per sampling window (the time between two readings) and over the whole sampled span. Without
NVML samples (GPU events but no sampler), the span is the traced span and `polled` is null.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlsys.profiler.atomic import write_text
from rlsys.profiler.collectors.nvml import DEFAULT_PERIOD_S, Sample
from rlsys.profiler.overlap import Interval, union
from rlsys.trace import Category, Session

METHOD = (
    "busy: union of kernel, memcpy and memset intervals recorded by torch.profiler (Kineto) or "
    "the JAX profiler; polled: NVML utilization.gpu (what nvidia-smi shows), read every "
    "{period:g} s"
)
MAX_POINTS = 600  # timeline points kept per device in summary.json
GPU_PLOT_FILE = "gpu_util.png"


class BusyTime:
    """The union of intervals, with `covered(lo, hi)` = its measure within [lo, hi) in O(log n)."""

    def __init__(self, intervals: Iterable[Interval]) -> None:
        starts, ends = union(intervals)
        self.starts, self.ends = starts.tolist(), ends.tolist()
        self.prefix = [0, *np.cumsum(ends - starts).tolist()]

    def _before(self, time: int) -> int:
        """Measure of the union within (-inf, time)."""
        i = bisect_right(self.starts, time) - 1
        if i < 0:
            return 0
        return self.prefix[i] + min(time, self.ends[i]) - self.starts[i]

    def covered(self, lo: int, hi: int) -> int:
        return self._before(hi) - self._before(lo) if hi > lo else 0


def device_comparison(
    busy: BusyTime, samples: Sequence[Sample], span: Interval, period_ns: int
) -> dict[str, Any]:
    """Busy vs polled for one device: totals over the span and a per-window timeline.

    Window i ends at reading i and starts at reading i-1 (the first one `period_ns` earlier),
    since NVML reports on the period before the reading. Without samples, the span is cut into
    equal windows and `polled` is None.
    """
    if samples:
        ends = [s.time_ns for s in samples]
        starts = [ends[0] - period_ns, *ends[:-1]]
        polled: list[float | None] = [s.gpu_percent for s in samples]
    else:
        lo, hi = span
        count = max(1, min(MAX_POINTS, (hi - lo) // period_ns))
        edges = [lo + (hi - lo) * i // count for i in range(count + 1)]
        starts, ends, polled = edges[:-1], edges[1:], [None] * count
    busy_percent = [100.0 * busy.covered(a, b) / (b - a) if b > a else 0.0
                    for a, b in zip(starts, ends, strict=True)]  # fmt: skip
    lo, hi = starts[0], ends[-1]
    busy_ns = busy.covered(lo, hi)
    values = [p for p in polled if p is not None]
    return {
        "span_seconds": round((hi - lo) / 1e9, 9),
        "busy_seconds": round(busy_ns / 1e9, 9),
        "busy_percent": round(100.0 * busy_ns / (hi - lo), 3) if hi > lo else 0.0,
        "polled_percent": round(sum(values) / len(values), 3) if values else None,
        "samples": len(values),
        "timeline": _downsample(ends, busy_percent, polled, span[0]),
    }


def _downsample(ends: list[int], busy: list[float], polled: list[float | None],
                origin: int) -> dict[str, list]:  # fmt: skip
    """At most MAX_POINTS points: each the mean of a run of consecutive windows."""
    step = max(1, -(-len(ends) // MAX_POINTS))
    out: dict[str, list] = {"seconds": [], "busy_percent": [], "polled_percent": []}
    for i in range(0, len(ends), step):
        group = slice(i, i + step)
        out["seconds"].append(round((ends[group][-1] - origin) / 1e9, 6))
        out["busy_percent"].append(round(sum(busy[group]) / len(busy[group]), 2))
        values = [p for p in polled[group] if p is not None]
        out["polled_percent"].append(round(sum(values) / len(values), 2) if values else None)
    return out


def gpu_section(
    session: Session, samples: Sequence[Sample], period_s: float = DEFAULT_PERIOD_S
) -> dict[str, Any] | None:
    """summary.json's "gpu" object (schema in `rlsys.profiler.summary`); None without a GPU."""
    intervals: dict[str, list[Interval]] = {}
    for e in session.events:
        if e.category is Category.GPU_KERNEL or e.device != "cpu":
            intervals.setdefault(e.device, []).append((e.start_ns, e.end_ns))
    if not intervals and not samples:
        return None
    starts = [e.start_ns for e in session.events] or [s.time_ns for s in samples]
    ends = [e.end_ns for e in session.events] or [s.time_ns for s in samples]
    span = (min(starts), max(ends))
    by_device: dict[str, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.time_ns):
        if s.time_ns > span[0]:  # readings before the first event cover nothing traced
            by_device.setdefault(f"cuda:{s.device}", []).append(s)
    devices = sorted(set(intervals) | set(by_device))
    if not devices:
        return None
    period_ns = round(period_s * 1e9)
    rows = []
    for device in devices:
        row = device_comparison(BusyTime(intervals.get(device, [])), by_device.get(device, []),
                                span, period_ns)  # fmt: skip
        rows.append({"device": device, **row})
    polled = [r["polled_percent"] for r in rows if r["polled_percent"] is not None]
    return {
        "method": METHOD.format(period=period_s),
        "busy_percent": round(sum(r["busy_percent"] for r in rows) / len(rows), 3),
        "polled_utilization": round(sum(polled) / len(polled), 3) if polled else None,
        "devices": rows,
    }


def counter_events(section: dict[str, Any], pid: int = 0) -> list[dict[str, Any]]:
    """Chrome-trace counter tracks ("ph": "C") of busy and polled percent per device."""
    records: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": "GPU utilization (busy vs NVML)"}},
    ]  # fmt: skip
    for row in section["devices"]:
        line = row["timeline"]
        for t, busy, polled in zip(line["seconds"], line["busy_percent"], line["polled_percent"],
                                   strict=True):  # fmt: skip
            args = {"busy %": busy} if polled is None else {"busy %": busy, "polled %": polled}
            records.append({"name": f"{row['device']} utilization", "ph": "C", "pid": pid,
                            "tid": 0, "ts": t * 1e6, "args": args})  # fmt: skip
    return records


def add_counters(trace_path: str | os.PathLike[str], section: dict[str, Any]) -> None:
    """Append the counter tracks to a trace.json written by `rlsys.trace.write_chrome_trace`.

    Timeline seconds count from the session's first event, which is that trace's time 0.
    """
    path = Path(trace_path)
    trace = json.loads(path.read_text(encoding="utf-8"))
    trace["traceEvents"].extend(counter_events(section))
    write_text(path, json.dumps(trace, separators=(",", ":")))


def plot_gpu(section: dict[str, Any], directory: str | os.PathLike[str]) -> Path:
    """Write the busy-vs-polled plot as `<directory>/gpu_util.png`."""
    from rlsys.profiler.plots import gpu_figure, save_and_close

    path = Path(directory) / GPU_PLOT_FILE
    save_and_close(gpu_figure(section), path)
    return path


def add_gpu_section(
    summary: dict[str, Any], session: Session, samples: Sequence[Sample], out: Path
) -> None:
    """Where the run had a GPU: summary["gpu"], gpu_util.png and counter tracks in trace.json."""
    section = gpu_section(session, samples)
    if section is None:
        return
    summary["gpu"] = section
    plot_gpu(section, out)
    if (out / "trace.json").is_file():
        add_counters(out / "trace.json", section)
