"""Overhead calibration by differential runs, and its correction of a profile.

Every recorded event costs the profiled program some time: the clock reads, the wrapper
call, the record, its JSON line. That time is inside the trace, so a profile overstates
both the total and the operations that record many events. After RL-Scope (Gleeson et al.,
arXiv 2102.04285, section 4.3) we estimate a cost per event for each instrumentation source
(`rlsys.profiler.sources`) and subtract it where each event happened.

Method. Run the same command (the same iteration budget) R times in each configuration,
alternating configurations (A B C A B C ...) so that slow drifts of a shared machine hit them
alike; each configuration switches on one more source than the one before:

    none                 no bootstrap at all: the uninstrumented run time T0
    annotations          operations only (automatic and the user's): T1, N1 OPERATION events
    annotations+ccalls   plus C-call intervals: T2, N2 SIMULATOR + BACKEND events
                         (N1' OPERATION events in this configuration)

The cost per event of each source is what its events added to the run time T, divided by
how many there were, for each round r of back-to-back runs; its median over the rounds is
the estimate (pairing runs of one round cancels the slow drifts of a shared machine):

    cost[annotations] = median_r (T1[r] - T0[r]) / N1[r]
    cost[ccalls]      = median_r (T2[r] - T1[r] - cost[annotations] * (N1'[r] - N1[r])) / N2[r]

(the general rule: configuration k's time less configuration k-1's in the same round, less
the known costs of the events of the other sources that k recorded more than k-1, over k's
new source's event count; the error of one source's estimate then does not leak into the
next one's). T is the CPU time of the
command (user + system, its child processes included) by default, not its wall time: the
profiler's bookkeeping is CPU work, and on a shared machine other programs change a run's
wall time far more than its CPU time (`basis="wall"` uses wall time; both are kept). As a
bonus, CPU time adds the overhead of parallel worker processes, which their events count
too, where wall time would see only the critical path. A cost that noise makes negative is
clamped to zero and reported. The "gpu" source (CUDA API, kernels) has no configuration
yet: without a GPU it records nothing. The estimate is only as good as the differences are
large against run-to-run noise: the command's startup and imports are in every run, so a
short command on a busy machine needs more `--calibration-runs`.

Correction. For each operation, each recorded event e whose bookkeeping ran in it removes
cost[source(e.category)] from its wall time (`Times.cost_events` holds these counts per
category: an interval event counts where it starts; an operation counts in the operation
around it, since its own enter/exit bookkeeping runs just outside its interval). The
bookkeeping runs in the interpreter, around the event's boundaries, so the removed time is
taken from the operation's Python time first and, once that is used up, from the event's own
category. The corrected total is the profiled command's wall time less the cost of all its
events; `bias` = corrected / uninstrumented - 1 says how well the correction
did (RL-Scope reports this too), `inflation` = profiled / uninstrumented how much the
profiler slowed the program.

The cost is a per-machine, per-workload fact (it depends on the CPU, its load and what the
events look like), so a calibration is cached under `~/.cache/rlsys/calibration/` (or
$XDG_CACHE_HOME), keyed by a hash of the machine, the command and the instrumentation's own
code, and reused until `--recalibrate`. For a command of several processes the correction
subtracts every process's overhead from the wall time, which overcorrects where workers ran
in parallel.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlsys.profiler import sources as _sources
from rlsys.profiler.atomic import write_text
from rlsys.profiler.launch import child_environment
from rlsys.profiler.result import CPU_CATEGORIES, Breakdown, Times
from rlsys.trace import Category
from rlsys.trace.annotate import TRACE_DIR_ENV
from rlsys.trace.machine import cpu_model

CALIBRATION_VERSION = 2  # 2: torch intervals cheaper, metadata reads no longer events
PYTHON = str(Category.PYTHON)

CONFIGURATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("none", ()),
    ("annotations", (_sources.ANNOTATIONS,)),
    ("annotations+ccalls", (_sources.ANNOTATIONS, _sources.CCALLS)),
)
"""Name and sources of each configuration; each adds one source to the one before it."""


class CalibrationError(RuntimeError):
    """A calibration run failed or a cached calibration is unreadable (one line)."""


@dataclass(frozen=True)
class Run:
    """One run of the command in one configuration: its wall time and events per source."""

    configuration: str
    wall_ns: int
    events: Mapping[str, int]  # source -> events recorded (all processes)
    cpu_ns: int | None = None  # user + system CPU time of the command and its children


@dataclass(frozen=True)
class Calibration:
    """Costs per event of each source, and the measurements they come from."""

    command: tuple[str, ...]
    machine: Mapping[str, Any]
    runs_per_configuration: int
    uninstrumented_seconds: float  # median wall time of the "none" runs
    wall_seconds: Mapping[str, float]  # configuration -> median wall time
    cpu_seconds: Mapping[str, float]  # configuration -> median CPU time (0 if unmeasured)
    events: Mapping[str, Mapping[str, float]]  # configuration -> source -> median events
    cost_ns: Mapping[str, float]  # source -> cost per event (clamped at 0)
    raw_cost_ns: Mapping[str, float]  # source -> estimate before clamping
    round_cost_ns: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # per round
    basis: str = "cpu"  # the run time the costs come from: "cpu" or "wall"
    created: str = ""
    version: int = CALIBRATION_VERSION
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        data["warnings"] = list(self.warnings)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        values = dict(data)
        values["command"] = tuple(values["command"])
        values["warnings"] = tuple(values.get("warnings", ()))
        values["round_cost_ns"] = {k: tuple(v) for k, v in values.get("round_cost_ns", {}).items()}
        return cls(**values)


# --- the estimator ---------------------------------------------------------------------------


def estimate(
    runs: Sequence[Run],
    command: Sequence[str] = (),
    machine: Mapping[str, Any] | None = None,
    configurations: Sequence[tuple[str, tuple[str, ...]]] = CONFIGURATIONS,
    basis: str = "cpu",
) -> Calibration:
    """Costs per event from runs of every configuration (method in the module docstring).

    `configurations` start with the uninstrumented one; each adds one source. `basis` is
    "cpu" or "wall" (runs without CPU times fall back to wall). Raises CalibrationError if a
    configuration has no run.
    """
    if basis not in ("cpu", "wall"):
        raise ValueError(f"basis must be 'cpu' or 'wall', not {basis!r}")
    by_config: dict[str, list[Run]] = {name: [] for name, _ in configurations}
    for run in runs:
        if run.configuration in by_config:
            by_config[run.configuration].append(run)
    missing = [name for name, found in by_config.items() if not found]
    if missing:
        raise CalibrationError(f"calibration has no run of configuration {missing[0]!r}")
    wall = {name: statistics.median(r.wall_ns for r in rs) for name, rs in by_config.items()}
    cpu = {name: statistics.median(r.cpu_ns or 0 for r in rs) for name, rs in by_config.items()}
    if basis == "cpu" and not all(r.cpu_ns for r in runs):
        basis = "wall"
    events = {
        name: {s: statistics.median(r.events.get(s, 0) for r in rs) for s in _sources.SOURCES}
        for name, rs in by_config.items()
    }
    first = configurations[0][0]
    raw: dict[str, float] = {}
    warnings: list[str] = []
    rounds: dict[str, tuple[float, ...]] = {}
    previous: tuple[str, ...] = ()
    before = first
    for name, enabled in configurations[1:]:
        (new,) = set(enabled) - set(previous)
        # Pair each run with the previous configuration's run of the same round (they ran
        # back to back, so a shared machine's slow drifts cancel, and the other sources'
        # events, the same in both, cancel too); the median over rounds resists outliers.
        per_round = []
        for base, run in zip(by_config[before], by_config[name], strict=False):
            count = run.events.get(new, 0)
            if count > 0:
                known = sum(
                    raw[s] * (run.events.get(s, 0) - base.events.get(s, 0)) for s in previous
                )
                per_round.append((_time(run, basis) - _time(base, basis) - known) / count)
        rounds[new] = tuple(per_round)
        if per_round:
            raw[new] = statistics.median(per_round)
            if _unsteady(per_round):
                warnings.append(
                    f"the {new} cost varies from {min(per_round):.0f} to {max(per_round):.0f} "
                    "ns/event between rounds: run-to-run noise is as large as the signal; "
                    "more --calibration-runs (or a longer run, a quieter machine) will help"
                )
        else:
            raw[new] = 0.0
            warnings.append(f"no {new} events were recorded: its cost is unknown, taken as 0")
        previous, before = enabled, name
    cost = {s: max(0.0, c) for s, c in raw.items()}
    for source, value in raw.items():
        if value < 0:
            warnings.append(
                f"the {source} cost came out negative ({value:.0f} ns/event): run-to-run noise "
                "exceeds it; taken as 0 (more --calibration-runs or a longer run helps)"
            )
    return Calibration(
        command=tuple(command),
        machine=dict(machine or {}),
        runs_per_configuration=min(len(rs) for rs in by_config.values()),
        uninstrumented_seconds=wall[first] / 1e9,
        wall_seconds={name: w / 1e9 for name, w in wall.items()},
        cpu_seconds={name: c / 1e9 for name, c in cpu.items()},
        events=events,
        cost_ns=cost,
        raw_cost_ns=raw,
        round_cost_ns=rounds,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        basis=basis,
        warnings=tuple(warnings),
    )


def _unsteady(values: Sequence[float]) -> bool:
    """Whether per-round estimates spread by more than their median (half-range > median/2)."""
    middle = statistics.median(values)
    return len(values) > 1 and (max(values) - min(values)) / 2 > abs(middle) / 2


def _time(run: Run, basis: str) -> int:
    return run.cpu_ns if basis == "cpu" and run.cpu_ns else run.wall_ns


# --- the correction --------------------------------------------------------------------------


def event_cost_ns(events: Mapping[str, int], cost_ns: Mapping[str, float]) -> dict[str, float]:
    """Per category: events of that category times the cost per event of its source."""
    costs = {}
    for category, count in events.items():
        source = _sources.SOURCE_OF.get(Category(category))
        if source is not None and count:
            costs[category] = count * cost_ns.get(source, 0.0)
    return costs


def correct_times(times: Times, cost_ns: Mapping[str, float]) -> dict[str, Any]:
    """The corrected wall time and CPU categories of one operation (see the docstring).

    Returns {"overhead_ns", "wall_ns", "cpu_ns"}: wall and categories less the overhead,
    never below zero.
    """
    per_category = event_cost_ns(times.cost_events, cost_ns)
    overhead = sum(per_category.values())
    cpu = {k: float(v) for k, v in times.cpu_ns.items()}
    from_python = min(cpu.get(PYTHON, 0.0), overhead)
    cpu[PYTHON] = cpu.get(PYTHON, 0.0) - from_python
    left = overhead - from_python
    for category, cost in per_category.items():
        if left <= 0:
            break
        take = min(cpu.get(category, 0.0), cost, left)
        if category in cpu:
            cpu[category] -= take
        left -= take
    return {
        "overhead_ns": overhead,
        "wall_ns": max(0.0, times.wall_ns - overhead),
        "cpu_ns": {k: cpu.get(k, 0.0) for k in map(str, CPU_CATEGORIES)},
    }


def correct(result: Breakdown, cost_ns: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """`correct_times` for every operation of `result` (summed over processes)."""
    return {name: correct_times(times, cost_ns) for name, times in result.operations.items()}


def totals(
    wall_seconds: float, result: Breakdown, calibration: Calibration | None
) -> dict[str, Any]:
    """Profiled (uncorrected), uninstrumented and corrected totals, bias and inflation."""
    overhead = None
    corrected = bias = inflation = uninstrumented = None
    if calibration is not None:
        overhead = sum(event_cost_ns(result.total.cost_events, calibration.cost_ns).values())
        overhead /= 1e9
        corrected = wall_seconds - overhead
        uninstrumented = calibration.uninstrumented_seconds
        if uninstrumented > 0:
            bias = corrected / uninstrumented - 1.0
            inflation = wall_seconds / uninstrumented
    return {
        "traced_seconds": round(result.total_ns / 1e9, 9),
        "uncorrected_seconds": round(wall_seconds, 6),
        "uninstrumented_seconds": _round(uninstrumented),
        "overhead_seconds": _round(overhead),
        "corrected_seconds": _round(corrected),
        "bias": _round(bias),
        "inflation": _round(inflation),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# --- running the configurations --------------------------------------------------------------


def count_events(trace_dir: Path) -> dict[str, int]:
    """Events per source in every `*.jsonl` of `trace_dir` (without building Events)."""
    per_category: dict[str, int] = {}
    for path in trace_dir.glob("*.jsonl"):
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                packed = line.startswith('["intervals",')
                if packed or line.startswith('["event",'):
                    try:
                        record = json.loads(line)
                        category, count = (record[1], record[4]) if packed else (record[2], 1)
                        category, count = Category(category), int(count)
                    except (ValueError, IndexError, TypeError):
                        continue  # a torn last line, or a damaged one (not counted)
                    per_category[category] = per_category.get(category, 0) + count
    per_source = dict.fromkeys(_sources.SOURCES, 0)
    for category, count in per_category.items():
        source = _sources.SOURCE_OF.get(category)
        if source is not None:
            per_source[source] += count
    return per_source


def _uninstrumented_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(TRACE_DIR_ENV, None)  # a script importing rlsys would record otherwise
    return env


def run_configuration(command: Sequence[str], name: str, enabled: tuple[str, ...]) -> Run:
    """Run `command` once in configuration `name`; CalibrationError if it fails."""
    with tempfile.TemporaryDirectory(prefix="rlsys-calibrate-") as tmp:
        trace_dir = Path(tmp)
        if enabled:
            env = child_environment(trace_dir)
            env.update(_sources.environment(enabled))
        else:
            env = _uninstrumented_environment()
        cpu_before = _children_cpu_ns()
        started = time.perf_counter_ns()
        try:
            done = subprocess.run(list(command), env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, check=False)  # fmt: skip
        except OSError as err:
            raise CalibrationError(f"cannot start {command[0]!r}: {err.strerror}") from None
        wall = time.perf_counter_ns() - started
        cpu = _children_cpu_ns() - cpu_before
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise CalibrationError(
                f"calibration run ({name}) exited with code {done.returncode}: {tail[0]}"
            )
        events = count_events(trace_dir) if enabled else dict.fromkeys(_sources.SOURCES, 0)
    return Run(name, wall, events, cpu)


def _children_cpu_ns() -> int:
    """User + system time of this process's waited-for children (and theirs), in ns."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((usage.ru_utime + usage.ru_stime) * 1e9)


