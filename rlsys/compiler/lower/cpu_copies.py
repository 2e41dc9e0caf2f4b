"""XLA:CPU's copy insertion with region-based live ranges, for the programs rlsys compiles.

XLA copies a loop-carried buffer wherever it cannot prove that the loop body may update it
in place. By default XLA:CPU's copy insertion judges that from live ranges over the whole
program; `xla_cpu_copy_insertion_use_region_analysis` makes it analyse each loop's body
(region) on its own, which proves more updates safe. In PPO's iteration on gymnax CartPole
every loop body holds one copy fewer: in the acting step and the minibatch update, the copy
of the loop counter made every trip (one of the 23 thunks of an acting step, one of the 79
of an update), and the iteration took 4.1% less time: 4.144 against 4.322 ms (25 alternating
rounds in one process, both compilations; the same results bit for bit). The A2C scaling
sweep's iterations ran as before (1.000-1.013x at its base, envs=64, width=16, width=256,
layers=4 and episode=125 points; benchmarks/HISTORY.md, thirtieth session).

Applied through `backend_options.py`.
"""

from __future__ import annotations

CPU_COPY_OPTIONS: dict[str, object] = {"xla_cpu_copy_insertion_use_region_analysis": True}
