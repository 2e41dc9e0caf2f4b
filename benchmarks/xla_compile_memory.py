"""What compiling a program costs in memory on XLA:CPU, per loop fusion.

    python benchmarks/xla_compile_memory.py [--reps 3]   # a markdown table, a process per run

Each row compiles a synthetic program of K loop fusions (a chain of `tanh(x @ w) * c +
sin(x)`: each matmul ends one fusion) in a fresh process, after the backend is up and a tiny
program is compiled, and prints the process's peak RSS above that point (`ru_maxrss`):

- `parts=P`: the same K fusions as P programs compiled one after the other (with
  `malloc_trim` between), which is what splitting an iteration into phases would give;
- `legacy`: with `--xla_cpu_use_fusion_emitters=false` (XLA's older LLVM IR emitters).

It shows why the scaling sweep's rlsys peak sits where it does (benchmarks/HISTORY.md): the
MLIR fusion emitters keep each loop fusion's compiler state until the whole program is
compiled, so a compilation's transient memory grows with the number of loop fusions in that
one program. The sweep's A2C iteration has about a hundred.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys

LEGACY_FLAG = "--xla_cpu_use_fusion_emitters=false"
ROWS = [(10, 1, False), (40, 1, False), (80, 1, False), (160, 1, False),
        (100, 1, False), (100, 2, False), (100, 4, False),
        (40, 1, True), (160, 1, True)]  # fmt: skip


def measure(fusions: int, parts: int) -> tuple[int, float]:
    """Compile `fusions` loop fusions as `parts` programs; (fusions seen, peak MiB above
    the start)."""
    import jax
    import jax.numpy as jnp
    import psutil

    jax.jit(lambda x: jnp.tanh(x) + 1).lower(jnp.ones(3)).compile()  # the backend, warm
    # After the backend is up: importing rlsys.compiler would otherwise change how JAX
    # dispatches (cpu_dispatch.py), and this measures JAX as it comes.
    from rlsys.compiler.heap import release_freed_heap

    start = psutil.Process().memory_info().rss / 2**20

    def chain(offset: int):
        def program(x, w):
            for k in range(fusions // parts):
                x = jnp.tanh(x @ w) * (offset + k + 1.0) + jnp.sin(x)
            return x

        return program

    seen = 0
    for part in range(parts):
        shapes = (jnp.ones((64, 64)), jnp.ones((64, 64)))
        compiled = jax.jit(chain(part * fusions)).lower(*shapes).compile()
        seen += len(re.findall(r"kind=kLoop", compiled.as_text()))
        del compiled
        release_freed_heap()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return seen, peak - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--one", nargs=2, type=int, metavar=("FUSIONS", "PARTS"), help=argparse.SUPPRESS
    )  # a row, in this process (the child)
    parser.add_argument("--reps", type=int, default=3, help="processes per row (default 3)")
    args = parser.parse_args()
    if args.one:
        seen, mib = measure(*args.one)
        print(f"{seen} {mib:.0f}")
        return
    print(
        "| loop fusions | programs | emitters | peak MiB above start: median (range) "
        "| MiB per fusion |"
    )
    print("|---|---|---|---|---|")
    for fusions, parts, legacy in ROWS:
        env = dict(os.environ)
        if legacy:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {LEGACY_FLAG}".strip()
        cmd = [sys.executable, __file__, "--one", str(fusions), str(parts)]
        runs = [subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                for _ in range(args.reps)]  # fmt: skip
        seen = int(runs[0].stdout.split()[0])
        mibs = sorted(float(r.stdout.split()[1]) for r in runs)
        median = statistics.median(mibs)
        kind = "legacy (LLVM IR)" if legacy else "MLIR (default)"
        print(
            f"| {seen} | {parts} | {kind} | {median:.0f} ({mibs[0]:.0f}–{mibs[-1]:.0f}) "
            f"| {median / seen:.2f} |"
        )


if __name__ == "__main__":
    main()
