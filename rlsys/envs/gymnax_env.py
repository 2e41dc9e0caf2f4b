"""gymnax environments as ops of a recurrent-tensor program (in-graph, jitted with the rest).

    env = GymnaxEnv("CartPole-v1")
    first = env.reset(key)                      # first.obs, first.state
    step = env.step(key, state, action)         # .obs .state .reward .terminated .truncated
                                                # .done .final_obs
An environment state (a pytree) is carried as one float32 vector (`ravel_pytree`; its integer
leaves are small counters, exact in float32). gymnax resets finished episodes inside `step`:
`obs` is then the first observation of the next episode and `final_obs` the last one of the
finished episode (for bootstrapping a truncated episode). An op computes a whole transition
and returns its parts packed in one vector; the properties below slice them out. Where the
environment keeps gymnax's own `step`, the reset that follows an episode end is an op of its
own (`_reset_after_point`), so that an acting loop draws it for all steps before it runs.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.rules import TensorType
from rlsys.compiler.rules.base import register
from rlsys.compiler.rules.threefry import typed_key
from rlsys.compiler.tensor import RecurrentTensor, lift

# gymnax imports these at its own import only to draw frames (Pong, Rooms); with them come
# scipy and pandas: about 2 of the 2.7 s `import gymnax` takes on a 2-core machine.
_DRAWING_MODULES = ("seaborn", "matplotlib.pyplot")


class _LoadedOnFirstUse(types.ModuleType):
    """Stands in for a module until one of its attributes is read, then imports it. (The
    standard `importlib.util.LazyLoader` loads as soon as another `import` statement names
    the module: the import system reads `__spec__`.)"""

    def __getattr__(self, attr: str):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _import_gymnax():
    """`import gymnax`, with its drawing modules imported on first use."""
    for name in _DRAWING_MODULES:
        if name in sys.modules or not _installed(name):
            continue
        sys.modules[name] = stand_in = _LoadedOnFirstUse(name)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, stand_in)
    import gymnax

    return gymnax


@functools.cache
def _environment(env_id: str):
    gymnax = _import_gymnax()  # slow (seconds): only when a program uses it
    try:
        env, params = gymnax.make(env_id)
    except (ValueError, KeyError) as err:
        known = ", ".join(sorted(gymnax.registered_envs)[:8])
        raise RecurrenceError(f"unknown gymnax environment {env_id!r} (e.g. {known}, ...)") from err
    except OSError as err:  # MNISTBandit downloads MNIST when made
        raise RecurrenceError(f"gymnax could not make {env_id!r}: {err}") from None
    # The state's layout, from shapes: an eager reset would compile its random draws.
    shapes = jax.eval_shape(env.reset, jax.random.PRNGKey(0), params)[1]
    flat, unravel = ravel_pytree(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))
    # The program keeps the state as float32 (`_flat`); a state of integers only (Catch's
    # positions, MinAtar's grids) unravels from its own dtype (exact up to 2**24).
    return env, params, lambda packed: unravel(packed.astype(flat.dtype))


def _flat(tree) -> jax.Array:
    return ravel_pytree(tree)[0].astype("float32")


def _reset_point(key, *, env_id: str, layout):
    env, params, _ = _environment(env_id)
    obs, state = env.reset(typed_key(key), params)
    return jnp.concatenate([_flat(obs), _flat(state)])


def _step_point(key, state, action, *, env_id: str, layout):
    env, params, unravel = _environment(env_id)
    # gymnax draws from the key with jax.random: the same numbers, unrolled (threefry.py)
    obs, state, reward, terminated, truncated, info = env.step(typed_key(key), unravel(state),
                                                               action, params)  # fmt: skip
    parts = [obs, state, reward, terminated, truncated, info["final_observation"]]
    return jnp.concatenate([jnp.atleast_1d(_flat(p)) for p in parts])


# gymnax's `Environment.step` is step_env, then reset_env from the second half of the key,
# then a select of the reset where the episode ended. The reset depends on the key alone, so
# for environments that keep that `step`, rlsys makes it an op of its own: the compiler then
# draws the resets of every step of an acting loop at once, outside the loop, and the loop
# keeps step_env and the select (on the packed vector: one select, not one per state leaf).


def _keeps_gymnax_step(env) -> bool:
    from gymnax.environments.environment import Environment  # imported with the env

    return type(env).step is Environment.step


def _reset_after_point(key, *, env_id: str, layout):
    """The reset that follows an episode ending at this step (gymnax's auto-reset)."""
    env, params, _ = _environment(env_id)
    _, key_reset = jax.random.split(typed_key(key))
    obs, state = env.reset_env(key_reset, params)
    return jnp.concatenate([_flat(obs), _flat(state)])


def _step_before_reset_point(key, state, action, reset, *, env_id: str, layout):
    """gymnax's `step`, given the reset `_reset_after_point` drew from the same key."""
    env, params, unravel = _environment(env_id)
    key_step, _ = jax.random.split(typed_key(key))
    obs, after_step, reward, terminated, _ = env.step_env(key_step, unravel(state), action,
                                                          params)  # fmt: skip
    truncated = env.is_truncated(after_step, params)
    stepped = jnp.concatenate([_flat(obs), _flat(after_step)])
    after = jnp.where(jnp.logical_or(terminated, truncated), reset, stepped)
    parts = [after, reward, terminated, truncated, obs]
    return jnp.concatenate([jnp.atleast_1d(_flat(p)) for p in parts])


def _packed(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    return TensorType((sum(n for _, n in params["layout"]),), "float32")


register("gymnax_reset", _packed, _reset_point)
register("gymnax_step", _packed, _step_point)
register("gymnax_reset_after", _packed, _reset_after_point)
register("gymnax_step_before_reset", _packed, _step_before_reset_point)


class _Packed:
    """Named parts of one packed transition vector: of floats, or of bytes where the frames
    are bytes (`GymnasiumEnv`), the other parts then 4 bytes each, read as floats."""

    def __init__(self, packed: RecurrentTensor, layout, obs_shape) -> None:
        self._packed, self._obs_shape = packed, obs_shape
        self._offsets = {}
        offset = 0
        for name, size in layout:
            self._offsets[name] = (offset, offset + size)
            offset += size

    def _part(self, name: str) -> RecurrentTensor:
        start, stop = self._offsets[name]
        part = self._packed.slice_axis(start, stop)
        if self._packed.dtype == "uint8" and name not in ("obs", "final_obs"):
            part = part.bitcast("float32")  # packed with byte frames: a float's 4 bytes
        return part

    @property
    def obs(self) -> RecurrentTensor:
        return self._part("obs").reshape(self._obs_shape)

    @property
    def final_obs(self) -> RecurrentTensor:
        return self._part("final_obs").reshape(self._obs_shape)

    @property
    def state(self) -> RecurrentTensor:
        return self._part("state")

    @property
    def reward(self) -> RecurrentTensor:
        return self._part("reward").reshape(())

    @property
    def terminated(self) -> RecurrentTensor:
        return self._part("terminated").reshape(())

    @property
    def truncated(self) -> RecurrentTensor:
        return self._part("truncated").reshape(())

    @property
    def done(self) -> RecurrentTensor:
        program = self._packed.program
        return program.apply("maximum", [self.terminated, self.truncated])


class GymnaxEnv:
    """A gymnax environment by id, e.g. GymnaxEnv("CartPole-v1")."""

    in_graph = True  # its state is a tensor of the program
    obs_dtype = "float32"

    def __init__(self, env_id: str) -> None:
        env, params, _ = _environment(env_id)
        self.env_id = env_id
        self._split_reset = _keeps_gymnax_step(env)  # see _reset_after_point
        self.max_episode_steps = int(getattr(params, "max_steps_in_episode", 1000))
        obs, state = env.reset(jax.random.PRNGKey(0), params)
        self.obs_shape = tuple(jnp.shape(obs)) or (1,)  # FrozenLake's: a number, the cell
        self.state_size = int(_flat(state).shape[0])
        space = env.action_space(params)
        self.num_actions = int(getattr(space, "n", 0)) or None
        self.action_shape = tuple(getattr(space, "shape", ()) or ())
        obs_size = math.prod(self.obs_shape)
        self._reset_layout = (("obs", obs_size), ("state", self.state_size))
        self._step_layout = (
            ("obs", obs_size),
            ("state", self.state_size),
            ("reward", 1),
            ("terminated", 1),
            ("truncated", 1),
            ("final_obs", obs_size),
        )

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    def reset(self, key: RecurrentTensor) -> _Packed:
        packed = key.program.apply("gymnax_reset", [key], env_id=self.env_id,
                                   layout=self._reset_layout)  # fmt: skip
        return _Packed(packed, self._reset_layout, self.obs_shape)

    def step(self, key: RecurrentTensor, state: RecurrentTensor, action: Any) -> _Packed:
        program = key.program
        action = lift(program, action)
        if not self._split_reset:
            packed = program.apply("gymnax_step", [key, state, action], env_id=self.env_id,
                                   layout=self._step_layout)  # fmt: skip
            return _Packed(packed, self._step_layout, self.obs_shape)
        reset = program.apply("gymnax_reset_after", [key], env_id=self.env_id,
                              layout=self._reset_layout)  # fmt: skip
        packed = program.apply("gymnax_step_before_reset", [key, state, action, reset],
                               env_id=self.env_id, layout=self._step_layout)  # fmt: skip
        return _Packed(packed, self._step_layout, self.obs_shape)
