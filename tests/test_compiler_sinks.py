"""Sinks: user functions that see each point of a tensor as the run computes it."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt


def counting_program(events: list):
    """x[i, b] = 10 i + b computed by a recurrence over i; y = sum over b of x at the end."""
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    I, B = prog.bounds
    with prog:
        x = rt.placeholder(name="x")
        x[0, b] = rt.const(0.0) + b  # a dimension used as a value
        x[i + 1, b] = x[i, b] + 10.0
        total = x[i, 0:B].sum()
        prog.sink(x, lambda point, value: events.append(("x", point, float(value))))
        prog.sink(total, lambda point, value: events.append(("total", point, float(value))))
        everything = x[0:I, 0:B].sum()  # outside the loop: fires at the end
        prog.sink(everything, lambda point, value: events.append(("all", point, float(value))))
        prog.output("total", total)
    return prog


@pytest.mark.parametrize("backend", ["jax", "ref"])
def test_sinks_see_every_point_in_order(backend) -> None:
    events: list = []
    out = counting_program(events).compile(bounds={"I": 3, "B": 2}, backend=backend).run()
    assert list(out) == ["total"]  # sinks add no outputs
    x_points = [(p["i"], p["b"], v) for kind, p, v in events if kind == "x"]
    assert x_points == [(i, b, 10.0 * i + b) for i in range(3) for b in range(2)]
    totals = [(p, v) for kind, p, v in events if kind == "total"]
    assert totals == [({"i": i}, 20.0 * i + 1.0) for i in range(3)]
    assert [(p, v) for kind, p, v in events if kind == "all"] == [({}, 63.0)]


def test_iteration_sinks_fire_as_iterations_finish() -> None:
    events: list = []
    exe = counting_program(events).compile(bounds={"I": 6, "B": 2}, iterations_per_call=2)
    seen = []

    def on_iteration(i, outputs):
        assert set(outputs) == {"total"}  # the hidden sink outputs are not shown
        seen.append((i, len([e for e in events if e[0] == "total"])))
        return i == 2  # stop after iteration 2 (its call also computed iteration 3)

    out = exe.run(on_iteration=on_iteration)
    assert seen == [(0, 1), (1, 2), (2, 3)]  # each iteration's sink fired before
    np.testing.assert_allclose(out["total"], [1.0, 21.0, 41.0, 61.0])
    totals = [p["i"] for kind, p, _ in events if kind == "total"]
    assert totals == [0, 1, 2, 3]  # every iteration computed, as the outputs
    assert not [e for e in events if e[0] == "all"]  # the run stopped before the end


def test_a_sink_must_be_callable() -> None:
    prog = rt.Program(dims=("i",))
    with prog:
        x = rt.placeholder(name="x")
        x[prog.dims[0]] = rt.const(1.0)
        with pytest.raises(rt.RecurrenceError, match="sink of x: 3 is not callable"):
            prog.sink(x, 3)