def calibrate(
    command: Sequence[str],
    runs: int,
    *,
    run: Callable[[Sequence[str], str, tuple[str, ...]], Run] = run_configuration,
    on_run: Callable[[Run], None] | None = None,
) -> Calibration:
    """Run every configuration `runs` times, alternating, and estimate the costs."""
    if runs < 1:
        raise ValueError(f"--calibration-runs must be at least 1, not {runs}")
    measured = []
    for _ in range(runs):
        for name, enabled in CONFIGURATIONS:
            result = run(command, name, enabled)
            measured.append(result)
            if on_run is not None:
                on_run(result)
    return estimate(measured, command, machine_fingerprint())


# --- the cache -------------------------------------------------------------------------------


def machine_fingerprint() -> dict[str, Any]:
    """What makes costs differ between machines (and Python versions)."""
    return {
        "host": socket.gethostname(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def instrumentation_fingerprint() -> str:
    """A hash of the code that runs per recorded event (hooks, collectors, the recorder): a
    change to it changes the costs, so it makes cached calibrations stale."""
    package = Path(__file__).resolve().parents[1]
    collectors = (package / "profiler" / "collectors").glob("*.py")
    trace = (package / "trace").glob("*.py")
    files = sorted([package / "profiler" / "hooks.py", package / "profiler" / "sources.py",
                    *collectors, *trace])  # fmt: skip
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlsys" / "calibration"


def cache_path(command: Sequence[str], machine: Mapping[str, Any] | None = None) -> Path:
    """`<cache>/<hash of machine + command + cwd + instrumentation>.json` (a relative script
    path needs the cwd)."""
    key = {
        "version": CALIBRATION_VERSION,
        "instrumentation": instrumentation_fingerprint(),
        "machine": dict(machine or machine_fingerprint()),
        "command": list(command),
        "cwd": os.getcwd(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / f"{digest}.json"


def load_cached(command: Sequence[str]) -> Calibration | None:
    """The cached calibration of `command` on this machine, or None."""
    path = cache_path(command)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != CALIBRATION_VERSION:
            return None
        return Calibration.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise CalibrationError(
            f"{path}: unreadable cached calibration ({err}); rerun with --recalibrate"
        ) from None


def save_cached(calibration: Calibration) -> Path:
    path = cache_path(calibration.command)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(calibration.to_dict(), indent=2) + "\n")
    return path
