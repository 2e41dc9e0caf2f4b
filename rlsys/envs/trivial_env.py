"""TimeRL's "trivial" environment, in-graph: a scalar position moved by the (clipped) action.

For scaling studies, where the environment should cost nothing but its observation size:

    position[0] ~ uniform(-1, 1)
    position[k + 1] = position[k] + clip(action[k], -1, 1)
    reward[k] = -|position[k + 1]|            (minus the distance to the origin)
    observation = position broadcast to obs_shape
    every episode lasts episode_length steps (truncated, never terminated)

The id is `trivial:SHAPE[:STEPS]`: SHAPE is the observation shape with axes joined by "x"
(`64`, `3x84x84`), STEPS the episode length (default 100). Actions are Box(-1, 1, (1,)).

It plugs into the same interface as `GymnaxEnv` (reset(key) / step(key, state, action),
episodes reset inside `step`), but is written with ordinary recurrent-tensor ops, so it needs
no op of its own and runs under both backends. Its state is [position, steps taken].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import rlsys.rt as rt
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.tensor import RecurrentTensor, lift

DEFAULT_EPISODE_LENGTH = 100
ID_SYNTAX = "trivial:SHAPE[:STEPS], e.g. trivial:64 or trivial:3x84x84:200"


@dataclass
class TrivialStep:
    """One transition (or a reset: obs and state only), as tensors of the program."""

    obs: RecurrentTensor
    state: RecurrentTensor
    reward: Any = None
    terminated: Any = None
    truncated: Any = None
    final_obs: Any = None

    @property
    def done(self) -> RecurrentTensor:
        return rt.maximum(self.terminated, self.truncated)


def parse_id(env_id: str) -> tuple[tuple[int, ...], int]:
    """(observation shape, episode length) from `SHAPE[:STEPS]`."""
    shape_text, _, steps_text = env_id.partition(":")
    try:
        shape = tuple(int(n) for n in shape_text.split("x"))
        steps = int(steps_text) if steps_text else DEFAULT_EPISODE_LENGTH
    except ValueError:
        shape, steps = (), 0
    if not shape or min(shape) < 1 or steps < 1:
        raise RecurrenceError(f"trivial environment {env_id!r}: expected {ID_SYNTAX}")
    return shape, steps


class TrivialEnv:
    """The trivial environment with observations of `obs_shape` and fixed-length episodes."""

    in_graph = True  # its state is a tensor of the program (as with gymnax)
    obs_dtype = "float32"
    num_actions = None  # continuous actions
    action_shape = (1,)
    state_size = 2

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.obs_shape, self.max_episode_steps = parse_id(env_id)

    @property
    def discrete(self) -> bool:
        return False

    def _observe(self, position: RecurrentTensor) -> RecurrentTensor:
        return position.broadcast_to(self.obs_shape)

    def _start(self, key: RecurrentTensor) -> RecurrentTensor:
        return rt.random.uniform(key) * 2.0 - 1.0

    def reset(self, key: RecurrentTensor) -> TrivialStep:
        position = self._start(key)
        state = rt.concat([position.reshape(1), lift(key.program, [0.0])])
        return TrivialStep(self._observe(position), state)

    def step(self, key: RecurrentTensor, state: RecurrentTensor, action: Any) -> TrivialStep:
        action = lift(key.program, action)
        moved = state.slice_axis(0, 1) + action.reshape(1).clip(-1.0, 1.0)
        steps = state.slice_axis(1, 2) + 1.0
        truncated = (steps >= float(self.max_episode_steps)).astype("float32")
        # Like gymnax, a finished episode restarts within the step: obs is the next episode's.
        # Its start is drawn from a key of its own: the step's key also samples the action.
        restart = self._start(key.fold_in(1)).reshape(1)
        position = rt.where(truncated > 0.0, restart, moved)
        steps = steps * (1.0 - truncated)
        return TrivialStep(
            obs=self._observe(position.reshape(())),
            state=rt.concat([position, steps]),
            reward=-moved.abs().reshape(()),
            terminated=truncated.reshape(()) * 0.0,  # same domain as the rest
            truncated=truncated.reshape(()),
            final_obs=self._observe(moved.reshape(())),
        )
