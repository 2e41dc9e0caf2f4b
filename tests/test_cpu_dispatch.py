"""rlsys.compiler makes XLA:CPU run programs inline (see rlsys/compiler/cpu_dispatch.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

IMPORT = "import rlsys.compiler; "
READ = "import jax; print(jax.config.read('jax_cpu_enable_async_dispatch'))"


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "RLSYS_CPU_ASYNC_DISPATCH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**environ, **env}, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("code", "env", "async_dispatch"),
    [
        (IMPORT + READ, {}, "False"),
        (IMPORT + READ, {"RLSYS_CPU_ASYNC_DISPATCH": "1"}, "True"),
        # A process whose JAX already runs: the setting would not take effect, so it is left.
        ("import jax.numpy as jnp; jnp.ones(2).block_until_ready(); " + IMPORT + READ, {}, "True"),
        # The profiler and tracing do not import the compiler: a profiled script keeps its JAX.
        ("import rlsys.profiler, rlsys.trace; " + READ, {}, "True"),
    ],
)
def test_cpu_programs_run_inline_when_the_compiler_is_imported_first(code, env, async_dispatch):
    assert _run(code, **env) == async_dispatch


def test_an_inline_program_gives_the_same_results():
    code = (
        "import time, rlsys.compiler, jax, jax.numpy as jnp, numpy as np\n"
        "f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())\n"
        "x = jnp.asarray(np.arange(64.0, dtype=np.float32).reshape(8, 8) / 64)\n"
        "print(float(f(x)))\n"
    )
    assert float(_run(code)) == pytest.approx(float(_run(code, RLSYS_CPU_ASYNC_DISPATCH="1")),
                                              rel=0, abs=0)  # fmt: skip
