"""The smallest recurrent-tensor program, for tests about what compiling does around it."""

from __future__ import annotations

import numpy as np

import rlsys.rt as rt

DOUBLINGS = [1.0, 2.0, 4.0, 8.0]  # its output "x" with bounds {"T": 4}


def doubling_program() -> rt.Program:
    """x[0] = 1, x[t+1] = 2 x[t]; outputs x[0:4]."""
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.placeholder(name="x")
        x[0] = rt.const(np.float32(1.0))
        x[t + 1] = x * 2.0
        prog.output("x", x[0:4])
    return prog
