"""Stable-Baselines3's PPO on CartPole-v1 with the shared hyperparameters (the `bench` extra).

`PPO("MlpPolicy")` on `make_vec_env` (a `DummyVecEnv` of 8 `Monitor`-wrapped envs), one
torch thread, CPU. Where SB3 differs from CleanRL/PureJaxRL even with the same numbers:

* value clipping (`clip_range_vf=0.2`) clips the prediction and takes the squared error of
  the clipped one, not the max of clipped and unclipped errors; the value loss has no 0.5
  factor (`vf_coef=0.5` weighs the plain mean squared error);
* truncated episodes (the 500-step limit) are bootstrapped with the value of their final
  observation;
* the learning rate is annealed by SB3's `progress_remaining` (env steps done / total),
  updated once per rollout, rather than by the iteration index.

With an Atari id (`ALE/...`, the `ppo_atari` case) the environments are rlsys's
preprocessed games (`rlsys/envs/atari.py`: frames as bytes, which SB3 scales to [0, 1]
itself, `normalize_images`) and the policy `PPO("CnnPolicy")`: the Nature CNN shared by a
linear actor and critic.

A callback sums the returns of the episodes that ended in each rollout (from `Monitor`'s
`info["episode"]`) and stops training once the target is met.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger

from benchmarks.baselines import HYPER, Hyper, Progress
from benchmarks.baselines.cleanrl_style_ppo import env_maker
from rlsys.envs import atari

ENV_ID = "CartPole-v1"


class _Returns(BaseCallback):
    """Episode returns per rollout into a `Progress`; stop once it has met its target.

    A rollout's episodes are recorded when the next rollout starts (or training ends), that
    is after the rollout's update, like the other baselines check after their update.
    """

    def __init__(self, progress: Progress) -> None:
        super().__init__(verbose=0)
        self.progress = progress
        self.sum, self.count, self.pending = 0.0, 0, False

    def _flush(self) -> None:
        if self.pending:
            self.progress.add(self.sum, self.count)
        self.sum, self.count, self.pending = 0.0, 0, False

    def _on_rollout_start(self) -> None:
        self._flush()

    def _on_rollout_end(self) -> None:
        self.pending = True

    def _on_training_end(self) -> None:
        self._flush()

    def _on_step(self) -> bool:
        if self.progress.reached:
            return False
        for info in self.locals["infos"]:
            episode = info.get("episode")
            if episode is not None:
                self.sum += float(episode["r"])
                self.count += 1
        return True


def train(total_steps: int, seed: int, *, target: float | None = None,
          clock_start: float | None = None, hyper: Hyper = HYPER,
          env_id: str = ENV_ID) -> dict[str, Any]:  # fmt: skip
    """Train for `total_steps` env steps (whole rollouts), stopping early once `target` is
    met; see `Progress.result` for the keys. `compile_seconds` is the setup (envs, model)."""
    began = time.perf_counter()
    torch.set_num_threads(1)
    progress = Progress(hyper.batch_size, target=target, clock_start=clock_start)
    images = atari.is_atari(env_id)
    env = make_vec_env(env_maker(env_id), n_envs=hyper.num_envs, seed=seed)
    lr = hyper.learning_rate
    policy_kwargs = {"ortho_init": True, "optimizer_kwargs": {"eps": hyper.adam_eps}}
    if not images:
        policy_kwargs["net_arch"] = {"pi": [hyper.hidden] * 2, "vf": [hyper.hidden] * 2}
        policy_kwargs["activation_fn"] = torch.nn.Tanh
    model = PPO(
        "CnnPolicy" if images else "MlpPolicy",
        env,
        learning_rate=lambda remaining: lr * remaining,
        n_steps=hyper.num_steps,
        batch_size=hyper.minibatch_size,
        n_epochs=hyper.update_epochs,
        gamma=hyper.gamma,
        gae_lambda=hyper.gae_lambda,
        clip_range=hyper.clip_coef,
        clip_range_vf=hyper.clip_coef,
        normalize_advantage=True,
        ent_coef=hyper.ent_coef,
        vf_coef=hyper.vf_coef,
        max_grad_norm=hyper.max_grad_norm,
        policy_kwargs=policy_kwargs,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    # What SB3 builds for verbose=0 (no outputs), minus the empty /tmp/SB3-<time> folder its
    # default makes on every run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    callback = _Returns(progress)
    num_iterations = hyper.iterations(total_steps)
    setup_seconds = time.perf_counter() - began
    run_began = time.perf_counter()
    model.learn(total_timesteps=num_iterations * hyper.batch_size, callback=callback)
    run_seconds = time.perf_counter() - run_began
    env.close()
    return progress.result(iterations=len(progress.returns), compile_seconds=setup_seconds,
                           run_seconds=run_seconds)  # fmt: skip
