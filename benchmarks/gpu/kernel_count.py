"""GPU kernels per iteration: rlsys vs the PureJaxRL-style baseline, same workload.

    python benchmarks/gpu/kernel_count.py ppo                 # ppo_cartpole's PPO setup
    python benchmarks/gpu/kernel_count.py sweep base          # a scaling_sweep point (A2C)
    python benchmarks/gpu/kernel_count.py sweep width=16 --unpacked --hlo-dir /tmp/hlo

On a GPU an iteration of these small workloads is thousands of kernels of a few
microseconds each, so its time goes with how many kernels and loop steps the program runs,
not with arithmetic. This script compiles both programs as their benchmarks do (PPO 10
iterations per call, the sweep one), times a window of iterations, then traces another with
the JAX profiler and counts, per iteration, the kernels and copies on the GPU's streams and
their summed time. `--hlo-dir` writes both optimized programs (a fusion is a kernel) to see
where extra kernels come from; `--unpacked` turns off the packing of small kept values in
rlsys's scans (a CPU optimization) to see what it costs on the GPU.

On the CPU it runs too and counts no kernels: that is how it is tested.
"""

from __future__ import annotations

import argparse
import collections
import glob
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "cases")]

# A driver runs iterations until its callback, called after each one, returns True.
Driver = Callable[[Callable[[], bool]], None]


def rlsys_driver(workload: str, point: dict[str, int]) -> tuple[Driver, str]:
    """rlsys's program as its benchmark compiles it, and its optimized HLO."""
    from xla_breakdown import build

    exe = build(workload, 10**5, point)

    def drive(after_iteration: Callable[[], bool]) -> None:
        exe.run(on_iteration=lambda i, outputs: after_iteration())

    return drive, "\n\n".join(exe.optimized_hlo().values())


def baseline_driver(workload: str, point: dict[str, int]) -> tuple[Driver, str]:
    """The PureJaxRL-style program: PPO 10 iterations per call in a scan, A2C one."""
    if workload == "ppo":
        from baselines import purejaxrl_style_ppo

        init, update, _ = purejaxrl_style_ppo.make_functions(10**8)
        per_call = 10

        def call(state):
            return jax.lax.scan(update, state, None, length=per_call)
    else:
        from baselines import A2CSetup, purejaxrl_style_a2c

        setup = A2CSetup(num_envs=point["envs"], episode_length=point["episode"], obs_size=16,
                         hidden=point["width"], layers=point["layers"])  # fmt: skip
        init, call = purejaxrl_style_a2c.make_functions(setup, 10**5)
        per_call = 1
    state = jax.jit(init)(jax.random.PRNGKey(0))
    compiled = jax.jit(call).lower(state).compile()

    def drive(after_iteration: Callable[[], bool]) -> None:
        nonlocal state
        while True:
            state, stats = compiled(state)
            jax.block_until_ready(stats)
            if any([after_iteration() for _ in range(per_call)]):
                return

    return drive, compiled.as_text()


def measure(drive: Driver, warm: int, timed: int, traced: int, folder: str) -> dict:
    """Untraced ms per iteration over `timed` iterations after `warm`, then a traced window
    of `traced` iterations: kernels, copies and their GPU time per iteration."""
    seen, clock = [0], {}

    def after_iteration() -> bool:
        seen[0] += 1
        if seen[0] == warm:
            clock["start"] = time.perf_counter()
        elif seen[0] == warm + timed:
            clock["timed"] = time.perf_counter()
            jax.profiler.start_trace(folder)
        elif seen[0] == warm + timed + traced:
            jax.profiler.stop_trace()
            return True
        return False

    drive(after_iteration)
    ms = (clock["timed"] - clock["start"]) / timed * 1e3
    kinds: collections.Counter = collections.Counter()
    busy_ns, names = 0, collections.Counter()
    for path in glob.glob(f"{folder}/**/*.xplane.pb", recursive=True):
        for plane in jax.profiler.ProfileData.from_file(path).planes:
            if not plane.name.startswith("/device:GPU"):
                continue
            for line in plane.lines:
                if not line.name.startswith("Stream"):
                    continue
                for event in line.events:
                    copy = "memcpy" in event.name.lower() or "memset" in event.name.lower()
                    kinds["copies" if copy else "kernels"] += 1
                    busy_ns += event.duration_ns
                    names[event.name] += 1
    return {"ms/iter": ms, "kernels/iter": kinds["kernels"] / traced,
            "copies/iter": kinds["copies"] / traced, "GPU us/iter": busy_ns / 1e3 / traced,
            "top": [(n, c / traced) for n, c in names.most_common(12)]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=("ppo", "sweep"))
    parser.add_argument("point", nargs="?", default="base", help="sweep only: base, width=16, ...")
    parser.add_argument("--unpacked", action="store_true",
                        help="rlsys without packing small kept values in scans")  # fmt: skip
    parser.add_argument("--hlo-dir", type=Path, help="write both optimized HLO programs here")
    args = parser.parse_args()
    from scaling_sweep import grid

    points = grid()
    if args.point not in points:
        parser.error(f"unknown point {args.point!r}; choose one of {', '.join(points)}")
    if args.unpacked:
        from rlsys.compiler.lower import jax_loop

        jax_loop.PACKED_BYTES = -1  # no kept value is that small: none is packed
    warm, timed, traced = (20, 30, 10) if args.workload == "ppo" else (3, 8, 2)
    label = args.workload + ("" if args.workload == "ppo" else f" {args.point}")
    label += " (rlsys unpacked)" if args.unpacked else ""
    print(f"{label} on {jax.default_backend()}: {warm} warm, {timed} timed, {traced} traced")
    for system, make in (("rlsys", rlsys_driver), ("purejaxrl", baseline_driver)):
        began = time.perf_counter()
        drive, hlo = make(args.workload, points[args.point])
        compile_s = time.perf_counter() - began
        if args.hlo_dir:
            args.hlo_dir.mkdir(parents=True, exist_ok=True)
            name = f"{args.workload}-{args.point}-{system}{'-unpacked' if args.unpacked else ''}"
            (args.hlo_dir / f"{name}.hlo.txt").write_text(hlo)
        with tempfile.TemporaryDirectory() as folder:
            result = measure(drive, warm, timed, traced, folder)
        fusions = sum(" fusion(" in line for line in hlo.splitlines())
        whiles = sum(" while(" in line for line in hlo.splitlines())
        print(f"  {system:9} {result['ms/iter']:8.3f} ms/iter  "
              f"{result['kernels/iter']:8.1f} kernels/iter  "
              f"{result['copies/iter']:6.1f} copies/iter  "
              f"GPU {result['GPU us/iter']:8.1f} us/iter  | HLO: {fusions} fusions, "
              f"{whiles} whiles | built in {compile_s:.1f} s")  # fmt: skip
        for name, count in result["top"]:
            print(f"      {count:7.1f}/iter  {name[:100]}")


if __name__ == "__main__":
    main()
