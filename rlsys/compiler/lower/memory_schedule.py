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

import os
from pathlib import Path

import jax

from rlsys.compiler.errors import ProgramTooLargeError
from rlsys.compiler.lower.backend_options import backend_options

LARGE_TEMPORARIES = 128 * 2**20  # bytes: about what compiling an A2C iteration holds (1.4 MiB
# per loop fusion, about a hundred fusions): above it, running sets the process's peak
MEMORY_SCHEDULER = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


def temporaries(compiled) -> int:
    """Bytes of temporary buffers a call of the compiled program allocates."""
    analysis = compiled.memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", 0) if analysis is not None else 0


def call_bytes(compiled) -> int:
    """Bytes a call of the compiled program holds: its arguments, results and temporaries
    (results written into donated arguments counted once)."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return 0
    sizes = ("argument", "output", "temp")
    held = sum(getattr(analysis, f"{size}_size_in_bytes", 0) for size in sizes)
    return held - getattr(analysis, "alias_size_in_bytes", 0)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # absent, or cgroup v2's "max"


CGROUP_LIMITS = (  # (limit, usage) of the process's cgroup as a container mounts it
    ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),  # v2
    ("sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def available_bytes(root: Path = Path("/")) -> int | None:
    """Memory this process can still take: free RAM and swap (Linux's MemAvailable and
    SwapFree), or less where its cgroup limits it; None where unknown."""
    try:
        lines = (root / "proc/meminfo").read_text().splitlines()
        meminfo = dict(line.split(":", 1) for line in lines if ":" in line)
        free = sum(int(meminfo[key].split()[0]) * 1024 for key in ("MemAvailable", "SwapFree"))
    except (OSError, ValueError, KeyError):
        return None
    for limit, usage in CGROUP_LIMITS:
        most, used = _read_int(root / limit), _read_int(root / usage)
        if most is not None and used is not None:
            free = min(free, max(most - used, 0))
    return free


def check_fits(compiled) -> None:
    """Raise ProgramTooLargeError if a call of the compiled program needs more memory than
    is available (`RLSYS_SKIP_MEMORY_CHECK=1` skips this)."""
    if os.environ.get("RLSYS_SKIP_MEMORY_CHECK") == "1":
        return
    needed, free = call_bytes(compiled), available_bytes()
    if free is not None and needed > free:
        raise ProgramTooLargeError(
            f"a call of the compiled program needs {needed / 2**30:.1f} GiB (arguments, results "
            f"and temporaries), and this machine has {free / 2**30:.1f} GiB free"
        )


def compile_frugally(lowered) -> jax.stages.Compiled:
    """`lowered.compile()` with the backend's options (`backend_options.py`), or on CPU, for
    a program with large temporaries, its compilation with the memory scheduler too when
    that needs fewer; on CPU, refused if a call would not fit in memory (`check_fits`)."""
    options = backend_options()
    compiled = lowered.compile(compiler_options=options or None)
    if jax.default_backend() != "cpu":
        return compiled  # an accelerator's allocator reports what does not fit
    needed = temporaries(compiled)
    if needed > LARGE_TEMPORARIES:
        frugal = lowered.compile(compiler_options={**options, **MEMORY_SCHEDULER})
        compiled = frugal if temporaries(frugal) < needed else compiled
    check_fits(compiled)
    return compiled
