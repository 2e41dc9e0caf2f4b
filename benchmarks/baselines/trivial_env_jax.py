"""TimeRL's trivial environment as pure JAX functions (gymnax-like), for the PureJaxRL-style A2C.

Same dynamics as `rlsys/envs/trivial_env.py` (and `trivial_env_numpy.py`), for one env;
vmap them over envs. The state is (position, steps taken); `step` resets a finished episode
inside the step, like gymnax, and also returns the last observation of the episode.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class State(NamedTuple):
    position: jax.Array  # () float32
    steps: jax.Array  # () int32


class Step(NamedTuple):
    obs: jax.Array
    state: State
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array


def make(obs_shape: tuple[int, ...], episode_length: int):
    """`reset(key) -> (obs, state)` and `step(key, state, action) -> Step`, for one env."""

    def observe(position):
        return jnp.broadcast_to(position, obs_shape)

    def start(key):
        return jax.random.uniform(key, (), jnp.float32, -1.0, 1.0)

    def reset(key):
        position = start(key)
        return observe(position), State(position, jnp.int32(0))

    def step(key, state: State, action) -> Step:
        moved = state.position + jnp.clip(action.reshape(()), -1.0, 1.0)
        steps = state.steps + 1
        truncated = steps >= episode_length
        position = jnp.where(truncated, start(key), moved)
        return Step(
            obs=observe(position),
            state=State(position, jnp.where(truncated, 0, steps)),
            reward=-jnp.abs(moved),
            terminated=jnp.zeros((), bool),
            truncated=truncated,
            final_obs=observe(moved),
        )

    return reset, step
