"""The scaling sweep's A2C iteration with its gradient re-run whole and in chunks, A/B in one
process.

    python benchmarks/chunked_grad_ab.py layers=4            # a point of scaling_sweep
    python benchmarks/chunked_grad_ab.py base --chunk-mib 1 2 --rounds 5

Each variant is built and compiled once (`rlsys/compiler/lower/chunked_grad.py`'s chunk size
set to the variant's, its other limits lifted, so that every variant but "whole" chunks);
then the variants run in turn, 6 iterations each, `--rounds` times, the order reversed every
round (`compare`). Printed per variant: the median over rounds of its median seconds per
iteration (iterations 2 to 6), and the best.
One process and alternating rounds, because this machine's speed drifts by tens of percent
between processes a minute apart.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys and benchmarks

import jax
import numpy as np

from benchmarks.cases.scaling_sweep import OBS_SIZE, grid
from rlsys.algos.a2c import build_a2c
from rlsys.algos.config import A2CConfig
from rlsys.compiler.lower import chunked_grad
from rlsys.compiler.lower import jax as lowering

ITERATIONS = 6


def compile_variant(point: dict[str, int], chunk_bytes: int | None):
    """The point's program compiled with chunks of `chunk_bytes`, or whole (None)."""
    choose = chunked_grad.row_chunking
    if chunk_bytes is None:
        lowering.row_chunking = lambda *args, **kwargs: None
    else:
        chunked_grad.CHUNK_BYTES, chunked_grad.WHOLE_BYTES = chunk_bytes, 0
        chunked_grad.MAX_WIDTH = 1 << 30
        chunked_grad.CHUNKED_BACKENDS = (jax.default_backend(),)
    try:
        return compile_point(point)
    finally:
        lowering.row_chunking = choose


def compile_point(point: dict[str, int], devices: int = 1, segmented: bool = False):
    """The A2C iteration of a sweep point, compiled to run ITERATIONS iterations, one a call
    (its envs split over `devices` devices; `segmented`: as several XLA programs)."""
    envs, episode = point["envs"], point["episode"]
    config = A2CConfig(env=f"trivial:{OBS_SIZE}:{episode}", num_envs=envs, num_steps=episode,
                       total_steps=ITERATIONS * envs * episode, hidden_size=point["width"],
                       hidden_layers=point["layers"], iterations_per_call=1).validate()  # fmt: skip
    built = build_a2c(config)
    return built.program.compile(bounds=built.bounds, iterations_per_call=1, devices=devices,
                                 segmented=segmented)  # fmt: skip


def iteration_seconds(exe) -> list[float]:
    stamps: list[float] = []
    exe.run(on_iteration=lambda i, outputs: stamps.append(time.perf_counter()))
    return [b - a for a, b in itertools.pairwise(stamps)]


def compare(point: str, programs: dict, rounds: int, reference: str | None = None) -> None:
    """Run `programs` in turn, ITERATIONS iterations each, `rounds` times, the order reversed
    every round; print each one's median over rounds of its median seconds per iteration
    (iterations 2 to 6), its best, and how far its losses are from `reference`'s, if given."""
    losses = {} if reference is None else {
        name: np.asarray(exe.run()["loss"]) for name, exe in programs.items()}  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in programs}
    for round_ in range(rounds):
        for name in list(programs)[:: 1 if round_ % 2 == 0 else -1]:
            seconds[name].append(statistics.median(iteration_seconds(programs[name])))
    width = max(map(len, programs))
    for name, values in seconds.items():
        line = (f"{point} {name:>{width}}: {statistics.median(values) * 1e3:7.1f} ms per "
                f"iteration (best {min(values) * 1e3:.1f}), {rounds} rounds")  # fmt: skip
        if reference is not None:
            apart = np.max(np.abs(losses[name] / losses[reference] - 1))
            line += f"; losses within {apart:.1e} of {reference}'s"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point", choices=tuple(grid()))
    help = "chunk sizes to compare with the whole re-run (default 1)"
    parser.add_argument("--chunk-mib", type=float, nargs="+", default=[1.0], help=help)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    point = grid()[args.point]
    sizes = {"whole": None, **{f"{mib:g}MiB": int(mib * 2**20) for mib in args.chunk_mib}}
    programs = {name: compile_variant(point, size) for name, size in sizes.items()}
    compare(args.point, programs, args.rounds)


if __name__ == "__main__":
    main()
