"""GPU kernels per iteration: rlsys vs the PureJaxRL-style baseline, same workload.

    python benchmarks/gpu/kernel_count.py ppo                 # ppo_cartpole's PPO setup
    python benchmarks/gpu/kernel_count.py sweep base          # a scaling_sweep point (A2C)
    python benchmarks/gpu/kernel_count.py sweep width=16 --rlsys off,rlsys --hlo-dir /tmp/hlo

On a GPU an iteration of these small workloads is thousands of kernels of a few
microseconds each, so its time goes with how many kernels and loop steps the program runs,
not with arithmetic. This script compiles both programs as their benchmarks do (PPO 10
iterations per call, the sweep one), times a window of iterations, then traces another with
the JAX profiler and counts, per iteration, the kernels and copies on the GPU's streams and
their summed time, and per loop body of the program, the kernels, their GPU time and the GPU's
idle time before them. `--rlsys off,rlsys,graphs` compares XLA:GPU compiler options for rlsys
(`rlsys`: its own, from `rlsys/compiler/lower/gpu_launch.py`); `--hlo-dir` writes the optimized
programs (a fusion is a kernel).

It runs on a CPU too, counting no kernels; `tests/test_bench_kernel_count.py` checks how it
attributes events to loops.
"""

from __future__ import annotations

import argparse
import collections
import glob
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "cases")]

from rlsys.compiler.lower import gpu_launch  # noqa: E402 (rlsys from this checkout)

# jaxlib's profile events warn on every stats lookup (under Python 3.12): noise, not news
warnings.filterwarnings(
    "ignore", message=".*event_stats has no __module__", category=DeprecationWarning
)

# A driver runs iterations until its callback, called after each one, returns True.
Driver = Callable[[Callable[[], bool]], None]


def rlsys_driver(workload: str, point: dict[str, int], options: dict) -> tuple[Driver, str]:
    """rlsys's program as its benchmark compiles it, and its optimized HLO. (`options` are
    set by the caller, in `gpu_launch`, where rlsys reads them.)"""
    from xla_breakdown import build

    exe = build(workload, 10**5, point)

    def drive(after_iteration: Callable[[], bool]) -> None:
        exe.run(on_iteration=lambda i, outputs: after_iteration())

    return drive, "\n\n".join(exe.optimized_hlo().values())


def baseline_driver(workload: str, point: dict[str, int], options: dict) -> tuple[Driver, str]:
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
    compiled = jax.jit(call).lower(state).compile(compiler_options=options or None)

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
    of `traced` iterations: the GPU's stream events (kernels and copies) in it."""
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
    events = []  # (start ns, end ns, HLO instruction or kernel name, is a copy)
    for path in glob.glob(f"{folder}/**/*.xplane.pb", recursive=True):
        for plane in jax.profiler.ProfileData.from_file(path).planes:
            if not plane.name.startswith("/device:GPU"):
                continue
            for line in plane.lines:
                if not line.name.startswith("Stream"):
                    continue
                for event in line.events:
                    op = dict(event.stats).get("hlo_op") or event.name
                    copy = any(word in event.name.lower() for word in ("memcpy", "memset"))
                    events.append((event.start_ns, event.end_ns, str(op), copy))
    return {"ms/iter": (clock["timed"] - clock["start"]) / timed * 1e3, "events": sorted(events)}


def per_computation(events: list, traced: int, hlo: str) -> dict[str, list[float]]:
    """Per HLO computation (a loop body, the top level): its kernels, their GPU time and the
    GPU's idle time just before them, per iteration. Idle before a kernel is host time: a
    launch, a loop step's bookkeeping, a wait on the host."""
    from xla_breakdown import parse_hlo

    owner, _, labels = parse_hlo(hlo)
    owner = {name.replace(".", "_"): (comp, labels.get(comp, "")) for name, comp in owner.items()}
    table = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    frontier = events[0][0] if events else 0
    for start, end, op, _ in events:
        comp, label = owner.get(op.replace(".", "_"), ("(not in the HLO)", ""))
        row = table[f"{comp} {label}".strip()]
        row[0] += 1 / traced
        row[1] += (end - start) / 1e3 / traced
        row[2] += max(0, start - frontier) / 1e3 / traced
        frontier = max(frontier, end)
    return table


