"""Gradients equal jax.grad of a hand-written loss; SGD and Adam over i equal optax."""

from __future__ import annotations

import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlsys.rt as rt


@pytest.fixture(params=["ref", "jax"])
def backend(request) -> str:
    return request.param


def test_grad_of_a_loss_over_b_and_t_equals_jax_grad(backend: str) -> None:
    prog = rt.Program(dims=("i", "b", "t"))
    i, b, t = prog.dims
    I, B, T = prog.bounds
    with prog:
        w = rt.input("w", shape=(3,), domain=(i,))
        x = rt.input("x", shape=(3,), domain=(i, b, t))
        y = (x * w).sum().tanh()
        loss = (y * y)[i, 0:B, 0:T].mean(axis=(0, 1))
        prog.output("g", rt.grad(loss, w))
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(2, 3)).astype("float32")
    xs = rng.normal(size=(2, 4, 5, 3)).astype("float32")

    def hand_written(w, x):
        return jnp.mean(jnp.tanh((x * w).sum(-1)) ** 2)

    expected = np.stack([jax.grad(hand_written)(weights[k], xs[k]) for k in range(2)])
    out = prog.compile(bounds={I: 2, B: 4, T: 5}, backend=backend).run({"w": weights, "x": xs})
    np.testing.assert_allclose(out["g"], expected, rtol=1e-5, atol=1e-7)


def test_grad_of_a_sliced_flat_vector_equals_jax_grad(backend: str) -> None:
    # Slices, slices of slices, and a use of the whole vector: the JAX lowering takes the
    # gradient piece by piece (`_slices_of`); it must equal the plain gradient.
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    I, B = prog.bounds
    with prog:
        theta = rt.input("theta", shape=(10,), domain=(i,))
        x = rt.input("x", shape=(2,), domain=(i, b))
        first = theta.slice_axis(0, 6)
        weight = first.slice_axis(0, 4).reshape(2, 2)
        bias = first.slice_axis(4, 6)
        scale = theta.slice_axis(5, 9)  # overlaps `first`
        hidden = (x @ weight + bias).tanh()
        per_env = (hidden * scale.slice_axis(0, 2)).sum() + 0.1 * (theta * theta).sum()
        prog.output("g", rt.grad(per_env[i, 0:B].mean(), theta))
    rng = np.random.default_rng(1)
    thetas = rng.normal(size=(2, 10)).astype("float32")
    xs = rng.normal(size=(2, 3, 2)).astype("float32")

    def hand_written(theta, x):
        hidden = jnp.tanh(x @ theta[0:4].reshape(2, 2) + theta[4:6])
        return jnp.mean((hidden * theta[5:7]).sum(-1)) + 0.1 * (theta * theta).sum()

    expected = np.stack([jax.grad(hand_written)(thetas[k], xs[k]) for k in range(2)])
    out = prog.compile(bounds={I: 2, B: 3}, backend=backend).run({"theta": thetas, "x": xs})
    np.testing.assert_allclose(out["g"], expected, rtol=1e-5, atol=1e-6)


def test_stop_gradient_cuts_the_path(backend: str) -> None:
    prog = rt.Program(dims=("i",))
    with prog:
        w = rt.input("w", shape=(2,))
        loss = (w * w.stop_gradient()).sum()
        prog.output("g", rt.grad(loss, w))
    w0 = np.array([[1.0, -2.0]], "float32")
    out = prog.compile(bounds={"I": 1}, backend=backend).run({"w": w0})
    np.testing.assert_allclose(out["g"], w0)  # d/dw (w * const w) = w, not 2w


def test_a_recurrence_behind_stop_gradient_is_data_not_rerun(backend: str) -> None:
    """x[i, t + 1] depends on w[i] only through a stop_gradient (an acting loop's sampled
    action): the gradient reads x as data, re-running neither x's scan nor anything behind
    the stop_gradient, and equals the gradient with x held fixed."""
    from rlsys.compiler.autodiff import path_nodes

    prog = rt.Program(dims=("i", "t"))
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        w = rt.input("w", shape=(), domain=(i,))
        x = rt.placeholder(domain=(i, t), name="x")
        action = (w[i] * x).stop_gradient()
        x[i, 0] = 1.0
        x[i, t + 1] = x + action * 0.5
        loss = (w[i] * x * x)[i, 0:T].sum()
        grad = rt.grad(loss, w)
        prog.output("g", grad)
        prog.output("x", x)
    graph = prog.graph()
    path = path_nodes(graph, w.node_id, loss.node_id, ())
    assert x.node_id not in path and action.node_id not in path
    w0 = np.array([0.3, -0.4], "float32")
    out = prog.compile(bounds={I: 2, T: 4}, backend=backend).run({"w": w0})
    np.testing.assert_allclose(out["g"], (out["x"] ** 2).sum(axis=1), rtol=1e-6)


