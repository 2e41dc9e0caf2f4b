"""The scaling sweep's A2C iteration on one CPU device and split over several, A/B in one
process.

    python benchmarks/data_parallel_ab.py layers=4            # a point of scaling_sweep
    python benchmarks/data_parallel_ab.py base --devices 2 --rounds 7
    python benchmarks/data_parallel_ab.py layers=4 --segmented   # both compiled segmented

The point's program is compiled twice, `devices=1` and `devices=N` (the envs split over N
CPU devices: `rlsys/compiler/lower/data_parallel.py`); then the two run in turn, 6
iterations each, `--rounds` times. Printed per variant: the median over rounds of its
median milliseconds per iteration (iterations 2 to 6), and the best; and the largest
relative difference between the two variants' losses (the devices' sums add in another
order). Set RLSYS_CPU_ASYNC_DISPATCH=1 to compare with JAX's asynchronous CPU dispatch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys and benchmarks


def main() -> None:
    from benchmarks.cases.scaling_sweep import grid

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point", choices=tuple(grid()))
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    segmented = "compile both as several XLA programs (segmented=True)"
    parser.add_argument("--segmented", action="store_true", help=segmented)
    args = parser.parse_args()
    point = grid()[args.point]
    if args.devices < 2 or point["envs"] % args.devices:
        parser.error(f"--devices must be at least 2 and divide the point's {point['envs']} envs")
    from rlsys.compiler import use_cpu_devices

    use_cpu_devices(args.devices)  # before anything runs on JAX
    import numpy as np

    from benchmarks.chunked_grad_ab import compile_point

    programs = {"one device": compile_point(point, segmented=args.segmented),
                f"{args.devices} devices": compile_point(point, devices=args.devices,
                                                         segmented=args.segmented)}  # fmt: skip
    millis: dict[str, list[float]] = {name: [] for name in programs}
    losses: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, exe in programs.items():
            stamps, losses[name] = [], []

            def on_iteration(i, outputs, stamps=stamps, loss=losses[name]) -> None:
                stamps.append(time.perf_counter())
                loss.append(float(outputs["loss"]))

            exe.run(on_iteration=on_iteration)
            millis[name].append(1e3 * statistics.median(np.diff(stamps)))
    for name, values in millis.items():
        print(f"{args.point} {name:>10}: {statistics.median(values):7.1f} ms per iteration "
              f"(best {min(values):.1f}), {args.rounds} rounds")  # fmt: skip
    one, split = (np.asarray(v) for v in losses.values())
    print(f"largest relative difference of the losses: {np.max(np.abs(split / one - 1)):.2e}")


if __name__ == "__main__":
    main()
