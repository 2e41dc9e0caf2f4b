"""gymnasium environments as host ops: the environment runs in Python, outside the jit.

    env = GymnasiumEnv("CartPole-v1", num_envs=8, seed=0, batch_dim=b)
    first = env.reset(program)                # .obs, domain (b,)
    step = env.step(action)                   # .obs .reward .terminated .truncated .done
                                              # .final_obs, one call for all b at a point
A `SameStepVector` of `num_envs` copies (SyncVectorEnv's results, at two thirds of its cost)
steps all environments of a point in one host call, made from Python between the acting
loop's jitted steps (`compiler/stages.py`), in program order. Finished episodes reset in the
same step: `obs` then starts the next episode and `final_obs` is the last observation of
the finished one, as with gymnax.

The environment's state lives in the host object, not in the program: re-running a program
continues the environments where they were (a fresh program starts them from `seed`).

Other host backends (envpool) subclass `GymnasiumEnv`, replacing how the vector env is made,
reset and stepped (`_make_vector`, `_reset_vector`, `_step_vector`); the ops, spaces and
packing stay here.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.rules import TensorType
from rlsys.compiler.rules.base import register
from rlsys.compiler.tensor import RecurrentTensor
from rlsys.envs.gymnax_env import _Packed


def _packed_type(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    return TensorType((sum(n for _, n in params["layout"]),), params["dtype"])


def _mujoco_warnings_once(env_id: str) -> None:
    """Route MuJoCo's warnings to Python's `warnings`, which shows each once: MuJoCo's C
    library prints them to stdout for every model it compiles, and gymnasium's MuJoCo models
    use `settotalmass` (deprecated in MuJoCo 3.3), so 8 envs printed the same warning 8
    times. A handler the user set is left alone."""
    import gymnasium as gym

    try:
        entry_point = str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return  # an unknown id: making it will say so
    if "mujoco" not in entry_point:
        return
    try:
        import mujoco
    except ImportError:
        return  # making the env will say what to install
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(text: str) -> None:
    try:
        warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=2)
    except Exception:  # warnings as errors: raised into MuJoCo's C code, it aborts the process
        print(f"MuJoCo warning: {text}", file=sys.stderr)


def _host_reset(dummy, *, env: GymnasiumEnv, layout, dtype) -> np.ndarray:
    return env.host_reset()


def _host_step(action, *, env: GymnasiumEnv, layout, dtype) -> np.ndarray:
    return env.host_step(np.asarray(action))


register("gymnasium_reset", _packed_type, None, host=_host_reset)
register("gymnasium_step", _packed_type, None, host=_host_step)


class GymnasiumEnv:
    """`num_envs` copies of gymnasium environment `env_id`, stepped together on the host."""

    in_graph = False  # its state lives in the host object

    def __init__(self, env_id: str, num_envs: int, seed: int = 0) -> None:
        import gymnasium as gym

        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.vector, obs_space, action_space, self.max_episode_steps = self._make_vector()
        if not isinstance(obs_space, gym.spaces.Box):
            raise RecurrenceError(
                f"gymnasium environment {env_id!r}: observations of type "
                f"{type(obs_space).__name__} are not supported (Box only)"
            )
        if isinstance(action_space, gym.spaces.Discrete):
            self.num_actions, self.action_shape = int(action_space.n), ()
        elif isinstance(action_space, gym.spaces.Box):
            self.num_actions, self.action_shape = None, tuple(action_space.shape)
            self._low, self._high = action_space.low, action_space.high
        else:
            raise RecurrenceError(f"gymnasium environment {env_id!r}: actions of type "
                                  f"{type(action_space).__name__} are not supported "
                                  "(Discrete or Box)")  # fmt: skip
        self.obs_shape = tuple(obs_space.shape)
        # Frames (Atari's) stay bytes, a quarter of float32's memory in the rollout's stacks;
        # the networks scale them (`obs_vectors`). A step's row is then bytes, its reward,
        # terminated and truncated 4 bytes each, read back as floats (`_Packed`).
        self.obs_dtype = "uint8" if np.dtype(obs_space.dtype) == np.uint8 else "float32"
        self._dtype = np.dtype(self.obs_dtype)
        self._scalar = np.dtype(np.float32).itemsize // self._dtype.itemsize
        self._obs_size = obs_size = math.prod(self.obs_shape)
        self._reset_layout = (("obs", obs_size),)
        self._step_layout = (("obs", obs_size), ("reward", self._scalar),
                             ("terminated", self._scalar), ("truncated", self._scalar),
                             ("final_obs", obs_size))  # fmt: skip

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    # -- the vector env (what other host backends replace) ----------------------------------
    def _make_vector(self):
        """(vector env, single observation space, single action space, episode limit)."""
        import gymnasium as gym

        from rlsys.envs import atari
        from rlsys.envs.same_step_vector import SameStepVector

        make, limit = partial(gym.make, self.env_id), None
        _mujoco_warnings_once(self.env_id)
        try:
            if atari.is_atari(self.env_id):
                atari.register()
                make, limit = partial(atari.make, self.env_id), atari.episode_limit(self.env_id)
            vector = SameStepVector([make] * self.num_envs)
        except (gym.error.Error, ValueError) as err:  # ValueError: spaces it cannot batch
            raise RecurrenceError(f"gymnasium environment {self.env_id!r}: {err}") from None
        if limit is None:
            spec = vector.spec
            limit = int(spec.max_episode_steps or 1000) if spec else 1000
        return vector, vector.single_observation_space, vector.single_action_space, limit

    def _reset_vector(self) -> np.ndarray:
        obs, _ = self.vector.reset(seed=self.seed)
        return obs

    def _step_vector(self, action: np.ndarray):
        """(obs, reward, terminated, truncated, final obs), each an array or a list with one
        entry per environment, in environment order, with same-step resets: a finished
        episode's obs is the next episode's first, its final obs the last of the finished."""
        return self.vector.step_rows(action)

    # -- on the host --------------------------------------------------------------------------
    def host_reset(self) -> np.ndarray:
        return np.asarray(self._reset_vector(), self.obs_dtype).reshape(self.num_envs, -1)

    def host_step(self, action: np.ndarray) -> np.ndarray:
        if not self.discrete:
            action = np.clip(action, self._low, self._high)
        obs, reward, terminated, truncated, final = self._step_vector(action)
        n, size, fields = self.num_envs, self._obs_size, 3 * self._scalar
        packed = np.empty((n, 2 * size + fields), self._dtype)  # the columns of _step_layout
        packed[:, :size] = self._rows(obs)
        if self._scalar == 1:  # floats: the columns as they are (a view costs 1-2 us a step)
            at = size
            packed[:, at], packed[:, at + 1], packed[:, at + 2] = reward, terminated, truncated
        else:  # bytes: each float's 4 of them
            floats = packed[:, size : size + fields].view(np.float32)
            floats[:, 0], floats[:, 1], floats[:, 2] = reward, terminated, truncated
        packed[:, size + fields :] = self._rows(final)
        return packed

    def _rows(self, observations) -> Any:
        """Observations (an array, or a list of one per environment) as rows to copy: flat
        ones copy as they are, without a stacked array in between."""
        if len(self.obs_shape) == 1:
            return observations
        return np.reshape(observations, (self.num_envs, self._obs_size))

    # -- in the program -------------------------------------------------------------------------
    def reset(self, anchor: RecurrentTensor) -> _Packed:
        """The first observations; `anchor` is any tensor whose domain is the batch dim."""
        packed = anchor.program.apply("gymnasium_reset", [anchor], env=self,
                                      layout=self._reset_layout, dtype=self.obs_dtype)  # fmt: skip
        return _Packed(packed, self._reset_layout, self.obs_shape)

    def step(self, action: RecurrentTensor) -> _Packed:
        packed = action.program.apply("gymnasium_step", [action], env=self,
                                      layout=self._step_layout, dtype=self.obs_dtype)  # fmt: skip
        return _Packed(packed, self._step_layout, self.obs_shape)
