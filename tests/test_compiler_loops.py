"""Loops: what a scan keeps after it (`lower/jax_loop.py`)."""

from __future__ import annotations

import re

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


def acting_and_returns(full_output: bool):
    """An acting-like forward scan over t for every b (x, a layer of 4 units plus noise drawn
    for every step before it), a layer on all of its points at once (r) and a reverse scan
    over t reading that (g: returns)."""
    prog = rt.Program(dims=("i", "b", "t"))
    i, b, t = prog.dims
    last = prog.bounds[2] - 1
    weights = np.random.default_rng(2).normal(size=(4, 4)).astype("float32")
    with prog:
        w, v = rt.const(weights), rt.const(np.ones((4, 2), "float32"))
        c = rt.input("c", shape=(4,), domain=(i, b))
        x = rt.placeholder(shape=(4,), domain=(i, b, t), name="x")
        x[i, b, 0] = c
        noise = rt.random.normal(rt.random.key(0).fold_in(b).fold_in(t), (4,))
        x[i, b, t + 1] = (x[i, b, t] @ w).tanh() + 0.1 * noise  # the noise is drawn before
        r = (x @ v).sum()
        g = rt.placeholder(domain=(i, b, t), name="g")
        g[i, b, last] = r[i, b, last]
        g[i, b, t] = r + 0.9 * g[i, b, t + 1]
        prog.output("total", g[i, 0 : prog.bounds[1], 0 : prog.bounds[2]].sum())
        if full_output:
            prog.output("g", g)
    return prog


@pytest.mark.parametrize("full_output", [False, True])
def test_a_stack_is_used_as_the_scan_stored_it_without_transposing(full_output: bool) -> None:
    # A loop over t stores its values t first; computing on them and scanning them again in
    # that order, and drawing the noise the loop streams in that order, needs no (b, t) <->
    # (t, b) transposition, which XLA:CPU would make a transposing fusion plus a copy each.
    # An output is still in domain order: that is the one transposing copy left.
    c = np.random.default_rng(1).normal(size=(2, 3, 4)).astype("float32")
    bounds = {"I": 2, "B": 3, "T": T}
    exe = acting_and_returns(full_output).compile(bounds=bounds)
    expected = acting_and_returns(full_output).compile(bounds=bounds, backend="ref").run({"c": c})
    out = exe.run({"c": c})
    for name in expected:
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-5, atol=1e-5)
    (hlo,) = exe.optimized_hlo().values()
    transposes = [
        line
        for line in _scheduled_instructions(hlo)
        if re.search(r"%\S*(transpose|copy)\S* = \S+ fusion\(", line)
    ]
    assert len(transposes) == (1 if full_output else 0), transposes


def _scheduled_instructions(hlo: str) -> list[str]:
    """The instructions XLA runs one by one (the entry's and loop bodies'), not those inside
    fusions, where a transposition is only a way of indexing."""
    lines, inside_fusion = [], False
    for line in hlo.splitlines():
        if line and not line[0].isspace():
            inside_fusion = line.startswith(("%fused", "%wrapped"))
        elif not inside_fusion:
            lines.append(line)
    return lines


def several_kept_values():
    """A recurrence over t whose members x and h (3 floats a step each), a (an int) and w
    (3 x 2048 floats) are all read after the loop."""
    prog = rt.Program(dims=("i", "t"))
    i, t = prog.dims
    with prog:
        c = rt.input("c", shape=(3,), domain=(i,))
        x = rt.placeholder(shape=(3,), domain=(i, t), name="x")
        h = x * 0.5
        a = h.argmax()
        w = (h.reshape(3, 1) * rt.const(np.ones((1, 2048), "float32"))).tanh()
        x[i, 0] = c
        x[i, t + 1] = (h.tanh() + a.astype("float32") * 0.01 + w.sum(axis=1) * 1e-4)[i, t]
        prog.output("x", x)
        prog.output("h", h)
        prog.output("a", a)
        prog.output("w", w.sum())
    return prog


def test_a_loop_writes_its_small_kept_values_as_one_row_per_dtype() -> None:
    # Each stacked value is a dynamic-update-slice thunk per step, about a microsecond each
    # on CPU: the small ones go packed, one row per dtype (`PACKED_BYTES`: x and h in one
    # f32 row, a in an s32 one), the wide one (3 x 2048 floats a step) as it is.
    c = np.random.default_rng(3).normal(size=(2, 3)).astype("float32")
    bounds = {"I": 2, "T": T}
    exe = several_kept_values().compile(bounds=bounds)
    expected = several_kept_values().compile(bounds=bounds, backend="ref").run({"c": c})
    out = exe.run({"c": c})
    for name in expected:
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-5)
    (hlo,) = exe.optimized_hlo().values()
    writes = [match.group(1) for line in _scheduled_instructions(hlo)
              if (match := re.search(r"%\S*dynamic-update-slice\S* = (\w+)\[", line))]  # fmt: skip
    assert sorted(writes) == ["f32", "f32", "s32"]
