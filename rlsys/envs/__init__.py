"""Environment adapters: gymnax environments as ops inside a compiled program."""

from rlsys.envs.gymnax_env import GymnaxEnv

__all__ = ["GymnaxEnv"]
