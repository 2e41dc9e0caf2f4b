"""Profiler overhead: what `rlsys profile` costs an RL script, and how well it corrects that.

Two workloads, each the unmodified baseline of `benchmarks/baselines/` (torch, 1 thread,
CPU) on CartPole-v1 for a fixed budget of env steps: the CleanRL-style PPO and SB3's PPO.
Each runs as its own command (`python -c "train(...)"`) in one of three modes:

* `uninstrumented`: plain;
* `disabled`: the profiler's bootstrap on PYTHONPATH, so every hook is installed, but no
  recorder (what the automatic operations cost a program while nothing records; the
  user-annotation cost with nothing recording is in the `annotation_overhead` case);
* `profiled`: `rlsys profile --calibrate` (the calibration is cached per machine and command;
  the harness gives each repetition its own seed, which is part of the command, so every
  repetition calibrates: about 100 s each).

Reported: `seconds`, the training loop's own time (the script's `run_seconds`, setup and
imports excluded), and `command_seconds`, the whole command's wall time. Profiled runs add
`corrected_seconds` (the loop's time less the calibrated cost of the events recorded, which
nearly all fall in the loop), `overhead_seconds`, and from the summary the command-level
`inflation` and `bias` against the calibration's own uninstrumented runs. Against
`<workload>-uninstrumented`, `seconds` give the loop's inflation (profiled) and the disabled
cost; corrected |bias| = |corrected_seconds / uninstrumented seconds - 1|. The
table's ratios are against the CleanRL-style baseline; for SB3 divide by
`sb3-uninstrumented` (one case has one baseline).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlsys.bench import Case, System, child_main, report

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines import TORCH_PPO  # noqa: E402  (needs the repo on the path)

STEPS = {False: 16_384, True: 4_096}  # env steps: full, --quick

WORKLOAD = """
import json, sys
sys.path.insert(0, {root!r})
from benchmarks.baselines import {module} as workload
result = workload.train({steps}, {seed})
open(sys.argv[1], "w").write(json.dumps(result))
"""


def _command(impl: str, steps: int, seed: int, result: Path) -> list[str]:
    code = WORKLOAD.format(root=str(ROOT), module=TORCH_PPO[impl], steps=steps, seed=seed)
    return [sys.executable, "-c", code, str(result)]


def _environment(mode: str) -> dict[str, str]:
    from rlsys.profiler.launch import BOOTSTRAP_DIR
    from rlsys.trace.annotate import TRACE_DIR_ENV

    env = dict(os.environ)
    env.pop(TRACE_DIR_ENV, None)
    if mode == "disabled":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOTSTRAP_DIR),
                                                          env.get("PYTHONPATH")]))  # fmt: skip
    return env


def run(*, quick: bool, seed: int, impl: str, mode: str) -> None:
    steps = STEPS[quick]
    # A fixed result path: the calibration cache is keyed by the command, which names it.
    result_path = Path(tempfile.gettempdir()) / f"rlsys-profiler-overhead-{impl}-{steps}.json"
    command = _command(impl, steps, seed, result_path)
    extra: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rlsys-profiler-overhead-") as tmp:
        if mode == "profiled":
            out = Path(tmp) / "profile"
            runner = [sys.executable, "-m", "rlsys.cli", "profile", "--calibrate", "--quiet",
                      "--out", str(out), "--", *command]  # fmt: skip
            subprocess.run(runner, check=True, stdout=subprocess.DEVNULL)
            summary = json.loads((out / "summary.json").read_text())
            totals = summary["totals"]
            command_seconds = totals["uncorrected_seconds"]
            extra = {
                "overhead_seconds": totals["overhead_seconds"],
                "inflation": totals["inflation"],
                "bias": totals["bias"],
            }
        else:
            began = time.perf_counter()
            subprocess.run(command, check=True, env=_environment(mode), stdout=subprocess.DEVNULL)
            command_seconds = time.perf_counter() - began
    result = json.loads(result_path.read_text())
    seconds = result["run_seconds"]
    if mode == "profiled":
        extra["corrected_seconds"] = seconds - extra["overhead_seconds"]
    report(env_steps=result["env_steps"], seconds=seconds, command_seconds=command_seconds,
           **extra)  # fmt: skip


def _systems() -> list[System]:
    descriptions = {
        "uninstrumented": "the plain command",
        "disabled": "bootstrap hooks installed, nothing recording",
        "profiled": "rlsys profile --calibrate (uncorrected seconds; corrected_seconds)",
    }
    return [
        System(
            f"{impl}-{mode}",
            run=run,
            params={"impl": impl, "mode": mode},
            description=f"{TORCH_PPO[impl]}: {text}",
        )
        for impl in TORCH_PPO
        for mode, text in descriptions.items()
    ]


CASE = Case(
    name="profiler_overhead",
    description=(
        "What `rlsys profile` costs the CleanRL-style and SB3 PPO on CartPole-v1 (torch, 1 "
        "thread): uninstrumented vs hooks installed but not recording vs profiled, and the "
        "calibrated correction of the profiled time."
    ),
    baseline="cleanrl-uninstrumented",
    timeout_s=900.0,
    systems=_systems(),
)

if __name__ == "__main__":
    child_main(CASE)
