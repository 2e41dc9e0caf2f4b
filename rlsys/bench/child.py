"""The child side of a benchmark: parse `--system/--quick/--seed`, run, `report()` results.

The runner measures what only it can see from outside (wall time of the whole process, peak
RSS of the process tree); the child reports what only it knows: how much work it did and how
long its timed region took (excluding imports and compilation), plus any other numbers
(`compile_seconds`, `ns_per_call`). They travel as one JSON object in the file named by
RLSYS_BENCH_RESULT, not on stdout, so that whatever the libraries print cannot corrupt them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rlsys.bench.case import Case

RESULT_ENV = "RLSYS_BENCH_RESULT"


def report(*, env_steps: float, seconds: float, **metrics: float) -> None:
    """Report this run: `env_steps` units of work done in `seconds` of timed work.

    `env_steps` counts the case's unit (env steps, calls, ...). Extra keyword arguments are
    named metrics; the tables show their median per system. Without RLSYS_BENCH_RESULT (a
    case run by hand) the result is printed instead.
    """
    values = {"env_steps": env_steps, "seconds": seconds, **metrics}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"report({key}=...) must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"report({key}={value!r}) must be finite")
    if seconds <= 0:
        raise ValueError(f"report(seconds={seconds!r}) must be positive")
    result = {"env_steps": env_steps, "seconds": seconds, "metrics": metrics}
    target = os.environ.get(RESULT_ENV)
    if not target:
        print(json.dumps(result, indent=2))
        return
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)  # atomic: the runner never reads half a result


def child_main(case: Case, argv: Sequence[str] | None = None) -> None:
    """Entry point of a case file run as a child: run the chosen system once."""
    parser = argparse.ArgumentParser(
        prog=Path(sys.argv[0]).name,
        description=f"{case.description} (one run of one system; the runner is `rlsys bench`)",
    )
    parser.add_argument("--system", required=True, choices=case.system_names)
    parser.add_argument("--quick", action="store_true", help="a smaller workload")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    system = case.system(args.system)
    reason = system.skip_reason()
    if reason is not None:
        parser.exit(3, f"system {system.name!r} is not available here: {reason}\n")
    if system.run is None:
        parser.exit(3, f"system {system.name!r} defines no run function\n")
    system.run(quick=args.quick, seed=args.seed, **system.params)
