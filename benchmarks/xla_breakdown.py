"""Where an rlsys iteration's time goes inside XLA:CPU: per loop body and per thunk.

    python benchmarks/xla_breakdown.py ppo      # PPO, gymnax CartPole, the ppo_cartpole setup
    python benchmarks/xla_breakdown.py sweep    # A2C, trivial env, scaling_sweep's base point
    python benchmarks/xla_breakdown.py sweep --layers 4   # another point of the sweep

XLA:CPU runs a compiled program as a sequence of *thunks* (a loop fusion, a library dot, a
while loop, ...), each named after its HLO instruction. With `--xla_cpu_enable_xprof_traceme`
the JAX profiler records every thunk; this script records a window of iterations, maps each
thunk back to the HLO computation that holds it (a while body is one loop of the program:
acting steps, minibatch updates) and prints, per computation, thunks and thunk time per
iteration (a while thunk's own span, which holds its body's, is left out of these sums),
then the costliest thunks with their time per call and what they are.

Tracing costs about half a microsecond per thunk, so the small thunks of an acting step
read high; the printed wall time per iteration is with tracing on. Tracing also makes some
YNNPACK fusions take page faults on every call (their scratch memory, it seems, on pages
the heap has just given back): PPO's critic 64x64 weight gradient reads about 40 us traced against
the actor's 24, and 41% of its samples under `perf` are in the operating system (page
faults, glibc growing a thread's heap); untraced, XLA's threads take almost no page faults
(benchmarks/HISTORY.md, thirty-first session). So compare a thunk with its twins before
reading much into one that stands out. Eigen's `dot` thunks return before their work is
done (it runs as pool tasks): their spans read short, and a product running beside one
reads long. `dot` thunks are XLA's own (Eigen) matrix products, `ynn_fusion` ones
YNNPACK's: YNNPACK takes a dot only when the left operand's contracted dimension is its last
(`ynn_support.cc` in XLA), which a weight gradient Xᵀ·dY (contracting the batch rows of
both) never is.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import jax

from rlsys.compiler.lower.hlo_work import computations, while_loop

TRACE_FLAG = "--xla_cpu_enable_xprof_traceme=true"
SWEEP_BASE = {"envs": 256, "episode": 250, "width": 64, "layers": 2}  # scaling_sweep's BASE


def parse_hlo(text: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(instruction -> its computation, instruction -> its text, loop body -> a label)."""
    owner, body, labels = {}, {}, {}
    for computation, instructions in computations(text)[0].items():
        for name, instruction in instructions:
            owner[name], body[name] = computation, instruction
            if loop := while_loop(instruction):
                trips = "?" if loop[1] is None else loop[1]
                labels[loop[0]] = f"while body ({trips} trips per call)"
    return owner, body, labels


def describe(instruction: str) -> str:
    """The shape and kind of a thunk's instruction, with a dot's contracted dimensions."""
    shape = instruction.split(" ", 1)[0]
    kind = re.search(r"\b(dot|fusion|copy|while|sort|concatenate|call)\(", instruction)
    text = f"{shape} {kind.group(1) if kind else '?'}"
    if kind and kind.group(1) == "dot":
        dims = re.search(r"(lhs_contracting_dims=\{[\d,]*\}, rhs_contracting_dims=\{[\d,]*\})",
                         instruction)  # fmt: skip
        text += f" {dims.group(1) if dims else ''}"
    if "__ynn_fusion" in instruction:
        text += " (YNNPACK)"
    return text


def build(workload: str, iterations: int, point: dict[str, int], devices: int = 1):
    """The compiled program: PPO with 10 iterations per call, or A2C with one at `point`."""
    if workload == "ppo":
        from rlsys.algos.config import PPOConfig
        from rlsys.algos.ppo import build_ppo

        config = PPOConfig(env="gymnax:CartPole-v1", total_steps=iterations * 1024,
                           iterations_per_call=10).validate()  # fmt: skip
        built = build_ppo(config)
    else:
        from rlsys.algos.a2c import build_a2c
        from rlsys.algos.config import A2CConfig

        envs, episode = point["envs"], point["episode"]  # one episode of every env
        config = A2CConfig(env=f"trivial:16:{episode}", num_envs=envs, num_steps=episode,
                           total_steps=iterations * envs * episode,
                           hidden_size=point["width"], hidden_layers=point["layers"],
                           iterations_per_call=1).validate()  # fmt: skip
        built = build_a2c(config)
    return built.program.compile(bounds=built.bounds, devices=devices,
                                 iterations_per_call=config.iterations_per_call)  # fmt: skip


