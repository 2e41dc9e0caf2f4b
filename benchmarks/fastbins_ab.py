"""The scaling sweep's `auto` system at one point with glibc's fastbins off (as
`rlsys.compiler.heap.keep_freed_buffers` sets them) and on, in fresh processes alternating.

    python benchmarks/fastbins_ab.py envs=64 --runs 16

Each run trains 12 iterations in a process of its own and prints its peak RSS above the
idle process (after imports, as the sweep measures it) and its median iteration time
(iterations 4 to 12). With fastbins on, some runs' heap grows by a whole block of a
program's temporaries (`heap.py`'s docstring), so compare how many runs sit high, not means.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS, WARM = 12, 3


def one_run(point: str) -> None:
    """Train at `point` in this process; print `above_idle_mib iteration_ms`."""
    import resource

    import psutil

    sys.path.insert(0, str(ROOT))
    import rlsys.algos.a2c  # noqa: F401  (imported before the idle RSS, as in the sweep)
    from rlsys.compiler import heap, use_cpu_devices

    use_cpu_devices()
    idle = psutil.Process().memory_info().rss / 2**20
    if os.environ.get("FASTBINS") == "on":  # everything keep_freed_buffers sets but M_MXFAST
        set_options = heap._set_malloc_options
        heap._set_malloc_options = lambda *options: set_options(
            *[option for option in options if option[0] != heap._M_MXFAST])  # fmt: skip
    from benchmarks.cases.scaling_sweep import _train_rlsys, grid

    result = _train_rlsys(grid()[point], ITERATIONS, seed=0, segmented="auto")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ms = 1e3 * statistics.median(result["iteration_seconds"][WARM:])
    print(f"{peak - idle:.0f} {ms:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("--runs", type=int, default=8, help="runs per variant")
    parser.add_argument("--one", choices=("off", "on"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one_run(args.point)
    results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for run in range(args.runs):
        for variant in ("off", "on") if run % 2 == 0 else ("on", "off"):
            done = subprocess.run([sys.executable, __file__, args.point, "--one", variant],
                                  capture_output=True, text=True, check=True,
                                  env={**os.environ, "FASTBINS": variant})  # fmt: skip
            mib, ms = (float(v) for v in done.stdout.split()[-2:])
            results[variant].append((mib, ms))
            print(f"run {run + 1} fastbins {variant:3}: {mib:4.0f} MiB above idle, {ms:6.1f} ms",
                  flush=True)  # fmt: skip
    for variant, rows in results.items():
        mibs = sorted(m for m, _ in rows)
        print(f"fastbins {variant:3}: MiB above idle {mibs}; median iteration "
              f"{statistics.median(ms for _, ms in rows):.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
