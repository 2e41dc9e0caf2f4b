"""`summary.json`: the result of `rlsys profile`, in seconds, as `rlsys report` reads it.

Schema, format "rlsys-profile-summary" version 1 (all times are float seconds; every
`categories`, `resources` and `events` object has every key, zeros included):

    {
      "format": "rlsys-profile-summary", "version": 1,
      "command": ["python", "train.py", ...],   # what ran, as given after `--`
      "exit_code": 0,             # the command's exit code; 128+N if killed by signal N
      "stopped_by": null,         # null | "interrupt" (SIGINT/SIGTERM) | "max-seconds"
      "trace_complete": true,     # every process closed its trace file (wrote its footer)
      "complete": true,           # trace_complete and not stopped_by: false = partial profile
      "wall_seconds": 12.3,       # the command's wall time as `rlsys profile` measured it
      "traced_seconds": 12.1,     # sum over processes of first-to-last event time
      "note": "...",              # what the category split is based on (see NOTE)
      "totals": {                 # `rlsys.profiler.calibrate.totals`
        "traced_seconds": 12.1, "uncorrected_seconds": 12.3,  # = wall_seconds
        "uninstrumented_seconds": 10.0, "overhead_seconds": 2.2, "corrected_seconds": 10.1,
        "bias": 0.01, "inflation": 1.23},  # all but the first two null without --calibrate
      "calibration": null,        # or the Calibration used (`Calibration.to_dict()`): costs
                                  # per event per source, the runs' medians, machine, warnings
      "operations": {NAME: TIMES, ...},   # summed over processes; longest first,
                                          # "(no operation)" last
      "total": TIMES,             # the sum of "operations"
      "processes": [              # one per process that recorded events, by pid
        {"pid": 1234, "parent_pid": 1200, "command": "train.py --seed 1",
         "traced_seconds": 12.1, "threads": [1234, 1240],
         "operations": {NAME: TIMES, ...}, "total": TIMES}
      ],
      "gpu": {                    # only where a GPU was found (rlsys.profiler.gpu)
        "method": "...",          # how busy and polled were measured
        "busy_percent": 41.0,     # mean over devices of true busy time (kernel union) / span
        "polled_utilization": 93.0,   # mean NVML utilization.gpu (nvidia-smi's figure), or null
        "devices": [{"device": "cuda:0", "span_seconds": 12.0, "busy_seconds": 4.9,
                     "busy_percent": 41.0, "polled_percent": 93.0, "samples": 120,
                     "timeline": {"seconds": [...], "busy_percent": [...],
                                  "polled_percent": [...]}}]
      }
    }

    TIMES = {
      "calls": 12,            # how many times the operation ran (0 for "(no operation)")
      "seconds": 1.5,         # wall time owned by it (sums to the total over operations)
      "percent": 12.4,        # of the total wall time (of the process, or of all processes)
      "gpu_seconds": 0.0,     # part of "seconds" with GPU activity
      "categories": {"python": 1.5, "simulator": 0.0, ...},   # thread seconds per CPU category
      "resources": {"cpu_only": 1.5, "gpu_only": 0.0, "cpu_gpu": 0.0, "idle": 0.0},
      "events": {"operation": 12, "python": 0, ...},           # recorded events per category
      "transitions": {"python->backend": 40, ...},  # category changes along a thread
      "corrected": null           # with a calibration: {"seconds", "overhead_seconds",
                                  # "categories"}: less the cost of the events recorded in it
    }

Times come from `rlsys.profiler.breakdown` (its docstring gives the attribution rules).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlsys.profiler.atomic import write_text
from rlsys.profiler.calibrate import Calibration, correct_times, totals
from rlsys.profiler.result import NO_OPERATION, Breakdown, Times

FORMAT_NAME = "rlsys-profile-summary"
FORMAT_VERSION = 1
SUMMARY_FILE = "summary.json"

NOTE = (
    "Categories come from what was recorded: simulator = inside environment step/reset, "
    "backend = inside torch's native calls and jitted JAX calls/waits; thread time under "
    "no recorded interval counts as python. CUDA API and GPU time are not collected yet."
)


class SummaryError(ValueError):
    """A folder holds no readable profile summary; the message says which and why."""


def _seconds(ns: int) -> float:
    return round(ns / 1e9, 9)


def _times(times: Times, total_ns: int, calibration: Calibration | None) -> dict[str, Any]:
    return {
        "calls": times.calls,
        "seconds": _seconds(times.wall_ns),
        "percent": round(100.0 * times.wall_ns / total_ns, 3) if total_ns else 0.0,
        "gpu_seconds": _seconds(times.gpu_ns),
        "categories": {k: _seconds(v) for k, v in times.cpu_ns.items()},
        "resources": {k: _seconds(v) for k, v in times.resource_ns.items()},
        "events": dict(times.events),
        "transitions": {f"{a}->{b}": n for (a, b), n in sorted(times.transitions.items())},
        "corrected": _corrected(times, calibration),
    }


def _corrected(times: Times, calibration: Calibration | None) -> dict[str, Any] | None:
    if calibration is None:
        return None
    fixed = correct_times(times, calibration.cost_ns)
    return {
        "seconds": _seconds(round(fixed["wall_ns"])),
        "overhead_seconds": _seconds(round(fixed["overhead_ns"])),
        "categories": {k: _seconds(round(v)) for k, v in fixed["cpu_ns"].items()},
    }


def _operations(
    operations: dict[str, Times], total_ns: int, calibration: Calibration | None
) -> dict[str, dict[str, Any]]:
    # An entry with neither time nor calls only holds the recording cost of an operation
    # around which no time was traced: no row.
    shown = [n for n, t in operations.items() if t.wall_ns or t.calls or any(t.events.values())]
    order = sorted(shown, key=lambda n: (n == NO_OPERATION, -operations[n].wall_ns))
    return {name: _times(operations[name], total_ns, calibration) for name in order}


def build_summary(
    result: Breakdown,
    *,
    command: list[str],
    exit_code: int | None,
    stopped_by: str | None,
    wall_seconds: float,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """The summary of a profiled run (schema in the module docstring)."""
    total_ns = result.total.wall_ns
    processes = []
    for pid in sorted(result.processes):
        process = result.processes[pid]
        process_ns = process.total.wall_ns
        processes.append(
            {
                "pid": pid,
                "parent_pid": process.parent_pid,
                "command": process.command,
                "traced_seconds": _seconds(process.total_ns),
                "threads": list(process.threads),
                "operations": _operations(process.operations, process_ns, calibration),
                "total": _times(process.total, process_ns, calibration),
            }
        )
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "command": list(command),
        "exit_code": exit_code,
        "stopped_by": stopped_by,
        "trace_complete": result.complete,
        "complete": result.complete and stopped_by is None,
        "wall_seconds": round(wall_seconds, 6),
        "traced_seconds": _seconds(result.total_ns),
        "note": NOTE,
        "totals": totals(wall_seconds, result, calibration),
        "calibration": calibration.to_dict() if calibration is not None else None,
        "operations": _operations(result.operations, total_ns, calibration),
        "total": _times(result.total, total_ns, calibration),
        "processes": processes,
    }


def write_summary(summary: dict[str, Any], directory: str | os.PathLike[str]) -> Path:
    path = Path(directory) / SUMMARY_FILE
    return write_text(path, json.dumps(summary, indent=2) + "\n")


def load_summary(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read `<directory>/summary.json`; SummaryError (one line) if it is not a profile."""
    directory = Path(directory)
    path = directory / SUMMARY_FILE
    if not directory.is_dir():
        raise SummaryError(f"{directory}: no such folder")
    if not path.is_file():
        raise SummaryError(f"{directory}: no {SUMMARY_FILE}; not a folder written by rlsys profile")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SummaryError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise SummaryError(f"{path}: not an {FORMAT_NAME} file")
    if data.get("version") != FORMAT_VERSION:
        raise SummaryError(
            f"{path}: summary version {data.get('version')}, this rlsys reads "
            f"version {FORMAT_VERSION}"
        )
    return data
