"""TimeRL's trivial environment as a NumPy vector env on the host, for the CleanRL-style A2C.

The dynamics of `rlsys/envs/trivial_env.py`, for `num_envs` environments at once:

    position ~ uniform(-1, 1) at reset
    moved = position + clip(action, -1, 1);  reward = -|moved|
    every episode lasts `episode_length` steps (truncated, never terminated)
    observation = position broadcast to `obs_shape` (float32)

Like a gymnasium vector env with `AutoresetMode.SAME_STEP`: the step that ends an episode
returns the first observation of the next one, and the last observation of the finished
episode as `info["final_obs"]` (here for every env, equal to the next observation when not
done). No gymnasium dependency: the env is a few array operations.
"""

from __future__ import annotations

import numpy as np


class TrivialVectorEnv:
    def __init__(self, num_envs: int, obs_shape: tuple[int, ...], episode_length: int,
                 seed: int = 0) -> None:  # fmt: skip
        self.num_envs = num_envs
        self.obs_shape = tuple(obs_shape)
        self.episode_length = episode_length
        self.rng = np.random.default_rng(seed)
        self.position = np.zeros(num_envs, np.float32)
        self.steps = np.zeros(num_envs, np.int64)

    def _start(self, count: int) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, count).astype(np.float32)

    def _observe(self, position: np.ndarray) -> np.ndarray:
        shape = (self.num_envs, *self.obs_shape)
        expand = (slice(None),) + (None,) * len(self.obs_shape)
        return np.ascontiguousarray(np.broadcast_to(position[expand], shape))

    def reset(self) -> tuple[np.ndarray, dict]:
        self.position = self._start(self.num_envs)
        self.steps[:] = 0
        return self._observe(self.position), {}

    def step(self, action: np.ndarray):
        """`action`: (num_envs, 1). Returns obs, reward, terminated, truncated, info."""
        action = np.asarray(action, np.float32).reshape(self.num_envs)
        moved = self.position + np.clip(action, np.float32(-1.0), np.float32(1.0))
        self.steps += 1
        truncated = self.steps >= self.episode_length
        reward = -np.abs(moved)
        position = moved.copy()
        if truncated.any():
            position[truncated] = self._start(int(truncated.sum()))
            self.steps[truncated] = 0
        self.position = position
        terminated = np.zeros(self.num_envs, bool)
        info = {"final_obs": self._observe(moved)}
        return self._observe(position), reward, terminated, truncated, info
