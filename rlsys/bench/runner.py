"""Run the systems of a case, alternating, and keep every run as a record.

Systems run alternately, in an order that reverses every repetition (A B C C B A A B C ...),
rather than one after the other (A A A B B B): a machine's speed drifts over a few minutes
(thermal limits, other load, page cache), and alternation spreads that drift over all systems
instead of charging it to whichever ran last. The reversal keeps a steady drift from favouring
the same system in every repetition (with A B C A B C and a machine that speeds up, C always
runs on the fastest machine of its repetition).
Each run is a fresh process, so import and compile costs count in its wall time and no
system inherits another's warm caches or memory.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlsys.bench.case import Case
from rlsys.bench.measure import run_measured
from rlsys.trace.annotate import TRACE_DIR_ENV
from rlsys.trace.machine import cpu_model

VERSIONED = ("rlsys", "jax", "jaxlib", "gymnax", "gymnasium", "torch", "envpool", "numpy")


@dataclass
class Record:
    """One run of one system: measured from outside plus what the child reported."""

    system: str
    rep: int
    order: int
    returncode: int | None
    wall_s: float
    peak_rss_bytes: int
    env_steps: float | None = None
    seconds: float | None = None
    rate: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    output_tail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CaseRun:
    """Everything one `rlsys bench run` learned about one case."""

    case: Case
    systems: list[str]
    skipped: dict[str, str]
    reps: int
    quick: bool
    seed: int
    records: list[Record] = field(default_factory=list)

    @property
    def failed(self) -> list[Record]:
        return [r for r in self.records if not r.ok]


def schedule(systems: Sequence[str], reps: int) -> list[tuple[int, str]]:
    """The run order: (rep, system) for rep 0 of every system, then rep 1 in reverse, ..."""
    return [
        (rep, name)
        for rep in range(reps)
        for name in (systems if rep % 2 == 0 else list(reversed(systems)))
    ]


def child_command(case: Case, system: str, *, quick: bool, seed: int) -> list[str]:
    assert case.path is not None, "cases come from load_case, which sets their path"
    command = [sys.executable, str(case.path), "--system", system, "--seed", str(seed)]
    return [*command, "--quick"] if quick else command


def child_environment() -> dict[str, str]:
    """The runner's environment, minus rlsys recording: a benchmark must not be traced
    (and its annotations must see no recorder) just because the runner is being profiled."""
    env = dict(os.environ)
    env.pop(TRACE_DIR_ENV, None)
    return env


def run_case(
    case: Case,
    systems: Sequence[str],
    *,
    reps: int,
    quick: bool,
    seed: int,
    timeout_s: float | None = None,
    on_record: Callable[[Record, int, int], None] | None = None,
) -> CaseRun:
    """Run `systems` of `case` `reps` times each, alternating; skip unavailable ones.

    Repetition r runs every system with seed `seed + r`: the systems of one repetition see
    the same seed, and deterministic systems (seeded training) do not repeat one run.
    `on_record(record, done, total)` is called after each run (for progress output).
    """
    skipped = {}
    for name in systems:
        reason = case.system(name).skip_reason()
        if reason is not None:
            skipped[name] = reason
    runnable = [name for name in systems if name not in skipped]
    result = CaseRun(case, list(systems), skipped, reps, quick, seed)
    order = schedule(runnable, reps)
    env = child_environment()
    for index, (rep, name) in enumerate(order):
        measured = run_measured(
            child_command(case, name, quick=quick, seed=seed + rep),
            timeout_s=timeout_s or case.timeout_s,
            env=env,
        )
        record = Record(
            system=name,
            rep=rep,
            order=index,
            returncode=measured.returncode,
            wall_s=measured.wall_s,
            peak_rss_bytes=measured.peak_rss_bytes,
            error=measured.failure(),
            output_tail=measured.output_tail,
        )
        if measured.result is not None:
            record.env_steps = measured.result.get("env_steps")
            record.seconds = measured.result.get("seconds")
            record.metrics = dict(measured.result.get("metrics") or {})
            if record.env_steps is not None and record.seconds:
                record.rate = record.env_steps / record.seconds
        if record.ok:
            record.output_tail = []  # keep the JSON small: output matters only on failure
        result.records.append(record)
        if on_record is not None:
            on_record(record, index + 1, len(order))
    return result


def machine_info() -> dict[str, object]:
    """Where the numbers were measured: without this a table of speeds means little."""
    versions = {}
    for dist in VERSIONED:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_json(
    path: Path, run: CaseRun, *, command: str, machine: dict, summary: list[dict]
) -> None:
    """Write the raw records (and the medians derived from them) to `path`."""
    case = run.case
    data = {
        "case": case.name,
        "description": case.description,
        "unit": case.unit,
        "baseline": case.baseline,
        "command": command,
        "argv": sys.argv,
        "reps": run.reps,
        "quick": run.quick,
        "seed": run.seed,
        "machine": machine,
        "systems": [
            {
                "name": name,
                "description": case.system(name).description,
                "skipped": run.skipped.get(name),
                "command": child_command(case, name, quick=run.quick, seed=run.seed),
            }
            for name in run.systems
        ],
        "records": [asdict(r) for r in run.records],
        "summary": summary,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
