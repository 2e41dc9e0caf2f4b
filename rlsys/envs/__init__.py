"""Environment adapters: gymnax (ops inside a compiled program), gymnasium (host ops)."""

from rlsys.envs.gymnasium_env import GymnasiumEnv
from rlsys.envs.gymnax_env import GymnaxEnv

__all__ = ["GymnasiumEnv", "GymnaxEnv"]