# XLA:GPU compiler options to compare
VARIANTS: dict[str, dict] = {
    "off": {},
    "rlsys": dict(gpu_launch.GPU_LAUNCH_OPTIONS),  # what rlsys compiles with on a GPU
    "graphs": {
        "xla_gpu_graph_min_graph_size": 1,
        # the default command types plus whole loops ("+WHILE" is refused as an option)
        "xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,"
        "WHILE,CONDITIONAL",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=("ppo", "sweep"))
    parser.add_argument("point", nargs="?", default="base", help="sweep only: base, width=16, ...")
    parser.add_argument("--rlsys", default="rlsys", metavar="VARIANTS",
                        help="comma-separated XLA:GPU options for rlsys, each measured: "
                        f"{', '.join(VARIANTS)} (default rlsys, its own)")  # fmt: skip
    parser.add_argument(
        "--baseline",
        default="off",
        choices=VARIANTS,
        help="XLA:GPU options for the PureJaxRL-style program (default off)",
    )
    parser.add_argument("--hlo-dir", type=Path, help="write the optimized HLO programs here")
    args = parser.parse_args()
    from scaling_sweep import grid

    points = grid()
    if args.point not in points:
        parser.error(f"unknown point {args.point!r}; choose one of {', '.join(points)}")
    variants = args.rlsys.split(",")
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown --rlsys variant(s) {sorted(unknown)}; choose from {list(VARIANTS)}")
    warm, timed, traced = (20, 30, 10) if args.workload == "ppo" else (3, 8, 2)
    label = args.workload + ("" if args.workload == "ppo" else f" {args.point}")
    print(f"{label} on {jax.default_backend()}: {warm} warm, {timed} timed, {traced} traced")
    runs = [(f"rlsys/{v}", rlsys_driver, VARIANTS[v]) for v in variants]
    runs.append((f"purejaxrl/{args.baseline}", baseline_driver, VARIANTS[args.baseline]))
    for system, make, options in runs:
        gpu_launch.GPU_LAUNCH_OPTIONS = options  # read when rlsys compiles
        began = time.perf_counter()
        drive, hlo = make(args.workload, points[args.point], options)
        compile_s = time.perf_counter() - began
        if args.hlo_dir:
            args.hlo_dir.mkdir(parents=True, exist_ok=True)
            name = f"{label.replace(' ', '-')}-{system.replace('/', '-')}"
            (args.hlo_dir / f"{name}.hlo.txt").write_text(hlo)
        with tempfile.TemporaryDirectory() as folder:
            result = measure(drive, warm, timed, traced, folder)
        events, copies = result["events"], sum(e[3] for e in result["events"])
        fusions = sum(" fusion(" in line for line in hlo.splitlines())
        whiles = sum(" while(" in line for line in hlo.splitlines())
        print(f"  {system:16} {result['ms/iter']:8.3f} ms/iter  "
              f"{(len(events) - copies) / traced:8.1f} kernels/iter  "
              f"{copies / traced:6.1f} copies/iter  | HLO: {fusions} fusions, "
              f"{whiles} whiles | built in {compile_s:.1f} s")  # fmt: skip
        table = per_computation(events, traced, hlo)
        print(f"    {'computation':56} {'events':>8} {'busy us':>9} {'idle us':>9}  (per iter)")
        for name, (count, busy, idle) in sorted(table.items(), key=lambda kv: -kv[1][1] - kv[1][2]):
            print(f"    {name[:56]:56} {count:8.1f} {busy:9.1f} {idle:9.1f}")
        names = collections.Counter(e[2] for e in events)
        for name, count in names.most_common(8):
            print(f"      {count / traced:7.1f}/iter  {name[:100]}")


if __name__ == "__main__":
    main()