def _gradient_reads(graph) -> dict:
    """Gradient node -> the values its re-run reads (what a loop before it must keep)."""
    from rlsys.compiler.lower.jax_program import gradient_reads
    from rlsys.compiler.passes.dce import needed_nodes
    from rlsys.compiler.schedule import build_schedule

    return gradient_reads(graph, build_schedule(graph, needed_nodes(graph)))[0]


def test_a_stop_gradient_of_a_path_value_is_taken_from_the_rerun(backend: str) -> None:
    """v = tanh(x w) is on the path and the loss also reads v.stop_gradient() (as A2C's
    advantage G - V reads the critic): the re-run computes that constant with v, so nothing
    computes v apart beforehand, and the gradient is jax.grad's with the same stop."""
    from rlsys.compiler.autodiff import path_nodes

    prog = rt.Program(dims=("i", "t"))
    i, T = prog.dims[0], prog.bounds[1]
    with prog:
        w = rt.input("w", shape=(), domain=(i,))
        x = rt.input("x", shape=(), domain=prog.dims)
        target = rt.input("target", shape=(), domain=prog.dims)
        v = (x * w).tanh()
        held = v.stop_gradient()
        advantage = target - held
        loss = (advantage * v * 3.0 + (v - target) ** 2.0)[i, 0:T].sum()
        grad = rt.grad(loss, w)
        prog.output("g", grad)
    graph = prog.graph()
    assert held.node_id in path_nodes(graph, w.node_id, loss.node_id, (i,))
    reads = _gradient_reads(graph)
    assert held.node_id not in reads[grad.node_id] and v.node_id not in reads[grad.node_id]
    assert {w.node_id, x.node_id, target.node_id} <= reads[grad.node_id]
    rng = np.random.default_rng(4)
    w0 = np.array([0.3, -0.4], "float32")
    x0, y0 = rng.normal(size=(2, 2, 5)).astype("float32")

    def hand_written(w, x, y):
        v = jnp.tanh(x * w)
        return jnp.sum((y - jax.lax.stop_gradient(v)) * v * 3.0 + (v - y) ** 2)

    expected = np.stack([jax.grad(hand_written)(w0[k], x0[k], y0[k]) for k in range(2)])
    out = prog.compile(bounds={"I": 2, "T": 5}, backend=backend).run(
        {"w": w0, "x": x0, "target": y0}
    )
    np.testing.assert_allclose(out["g"], expected, rtol=1e-5, atol=1e-6)


def test_a_gradient_rereads_the_data_of_its_path_not_what_it_recomputes(backend: str) -> None:
    """The re-run recomputes the ops between param and loss, so what a loop before it keeps
    for it is their data (x), not their values (x * w, its tanh): a host acting loop of A2C
    once stacked every hidden activation of its policy for the gradient."""
    prog = rt.Program(dims=("i", "t"))
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        w = rt.input("w", shape=(), domain=(i,))
        x = rt.input("x", shape=(), domain=(i, t))
        hidden = (x * w).tanh()
        total = rt.placeholder(domain=(i, t), name="total")  # a scan over t that reads hidden
        total[i, 0] = 0.0
        total[i, t + 1] = total + hidden
        loss = (hidden * hidden)[i, 0:T].sum()
        grad = rt.grad(loss, w)
        prog.output("g", grad)
        prog.output("total", total)
    graph = prog.graph()
    assert _gradient_reads(graph)[grad.node_id] == {w.node_id, x.node_id}
    w0 = np.array([0.3, -0.4], "float32")
    x0 = np.random.default_rng(2).normal(size=(2, 5)).astype("float32")
    out = prog.compile(bounds={I: 2, T: 5}, backend=backend).run({"w": w0, "x": x0})
    h = np.tanh(x0 * w0[:, None])
    np.testing.assert_allclose(out["g"], (2 * h * (1 - h * h) * x0).sum(axis=1), rtol=1e-5)


def quadratic_program(optimizer):
    prog = rt.Program(dims=("i",))
    (I,) = prog.bounds
    with prog:
        target = rt.input("target", shape=(3,))
        theta = rt.placeholder(shape=(3,))
        theta[0] = rt.const(np.array([0.5, -1.0, 2.0], "float32"))
        loss = ((theta - target) ** 2.0).sum()
        optimizer.minimize(loss, theta)
        prog.output("theta", theta)
    return prog, I


