"""`rt.lazy_where`: where(mask, value, otherwise) whose value's own ops run only at the
points where the mask holds (`rlsys/compiler/lazy.py`)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.compiler.errors import RecurrenceError


def layer_program(rows=None, shared: bool = False):
    """y[i, b] = where(m > 0.5, tanh(x @ w[i]), -1), and (shared) the layer as an output."""
    prog = rt.Program(dims=("i", "b"))
    i, _ = prog.dims
    with prog:
        w = rt.input("w", shape=(4, 3), domain=(i,))
        x = rt.input("x", shape=(4,), domain=prog.dims)
        m = rt.input("m", shape=(), domain=prog.dims)
        layer = (x @ w[i]).tanh()
        prog.output("y", rt.lazy_where(m > 0.5, layer, -1.0, rows=rows))
        if shared:
            prog.output("layer", layer)
    return prog


def layer_inputs(mask_rate: float, points: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w": rng.normal(size=(2, 4, 3)).astype("float32"),
            "x": rng.normal(size=(2, points, 4)).astype("float32"),
            "m": (rng.random((2, points)) < mask_rate).astype("float32")}  # fmt: skip


@pytest.mark.parametrize("rows", [None, 1, 3, 7, 100])
@pytest.mark.parametrize("mask_rate", [0.0, 0.2, 1.0])
def test_it_computes_what_where_computes(rows, mask_rate: float) -> None:
    # rows below the count of needed points make several passes; the reference lowering
    # computes both sides everywhere, as `where` does.
    inputs = layer_inputs(mask_rate)
    bounds = {"I": 2, "B": 40}
    got = layer_program(rows).compile(bounds=bounds).run(inputs)["y"]
    expected = layer_program(rows).compile(bounds=bounds, backend="ref").run(inputs)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    masked = np.broadcast_to(inputs["m"][..., None] > 0.5, got.shape)
    assert (got[~masked] == -1.0).all()


def test_the_value_is_computed_rows_at_a_time_not_at_every_point() -> None:
    # 600 points, computed 8 at a time: the program's product has 8 rows, not 600.
    exe = layer_program(rows=8).compile(bounds={"I": 2, "B": 600})
    hlo = "\n".join(exe.optimized_hlo().values())
    products = re.findall(r"= f32\[([\d,]+)\]\S* (?:dot|fusion)\(.*dot_general", hlo)
    shapes = set(re.findall(r"= f32\[([\d,]+)\]\S* dot\(", hlo)) | set(products)
    assert shapes and all(not s.startswith("600") and "600" not in s.split(",") for s in shapes)
    assert any(s.split(",")[0] == "8" for s in shapes), shapes


def test_a_value_that_other_outputs_need_is_computed_once_as_usual() -> None:
    inputs = layer_inputs(0.3)
    out = layer_program(rows=4, shared=True).compile(bounds={"I": 2, "B": 40}).run(inputs)
    masked = inputs["m"][..., None] > 0.5
    np.testing.assert_allclose(out["y"], np.where(masked, out["layer"], -1.0), rtol=1e-6)


def test_inside_a_scan_it_reads_the_current_step() -> None:
    # s[t + 1] = s[t] + lazy_where(t is odd, 2 * s[t], 1): a recurrence over t puts the lazy
    # node in a scan; the reference lowering gives the values.
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        s = rt.placeholder(domain=(t,), name="s")
        s[0] = 1.0
        odd = (t % 2) * 1.0
        s[t + 1] = s + rt.lazy_where(odd > 0.5, 2.0 * s, 1.0)
        prog.output("s", s)
    got = prog.compile(bounds={"T": 6}).run()["s"]
    expected = prog.compile(bounds={"T": 6}, backend="ref").run()["s"]
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(got, [1, 2, 6, 7, 21, 22])


def test_a_host_op_in_the_value_is_a_clear_error() -> None:
    from rlsys.envs import GymnasiumEnv

    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    with prog:
        env = GymnasiumEnv("CartPole-v1", 2, seed=0)
        first = env.reset(rt.random.key(0).fold_in(b))
        m = rt.input("m", shape=(), domain=(i, b))
        prog.output("y", rt.lazy_where(m > 0.5, first.obs.sum(), 0.0))
    with pytest.raises(RecurrenceError, match=r"lazy_where .* host op"):
        prog.compile(bounds={"I": 1, "B": 2})


def test_explain_shows_the_value_as_lazy() -> None:
    import io

    rows = layer_program(rows=4).compile(bounds={"I": 2, "B": 40}).explain(file=io.StringIO())
    by_op = {row.op: row for row in rows}
    assert by_op["tanh"].decisions == {"i": "lazy", "b": "lazy"}
    assert by_op["lazy_where"].decisions == {"i": "vectorize", "b": "vectorize"}


def test_a_gradient_through_the_value_is_a_clear_error() -> None:
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    with prog:
        w = rt.input("w", shape=(4, 3), domain=(i,))
        x = rt.input("x", shape=(4,), domain=(i, b))
        y = rt.lazy_where(x.sum() > 0.0, (x @ w[i]).tanh(), 0.0)
        prog.output("g", rt.grad(y[i, 0 : prog.bounds[1]].sum(), w))
    with pytest.raises(RecurrenceError, match="cannot be differentiated; use rt"):
        prog.compile(bounds={"I": 1, "B": 5})


@pytest.mark.parametrize("size", [1, 2, 5, 17, 100, 1000, 32000, 64001])
@pytest.mark.parametrize("rate", [0.0, 0.01, 0.5, 1.0])
def test_the_needed_points_are_listed_as_nonzero_lists_them(size: int, rate: float) -> None:
    import jax
    import jax.numpy as jnp

    from rlsys.compiler.lower.jax import _needed_first

    needed = np.random.default_rng(size).random(size) < rate
    got = np.asarray(jax.jit(_needed_first)(jnp.asarray(needed)))
    np.testing.assert_array_equal(got, jnp.nonzero(needed, size=size, fill_value=size)[0])
