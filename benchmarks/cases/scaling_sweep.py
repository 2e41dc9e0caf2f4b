"""TimeRL's scaling sweep: A2C on the trivial env, one factor at a time, rlsys vs baselines.

The workload of TimeRL's scaling study: the trivial env (`rlsys/envs/trivial_env.py`,
observations of OBS_SIZE = 16 floats: big enough to be a real matmul input, small enough
that the env costs nothing) and an A2C update of 1 epoch over the full batch. One iteration
is one episode of every env (the episode length is the rollout length), then one Adam step.
Around the base point (256 envs, episodes of 250 steps, 2 hidden layers of 64) one factor
varies at a time: envs {64, 256, 512}, episode length {125, 250, 500}, width {16, 64, 256},
layers {1, 2, 4}: 9 points, 4 systems each.

* `rlsys@POINT`: `rlsys.algos.a2c.build_a2c` with `A2CConfig(env="trivial:16:T",
  num_steps=T, ...)`, one iteration per jitted call, compiled with `devices="auto"`: JAX
  has one CPU device per core the process may use, and the compiler keeps the envs split
  over them (`rlsys/compiler/lower/data_parallel.py`) if that ran the first iterations
  faster than one device did (its choice is in the result as `placement`);
* `auto@POINT`: the same with `segmented="auto"` too: the iteration compiled as several XLA
  programs where compiling, not running, sets the peak memory; `devices="auto"` times a
  split of those only where a call does 4 GFLOP or more in matrix products (base, envs=512,
  episode=500, layers=4; compiling the split raises the peak the segments lowered), and
  compiles that split whole (faster than split segments); the others are placed as
  `rlsys@POINT`'s;
* `purejaxrl@POINT`: `benchmarks/baselines/purejaxrl_style_a2c.py`, one jitted iteration;
* `cleanrl@POINT`: `benchmarks/baselines/cleanrl_style_a2c.py`, PyTorch with 1 thread and
  the env as a NumPy vector env.

Every run does WARM iterations, then TIMED iterations (1 + 2 with `--quick`). Reported:
`iter_s` (median seconds of a timed iteration), `compile_s` (building and compiling, or
setting up), `idle_rss_mib` (the process's RSS right after its imports, before building),
`peak_rss_mib` (its high-water RSS, `ru_maxrss`) and `above_idle_mib` (the difference: what
the work itself costs). The case's own table (`sweep_table`) puts the four systems of each
point on one row, with each rlsys variant's speed-up over each baseline, and a second the
rate of matrix products each system's iteration time stands for (`least_gflop`).
"""

from __future__ import annotations

import itertools
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rlsys.bench import Case, System, child_main, report
from rlsys.bench.table import markdown_table

ROOT = Path(__file__).resolve().parents[2]  # the repository: `benchmarks.baselines` lives here
OBS_SIZE = 16
BASE = {"envs": 256, "episode": 250, "width": 64, "layers": 2}
VARIED = {"envs": (64, 512), "episode": (125, 500), "width": (16, 256), "layers": (1, 4)}
IMPLS = ("rlsys", "auto", "purejaxrl", "cleanrl")
OURS, BASELINES = ("rlsys", "auto"), ("cleanrl", "purejaxrl")
WARM, TIMED = 3, 5
QUICK_WARM, QUICK_TIMED = 1, 2


