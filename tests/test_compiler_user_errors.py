"""Mistakes a user writing a new algorithm makes, each refused with a RecurrenceError that
names the tensor (or the argument) and says how to fix it, instead of a Python or JAX error
from inside the compiler, a hang, or a silently wrong result."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt


def _program(dims=("b", "t")):
    prog = rt.Program(dims=dims)
    return prog, prog.dims, prog.bounds


def test_iterating_a_tensor_is_refused_not_an_endless_loop() -> None:
    prog, _, _ = _program()
    with prog:
        x = rt.placeholder()
        with pytest.raises(rt.RecurrenceError, match=r"x cannot be iterated"):
            for _ in x:
                pass
        with pytest.raises(rt.RecurrenceError, match=r"x cannot be iterated"):
            _first, _second = x
        with pytest.raises(rt.RecurrenceError, match=r"x has no value .* exe.run"):
            float(x)


def test_negative_index_is_refused_where_written_numpy_style_would_define_nothing() -> None:
    prog, _, _ = _program()
    with prog:
        x = rt.placeholder()
        with pytest.raises(rt.RecurrenceError, match=r"x, index of t: -1 is negative.* T - 1"):
            x[:, -1] = 1.0  # defined no point at all, silently
        with pytest.raises(rt.RecurrenceError, match=r"index of t: -1 is negative"):
            x[:, 0:-1]


def test_a_tensor_as_a_domain_index_says_to_use_take() -> None:
    prog, _, _ = _program()
    with prog:
        x = rt.placeholder()
        k = rt.const(1)
        with pytest.raises(rt.RecurrenceError, match=r"x, index of b: RecurrentTensor.*\.take"):
            x[k]


def test_outputs_and_sinks_take_this_programs_tensors_by_name() -> None:
    prog, _, _ = _program()
    other = rt.Program(dims=("b", "t"))
    with other:
        y = rt.placeholder()
    with prog:
        x = rt.placeholder()
        with pytest.raises(rt.RecurrenceError, match=r"output 'y': y belongs to another program"):
            prog.output("y", y)
        with pytest.raises(rt.RecurrenceError, match=r"sink: y belongs to another program"):
            prog.sink(y, lambda point, value: None)
        with pytest.raises(rt.RecurrenceError, match=r"output 'c': 3.0 is not a tensor"):
            prog.output("c", 3.0)
        with pytest.raises(rt.RecurrenceError, match=r"output name 3 is not a string"):
            prog.output(3, x)
        with pytest.raises(rt.RecurrenceError, match=r"sink of x: .* two arguments"):
            prog.sink(x, lambda value: None)
        prog.sink(x, print)  # builtins without a signature are taken as they are


def _doubling():
    prog, (b, t), (B, T) = _program()
    with prog:
        x = rt.placeholder()
        x[b, 0] = 1.0
        x[b, t + 1] = x[b, t] * 2.0
        prog.output("x", x)
    return prog, B, T


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        (None, "bounds must be a mapping .* got NoneType; pass prog.compile.bounds=.B: ..., T"),
        ([("B", 2), ("T", 3)], "bounds must be a mapping"),
        ({"B": 2, "T": True}, "bound T must be a positive integer, got True"),
        ({"B": 2, "b": 2, "T": 3}, "bound 'b' is not a bound"),
        ({"B": 1, "T": 2**33}, "bound T=8,589,934,592 is more than"),
    ],
)
def test_bad_bounds_are_refused_by_compile(bounds, message) -> None:
    prog, _, _ = _doubling()
    with pytest.raises(rt.RecurrenceError, match=message):
        prog.compile(bounds=bounds, backend="ref")


def test_a_bound_given_by_symbol_and_by_name_is_refused() -> None:
    prog, B, T = _doubling()
    with pytest.raises(rt.RecurrenceError, match=r"bound B is given twice"):
        prog.compile(bounds={B: 2, "B": 3, T: 3}, backend="ref")


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ("time", r"dims='time' is a string; give a sequence of names, e.g. dims=\('time',\)"),
        ((), "at least one dimension"),
        (("t", "T"), "dimensions t, T would share the bound T"),
        (("a b",), "identifiers like 't', got 'a b'"),
        (("t", "t"), "must be distinct"),
    ],
)
def test_bad_dimension_names_are_refused_by_program(dims, message) -> None:
    with pytest.raises(rt.RecurrenceError, match=message):
        rt.Program(dims=dims)


def test_declared_shapes_and_dtypes_are_checked_where_declared() -> None:
    prog, (_b, t), _ = _program()
    with prog:
        with pytest.raises(rt.ShapeError, match=r"placeholder x: 'floot32' is not a dtype"):
            x = rt.placeholder(dtype="floot32")
        with pytest.raises(rt.ShapeError, match=r"placeholder y: shape 3 .* shape=\(3,\)"):
            y = rt.placeholder(shape=3)  # noqa: F841 (named for the message)
        with pytest.raises(rt.ShapeError, match=r"input 'r': shape \(-2,\) needs sizes"):
            rt.input("r", shape=(-2,))
        with pytest.raises(rt.ShapeError, match=r"float64 would silently be float32"):
            rt.input("r", dtype="float64")
        with pytest.raises(rt.RecurrenceError, match=r"rt.input: the name 3 is not a string"):
            rt.input(3)
        x = rt.placeholder(domain=("t",))  # by name, as well as by symbol
        assert x.domain == (t,)
        with pytest.raises(rt.ShapeError, match=r"x.astype: 'float128x' is not a dtype"):
            x.astype("float128x")
        key = rt.random.key(0)
        with pytest.raises(rt.ShapeError, match=r"rt.random.uniform: shape \(-1,\) needs"):
            rt.random.uniform(key, shape=(-1,))
        with pytest.raises(rt.ShapeError, match=r"rt.random.permutation: shape \(-3,\)"):
            rt.random.permutation(key, -3)


def test_random_keys_must_be_key_tensors() -> None:
    prog, _, _ = _program()
    with prog:
        with pytest.raises(rt.RecurrenceError, match=r"uniform: the key 3 is not a tensor"):
            rt.random.uniform(3)
        with pytest.raises(rt.RecurrenceError, match=r"seed must be an integer, got 1.7"):
            rt.random.key(1.7)
        logits = rt.const([0.0, 1.0])
        with pytest.raises(rt.RecurrenceError, match=r"Categorical.sample: the key 0 is not"):
            rt.Categorical(logits).sample(0)
        with pytest.raises(rt.ShapeError, match=r"Categorical: logits need a last axis .*\(\)"):
            rt.Categorical(rt.const(0.0))


def test_op_arguments_jax_would_fail_on_or_take_silently_are_refused() -> None:
    prog, _, _ = _program()
    with prog:
        x = rt.input("x", shape=(2,))
        with pytest.raises(rt.ShapeError, match=r"broadcast_to: .*\(2,\).*\(3,\).* \(at "):
            x.broadcast_to((3,))
        assert x.broadcast_to((4, 2)).shape == (4, 2)
        with pytest.raises(rt.ShapeError, match=r"where: the condition is float32, not bool"):
            rt.where(x, 1.0, 2.0)
        with pytest.raises(rt.ShapeError, match=r"lazy_where: the condition is float32"):
            rt.lazy_where(x, x * 2.0, 0.0)
        with pytest.raises(rt.RecurrenceError, match=r"lazy_where: rows=0; give a positive"):
            rt.lazy_where(x > 0.0, x * 2.0, 0.0, rows=0)
        with pytest.raises(rt.ShapeError, match=r"concat: no tensors to join"):
            rt.concat([])
        with pytest.raises(rt.RecurrenceError, match=r"constant of \[\[1, 2\], \[3\]\]"):
            rt.const([[1, 2], [3]])


@pytest.mark.parametrize("segmented", [False, True])
def test_gradient_of_a_loss_that_does_not_depend_on_the_param_is_zero(segmented) -> None:
    # it failed with a KeyError inside the JAX lowering (the reference gave zeros)
    prog, (i, _b), bounds = _program(("i", "b"))
    with prog:
        w = rt.placeholder(domain=(i,))
        w[0] = 1.0
        loss = (w * w).stop_gradient()
        rt.optim.SGD(lr=0.1).minimize(loss, w)
        v = rt.placeholder(domain=(i,))
        v[i] = 2.0
        prog.output("w", w)
        prog.output("g", rt.grad(v * 3.0, w))
    out = prog.compile(bounds=dict.fromkeys(bounds, 3), segmented=segmented).run()
    assert out["w"].tolist() == [1.0, 1.0, 1.0] and out["g"].tolist() == [0.0, 0.0, 0.0]


def test_grad_arguments_are_float_tensors_of_the_program() -> None:
    prog, (i, _b), _ = _program(("i", "b"))
    with prog:
        w = rt.placeholder(domain=(i,))
        n = rt.placeholder(domain=(i,), dtype="int32")
        with pytest.raises(rt.RecurrenceError, match=r"grad: the loss 3.0 is not a tensor"):
            rt.grad(3.0, w)
        with pytest.raises(rt.RecurrenceError, match=r"grad: the param n is int32"):
            rt.grad((n * 2).astype("float32"), n)  # JAX returned float0 values, silently


def test_a_definition_an_earlier_one_shadows_everywhere_is_refused() -> None:
    prog, (i, t), (_I, T) = _program(("i", "t"))
    with prog:
        x = rt.placeholder(domain=(t,))
        x[t] = 3.0
        with pytest.raises(rt.RecurrenceError, match=r"x\[...\] = .*never applies: the earl"):
            x[0] = 1.0  # the base case after the general rule: silently ignored
        with pytest.raises(rt.RecurrenceError, match=r"never applies"):
            x[t + 1] = x[t] * 2.0
        y = rt.placeholder(domain=(t,))
        y[0] = 0.0
        y[T - 1] = 1.0  # shadowed only where T = 1: kept
        y[t] = 2.0
        z = rt.placeholder(domain=(t,))
        z[rt.min(T - 1, 5)] = 1.0
        z[rt.min(T - 1, 2)] = 2.0  # not comparable (a min less a min): kept
        w = rt.placeholder(domain=(i,))
        w[i] = 1.0
        with pytest.raises(rt.RecurrenceError, match=r"w\[...\] = .* never applies"):
            rt.optim.SGD(lr=0.1).minimize(w * w, w)  # w never learnt


def _running_sum(dtype):
    prog, (b, t), (B, T) = _program()
    with prog:
        r = rt.input("r", dtype=dtype)
        s = rt.placeholder(dtype=dtype)
        s[b, 0] = r[b, 0]
        s[b, t + 1] = s[b, t] + r[b, t + 1]
        prog.output("s", s)
    return prog.compile(bounds={B: 2, T: 3}, backend="ref")


@pytest.mark.parametrize(
    ("dtype", "value", "message"),
    [
        ("float32", np.array([[None] * 3] * 2), "input 'r' holds object values"),
        ("int32", np.full((2, 3), 1.7), "input 'r' is float64 but the program declares int32"),
        ("int32", np.full((2, 3), 2**40), "values from 1099511627776 .* outside int32"),
    ],
)
def test_run_refuses_inputs_a_cast_would_change_silently(dtype, value, message) -> None:
    with pytest.raises(rt.RecurrenceError, match=message):
        _running_sum(dtype).run({"r": value})


def test_run_takes_a_mapping_and_sums_correctly() -> None:
    exe = _running_sum("float32")
    with pytest.raises(rt.RecurrenceError, match=r"a mapping from name to array, got list"):
        exe.run([np.ones((2, 3))])
    r = np.arange(6).reshape(2, 3)  # integers into a float input are exact
    np.testing.assert_allclose(exe.run({"r": r})["s"], np.cumsum(r, axis=1))


def test_numpy_operands_on_the_left_join_the_program() -> None:
    prog, _, _ = _program(("i",))
    with prog:
        x = rt.input("x", shape=(2,))
        prog.output("sum", np.ones(2, "float32") + x)  # was an object array of tensors
        prog.output("scaled", np.float32(2.0) * x)
        prog.output("exp", np.exp(x))
        with pytest.raises(rt.RecurrenceError, match=r"numpy's sin cannot take x"):
            np.sin(x)
    x = np.array([[0.0, 1.0], [2.0, 3.0]], "float32")
    out = prog.compile(bounds={"I": 2}, backend="ref").run({"x": x})
    np.testing.assert_allclose(out["sum"], 1.0 + x)
    np.testing.assert_allclose(out["scaled"], 2.0 * x)
    np.testing.assert_allclose(out["exp"], np.exp(x), rtol=1e-6)


def test_defining_a_point_past_the_bound_is_refused() -> None:
    prog, (_b, t), (_B, T) = _program()
    with prog:
        x = rt.placeholder()
        with pytest.raises(rt.RecurrenceError, match=r"t = T is outside 0..T - 1 .* T - 1"):
            x[:, T] = 0.0  # meant the last point, defined none
        x[:, T - 1] = 0.0
        x[:, t] = x[:, t + 1]


def test_a_program_without_outputs_is_refused() -> None:
    prog, (b, t), _ = _program()
    with prog:
        x = rt.placeholder()
        x[b, t] = 1.0
    with pytest.raises(rt.RecurrenceError, match=r"no outputs, so it would compute nothing"):
        prog.compile(bounds={"B": 1, "T": 1}, backend="ref")


@pytest.mark.parametrize("backend", ["jax", "ref"])
def test_a_second_derivative_is_refused(backend) -> None:
    # JAX gave zeros for it, silently, and the reference failed inside JAX
    prog, (i,), (I,) = _program(("i",))
    with prog:
        w = rt.placeholder()
        w[i] = 2.0
        slope = rt.grad(w * w * w, w)
        prog.output("g", rt.grad(slope, w))
    with pytest.raises(rt.RecurrenceError, match=r"its loss reads the gradient at .* slope ="):
        prog.compile(bounds={I: 2}, backend=backend)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sizes": (4, -3, 2)}, r"MLP: sizes \(4, -3, 2\) must be .* two or more positive"),
        ({"sizes": (4,)}, r"MLP: sizes \(4,\) must be"),
        ({"sizes": (4, 2), "activation": "gelu"}, "MLP: activation must be one of"),
    ],
)
def test_bad_network_arguments_are_refused(kwargs, message) -> None:
    prog, _, _ = _program(("i",))
    with prog, pytest.raises(rt.RecurrenceError, match=message):
        rt.nn.MLP(**kwargs)


def test_a_convolution_larger_than_the_maps_is_a_recurrence_error() -> None:
    prog, _, _ = _program(("i",))
    with prog, pytest.raises(rt.RecurrenceError, match=r"8x8 convolution does not fit the 6x6"):
        rt.nn.ConvTorso((1, 6, 6))


def test_defining_with_a_dimension_value_asks_for_a_cast() -> None:
    prog, (i,), (I,) = _program(("i",))
    with prog:
        x = rt.placeholder()
        with pytest.raises(rt.ShapeError, match=r"x is float32 but the value is int32"):
            x[i] = i  # a TypeError from NumPy before
        n = rt.placeholder(dtype="int32")
        n[i] = i * 2
        prog.output("n", n)
    exe = prog.compile(bounds={I: 3}, backend="ref")
    assert exe.run()["n"].tolist() == [0, 2, 4]
    with pytest.raises(rt.RecurrenceError, match=r"iterations_per_call must be an integer >= 1"):
        prog.compile(bounds={I: 3}, iterations_per_call=2.0)


@pytest.mark.parametrize("backend", ["jax", "ref"])
def test_shapes_written_with_bounds_are_bound_at_compile_time(backend) -> None:
    prog, (b, _t), (B, T) = _program()
    with prog:
        r = rt.input("r")
        # a constant `a` is broadcast to the slice's shape (T,): a TypeError inside JAX before
        prog.output("ret", r[b, 0:T].linear_recurrence(0.5))
        prog.output("flat", r[0:B, 0:T].reshape(6))
    r = np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 2.0]], "float32")
    out = prog.compile(bounds={B: 2, T: 3}, backend=backend).run({"r": r})
    np.testing.assert_allclose(out["ret"], [[3.0, 4.0, 4.0], [0.5, 1.0, 2.0]])
    np.testing.assert_allclose(out["flat"], r.ravel())
    with pytest.raises(rt.ShapeError, match=r"reshape#\d+ at .* cannot reshape \(2, 2\) into"):
        prog.compile(bounds={B: 2, T: 2}, backend=backend)


def test_a_constant_take_past_the_axis_is_refused() -> None:
    prog, _, _ = _program(("i",))
    with prog:
        x = rt.const(np.arange(4.0, dtype="float32"))
        assert x.take(rt.const(3)).shape == ()
        with pytest.raises(rt.RecurrenceError, match=r"take\(7, axis=0\): indices run from 0 to 3"):
            x.take(rt.const(7))  # NaN at run time before
        with pytest.raises(rt.RecurrenceError, match=r"take\(\[ 0 -1\], axis=0\)"):
            x.take(np.array([0, -1], "int32"))


def test_python_builtins_on_tensors() -> None:
    prog, _, _ = _program(("i",))
    with prog:
        x = rt.input("x")
        assert abs(x).node.op == "abs"  # a TypeError before
        with pytest.raises(rt.RecurrenceError, match=r"rt.maximum/rt.minimum instead of the buil"):
            max(x, 0.0)
        with pytest.raises(rt.RecurrenceError, match=r"& \| ~ instead of and/or/not"):
            assert (x > 0.0) and (x < 1.0)


def test_optimizer_settings_must_be_finite_numbers() -> None:
    with pytest.raises(rt.RecurrenceError, match=r"Adam: lr=nan must be a finite number"):
        rt.optim.Adam(lr=float("nan"))  # every parameter was NaN after the first step
    with pytest.raises(rt.RecurrenceError, match=r"SGD: lr='0.1' must be a finite number"):
        rt.optim.SGD(lr="0.1")
    with pytest.raises(rt.RecurrenceError, match=r"max_grad_norm=0 must be > 0 or None"):
        rt.optim.SGD(max_grad_norm=0)
    rt.optim.Adam(lr=lambda i: 1e-3, max_grad_norm=float("inf"))
    rt.optim.SGD(lr=np.float32(0.1))
