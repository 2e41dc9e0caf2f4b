"""The scaling sweep's A2C iteration with its layers' weight gradients summed over blocks of
rows (`_blocked_rows_times` in `rlsys/compiler/rules/reduce.py`) and as XLA's own dot, A/B in
one process.

    python benchmarks/weight_grad_ab.py base --devices 2     # a point of scaling_sweep
    python benchmarks/weight_grad_ab.py episode=125 --segmented --rounds 8

Both variants are compiled once (the dot: `_BLOCKED_MAX_WEIGHT` set to 0 while it is
built), then run in turn, 6 iterations each, `--rounds` times, the order reversed every
round. Printed per variant: the median over rounds of its median seconds per iteration
(iterations 2 to 6), the best, and how far its losses are from the dot's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys and benchmarks

from benchmarks.cases.scaling_sweep import grid
from benchmarks.chunked_grad_ab import compare, compile_point
from rlsys.compiler import use_cpu_devices
from rlsys.compiler.rules import reduce


def compile_variant(point: dict[str, int], blocked: bool, devices: int, segmented: bool):
    default = reduce._BLOCKED_MAX_WEIGHT
    reduce._BLOCKED_MAX_WEIGHT = default if blocked else 0
    try:
        return compile_point(point, devices=devices, segmented=segmented)
    finally:
        reduce._BLOCKED_MAX_WEIGHT = default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point", choices=tuple(grid()))
    parser.add_argument("--devices", type=int, default=1, help="CPU devices the envs split over")
    parser.add_argument("--segmented", action="store_true", help="as several XLA programs")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    use_cpu_devices(args.devices)  # before JAX starts
    point = grid()[args.point]
    programs = {name: compile_variant(point, name == "blocked", args.devices, args.segmented)
                for name in ("blocked", "dot")}  # fmt: skip
    compare(args.point, programs, args.rounds, reference="dot")


if __name__ == "__main__":
    main()
