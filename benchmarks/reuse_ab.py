"""The scaling sweep's A2C iteration with the gradient taking the acting loop's activations
(`rlsys/compiler/lower/reuse.py`) and recomputing them, A/B in one process.

    python benchmarks/reuse_ab.py width=256                  # a point of scaling_sweep
    python benchmarks/reuse_ab.py layers=4 --min-width 1     # reuse at 64 wide too

Both variants are compiled once (`reuse.MIN_WIDTH` set to the variant's: `--min-width`, 129
by default, or never), then run in turn, 6 iterations each, `--rounds` times, the order
reversed every round. Printed per variant: the median over rounds of its median seconds per
iteration (iterations 2 to 6), the best, and how far its losses are from the recomputing
variant's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys and benchmarks

from benchmarks.cases.scaling_sweep import grid
from benchmarks.chunked_grad_ab import compare, compile_point
from rlsys.compiler.lower import reuse

NEVER = 1 << 30  # no activation is this wide: every one is recomputed


def compile_variant(point: dict[str, int], min_width: int):
    default = reuse.MIN_WIDTH
    reuse.MIN_WIDTH = min_width
    try:
        return compile_point(point)
    finally:
        reuse.MIN_WIDTH = default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point", choices=tuple(grid()))
    help = f"the narrowest activation reused (default {reuse.MIN_WIDTH})"
    parser.add_argument("--min-width", type=int, default=reuse.MIN_WIDTH, help=help)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    point = grid()[args.point]
    widths = {"reuse": args.min_width, "recompute": NEVER}
    programs = {name: compile_variant(point, width) for name, width in widths.items()}
    compare(args.point, programs, args.rounds, reference="recompute")


if __name__ == "__main__":
    main()