def profile(exe, warm: int, window: int, folder: str) -> float:
    """Run, tracing iterations warm..warm+window; the wall seconds per traced iteration."""
    seen, clock = [0], {}

    def on_iteration(i: int, outputs: dict) -> None:
        seen[0] += 1
        if seen[0] == warm:
            jax.profiler.start_trace(folder)
            clock["start"] = time.perf_counter()
        elif seen[0] == warm + window:
            clock["stop"] = time.perf_counter()
            jax.profiler.stop_trace()

    exe.run(on_iteration=on_iteration)
    return (clock["stop"] - clock["start"]) / window


def thunk_events(folder: str):
    (path,) = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
    data = jax.profiler.ProfileData.from_file(path)
    for plane in data.planes:
        for line in plane.lines:
            if "XLAEigen" in line.name:  # the threads XLA:CPU runs thunks on
                for event in line.events:
                    yield event.name, event.duration_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=("ppo", "sweep"))
    parser.add_argument("--top", type=int, default=25, help="thunks listed (default 25)")
    for factor, value in SWEEP_BASE.items():
        help = f"sweep only: the scaling sweep's {factor} (default {value})"
        parser.add_argument(f"--{factor}", type=int, default=value, help=help)
    parser.add_argument(
        "--devices",
        type=int,
        default=1,
        help="CPU devices the envs are split over (compile(devices=N))",
    )
    args = parser.parse_args()
    # Read once, when the first computation starts the backend: nothing has run yet.
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TRACE_FLAG}".strip()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys from this checkout
    from rlsys.compiler import use_cpu_devices

    use_cpu_devices(args.devices)
    warm, window = (20, 30) if args.workload == "ppo" else (3, 8)
    point = {factor: getattr(args, factor) for factor in SWEEP_BASE}
    exe = build(args.workload, warm + window + 10, point, args.devices)
    texts = exe.optimized_hlo()
    owner, body, labels = parse_hlo(next(iter(texts.values())))
    with tempfile.TemporaryDirectory() as folder:
        wall = profile(exe, warm, window, folder)
        events = list(thunk_events(folder))
    per_computation = collections.defaultdict(lambda: [0, 0])
    per_thunk = collections.defaultdict(lambda: [0, 0])
    for name, ns in events:
        if name not in owner:  # the executor's own spans, not thunks
            continue
        tables = [(per_thunk, name)]
        if not while_loop(body[name]):  # a loop's own span holds its body's thunks
            tables.append((per_computation, owner[name]))
        for table, key in tables:
            table[key][0] += 1
            table[key][1] += ns
    print(f"{args.workload}: {wall * 1e3:.2f} ms per iteration with tracing, "
          f"{window} iterations traced")  # fmt: skip
    print(f"\n{'computation':58} {'thunks/iter':>11} {'ms/iter':>8}")
    for name, (count, ns) in sorted(per_computation.items(), key=lambda kv: -kv[1][1]):
        label = labels.get(name, "top level" if name.startswith("main") else "")
        print(f"{(name + ' ' + label)[:58]:58} {count / window:11.1f} {ns / 1e6 / window:8.3f}")
    print(f"\n{'thunk':40} {'us/call':>8} {'calls/iter':>10} {'ms/iter':>8}  what")
    for name, (count, ns) in sorted(per_thunk.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{name[:40]:40} {ns / 1e3 / count:8.2f} {count / window:10.1f} "
              f"{ns / 1e6 / window:8.3f}  {owner[name][:24]}: {describe(body[name])}")  # fmt: skip


if __name__ == "__main__":
    main()
