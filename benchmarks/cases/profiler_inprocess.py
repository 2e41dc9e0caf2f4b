"""Profiler inflation measured inside one process: recording vs not, interleaved.

`profiler_overhead` compares whole commands, one process each; on a shared 2-core machine
two runs of the same command differ by up to 2x, far more than what the profiler costs. Here
one process installs the profiler's hooks and torch collector (as `rlsys profile` does: a
recorder active when torch is imported), then trains the same workload `ROUNDS` times with
nothing recording and `ROUNDS` times recording into a temporary folder, alternating, and
compares the loop's process CPU time (`time.process_time`): the same process, interpreter
state and libraries, and alternation shares the machine's drift between both.

Reported: `seconds` (the recording rounds' median), `idle_seconds` (nothing recording),
`inflation` (median recording / median idle), `inflation_min` (min / min: the rounds the
machine interrupted least). The hooks' cost while idle, against a process without them, is
`hooks_idle_cost`'s (about 1% of these loops).
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

STEPS = {False: 4_096, True: 1_024}  # env steps per round
ROUNDS = {False: 7, True: 2}


def run(*, quick: bool, seed: int, impl: str) -> None:
    import rlsys
    from rlsys.profiler import hooks, sources

    folder = tempfile.mkdtemp(prefix="rlsys-profiler-inprocess-")
    try:
        rlsys.start_recording(Path(folder) / "setup")  # the torch collector installs on import
        hooks.install(sources.enabled())
        workload = torch_ppo(impl)
        rlsys.stop_recording()
        workload.train(STEPS[quick] // 2, seed)  # warm up
        times: dict[str, list[float]] = {"idle": [], "recording": []}
        for r in range(ROUNDS[quick]):
            for mode, seconds in times.items():
                if mode == "recording":
                    rlsys.start_recording(Path(folder) / f"round-{r}")
                began = time.process_time()
                workload.train(STEPS[quick], seed + r)
                seconds.append(time.process_time() - began)
                if mode == "recording":
                    rlsys.stop_recording()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    median = {mode: statistics.median(seconds) for mode, seconds in times.items()}
    report(
        env_steps=STEPS[quick],
        seconds=median["recording"],
        idle_seconds=median["idle"],
        inflation=median["recording"] / median["idle"],
        inflation_min=min(times["recording"]) / min(times["idle"]),
    )


CASE = Case(
    name="profiler_inprocess",
    description=(
        "What recording costs the CleanRL-style and SB3 PPO on CartPole-v1 (torch, 1 thread) "
        "in one process: rounds of the same training with the profiler's hooks idle and "
        "recording, alternating (process CPU time)."
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