def grid() -> dict[str, dict[str, int]]:
    """Point name -> its factors: the base point, then one factor changed at a time."""
    points = {"base": dict(BASE)}
    for factor, values in VARIED.items():
        for value in values:
            points[f"{factor}={value}"] = {**BASE, factor: value}
    return points


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _train_rlsys(point: dict[str, int], iterations: int, seed: int,
                 segmented: bool | str) -> dict:  # fmt: skip
    from rlsys.algos.a2c import build_a2c
    from rlsys.algos.config import A2CConfig

    began = time.perf_counter()
    envs, episode = point["envs"], point["episode"]
    config = A2CConfig(env=f"trivial:{OBS_SIZE}:{episode}", num_envs=envs, num_steps=episode,
                       total_steps=iterations * envs * episode, hidden_size=point["width"],
                       hidden_layers=point["layers"], iterations_per_call=1,
                       seed=seed).validate()  # fmt: skip
    built = build_a2c(config)
    exe = built.program.compile(bounds=built.bounds, iterations_per_call=1, segmented=segmented,
                                devices="auto")  # fmt: skip
    setup_seconds = time.perf_counter() - began
    stamps, returns = [time.perf_counter()], []

    def on_iteration(i: int, outputs: dict) -> None:
        returns.append(float(outputs["episode_return_sum"]) / max(float(outputs["episodes"]), 1))
        stamps.append(time.perf_counter())  # the call's outputs are on the host: it is done

    exe.run(on_iteration=on_iteration)
    seconds = [b - a for a, b in itertools.pairwise(stamps)]
    timed = {f"call_ms_on_{n}_devices": 1e3 * t for n, t in exe.placement_seconds.items()}
    return {"iteration_seconds": seconds, "setup_seconds": setup_seconds, "mean_returns": returns,
            "placement": {"devices": exe.devices, **timed}}  # fmt: skip


def run(*, quick: bool, seed: int, impl: str, point: str) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # Everything the system needs is imported first: its idle RSS includes the libraries.
    if impl == "cleanrl":
        from benchmarks.baselines import cleanrl_style_a2c as module  # torch
    elif impl == "purejaxrl":
        from benchmarks.baselines import purejaxrl_style_a2c as module  # jax, optax
    else:
        import rlsys.algos.a2c  # noqa: F401  (jax and the compiler)
        from rlsys.compiler import use_cpu_devices

        use_cpu_devices()  # before JAX starts: a device per core, for devices="auto"
    idle = _rss_mib()
    factors = grid()[point]
    warm, timed = (QUICK_WARM, QUICK_TIMED) if quick else (WARM, TIMED)
    if impl in OURS:
        result = _train_rlsys(
            factors, warm + timed, seed, segmented="auto" if impl == "auto" else False
        )
    else:
        from benchmarks.baselines import A2CSetup

        setup = A2CSetup(num_envs=factors["envs"], episode_length=factors["episode"],
                         obs_size=OBS_SIZE, hidden=factors["width"],
                         layers=factors["layers"])  # fmt: skip
        result = module.train(setup, warm + timed, seed)
    peak = _peak_rss_mib()
    seconds = result["iteration_seconds"][warm:]
    report(
        env_steps=len(seconds) * factors["envs"] * factors["episode"],
        seconds=sum(seconds),
        iter_s=statistics.median(seconds),
        compile_s=result["setup_seconds"],
        idle_rss_mib=idle,
        peak_rss_mib=peak,
        above_idle_mib=peak - idle,
        final_return=result["mean_returns"][-1],
        **result.get("placement", {}),
    )


def least_products(factors: dict[str, int]) -> dict[str, float]:
    """The matrix-product work an iteration cannot avoid, in GFLOP, by kind: `forward`, the
    products that contract a layer's inputs (the actor's forward products while acting, the
    critic's over the batch, both networks' input gradients dY·Wᵀ but the first layer's) and
    `weight_grad`, those that contract the batch's rows (every layer's Xᵀ·dY). Nothing is
    recomputed; biases, activations, the optimizer and the env are left out."""
    width, layers = factors["width"], factors["layers"]
    per_net = OBS_SIZE * width + (layers - 1) * width**2 + width  # multiply-adds per row
    input_grads = per_net - OBS_SIZE * width  # no gradient for the observations
    gflop_per_row = 2 * 2 / 1e9  # both networks; 2 FLOP per multiply-add
    rows = factors["envs"] * factors["episode"]
    return {"forward": gflop_per_row * rows * (per_net + input_grads),
            "weight_grad": gflop_per_row * rows * per_net}  # fmt: skip


def least_gflop(factors: dict[str, int]) -> float:
    """All of `least_products`: a system's GFLOP/s over this is the rate its products would
    need if they were all it did."""
    return sum(least_products(factors).values())


