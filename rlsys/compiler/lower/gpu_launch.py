"""XLA:GPU options for rlsys's programs: small loop bodies launched as CUDA graphs.

XLA:GPU launches a program's kernels from the host one at a time, except runs of at least
`xla_gpu_graph_min_graph_size` (default 5) capturable kernels, which it records once into a
CUDA graph ("command buffer") and replays with one launch. An rlsys iteration holds loops
whose bodies are two or three tiny kernels (a GAE step, a running episode return over 256
envs): below that size, so every trip of them paid a launch per kernel. On an H200, in the
A2C scaling sweep's base point, the two 250-step loops of that kind left the GPU idle most of
an iteration: 13.1-14.5 ms per iteration with 5.0 ms of kernels.

With every run captured (minimum size 1), the same program ran 7.2 ms per iteration, PPO
(gymnax CartPole, 10 iterations per call) 5.3 ms against 5.6-6.9, and the sweep's width=16
point 6.3 against 10.0-15.4 (`benchmarks/gpu/kernel_count.py`, benchmarks/HISTORY.md,
twentieth session). Recording whole loops as graphs too (command types WHILE and
CONDITIONAL) made PPO slower: 7.3 ms. Applied through `backend_options.py`.
"""

from __future__ import annotations

GPU_LAUNCH_OPTIONS: dict[str, object] = {"xla_gpu_graph_min_graph_size": 1}
