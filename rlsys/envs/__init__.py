"""Environment adapters: gymnax and trivial (inside a compiled program), gymnasium and
envpool (host ops).

Each has `in_graph`: True when its state is a tensor of the program (reset(key),
step(key, state, action)), False when it lives on the host (reset(anchor), step(action)).
"""

from rlsys.envs.envpool_env import EnvpoolEnv
from rlsys.envs.gymnasium_env import GymnasiumEnv
from rlsys.envs.gymnax_env import GymnaxEnv
from rlsys.envs.trivial_env import TrivialEnv


def __getattr__(name: str):
    if name == "SameStepVector":  # on first use: it imports gymnasium
        from rlsys.envs.same_step_vector import SameStepVector

        return SameStepVector
    raise AttributeError(f"module 'rlsys.envs' has no attribute {name!r}")


__all__ = ["EnvpoolEnv", "GymnasiumEnv", "GymnaxEnv", "SameStepVector", "TrivialEnv"]
