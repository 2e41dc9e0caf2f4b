"""The reference interpreter: recurrences, slices, returns, and the errors of bad programs."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt


def doubling_program():
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    B, T = prog.bounds
    with prog:
        x = rt.placeholder(shape=(), dtype="float32", domain=(b, t))
        x[b, 0] = 1.0
        x[b, t + 1] = x[b, t] * 2.0
        prog.output("x", x)
        prog.output("total", x[b, 0:T].sum())
    return prog, B, T


@pytest.fixture(params=["ref", "jax"])
def backend(request) -> str:
    return request.param


def test_doubling_recurrence_gives_powers_of_two(backend: str) -> None:
    prog, B, T = doubling_program()
    out = prog.compile(bounds={B: 3, T: 8}, backend=backend).run()
    np.testing.assert_array_equal(out["x"], np.tile(2.0 ** np.arange(8), (3, 1)))
    np.testing.assert_array_equal(out["total"], [255.0] * 3)


def test_bounds_by_name_and_missing_bounds() -> None:
    prog, B, T = doubling_program()
    assert prog.compile(bounds={"B": 1, "T": 3}).run()["total"].tolist() == [7.0]
    with pytest.raises(rt.RecurrenceError, match=r"bounds missing at compile time: T"):
        prog.compile(bounds={B: 2})
    with pytest.raises(rt.RecurrenceError, match="positive integer"):
        prog.compile(bounds={B: 2, T: 0})


def reverse_discounted(rewards, dones, gamma):
    out = np.zeros_like(rewards)
    running = 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * (1.0 - dones[k]) * running
        out[k] = running
    return out


@pytest.mark.parametrize("gamma", [0.8, 0.99])
def test_returns_as_a_recurrence_match_a_reverse_loop(gamma: float, backend: str) -> None:
    rng = np.random.default_rng(0)
    n = 50
    rewards = rng.normal(size=n).astype("float32")
    dones = (rng.random(n) < 0.1).astype("float32")
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        r = rt.input("r")
        d = rt.input("d")
        ret = rt.placeholder()
        ret[T - 1] = r[T - 1]
        ret[t] = r[t] + gamma * (1.0 - d[t]) * ret[t + 1]
        prog.output("ret", ret)
        prog.output("op", r[0:T].discounted_cum_sum(gamma, done=d[0:T]))
    out = prog.compile(bounds={T: n}, backend=backend).run({"r": rewards, "d": dones})
    expected = reverse_discounted(rewards, dones, gamma)
    np.testing.assert_allclose(out["ret"], expected, rtol=1e-5)
    np.testing.assert_allclose(out["op"], expected, rtol=1e-5)


def test_variable_slices(backend: str) -> None:
    """The JAX lowering pads a variable-size slice to its largest length and masks the
    padding in reductions (lower/padded.py); the reference reads exactly the slice."""
    prog = rt.Program(dims=("b", "t"))
    (b, t), (_, T) = prog.dims, prog.bounds
    with prog:
        x = rt.input("x", domain=(b, t))
        prog.output("prefix", x[b, 0 : t + 1].sum())
        prog.output("suffix", x[b, t:T].sum())
        prog.output("window", x[b, t : rt.min(t + 3, T)].sum())
        prog.output("mean", (x[b, t:T] * 2.0).mean())
        prog.output("max", (-x[b, 0 : t + 1]).max())
        prog.output("min", x[b, t:T].min())
        prog.output("std", x[b, 0 : t + 1].std())
    values = np.arange(12, dtype="float32").reshape(2, 6) ** 1.5
    out = prog.compile(bounds={"B": 2, T: 6}, backend=backend).run({"x": values})
    prefixes = [values[:, : k + 1] for k in range(6)]
    suffixes = [values[:, k:] for k in range(6)]
    np.testing.assert_allclose(out["prefix"], np.cumsum(values, axis=1), rtol=1e-6)
    np.testing.assert_allclose(out["suffix"], np.cumsum(values[:, ::-1], 1)[:, ::-1], rtol=1e-6)
    window = np.stack([values[:, k : k + 3].sum(1) for k in range(6)], axis=1)
    np.testing.assert_allclose(out["window"], window, rtol=1e-6)
    np.testing.assert_allclose(out["mean"], np.stack([2 * s.mean(1) for s in suffixes], 1),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(out["max"], np.stack([(-p).max(1) for p in prefixes], 1))
    np.testing.assert_allclose(out["min"], np.stack([s.min(1) for s in suffixes], 1))
    np.testing.assert_allclose(out["std"], np.stack([p.std(1) for p in prefixes], 1),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_dims_as_values_and_where(backend: str) -> None:
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        y = rt.where(rt.const(2) * t < T, t, -1)
        prog.output("y", y + rt.const(0))
    assert prog.compile(bounds={T: 5}, backend=backend).run()["y"].tolist() == [0, 1, 2, -1, -1]


# -- errors: each names the tensor and the user's line --------------------------------------


def test_reading_an_undefined_point_names_tensor_and_point() -> None:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.placeholder()
        x[t + 1] = x[t] * 2.0  # no base case for t = 0
        prog.output("x", x)
    with pytest.raises(rt.RecurrenceError, match=r"x is read at t=0, where none of its 1 "
                       r"definitions applies.*test_compiler_ref\.py"):  # fmt: skip
        prog.compile(bounds={"T": 4})


def test_cycle_without_base_case_is_reported() -> None:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.placeholder()
        x[t] = x[t] + 1.0
        prog.output("x", x)
    with pytest.raises(rt.RecurrenceError, match=r"x: these tensors depend on each other at "
                       r"the same point.*test_compiler_ref\.py"):  # fmt: skip
        prog.compile(bounds={"T": 3})


def test_out_of_bounds_read_is_reported() -> None:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.input("x")
        y = x[t + 1]
        prog.output("y", y)
    with pytest.raises(rt.RecurrenceError, match=r"reads x at t=3 \(index t\+1, at t=2\), "
                       r"outside 0..2.*test_compiler_ref\.py"):  # fmt: skip
        prog.compile(bounds={"T": 3})


def test_checking_a_billion_steps_costs_what_ten_do() -> None:
    """Demand analysis takes index ranges from a box's corners and regions piece by piece:
    it enumerated every point of a dim (a run of 10^8 iterations grew to 15 GB before
    training). Its errors still name the point."""
    import tracemalloc

    from rlsys.compiler.compile import bind_bounds
    from rlsys.compiler.passes.demand import check_demand

    prog, _, _ = doubling_program()
    graph = prog.graph()
    tracemalloc.start()
    demand = check_demand(graph, bind_bounds(graph, {"B": 4, "T": 10**9}))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**20
    assert (0, 10**9) in {box[-1] for box in demand.values() if box}  # x over every t
    for program in (_undefined_at_zero, _read_past_the_end):
        graph = program().graph()
        with pytest.raises(rt.RecurrenceError, match=r"t=0,|at t=999999999\)"):
            check_demand(graph, bind_bounds(graph, {"T": 10**9}))


def _undefined_at_zero() -> rt.Program:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.placeholder()
        x[t + 1] = x[t] * 2.0
        prog.output("x", x)
    return prog


def _read_past_the_end() -> rt.Program:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        prog.output("y", rt.input("x")[t + 1])
    return prog


def test_definition_errors_name_tensor_and_line() -> None:
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        x = rt.placeholder(domain=(t,))
        with pytest.raises(rt.ShapeError, match=r"x is float32 but the value is int32"):
            x[t] = rt.const(1)
        with pytest.raises(rt.RecurrenceError, match=r"test_compiler_ref\.py:\d+: x\[t\] = .*"
                           r"varies along b, which is not in the domain of x"):  # fmt: skip
            x[t] = rt.input("z", domain=(b, t))
        with pytest.raises(rt.RecurrenceError, match=r"left side indexes t with 2\*t"):
            x[2 * t] = 1.0
        with pytest.raises(rt.RecurrenceError, match="not a placeholder"):
            y = rt.input("y", domain=(t,))
            y[t] = 1.0
        with pytest.raises(rt.ShapeError, match=r"do not broadcast.*test_compiler_ref\.py"):
            rt.input("u", shape=(3,)) + rt.input("v", shape=(4,))


def test_what_jax_cannot_do_with_a_variable_slice_is_refused_at_compile_time() -> None:
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        prefix = rt.input("x")[0 : t + 1]
        running = prefix.cumsum()
        prog.output("last", running.sum())
    with pytest.raises(rt.RecurrenceError, match=r"running: cumsum of .*variable-size slice.*"
                       r"test_compiler_ref\.py"):  # fmt: skip
        prog.compile(bounds={"T": 4}, backend="jax")
    assert prog.compile(bounds={"T": 4}, backend="ref").run({"x": np.ones(4)})["last"].tolist() == [
        1, 3, 6, 10]  # fmt: skip
    kept = rt.Program(dims=("t",))
    with kept:
        kept.output("prefix", rt.input("x")[0 : kept.dims[0] + 1])
    with pytest.raises(rt.RecurrenceError, match=r"output 'prefix'.*cannot return it"):
        kept.compile(bounds={"T": 4}, backend="jax")


def test_run_checks_input_names_and_shapes(backend: str) -> None:
    prog = rt.Program(dims=("t",))
    with prog:
        prog.output("y", rt.input("x") * 2.0)
    exe = prog.compile(bounds={"T": 3}, backend=backend)
    with pytest.raises(rt.RecurrenceError, match=r"missing \['x'\]"):
        exe.run({})
    with pytest.raises(rt.RecurrenceError, match=r"input 'x' has shape \(4,\)"):
        exe.run({"x": np.zeros(4)})
    np.testing.assert_array_equal(exe.run({"x": np.ones(3)})["y"], [2.0, 2.0, 2.0])


def test_unknown_dimension_and_no_program() -> None:
    other = rt.Program(dims=("s",))
    prog = rt.Program(dims=("t",))
    with prog:
        x = rt.input("x", domain=prog.dims)
        with pytest.raises(rt.RecurrenceError, match="does not declare"):
            x[other.dims[0]]
    with pytest.raises(rt.RecurrenceError, match="inside `with prog:`"):
        rt.placeholder()


def test_recurrence_reading_earlier_and_later_points_cannot_be_scheduled(backend: str) -> None:
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = rt.placeholder()
        x[0] = 1.0
        x[T - 1] = 1.0
        x[t] = x[t - 1] + x[t + 1]
        prog.output("x", x)
    with pytest.raises(rt.RecurrenceError, match=r"x: the recurrence along t reads both "
                       r"earlier and later points of itself.*test_compiler_ref\.py"):  # fmt: skip
        prog.compile(bounds={T: 5}, backend=backend)
