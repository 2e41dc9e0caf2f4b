"""The environment variables that turn off a process-wide setting rlsys makes for XLA:CPU
(`cpu_dispatch.py`, `heap.py`)."""

from __future__ import annotations

import os


def opted_out(env_var: str) -> bool:
    """True when the user set `env_var` to 1/true/yes/on (any case)."""
    return os.environ.get(env_var, "").strip().lower() in ("1", "true", "yes", "on")
