"""The XLA compiler options every program rlsys compiles gets, per backend: on a CPU
`cpu_copies`' region-based copy insertion and `cpu_convolutions`' Eigen convolutions, on a
GPU `gpu_launch`'s CUDA graphs for small loop bodies (each module says why). Compiler
options of the program, not process-wide flags: JAX code outside rlsys compiles as it
would."""

from __future__ import annotations

import jax

from rlsys.compiler.lower.cpu_convolutions import CPU_CONVOLUTION_OPTIONS
from rlsys.compiler.lower.cpu_copies import CPU_COPY_OPTIONS
from rlsys.compiler.lower.gpu_launch import GPU_LAUNCH_OPTIONS

OPTIONS_BY_BACKEND: dict[str, dict[str, object]] = {
    "cpu": {**CPU_COPY_OPTIONS, **CPU_CONVOLUTION_OPTIONS},
    "gpu": GPU_LAUNCH_OPTIONS,
}


def backend_options() -> dict[str, object]:
    """The compiler options for the current backend (none for others)."""
    return dict(OPTIONS_BY_BACKEND.get(jax.default_backend(), {}))
