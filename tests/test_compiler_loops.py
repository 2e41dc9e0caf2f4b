"""Loops: what a scan keeps after it (`lower/jax_loop.py`)."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt

T = 8


def recurrence(read_at: int, reverse: bool):
    """Per iteration i, x over t of shape (5,) carried forwards (or backwards): a scan inside
    the iteration; y reads x at one step."""
    prog = rt.Program(dims=("i", "t"))
    i, t = prog.dims
    with prog:
        c = rt.input("c")
        x = rt.placeholder(shape=(5,), name="x")
        start, step = (T - 1, 1) if reverse else (0, -1)
        x[i, start] = rt.const(np.arange(5, dtype="float32")) + i
        x[i, t] = x[i, t + step] * 0.5 + c  # reads the step before (after, reversed): a window
        prog.output("y", x[i, read_at] * 2.0)
    return prog


@pytest.mark.parametrize(("read_at", "reverse", "stacked"),
                         [(T - 1, False, False), (2, False, True),
                          (0, True, False), (T - 1, True, True)])  # fmt: skip
def test_a_value_read_only_at_the_last_step_is_not_stacked(read_at, reverse, stacked) -> None:
    c = np.random.default_rng(0).normal(size=(2, T)).astype("float32")
    bounds = {"I": 2, "T": T}
    exe = recurrence(read_at, reverse).compile(bounds=bounds)
    expected = recurrence(read_at, reverse).compile(bounds=bounds, backend="ref").run({"c": c})
    np.testing.assert_allclose(exe.run({"c": c})["y"], expected["y"], rtol=1e-6)
    # The scan's stack of x (a row per step and iteration) exists only when an earlier step
    # is read; otherwise the final carry is x at the last step.
    (hlo,) = exe.optimized_hlo().values()
    assert any(f"f32[{shape},5]" in hlo for shape in (f"{T},2", f"2,{T}")) == stacked
