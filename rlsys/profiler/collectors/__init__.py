"""Collectors of GPU activity: what the CUDA API and the GPU did, from the frameworks' profilers.

- `kineto`: a torch.profiler (Kineto) chrome trace -> CUDA API and GPU events.
- `jax_profiler`: a JAX profiler trace (perfetto_trace.json.gz) -> the same.
- `nvml`: an NVML utilization sampler (what nvidia-smi reports), run by `rlsys profile`.
- `gpu_tracing`: starts the framework profilers in a profiled process on a GPU machine.

Converters are pure functions of recorded data, so they are tested on hand-made traces; only
`gpu_tracing` and `nvml.open_nvml` touch a real GPU, and both do nothing without one.
"""
