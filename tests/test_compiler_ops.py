"""Every op has its rules and an example here; the JAX lowering equals the reference on it.

A new op registered without an example below fails `test_every_op_has_an_example`.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.envs  # noqa: F401  (registers the environment ops)
import rlsys.rt as rt
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.rules import RULES

STRUCTURAL = {"const", "input", "dim_value", "index", "merge", "grad"}
# Environment ops are exercised by the PPO-shaped program and `rlsys train` tests.
ENV_OPS = {"gymnax_reset", "gymnax_step", "gymnax_reset_after", "gymnax_step_before_reset",
           "gymnasium_reset", "gymnasium_step"}  # fmt: skip


def _x():
    return rt.input("x", shape=(3,))


def _key():
    return rt.random.key(7).fold_in(prog_dims()[0])


_DIMS = {}


def prog_dims():
    return _DIMS["dims"]


UNARY = ["neg", "exp", "tanh", "abs", "relu", "sigmoid", "stop_gradient", "log", "sqrt"]
EXAMPLES = {
    **{op: (lambda op=op: (_x().abs() + 0.5)._unary(op)) for op in UNARY},
    "logical_not": lambda: ~(_x() > 0.0),
    "add": lambda: _x() + 1.0,
    "sub": lambda: _x() - 1.0,
    "mul": lambda: _x() * 3.0,
    "div": lambda: _x() / 2.0,
    "pow": lambda: (_x().abs() + 1.0) ** 2.5,
    "integer_pow": lambda: (_x().abs() + 1.0) ** 2.0,
    "maximum": lambda: rt.maximum(_x(), 0.1),
    "minimum": lambda: rt.minimum(_x(), 0.1),
    "floordiv": lambda: rt.const(np.array([7, 8, 9], "int32")) // 2,
    "mod": lambda: rt.const(np.array([7, 8, 9], "int32")) % 4,
    "eq": lambda: _x() == 0.0,
    "ne": lambda: _x() != 0.0,
    "lt": lambda: _x() < 0.0,
    "le": lambda: _x() <= 0.0,
    "gt": lambda: _x() > 0.0,
    "ge": lambda: _x() >= 0.0,
    "logical_and": lambda: (_x() > 0.0) & (_x() < 1.0),
    "logical_or": lambda: (_x() > 0.5) | (_x() < -0.5),
    "where": lambda: rt.where(_x() > 0.0, _x(), 0.0),
    "lazy_where": lambda: rt.lazy_where(_x() > 0.0, _x().exp(), 0.0, rows=1),
    "cast": lambda: _x().astype("int32"),
    "bitcast": lambda: (
        rt.const(np.array([1.5, -2.0], "float32").view("uint8"), "uint8")
        .reshape(2, 4)
        .bitcast("float32")
    ),
    "sum": lambda: _x().sum(),
    "mean": lambda: _x().mean(),
    "max": lambda: _x().max(),
    "min": lambda: _x().min(),
    "std": lambda: _x().std(),
    "cumsum": lambda: _x().cumsum(),
    "linear_recurrence": lambda: _x().linear_recurrence(_x() * 0.5, reverse=False),
    "argmax": lambda: _x().argmax(),
    "discounted_cum_sum": lambda: _x().discounted_cum_sum(0.9, done=_x() > 0.5),
    "matmul": lambda: _x() @ rt.const(np.arange(6, dtype="float32").reshape(3, 2)),
    "conv2d": lambda: (_x().reshape(3, 1, 1) * _x().reshape(1, 3, 1)).conv2d(
        rt.const(np.arange(8, dtype="float32").reshape(2, 2, 1, 2)), stride=1
    ),
    "softmax": lambda: _x().softmax(),
    "log_softmax": lambda: _x().log_softmax(),
    "reshape": lambda: _x().reshape(3, 1),
    "slice_axis": lambda: _x().slice_axis(1, 3),
    "take": lambda: _x().take(rt.const(np.array([2, 0], "int32"))),
    "concat": lambda: rt.concat([_x(), _x() * 2.0]),
    "set_rows": lambda: (
        _x().reshape(3, 1).set_rows(prog_dims()[0], _x().reshape(3, 1).slice_axis(0, 2) * 0.5)
    ),
    "transpose": lambda: _x().reshape(3, 1).transpose(),
    "broadcast_to": lambda: _x().broadcast_to((2, 3)),
    "fold_in": lambda: _key().fold_in(3),
    "uniform": lambda: rt.random.uniform(_key(), (2,)),
    "normal": lambda: rt.random.normal(_key(), (2,)),
    "permutation": lambda: rt.random.permutation(_key(), 5),
    "gumbel": lambda: rt.random.gumbel(_key(), (2,)),
    "categorical_log_prob": lambda: rt.Categorical(_x()).log_prob(rt.const(1)),
    "categorical_entropy": lambda: rt.Categorical(_x()).entropy(),
    "gaussian_log_prob": lambda: rt.DiagGaussian(_x(), rt.const(np.zeros(3, "float32"))).log_prob(
        _x() * 0.5
    ),
    "gaussian_entropy": lambda: rt.DiagGaussian(
        _x(), rt.const(np.full(3, 0.3, "float32"))
    ).entropy(),
}


def test_every_op_has_an_example() -> None:
    missing = set(RULES) - STRUCTURAL - ENV_OPS - set(EXAMPLES)
    assert not missing, f"ops without an example in this file: {sorted(missing)}"
    for name, rule in RULES.items():
        assert callable(rule.infer), name
        assert (rule.point is None) == (name in STRUCTURAL or rule.host is not None), name


def test_bitcast_reads_bytes_back_as_the_floats_packed_into_them() -> None:
    packed = np.array([[0.25, -3.0], [7.5, 1e-30]], "float32")
    prog = rt.Program(dims=("i",))
    with prog:
        prog.output(
            "y", rt.const(packed.view("uint8").reshape(2, 2, 4), "uint8").bitcast("float32")
        )
    for backend in ("ref", "jax"):
        y = prog.compile(bounds={"I": 1}, backend=backend).run()["y"]
        np.testing.assert_array_equal(y, packed)  # bit for bit
    with prog, pytest.raises(RecurrenceError, match="last axis must hold one float32's 4"):
        rt.const(np.zeros((2, 3)), "uint8").bitcast("float32")


def test_set_rows_replaces_rows_and_says_what_they_must_be() -> None:
    prog = rt.Program(dims=("i",))
    (i,) = prog.dims
    with prog:
        table = rt.const(np.arange(8, dtype="float32").reshape(4, 2))
        prog.output("y", table.set_rows(2 * i, rt.const(-np.ones((2, 2), "float32"))))
    for backend in ("ref", "jax"):
        y = prog.compile(bounds={"I": 2}, backend=backend).run()["y"]
        expected = np.arange(8, dtype="float32").reshape(4, 2)
        expected[2:] = -1.0
        np.testing.assert_array_equal(y[1], expected)  # iteration 1 replaced rows 2 and 3
    with prog, pytest.raises(RecurrenceError, match=r"rows of float32 \(4, 2\) are float32 "
                             r"\(n, 2\) with n <= 4, not float32 \(3,\)"):  # fmt: skip
        table.set_rows(0, rt.const(np.zeros(3, "float32")))
    with prog, pytest.raises(RecurrenceError, match="the start must be an integer scalar"):
        table.set_rows(0.5, rt.const(np.zeros((1, 2), "float32")))


@pytest.mark.parametrize("op", sorted(EXAMPLES))
def test_op_agrees_between_backends(op: str) -> None:
    prog = rt.Program(dims=("i",))
    _DIMS["dims"] = prog.dims
    with prog:
        result = EXAMPLES[op]()
        assert op in {n.op for n in prog.graph()}, f"the example of {op} does not use it"
        prog.output("y", result)
    x = np.array([[0.3, -1.2, 0.8], [1.5, 0.1, -0.4]], "float32")
    reference = prog.compile(bounds={"I": 2}, backend="ref")
    inputs = {"x": x} if "x" in reference.input_specs else {}
    expected = reference.run(inputs)["y"]
    actual = prog.compile(bounds={"I": 2}, backend="jax").run(inputs)["y"]
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
