"""Hand-written baselines that the benchmark cases race rlsys against.

Three implementations of the same PPO on CartPole-v1, each in the style of a well-known
single-file or library implementation (written here from scratch, only the shape copied):

* `purejaxrl_style_ppo`: JAX, gymnax CartPole, the whole training one jitted function
  (scans over iterations, env steps, epochs and minibatches; envs vmapped), optax;
* `cleanrl_style_ppo`: PyTorch, gymnasium `SyncVectorEnv`, one Python loop like CleanRL's
  `ppo.py`;
* `sb3_ppo`: Stable-Baselines3's `PPO("MlpPolicy")` (the `bench` extra).

Each exposes `train(total_steps, seed, *, target=None, clock_start=None) -> dict` with the
keys of `Progress.result`. The hyperparameters are `HYPER` (the defaults of rlsys's
`PPOConfig`, which are CleanRL's `ppo.py` defaults with 8 environments).

For `benchmarks/cases/scaling_sweep.py` (TimeRL's scaling sweep), two A2C baselines on the
trivial env, one point of the sweep given as an `A2CSetup`:

* `purejaxrl_style_a2c`: JAX, the env as pure functions (`trivial_env_jax`), one jitted
  iteration (scan over the episode, then the update), optax;
* `cleanrl_style_a2c`: PyTorch, the env as a NumPy vector env (`trivial_env_numpy`), one
  Python loop.

Both expose `train(setup, iterations, seed) -> dict` with `iteration_seconds` (one per
iteration), `setup_seconds` (compilation or setup) and `mean_returns` (one per iteration).

Import them with the repository root on `sys.path`: `from benchmarks.baselines import ...`
(`benchmarks` is a namespace package, this folder a regular one).
"""

from __future__ import annotations

import collections
import importlib
import math
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

TARGET_RETURN = 475.0
"""CartPole-v1's "solved" return (gymnasium's reward_threshold)."""
WINDOW = 10
"""The target is met when the mean return of the last WINDOW iterations with episodes is."""

TORCH_PPO = {"cleanrl": "cleanrl_style_ppo", "sb3": "sb3_ppo"}
"""The PyTorch PPOs that the profiler's benchmarks profile: short name -> module here."""


def torch_ppo(name: str) -> ModuleType:
    """The module of PyTorch PPO `name` (a key of TORCH_PPO), imported now."""
    return importlib.import_module(f"{__name__}.{TORCH_PPO[name]}")


@dataclass(frozen=True)
class Hyper:
    num_envs: int = 8
    num_steps: int = 128
    update_epochs: int = 4
    num_minibatches: int = 4
    hidden: int = 64  # two hidden layers of this many tanh units, actor and critic apart
    learning_rate: float = 2.5e-4  # annealed linearly to 0 over the iterations
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2  # surrogate clipping and value clipping
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def iterations(self, total_steps: int) -> int:
        """Whole iterations in `total_steps` env steps (at least one)."""
        return max(1, total_steps // self.batch_size)


HYPER = Hyper()


class Progress:
    """Per-iteration mean episode returns, the time-to-target criterion, the result dict.

    `add(return_sum, episodes)` takes the returns of the episodes that ended in one
    iteration; an iteration without any gets NaN and does not count toward the window.
    `time_to_target_s` is measured from `clock_start` (a `time.perf_counter()` value; by
    default the moment this object was made).
    """

    def __init__(self, batch_size: int, target: float | None = None,
                 clock_start: float | None = None) -> None:  # fmt: skip
        self.batch_size = batch_size
        self.target = target
        self.clock_start = time.perf_counter() if clock_start is None else clock_start
        self.returns: list[float] = []
        # the last WINDOW returns with episodes, kept as they come: `add` runs in the timed
        # region of every system, so it must not rescan all iterations each time
        self._recent: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.steps_to_target: int | None = None
        self.time_to_target_s: float | None = None

    @property
    def reached(self) -> bool:
        return self.steps_to_target is not None

    def window_mean(self) -> float:
        """Mean of the last WINDOW iterations that had episodes (NaN if none had)."""
        recent = self._recent
        return sum(recent) / len(recent) if recent else math.nan

    def add(self, return_sum: float, episodes: float) -> bool:
        """Record one iteration; True once the target has been met (now or before)."""
        self.returns.append(float(return_sum) / episodes if episodes else math.nan)
        if episodes:
            self._recent.append(self.returns[-1])
        waiting = self.target is not None and not self.reached
        if waiting and len(self._recent) == WINDOW and self.window_mean() >= self.target:
            self.steps_to_target = len(self.returns) * self.batch_size
            self.time_to_target_s = time.perf_counter() - self.clock_start
        return self.reached

    def result(self, *, iterations: int, compile_seconds: float,
               run_seconds: float) -> dict[str, Any]:  # fmt: skip
        """`iterations`: those computed (a chunked run may compute past the target)."""
        return {
            "iteration_returns": list(self.returns),
            "iterations": iterations,
            "env_steps": iterations * self.batch_size,
            "compile_seconds": compile_seconds,
            "run_seconds": run_seconds,
            "final_return": self.window_mean(),
            "steps_to_target": self.steps_to_target,
            "time_to_target_s": self.time_to_target_s,
        }


RESULT_KEYS = frozenset(Progress(1).result(iterations=0, compile_seconds=0.0, run_seconds=0.0))


@dataclass(frozen=True)
class A2CSetup:
    """One point of the scaling sweep (`benchmarks/cases/scaling_sweep.py`) for the A2C
    baselines; the hyperparameters are the defaults of rlsys's `A2CConfig`.

    One iteration is one episode of every env: `episode_length` steps of `num_envs` envs on
    the trivial env (observations of `obs_size` floats), then one Adam step on the loss
    averaged over the whole batch (1 epoch, full batch, as TimeRL's A2C)."""

    num_envs: int = 256
    episode_length: int = 250
    obs_size: int = 16
    hidden: int = 64  # units per hidden layer, tanh, actor and critic apart
    layers: int = 2  # hidden layers
    learning_rate: float = 1e-3  # annealed linearly to 0 over the iterations
    gamma: float = 0.99
    gae_lambda: float = 1.0  # n-step returns to the episode's end, bootstrapped by the critic
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
