"""PPO on gymnasium CartPole-v1 (a host environment): rlsys vs CleanRL-style and SB3.

The same PPO and budget as `ppo_cartpole.py` (whose `run` this case reuses), but rlsys steps
a gymnasium `SyncVectorEnv` of 8 from inside its compiled acting loop (ordered host
callbacks), like the PyTorch systems do. The goal of issue #5 is >= 4x SB3's env steps/s.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rlsys.bench import Case, System, child_main

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cases.ppo_cartpole import run  # noqa: E402  (needs the repository on the path)

CASE = Case(
    name="ppo_cartpole_host",
    description=(
        "PPO on gymnasium CartPole-v1 (host environment, 8 envs x 128 steps, 4 x 4 "
        "minibatches), up to 500k env steps, stopping at a mean return of 475: rlsys vs a "
        "CleanRL-style PyTorch PPO and Stable-Baselines3."
    ),
    baseline="sb3",
    timeout_s=300.0,
    systems=[
        System(
            "rlsys-ppo-gymnasium",
            run=run,
            params={"impl": "rlsys", "env": "gymnasium:CartPole-v1"},
            description="rlsys.algos.ppo, gymnasium SyncVectorEnv stepped by host callbacks",
        ),
        System(
            "cleanrl-style",
            run=run,
            params={"impl": "cleanrl"},
            description="PyTorch, gymnasium SyncVectorEnv (SAME_STEP autoreset), 1 thread",
        ),
        System(
            "sb3",
            run=run,
            params={"impl": "sb3"},
            available=lambda: importlib.util.find_spec("stable_baselines3") is not None,
            missing="stable-baselines3 not installed (pip install 'rlsys[bench]')",
            description="Stable-Baselines3 PPO('MlpPolicy'), DummyVecEnv, 1 thread",
        ),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