# -- the case's own tables: one row per point -----------------------------------------------------
def sweep_table(rows: Sequence) -> str:
    """Markdown: per point, each system's seconds per iteration, each rlsys variant's speed-up
    over each baseline, memory above idle (peak RSS MiB in brackets), and the devices each
    rlsys variant ran on."""
    by_name = {row.system: row for row in rows}

    def metric(impl: str, point: str, key: str) -> float | None:
        row = by_name.get(f"{impl}@{point}")
        return None if row is None or row.skipped else row.metrics.get(key)

    def fmt(value: float | None, pattern: str) -> str:
        return "—" if value is None else pattern.format(value)

    header = ["point", "envs", "episode", "width", "layers"]
    header += [f"{impl} s/iter" for impl in IMPLS]
    header += [f"{ours} vs {baseline}" for ours in OURS for baseline in BASELINES]
    header += [f"{impl} MiB above idle (peak)" for impl in IMPLS]
    header += [f"{ours} devices (median)" for ours in OURS]  # devices="auto"'s choice
    lines = []
    for point, factors in grid().items():
        times = {impl: metric(impl, point, "iter_s") for impl in IMPLS}
        ratios = [
            None if times[ours] is None or times[b] is None else times[b] / times[ours]
            for ours in OURS
            for b in BASELINES
        ]
        memory = [
            fmt(metric(impl, point, "above_idle_mib"), "{:.0f}")
            + fmt(metric(impl, point, "peak_rss_mib"), " ({:.0f})").replace("—", "")  # one dash
            for impl in IMPLS
        ]
        cells = [point, *map(str, factors.values())]
        cells += [fmt(times[impl], "{:.3f}") for impl in IMPLS]
        cells += [fmt(r, "{:.2f}×") for r in ratios] + memory
        cells += [fmt(metric(ours, point, "devices"), "{:g}") for ours in OURS]
        lines.append(cells)
    return markdown_table(header, lines) + "\n\n" + _rate_table(metric, fmt)


def _rate_table(metric, fmt) -> str:
    """Markdown: per point, `least_gflop` and the rate it takes at each system's seconds per
    iteration, and at a fifth of the CleanRL-style's (what the 5× goal asks); compare the
    last with the machine's product rates in the `weight_grad_dots` case."""
    header = ["point", "least GFLOP", "GFLOP/s for 5× cleanrl"]
    header += [f"{impl} GFLOP/s" for impl in IMPLS]
    lines = []
    for point, factors in grid().items():
        gflop = least_gflop(factors)
        rates = {impl: None if (t := metric(impl, point, "iter_s")) is None else gflop / t
                 for impl in IMPLS}  # fmt: skip
        goal = None if rates["cleanrl"] is None else 5 * rates["cleanrl"]
        cells = [point, f"{gflop:.2f}", fmt(goal, "{:.1f}")]
        cells += [fmt(rates[impl], "{:.1f}") for impl in IMPLS]
        lines.append(cells)
    return markdown_table(header, lines) + "\n"


CASE = Case(
    name="scaling_sweep",
    description=(
        f"TimeRL's scaling sweep: A2C (1 epoch, full batch) on the trivial env (obs {OBS_SIZE}), "
        "one iteration = one episode of every env; envs {64, 256, 512}, episode {125, 250, "
        "500}, width {16, 64, 256}, layers {1, 2, 4}, one at a time around 256/250/64/2: "
        "rlsys vs a PureJaxRL-style JAX and a CleanRL-style PyTorch A2C."
    ),
    baseline="cleanrl@base",
    unit="env steps",
    timeout_s=600.0,
    systems=[
        System(
            f"{impl}@{point}",
            run=run,
            params={"impl": impl, "point": point},
            description=f"{impl}, {factors}",
        )
        for point, factors in grid().items()
        for impl in IMPLS
    ],
    summary_table=sweep_table,
)

if __name__ == "__main__":
    child_main(CASE)
