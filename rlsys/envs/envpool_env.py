"""envpool environments as host ops: `envpool:<id>`, e.g. envpool:CartPole-v1 (extra `envpool`).

The same host-op adapter as gymnasium (`GymnasiumEnv`); only the vector env differs. envpool
steps its `num_envs` copies in C++ threads and resets a finished environment on the *next*
step (ignoring that step's action). rlsys wants same-step resets (gymnax's and gymnasium's
`SAME_STEP`), so after a step that finished some episodes it steps just those environments
once more (`env_id=`): that step is their reset, and its observation the next episode's first.
"""

from __future__ import annotations

import warnings

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.envs.gymnasium_env import GymnasiumEnv


class EnvpoolEnv(GymnasiumEnv):
    """`num_envs` copies of envpool environment `env_id` (gymnasium API), stepped on the host."""

    def _make_vector(self):
        try:
            import envpool
        except ImportError:
            raise RecurrenceError(
                "envpool is not installed: pip install 'rlsys[envpool]' (or pip install envpool)"
            ) from None
        with warnings.catch_warnings():  # envpool's spaces have float64 bounds: harmless
            warnings.filterwarnings("ignore", message=".*precision lowered")
            try:
                pool = envpool.make_gymnasium(self.env_id, num_envs=self.num_envs,
                                              seed=self.seed)  # fmt: skip
            except AssertionError:  # envpool's answer to an unknown id
                raise RecurrenceError(f"unknown envpool environment {self.env_id!r} "
                                      "(see envpool.list_all_envs())") from None  # fmt: skip
            spaces = pool.observation_space, pool.action_space  # made on first access
        limit = int(getattr(pool.spec.config, "max_episode_steps", 1000))
        return pool, *spaces, limit

    def _reset_vector(self) -> np.ndarray:
        obs, info = self.vector.reset()
        return obs[np.argsort(info["env_id"])]  # rows in environment order

    def _step_vector(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self.vector.step(action)
        order = np.argsort(info["env_id"])  # rows in environment order
        obs, reward = obs[order], reward[order]
        terminated, truncated = terminated[order], truncated[order]
        final = np.array(obs, copy=True)
        finished = np.flatnonzero(terminated | truncated)
        if finished.size:
            idle = np.zeros((finished.size, *np.shape(action)[1:]), np.asarray(action).dtype)
            first, *_, reset_info = self.vector.step(idle, env_id=finished.astype("int32"))
            obs[reset_info["env_id"]] = first
        return obs, reward, terminated, truncated, final
