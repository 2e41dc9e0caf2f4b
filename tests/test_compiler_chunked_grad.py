"""A gradient of a mean or sum over many points, re-run a chunk of points at a time, equals
jax.grad of the whole; a path that mixes points is re-run whole."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.compiler.lower import chunked_grad

ROWS = 20_000  # enough points for two chunks of a 64-wide layer (chunked_grad.CHUNK_BYTES)


def _data():
    rng = np.random.default_rng(5)
    w1 = (rng.normal(size=(16, 64)) / 4).astype("float32")
    w2 = (rng.normal(size=(64, 1)) / 8).astype("float32")
    xs = rng.normal(size=(ROWS, 16)).astype("float32")
    return w1, w2, xs


def _program(reduce: str, mix_points: bool):
    prog = rt.Program(dims=("b",))
    (bound,) = prog.bounds
    with prog:
        w1 = rt.input("w1", shape=(16, 64), domain=())
        w2 = rt.input("w2", shape=(64, 1), domain=())
        x = rt.input("x", shape=(16,), domain=prog.dims)
        hidden = (x @ w1).tanh()
        if mix_points:  # every point's loss reads the mean over all points: not chunkable
            hidden = hidden - hidden[0:bound].mean(axis=0)
        per_point = ((hidden @ w2).sum() - 0.5) ** 2.0  # .sum(): the one output as a scalar
        over_points = per_point[0:bound]
        loss = over_points.mean() if reduce == "mean" else over_points.sum()
        prog.output("loss", loss)
        prog.output("g", rt.grad(loss, w1))
    return prog.compile(bounds={bound: ROWS})


def _expected(reduce: str, mix_points: bool, w1, w2, xs):
    def loss(w1):
        hidden = jnp.tanh(xs @ w1)
        if mix_points:
            hidden = hidden - hidden.mean(axis=0)
        per_point = ((hidden @ w2)[:, 0] - 0.5) ** 2
        return per_point.mean() if reduce == "mean" else per_point.sum()

    return jax.value_and_grad(loss)(w1)


@pytest.mark.parametrize("reduce", ["mean", "sum"])
@pytest.mark.parametrize("mix_points", [False, True])
def test_chunked_gradient_equals_the_whole_one(reduce: str, mix_points: bool) -> None:
    w1, w2, xs = _data()
    exe = _program(reduce, mix_points)
    out = exe.run({"w1": w1, "w2": w2, "x": xs})
    loss, grad = _expected(reduce, mix_points, w1, w2, xs)
    scale = 1.0 if reduce == "mean" else float(ROWS)
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-4, atol=1e-6 * scale)
    np.testing.assert_allclose(out["g"], grad, rtol=1e-3, atol=1e-6 * scale)
    # chunked: the re-run is a loop over chunks (XLA's while); whole: no loop at all
    looped = "while(" in "\n".join(exe.optimized_hlo().values())
    assert looped == (not mix_points)


def test_chunk_count_brings_chunks_near_the_target() -> None:
    assert chunked_grad._chunk_count(256, 64_000, 8192) == 8  # 8,000 points a chunk
    assert chunked_grad._chunk_count(256, 64_000, 4096) == 16  # 4,000
    assert chunked_grad._chunk_count(256, 64_000, 2048) == 32  # 2,000
    assert chunked_grad._chunk_count(250, 64_000, 8192) == 10  # along t: 6,400
    assert chunked_grad._chunk_count(7, 70_000, 8192) == 7  # a prime extent: one point each


def test_backends_outside_chunked_backends_run_the_gradient_whole(monkeypatch) -> None:
    # On a GPU the chunk loop only adds launches (slower at every sweep point on an H200).
    monkeypatch.setattr(chunked_grad, "CHUNKED_BACKENDS", ("gpu",))
    w1, w2, xs = _data()
    exe = _program("mean", mix_points=False)
    out = exe.run({"w1": w1, "w2": w2, "x": xs})
    loss, grad = _expected("mean", False, w1, w2, xs)
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["g"], grad, rtol=1e-3, atol=1e-6)
    assert "while(" not in "\n".join(exe.optimized_hlo().values())
