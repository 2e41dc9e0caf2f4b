"""PPO on Atari Pong through the CNN: rlsys vs a CleanRL-style PyTorch PPO and SB3.

Throughput, not learning (Pong takes millions of steps): each system runs 6 iterations (3
with `--quick`) of the shared PPO (8 envs x 128 steps, 4 epochs x 4 minibatches of 256) on
`ALE/Pong-v5`, all stepping the same preprocessed games (`rlsys/envs/atari.py`: 4-frame
skip, 84x84 grayscale bytes, 4 frames stacked) through the Nature CNN (three
convolutions, a dense layer of 512, a linear actor and critic on its features). rlsys
compiles the CNN's convolutions into its program (`conv2d`, on the host stage's policy
calls and the update); the PyTorch systems run one thread. Reported: env steps/s over the
iterations (after compilation or setup) and `compile_seconds`. Needs the `atari` extra.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rlsys.bench import Case, System, child_main, installed, report

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "ALE/Pong-v5"


def _train(impl: str, total_steps: int, seed: int) -> dict:
    from benchmarks.baselines import HYPER

    if impl == "rlsys":
        from benchmarks.cases.ppo_cartpole import _train_rlsys

        return _train_rlsys(total_steps, seed, target=None, clock_start=time.perf_counter(),
                            env=f"gymnasium:{ENV_ID}")  # fmt: skip
    if impl == "cleanrl":
        from benchmarks.baselines import cleanrl_style_ppo as module
    else:
        from benchmarks.baselines import sb3_ppo as module
    return module.train(total_steps, seed, hyper=HYPER, env_id=ENV_ID)


def run(*, quick: bool, seed: int, impl: str) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.baselines import HYPER

    result = _train(impl, (3 if quick else 6) * HYPER.batch_size, seed)
    report(env_steps=result["env_steps"], seconds=result["run_seconds"],
           compile_seconds=result["compile_seconds"])  # fmt: skip


ATARI = ("ale_py", "cv2")
MISSING = "ale-py or OpenCV not installed (pip install 'rlsys[atari]')"

CASE = Case(
    name="ppo_atari",
    description=(
        "PPO on ALE/Pong-v5 through the Nature CNN (8 envs x 128 steps, 4 epochs x 4 "
        "minibatches), 6 iterations: env steps/s of rlsys vs a CleanRL-style PyTorch PPO "
        "and Stable-Baselines3, all on the same preprocessed frames."
    ),
    baseline="cleanrl-style",
    timeout_s=600.0,
    systems=[
        System("rlsys-ppo-cnn", run=run, params={"impl": "rlsys"}, available=installed(*ATARI),
               missing=MISSING,
               description="rlsys.algos.ppo, --network auto (the CNN), 8 gymnasium envs"),
        System("cleanrl-style", run=run, params={"impl": "cleanrl"}, available=installed(*ATARI),
               missing=MISSING,
               description="PyTorch, CleanRL ppo_atari.py's network, SyncVectorEnv, 1 thread"),
        System("sb3", run=run, params={"impl": "sb3"},
               available=installed(*ATARI, "stable_baselines3"),
               missing=f"{MISSING}, or stable-baselines3 (pip install 'rlsys[bench]')",
               description="Stable-Baselines3 PPO('CnnPolicy'), DummyVecEnv, 1 thread"),
    ],
)  # fmt: skip

if __name__ == "__main__":
    child_main(CASE)