def optax_trajectory(transform, targets, steps):
    params = jnp.array([0.5, -1.0, 2.0])
    state = transform.init(params)
    trajectory = [params]
    for k in range(steps):
        g = jax.grad(lambda p, k=k: jnp.sum((p - targets[k]) ** 2))(params)
        updates, state = transform.update(g, state, params)
        params = optax.apply_updates(params, updates)
        trajectory.append(params)
    return np.stack(trajectory)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (rt.optim.SGD(lr=0.05), optax.sgd(0.05)),
        (rt.optim.Adam(lr=0.1), optax.adam(0.1)),
        (
            rt.optim.Adam(lr=lambda i: 0.1 * (1.0 - i / 10.0), max_grad_norm=0.5),
            optax.chain(
                optax.clip_by_global_norm(0.5), optax.adam(optax.linear_schedule(0.1, 0.0, 10))
            ),
        ),
    ],
)
def test_optimizers_over_i_equal_optax(ours, theirs, backend: str) -> None:
    targets = np.random.default_rng(1).normal(size=(6, 3)).astype("float32")
    prog, I = quadratic_program(ours)
    out = prog.compile(bounds={I: 6}, backend=backend).run({"target": targets})["theta"]
    np.testing.assert_allclose(out, optax_trajectory(theirs, targets, 5), rtol=1e-5, atol=1e-6)


def test_parameters_are_sequential_over_i() -> None:
    prog, I = quadratic_program(rt.optim.Adam())
    exe = prog.compile(bounds={I: 3})
    rows = {row.tensor: row for row in exe.explain(file=io.StringIO())}
    assert rows["theta"].decisions == {"i": "scan"}


def test_grad_needs_a_scalar_loss_without_extra_dims() -> None:
    prog = rt.Program(dims=("i", "b"))
    with prog:
        w = rt.input("w", shape=(2,), domain=prog.dims[:1])
        per_b = (w * rt.input("x", shape=(2,))).sum()
        with pytest.raises(rt.RecurrenceError, match=r"varies along b but w does not"):
            rt.grad(per_b, w)
        with pytest.raises(rt.RecurrenceError, match=r"spatial shape \(2,\)"):
            rt.grad(w * 2.0, w)


@pytest.mark.parametrize("per_call", [1, 2, 5])
def test_host_loop_reports_each_iteration_and_can_stop_early(per_call: int) -> None:
    targets = np.random.default_rng(1).normal(size=(5, 3)).astype("float32")
    prog, I = quadratic_program(rt.optim.SGD(lr=0.05))
    exe = prog.compile(bounds={I: 5}, iterations_per_call=per_call)
    assert exe.host_loop
    seen = []
    full = exe.run({"target": targets}, on_iteration=lambda i, out: seen.append(i))
    assert seen == [0, 1, 2, 3, 4]
    expected = optax_trajectory(optax.sgd(0.05), targets, 4)
    np.testing.assert_allclose(full["theta"], expected, rtol=1e-5, atol=1e-6)
    stopped = exe.run({"target": targets}, on_iteration=lambda i, out: i == 1)
    iterations_run = {1: 2, 2: 2, 5: 5}[per_call]  # a call always finishes its iterations
    assert len(stopped["theta"]) == iterations_run
    np.testing.assert_allclose(stopped["theta"], expected[:iterations_run], rtol=1e-5, atol=1e-6)


