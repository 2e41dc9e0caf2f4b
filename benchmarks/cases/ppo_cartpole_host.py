"""PPO on gymnasium CartPole-v1 (a host environment): rlsys vs CleanRL-style and SB3.

The same PPO and budget as `ppo_cartpole.py` (whose `run` this case reuses), but rlsys steps
8 gymnasium CartPole-v1 environments on the host, like the PyTorch systems do (they use
`SyncVectorEnv`; rlsys its `SameStepVector`: the same results at less cost). Its acting loop
is a host loop (`rlsys/compiler/stages.py`), one jitted policy call per step and the
environment stepped from Python between calls, and learning is one jitted call per
iteration. The goal of issue #5 is >= 4x SB3's env steps/s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlsys.bench import Case, System, child_main

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cases.ppo_cartpole import CASE as BASE  # noqa: E402  (needs the repo on the path)
from benchmarks.cases.ppo_cartpole import run  # noqa: E402

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
            description="rlsys.algos.ppo, 8 gymnasium envs (SameStepVector), host callbacks",
        ),
        BASE.system("cleanrl-style"),  # the same systems as ppo_cartpole
        BASE.system("sb3"),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
