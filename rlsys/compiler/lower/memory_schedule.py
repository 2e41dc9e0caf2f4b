"""XLA:CPU's instruction order chosen per program: for memory when its temporaries are large.

XLA:CPU orders a program's instructions with a scheduler that favours running independent
ones concurrently; its memory-optimized scheduler orders them to keep fewer buffers live.
On the A2C scaling sweep's iteration (256 envs x 250 steps, 256-wide layers) the memory
scheduler needs 318 MiB of temporaries instead of 382 (the forward activations of the actor,
the critic and the bootstrap values are no longer all live at once), with the same iteration
time, and the process's peak falls by as much; at 512 envs 167 instead of 201. For programs
with small temporaries it buys little and its compilation peaks about 10 MiB higher
(benchmarks/HISTORY.md, twelfth session), and there the compilation, not the run, sets the
process's peak memory.

So a program is compiled as XLA would, and compiled again with the memory scheduler only
when its temporaries exceed LARGE_TEMPORARIES; the one needing less is kept. That second
compilation (as long as the first) is paid only by programs whose every call moves hundreds
of megabytes.
"""

from __future__ import annotations

import jax

from rlsys.compiler.lower.backend_options import backend_options

LARGE_TEMPORARIES = 128 * 2**20  # bytes: about what compiling an A2C iteration holds (1.4 MiB
# per loop fusion, about a hundred fusions): above it, running sets the process's peak
MEMORY_SCHEDULER = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


def temporaries(compiled) -> int:
    """Bytes of temporary buffers a call of the compiled program allocates."""
    analysis = compiled.memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", 0) if analysis is not None else 0


def compile_frugally(lowered) -> jax.stages.Compiled:
    """`lowered.compile()` with the backend's options (`backend_options.py`), or on CPU, for
    a program with large temporaries, its compilation with the memory scheduler too when
    that needs fewer."""
    options = backend_options()
    compiled = lowered.compile(compiler_options=options or None)
    if jax.default_backend() != "cpu":
        return compiled
    needed = temporaries(compiled)
    if needed <= LARGE_TEMPORARIES:
        return compiled
    frugal = lowered.compile(compiler_options={**options, **MEMORY_SCHEDULER})
    return frugal if temporaries(frugal) < needed else compiled
