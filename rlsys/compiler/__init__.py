"""The recurrent-tensor compiler: programs -> dependence graph -> passes -> JAX.

User-facing names are re-exported by `rlsys.rt`.
"""

from rlsys.compiler.cpu_dispatch import run_cpu_programs_inline

run_cpu_programs_inline()  # before any JAX computation creates the CPU backend: see there
from rlsys.compiler.lower.data_parallel import use_cpu_devices  # noqa: E402

__all__ = ["use_cpu_devices"]
