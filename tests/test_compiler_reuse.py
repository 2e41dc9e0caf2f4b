"""A gradient's re-run takes the activations an acting loop computed (`lower/reuse.py`):
the same loss and gradient, without the forward products over the whole rollout."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.algos.a2c import build_a2c
from rlsys.algos.config import A2CConfig, PPOConfig
from rlsys.algos.ppo import build_ppo
from rlsys.compiler.lower import reuse
from rlsys.compiler.lower.jax_program import gradient_reads
from rlsys.compiler.passes.dce import needed_nodes
from rlsys.compiler.schedule import build_schedule

B, T, WIDTH = 6, 5, 8


def _program():
    """A scan over t whose step reads tanh(x @ w1) (as acting reads its policy), and a loss
    over every (b, t) that reads the same activations."""
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        w1 = rt.input("w1", shape=(3, WIDTH), domain=())
        w2 = rt.input("w2", shape=(WIDTH,), domain=())
        x = rt.placeholder(shape=(3,), domain=(b, t), name="x")
        hidden = (x @ w1).tanh()
        x[b, 0] = rt.input("x0", shape=(3,), domain=(b,))[b]
        x[b, t + 1] = (x + (hidden @ w2).stop_gradient() * 0.1)[b, t]  # the "env step"
        loss = ((hidden @ w2 - 0.5) ** 2.0)[0:B, 0:T].mean()
        prog.output("loss", loss)
        prog.output("g1", rt.grad(loss, w1))
        prog.output("g2", rt.grad(loss, w2))
    return prog


def _inputs():
    rng = np.random.default_rng(3)
    return {"w1": rng.normal(size=(3, WIDTH)).astype("float32"),
            "w2": rng.normal(size=(WIDTH,)).astype("float32") / 3,
            "x0": rng.normal(size=(B, 3)).astype("float32")}  # fmt: skip


def _expected(w1, w2, x0):
    xs, x = [], x0
    for _ in range(T):  # the scan, by hand
        xs.append(x)
        x = x + (jnp.tanh(x @ w1) @ w2)[:, None] * 0.1
    xs = jax.lax.stop_gradient(jnp.stack(xs, axis=1))  # data of the loss, as in rlsys

    def loss(w1, w2):
        return jnp.mean((jnp.tanh(xs @ w1) @ w2 - 0.5) ** 2)

    return loss(w1, w2), jax.grad(loss, argnums=(0, 1))(w1, w2)


def _products(exe) -> int:
    return len(re.findall(r"= f32\[[\d,]*\]\S* (?:dot|fusion)\(.*(?:dot\(|__ynn_fusion)",
                          "\n".join(exe.optimized_hlo().values())))  # fmt: skip


@pytest.mark.parametrize("min_width", [1, 10**6])  # reused, recomputed
def test_the_gradient_with_stored_activations_equals_jax_grad(monkeypatch, min_width) -> None:
    monkeypatch.setattr(reuse, "MIN_WIDTH", min_width)
    prog = _program()
    exe = prog.compile(bounds=dict(zip(prog.bounds, (B, T), strict=True)))
    out = exe.run(_inputs())
    loss, (g1, g2) = _expected(**_inputs())
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(out["g1"], g1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["g2"], g2, rtol=1e-4, atol=1e-6)
    # reused, x @ w1 over every (b, t) is not recomputed: the loss's h @ w2 and the step's
    assert _products(exe) == (2 if min_width == 1 else 3)


def _a2c(monkeypatch, min_width: int):
    monkeypatch.setattr(reuse, "MIN_WIDTH", min_width)
    cfg = A2CConfig(env="trivial:4:8", num_envs=8, num_steps=8, total_steps=8 * 8 * 4,
                    hidden_size=16, hidden_layers=2).validate()  # fmt: skip
    built = build_a2c(cfg)
    return built.program.compile(bounds=built.bounds, iterations_per_call=4)


def test_a2c_takes_its_acting_loops_activations_and_learns_the_same(monkeypatch) -> None:
    reused, recomputed = _a2c(monkeypatch, 1), _a2c(monkeypatch, 10**6)
    losses = [exe.run()["loss"] for exe in (reused, recomputed)]
    assert losses[0].shape == (4,)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
    # the actor's two layers are not recomputed over the rollout: two products fewer
    assert _products(reused) == _products(recomputed) - 2


def _reused(program, min_width: int, monkeypatch) -> frozenset[int]:
    """What the program's gradients take instead of recomputing."""
    monkeypatch.setattr(reuse, "MIN_WIDTH", min_width)
    graph = program.graph()
    _, reused = gradient_reads(graph, build_schedule(graph, needed_nodes(graph)))
    return frozenset().union(*reused.values())


def test_narrow_activations_are_recomputed(monkeypatch) -> None:
    prog = _program()
    graph = prog.graph()
    tanh = {n for n in graph.nodes if graph[n].op == "tanh"}
    assert _reused(prog, WIDTH + 1, monkeypatch) == frozenset()
    assert _reused(prog, WIDTH, monkeypatch) == tanh


def test_only_activations_of_a_loop_inside_the_gradients_are_reused(monkeypatch) -> None:
    # PPO's minibatch update computes its activations in the gradient's own loop, from
    # parameters that no acting loop used: nothing to take, however wide
    cfg = PPOConfig(env="gymnax:CartPole-v1", total_steps=2048).validate()
    assert _reused(build_ppo(cfg).program, 1, monkeypatch) == frozenset()
