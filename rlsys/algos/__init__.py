"""RL algorithms written as recurrent-tensor programs, one readable file each.

`ALGORITHMS` maps each name `rlsys train` accepts to its config class and builder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlsys.algos.config import A2CConfig, DQNConfig, PPOConfig, REINFORCEConfig


def _builder(module: str, function: str) -> Callable[[Any], Any]:
    def build(config):  # imports JAX and the environments only when an algorithm is built
        import importlib

        return getattr(importlib.import_module(f"rlsys.algos.{module}"), function)(config)

    return build


ALGORITHMS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "ppo": (PPOConfig, _builder("ppo", "build_ppo")),
    "a2c": (A2CConfig, _builder("a2c", "build_a2c")),
    "reinforce": (REINFORCEConfig, _builder("reinforce", "build_reinforce")),
    "dqn": (DQNConfig, _builder("dqn", "build_dqn")),
}
