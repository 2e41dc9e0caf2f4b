"""Collectors: what happened below Python, recorded as trace events.

C-call intervals (the "ccalls" source of `rlsys.profiler.sources`), CPU-category events
(`Category.BACKEND`, `Category.SIMULATOR`) recorded into the active recorder with
`Recorder.emit_raw`, one event per interval, written when the interval ends (torch, whose
intervals are the most numerous, appends them to a `Recorder.interval_buffer` instead):

- `torch_backend`: each call of a C-implemented torch function or Tensor method, and each
  backward pass (wrapped entry points), except metadata reads cheaper than their recording.
- `jax_backend`: jitted JAX calls, waits on results; plus JAX's automatic operations.

Simulator intervals come from the environment wrappers of `rlsys.profiler.hooks`, which
record the "simulation" operation and the SIMULATOR interval in the same wrapper.

GPU activity, from the frameworks' profilers:

- `kineto`: a torch.profiler (Kineto) chrome trace -> CUDA API and GPU events.
- `jax_profiler`: a JAX profiler trace (perfetto_trace.json.gz) -> the same.
- `nvml`: an NVML utilization sampler (what nvidia-smi reports), run by `rlsys profile`.
- `gpu_tracing`: starts the framework profilers in a profiled process on a GPU machine.

GPU converters are pure functions of recorded data, so they are tested on hand-made traces;
only `gpu_tracing` and `nvml.open_nvml` touch a real GPU, and both do nothing without one.
"""
