"""Collectors of C-call intervals (the "ccalls" source of `rlsys.profiler.sources`).

Each records CPU-category events (`Category.BACKEND`, `Category.SIMULATOR`) into the active
recorder with `Recorder.emit_raw`, one event per interval, written when the interval ends:

    torch_backend  the outermost torch function / Tensor method call (a TorchFunctionMode)
    jax_backend    jitted JAX calls, waits on results; plus JAX's automatic operations

Simulator intervals come from the environment wrappers of `rlsys.profiler.hooks`, which
record the "simulation" operation and the SIMULATOR interval in the same wrapper.
"""
