"""Property: on random small recurrence programs, the JAX lowering equals the reference."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlsys.rt as rt

UNARY = ["tanh", "exp", "abs", "sigmoid"]
BINARY = ["add", "sub", "mul", "maximum"]


def build(draw) -> tuple[rt.Program, dict, dict]:
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    B, T = prog.bounds
    bounds = {B: draw(st.integers(1, 3)), T: draw(st.integers(1, 6))}
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs = {}
    with prog:
        pool = []
        for k, domain in enumerate([(b, t), (t,), (b,)]):
            name = f"in{k}"
            extents = tuple(bounds[d.bound] for d in domain)
            inputs[name] = rng.normal(size=extents).astype("float32")
            pool.append(rt.input(name, domain=domain))

        def pick():
            return pool[draw(st.integers(0, len(pool) - 1))]

        for _ in range(draw(st.integers(1, 7))):
            kind = draw(st.sampled_from(["unary", "binary", "forward", "reverse", "reduce",
                                         "window", "last", "shift"]))  # fmt: skip
            if kind == "unary":
                x = pick()
                pool.append(getattr(x, draw(st.sampled_from(UNARY)))()
                            if draw(st.booleans()) else -x)  # fmt: skip
            elif kind == "binary":
                op = draw(st.sampled_from(BINARY))
                x, y = pick(), pick()
                pool.append(rt.maximum(x, y) if op == "maximum" else getattr(x, f"__{op}__")(y))
            elif kind == "forward":  # y[0] = x[0]; y[t+1] = a * y[t] + x[t+1]
                x = pick()
                a = draw(st.sampled_from([0.5, -0.9, 1.0]))
                y = rt.placeholder(domain=(b, t))
                y[b, 0] = x[..., 0] + rt.const(0.0, "float32") if t in x.domain else x + 0.0
                y[b, t + 1] = a * y[b, t] + (x[..., t + 1] if t in x.domain else x)
                pool.append(y)
            elif kind == "reverse":  # y[T-1] = x; y[t] = x[t] + g * tanh(y[t+1])
                x = pick()
                y = rt.placeholder(domain=(b, t))
                y[b, T - 1] = (x[..., T - 1] if t in x.domain else x) + 0.0
                y[b, t] = x + 0.7 * y[b, t + 1].tanh()
                pool.append(y)
            elif kind == "reduce" and t in pick().domain:
                x = pick()
                pool.append(x[..., 0:T].sum(axis=0) if t in x.domain else x)
            elif kind == "window" and t in pick().domain:  # a variable-size slice, reduced
                x = pick()
                if t in x.domain:
                    n = draw(st.integers(1, 3))
                    window = [x[..., t : rt.min(t + n, T)], x[..., 0 : t + 1], x[..., t:T]]
                    how = draw(st.sampled_from(["sum", "mean", "max"]))
                    pool.append(getattr(window[draw(st.integers(0, 2))], how)(axis=0))
            elif kind == "last":
                x = pick()
                pool.append(x[..., T - 1] if t in x.domain else x * 2.0)
            elif kind == "shift":  # a read of the previous point with its own base case
                x = pick()
                if t in x.domain:
                    y = rt.placeholder(domain=x.domain)
                    y[..., 0] = x[..., 0] * 0.5
                    y[..., t + 1] = x[..., t]
                    pool.append(y)
        for k, tensor in enumerate(pool[3:] or pool):
            prog.output(f"out{k}", tensor + 0.0)
    return prog, bounds, inputs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_jax_lowering_equals_reference(data) -> None:
    prog, bounds, inputs = build(data.draw)
    expected = prog.compile(bounds=bounds, backend="ref").run(inputs)
    actual = prog.compile(bounds=bounds, backend="jax", debug=True).run(inputs)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)  # fmt: skip
