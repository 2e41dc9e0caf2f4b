"""Domain reduction: ops drop the dims their values do not vary along; results stay equal."""

from __future__ import annotations

import io

import numpy as np

import rlsys.compiler.pipeline as pipeline
import rlsys.rt as rt


def doubling(events: list):
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        x = rt.placeholder(shape=(), dtype="float32", domain=(b, t), name="x")
        x[b, 0] = rt.const(1.0)
        x[b, t + 1] = x[b, t] * 2.0  # the same for every b
        y = x + b  # varies along b again
        prog.output("x", x)
        prog.output("y", y)
        prog.sink(x, lambda point, value: events.append((point, float(value))))
    return prog


def test_a_recurrence_that_ignores_b_is_computed_once_per_t() -> None:
    events: list = []
    exe = doubling(events).compile(bounds={"B": 3, "T": 4})
    rows = {row.tensor: row for row in exe.explain(file=io.StringIO())}
    assert rows["x"].domain == ("t",)
    assert rows["x"].decisions == {"t": "scan"}
    out = exe.run()
    powers = 2.0 ** np.arange(4)
    np.testing.assert_array_equal(out["x"], np.broadcast_to(powers, (3, 4)))  # the old shape
    np.testing.assert_array_equal(out["y"], powers + np.arange(3)[:, None])
    assert events == [({"b": b, "t": t}, 2.0**t) for b in range(3) for t in range(4)]


def test_a_reduced_gradient_loss_gives_the_gradient_of_the_unreduced_program(
    monkeypatch,
) -> None:
    """loss[i, b] reads only w[i, 0], so it does not vary along b and is reduced; the
    gradient still sums it over all B points of its domain, as without the pass."""
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    with prog:
        w = rt.input("w", domain=(i, b))
        loss = rt.placeholder(shape=(), dtype="float32", domain=(i, b), name="loss")
        loss[i, b] = w[i, 0] * w[i, 0]
        prog.output("g", rt.grad(loss, w))
    weights = {"w": np.array([[1.0, 7, 7, 7, 7], [3.0, 7, 7, 7, 7]], "float32")}
    exe = prog.compile(bounds={"I": 2, "B": 5})
    assert {r.tensor: r.domain for r in exe.explain(file=io.StringIO())}["loss"] == ("i",)
    reduced = exe.run(weights)["g"]
    without = [p for p in pipeline.PIPELINE if p[0] != "domain reduction"]
    monkeypatch.setattr(pipeline, "PIPELINE", tuple(without))
    np.testing.assert_allclose(reduced, prog.compile(bounds={"I": 2, "B": 5}).run(weights)["g"])
    np.testing.assert_allclose(reduced[:, 0], [10.0, 30.0])


def test_a_sliced_dim_is_kept() -> None:
    """h does not vary along b, but a reader slices it along b: that axis must stay."""
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    _, B = prog.bounds
    with prog:
        w = rt.input("w", domain=(i,))
        h = rt.placeholder(shape=(), dtype="float32", domain=(i, b), name="h")
        h[i, b] = w * w
        prog.output("total", h[i, 0:B].sum())
    out = prog.compile(bounds={"I": 2, "B": 5}).run({"w": np.array([1.0, 3.0], "float32")})
    np.testing.assert_allclose(out["total"], [5.0, 45.0])