def test_points_over_several_dims_are_computed_flat_with_the_nested_result(monkeypatch) -> None:
    """A node whose inputs all vary along its vector dims (b, t) runs as one vmap over
    b * t, a matmul as one call on all b * t rows (`_vectorized_flat`); nested vmaps, one
    per dim, give the same values and grads."""
    import rlsys.compiler.lower.jax as lowering
    from rlsys.algos.a2c import build_a2c
    from rlsys.algos.config import A2CConfig

    config = A2CConfig(env="trivial:3:5", num_envs=4, num_steps=5, total_steps=4 * 5 * 3,
                       hidden_size=8, seed=1)  # fmt: skip
    flat_calls = []
    flat = lowering._vectorized_flat
    monkeypatch.setattr(lowering, "_vectorized_flat",
                        lambda *args: flat_calls.append(1) or flat(*args))  # fmt: skip
    built = build_a2c(config)
    merged = built.program.compile(bounds=built.bounds).run()
    assert flat_calls, "no node was computed flat"
    monkeypatch.setattr(lowering, "_vectorized_flat",
                        lambda ctx, fn, reads, dims, rows: lowering._vectorized_nested(
                            ctx, fn, reads, dims))  # fmt: skip
    built = build_a2c(config)
    nested = built.program.compile(bounds=built.bounds).run()
    assert merged.keys() == nested.keys()
    for name, value in merged.items():
        np.testing.assert_allclose(value, nested[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_one_output_layer_over_many_vectorized_points_is_one_call_on_all_rows() -> None:
    # A matmul whose rows are the points of a vector dim (b here) is called once on all of
    # them (`OpRule.rows`), so its weight gradient is summed over chunks of rows as for a
    # spatial batch, not left to the slow dot.
    prog = rt.Program(dims=("b",))
    (b,) = prog.dims
    with prog:
        w = rt.input("w", shape=(64, 1), domain=())
        x = rt.input("x", shape=(64,), domain=(b,))
        prog.output("g", rt.grad((x @ w).tanh()[0 : prog.bounds[0]].sum(), w))
    rng = np.random.default_rng(3)
    weights = rng.normal(size=(64, 1)).astype("float32")
    xs = rng.normal(size=(6000, 64)).astype("float32")
    expected = jax.grad(lambda w, x: jnp.tanh(x @ w).sum())(weights, xs)
    exe = prog.compile(bounds={prog.bounds[0]: 6000})
    np.testing.assert_allclose(exe.run({"w": weights, "x": xs})["g"], expected, rtol=1e-4,
                               atol=1e-3)  # fmt: skip
    hlo = "\n".join(exe.optimized_hlo().values())
    assert not re.findall(r" dot\(.*lhs_contracting_dims=\{0\}", hlo)


@pytest.mark.parametrize(("outputs", "rows", "slow_dot"), [
    (2, 256, False), (4, 256, False), (5, 256, False), (64, 512, False), (64, 513, False),
    (64, 4000, False), (128, 4096, False), (256, 4096, True), (64, 514, True),
    (2, 1024, False), (1, 4096, False), (1, 6000, False)])  # fmt: skip
def test_a_layer_on_a_few_rows_or_outputs_has_the_plain_gradient_without_a_slow_dot(
    outputs: int, rows: int, slow_dot: bool
) -> None:
    # Up to 4 outputs the weight's gradient is a multiply-reduce, on up to 512 rows it takes
    # a transposed copy of them, on more rows a weight of 32x32 to 64x128 sums it over blocks
    # of 32-64 rows (513 = 9 * 57, 4000 = 80 * 50; 514 has no such divisor, and 64x128 is
    # the largest weight), and for one output on thousands of rows it is summed over chunks
    # of rows (`rules/reduce.py`), because XLA:CPU runs the dot form Xᵀ·dY slowly; the
    # values must not change. 64x256 is past the blocked sum: the slow dot.
    prog = rt.Program(dims=("i",))
    (i,) = prog.dims
    with prog:
        w = rt.input("w", shape=(64, outputs), domain=(i,))
        x = rt.input("x", shape=(rows, 64), domain=(i,))
        prog.output("g", rt.grad((x @ w).tanh().sum(), w))
    rng = np.random.default_rng(2)
    weights = rng.normal(size=(1, 64, outputs)).astype("float32")
    xs = rng.normal(size=(1, rows, 64)).astype("float32")
    jax_grad = jax.grad(lambda w, x: jnp.tanh(x @ w).sum())(weights[0], xs[0])
    exe = prog.compile(bounds={prog.bounds[0]: 1})
    got = exe.run({"w": weights, "x": xs})["g"][0]
    # Each form sums the rows in its own order, so both are held to the exact gradient
    # (float64), relative to the sum of the terms' magnitudes: float32 rounding's measure.
    x64, w64 = xs[0].astype("float64"), weights[0].astype("float64")
    dy = 1.0 - np.tanh(x64 @ w64) ** 2
    exact, magnitude = x64.T @ dy, np.abs(x64).T @ np.abs(dy)
    for gradient in (got, jax_grad):  # JAX's own dot meets the same bound
        assert np.max(np.abs(gradient - exact) / magnitude) < 1e-6
    hlo = "\n".join(exe.optimized_hlo().values())
    # Xᵀ·dY contracts the rows of X: the product's left operand is contracted on dim 0.
    weight_gradient_dots = re.findall(r" dot\(.*lhs_contracting_dims=\{0\}", hlo)
    assert bool(weight_gradient_dots) == slow_dot, weight_gradient_dots


def test_running_a_compiled_host_loop_compiles_nothing_more(xla_compilations) -> None:
    """A run's fresh carry (parameters, Adam's moments, counters) is made without XLA:
    `jnp.zeros` would compile a program per new shape at the run's first call (PPO on
    CartPole: 110 ms of a run's 1.5 s)."""
    prog = rt.Program(dims=("i",))
    (I,) = prog.bounds
    with prog:
        target = rt.input("target", shape=(3, 11))
        theta = rt.placeholder(shape=(3, 11))
        theta[0] = rt.const(np.full((3, 11), 0.5, "float32"))
        rt.optim.Adam(lr=0.1).minimize(((theta - target) ** 2.0).sum(), theta)
        prog.output("theta", theta)
    exe = prog.compile(bounds={I: 4}, iterations_per_call=2)
    xla_compilations.clear()
    out = exe.run({"target": np.zeros((4, 3, 11), "float32")})
    assert xla_compilations == []
    assert out["theta"].shape == (4, 3, 11) and np.all(out["theta"][-1] < 0.5)
