"""Profiler inflation and calibrated bias measured inside one process, interleaved.

`profiler_overhead` compares whole commands, one process each; on a shared 2-core machine
two runs of the same command differ by up to 2x, far more than what the profiler costs. Here
one process installs the profiler's hooks (as `rlsys profile` does), then trains the same
workload `ROUNDS` times in each of the calibration's configurations
(`rlsys.profiler.calibrate.CONFIGURATIONS`), round by round:

    none                 nothing recording, torch's entry points not wrapped
    annotations          recording operations only (`hooks.record_ccalls(False)`)
    annotations+ccalls   recording everything, as `rlsys profile` does

and times each training by the process's CPU time (`time.process_time`): the same process,
interpreter state and libraries, and alternation shares the machine's drift between them.
The calibration's own estimator (`calibrate.estimate`) turns the rounds into costs per event;
each round's bias is its corrected time (everything recorded, less events x costs estimated
from the *other* rounds) against its own uninstrumented time.

Reported: `seconds` (the recording rounds' median), `idle_seconds` (uninstrumented),
`inflation` (median recording / median uninstrumented), `inflation_min` (min / min: the
rounds the machine interrupted least), `annotation_ns` and `ccall_ns` (costs per event from
all rounds), `bias` (the median of the rounds' biases) and `bias_spread` (their half range).
The installed hooks' cost while idle is `hooks_idle_cost`'s (about 1% of these loops).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rlsys.bench import Case, System, child_main, report

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines import TORCH_PPO, torch_ppo  # noqa: E402  (needs the repo on the path)

# Env steps per configuration and round: about 3 s of training, so that the machine's
# second-to-second noise averages out within a round (at 4,096 steps, 0.7 s, the rounds'
# biases spread +-12-56%).
STEPS = {False: 16_384, True: 1_024}
ROUNDS = {False: 7, True: 2}


def run(*, quick: bool, seed: int, impl: str) -> None:
    import rlsys
    from rlsys.profiler import calibrate, hooks, sources

    folder = Path(tempfile.mkdtemp(prefix="rlsys-profiler-inprocess-"))
    names = [name for name, _ in calibrate.CONFIGURATIONS]
    runs: list[calibrate.Run] = []
    try:
        rlsys.start_recording(folder / "setup")  # the torch collector installs on import
        hooks.install(sources.enabled())
        workload = torch_ppo(impl)
        rlsys.stop_recording()
        workload.train(STEPS[quick] // 2, seed)  # warm up
        for r in range(ROUNDS[quick]):
            for name in names if r % 2 == 0 else names[::-1]:
                runs.append(_one_run(workload, name, folder / f"{name}-{r}", seed + r, quick))
    finally:
        hooks.record_ccalls(True)
        shutil.rmtree(folder, ignore_errors=True)
    report(env_steps=STEPS[quick], **_summary(runs, names, calibrate))


def _one_run(workload, name: str, trace_dir: Path, seed: int, quick: bool):
    """Train once in configuration `name`; its CPU time and events per source."""
    import rlsys
    from rlsys.profiler import calibrate, hooks, sources

    enabled = dict(calibrate.CONFIGURATIONS)[name]
    recording = bool(enabled)
    hooks.record_ccalls(sources.CCALLS in enabled)
    if recording:
        rlsys.start_recording(trace_dir)
    began = time.process_time_ns()
    workload.train(STEPS[quick], seed)
    cpu_ns = time.process_time_ns() - began
    if recording:
        rlsys.stop_recording()
    events = calibrate.count_events(trace_dir) if recording else {}
    return calibrate.Run(name, wall_ns=cpu_ns, events=events, cpu_ns=cpu_ns)


def _summary(runs, names: list[str], calibrate) -> dict[str, float]:
    """Inflation, costs per event and the leave-one-round-out bias (see the docstring)."""
    per_config = {name: [run for run in runs if run.configuration == name] for name in names}
    none, full = per_config[names[0]], per_config[names[-1]]
    biases = []
    for r in range(len(none)):
        others = [run for name in names for k, run in enumerate(per_config[name]) if k != r]
        costs = calibrate.estimate(others).cost_ns  # clamped at 0, as `rlsys profile` uses
        overhead = sum(n * costs.get(source, 0.0) for source, n in full[r].events.items())
        biases.append((full[r].cpu_ns - overhead) / none[r].cpu_ns - 1.0)
    costs = calibrate.estimate(runs).raw_cost_ns  # unclamped: shows the noise
    seconds = {name: [run.cpu_ns / 1e9 for run in found] for name, found in per_config.items()}
    return {
        "seconds": statistics.median(seconds[names[-1]]),
        "idle_seconds": statistics.median(seconds[names[0]]),
        "inflation": statistics.median(seconds[names[-1]]) / statistics.median(seconds[names[0]]),
        "inflation_min": min(seconds[names[-1]]) / min(seconds[names[0]]),
        "annotation_ns": costs.get("annotations", 0.0),
        "ccall_ns": costs.get("ccalls", 0.0),
        "bias": statistics.median(biases),
        "bias_spread": (max(biases) - min(biases)) / 2,
    }


CASE = Case(
    name="profiler_inprocess",
    description=(
        "What recording costs the CleanRL-style and SB3 PPO on CartPole-v1 (torch, 1 thread) "
        "in one process, and how well the calibrated correction removes it: rounds of the "
        "same training uninstrumented, recording operations only, and recording everything, "
        "alternating (process CPU time); the bias of each round is corrected with costs "
        "estimated from the other rounds."
    ),
    baseline="cleanrl",
    timeout_s=600.0,
    systems=[
        System(name, run=run, params={"impl": name}, description=f"baselines/{module}.py")
        for name, module in TORCH_PPO.items()
    ],
)

if __name__ == "__main__":
    child_main(CASE)
