"""XLA:CPU programs run in the calling thread, not handed to a worker thread.

By default JAX dispatches a CPU program asynchronously: the call enqueues it on a worker
thread and returns, and reading a result waits for that thread. For a large program (a
whole training iteration) the handoff is lost in the work. For the tiny per-step policy
call of a host loop (8 observations through a 64-64 MLP: about 11 µs of XLA thunks) it is
most of the cost: waking the worker, its wake-up latency and waking the caller back cost
about 80 µs per call on this project's 2-core machine, against about 21 µs for the same call
run inline (its real arguments, repeated in one process). PPO on gymnasium CartPole (a host
loop), alternating in one session: 32–34k env steps/s dispatched asynchronously, 40–53k
inline. Whole-iteration programs ran no faster dispatched: gymnax PPO and the A2C scaling
sweep at the same speed either way (benchmarks/HISTORY.md, the host PPO row), and the sweep's
iteration at 4 layers slower, 131.7 against 119.2 ms (section "Twenty-third session").

The switch is JAX's `jax_cpu_enable_async_dispatch`, which takes effect only when the CPU
backend is created, so it is set when `rlsys.compiler` is imported: in a process that has
already run JAX computations it changes nothing. The profiler does not import the compiler,
so `rlsys profile -- python script.py` leaves the script's JAX as it is. Set the environment
variable RLSYS_CPU_ASYNC_DISPATCH=1 to keep JAX's asynchronous dispatch.
"""

from __future__ import annotations

import jax

from rlsys.compiler.opt_out import opted_out

ENV_VAR = "RLSYS_CPU_ASYNC_DISPATCH"


def _backend_started() -> bool:
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # a JAX without it: assume started, and leave the setting alone
        return True
    return backends_are_initialized()


def run_cpu_programs_inline() -> None:
    """Make XLA:CPU run programs synchronously in the caller, unless the user opted out or
    the backend already exists (then the setting would not take effect)."""
    if not opted_out(ENV_VAR) and not _backend_started():
        jax.config.update("jax_cpu_enable_async_dispatch", False)
