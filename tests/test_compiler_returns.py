"""Returns in recurrent tensors against plain Python loops: discounted sums, GAE, n-step."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt


def reverse_loop_returns(rewards, dones, gamma):
    out, running = np.zeros_like(rewards), 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * (1.0 - dones[k]) * running
        out[k] = running
    return out


@pytest.mark.parametrize("horizon", [10, 2000])
@pytest.mark.parametrize("gamma", [0.8, 0.99])
def test_discounted_cum_sum_with_dones_equals_a_reverse_loop(horizon: int, gamma: float) -> None:
    rng = np.random.default_rng(horizon)
    rewards = rng.normal(size=horizon).astype("float32")
    dones = (rng.random(horizon) < 0.05).astype("float32")
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        r, d = rt.input("r"), rt.input("d")
        ret = rt.placeholder(name="ret")
        ret[T - 1] = r[T - 1]
        ret[t] = r + gamma * (1.0 - d) * ret[t + 1]
        prog.output("recurrence", ret)
        prog.output("op", r[0:T].discounted_cum_sum(gamma, done=d[0:T]))
        prog.output("linear", r[0:T].linear_recurrence(gamma * (1.0 - d[0:T])))
    out = prog.compile(bounds={T: horizon}).run({"r": rewards, "d": dones})
    expected = reverse_loop_returns(rewards, dones, gamma)
    np.testing.assert_allclose(out["recurrence"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["op"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["linear"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["ref", "jax"])
def test_linear_recurrence_forward_and_backward(backend: str) -> None:
    rng = np.random.default_rng(3)
    x, a = rng.normal(size=(2, 9)).astype("float32"), rng.uniform(-1, 1, (2, 9)).astype("float32")
    prog = rt.Program(dims=("b",))
    with prog:
        xs, as_ = rt.input("x", shape=(9,)), rt.input("a", shape=(9,))
        prog.output("backward", xs.linear_recurrence(as_))
        prog.output("forward", xs.linear_recurrence(as_, reverse=False))
        prog.output("constant", xs.linear_recurrence(0.5, reverse=False))
    out = prog.compile(bounds={"B": 2}, backend=backend).run({"x": x, "a": a})
    backward, forward, constant = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    for k in range(9):
        forward[:, k] = a[:, k] * (forward[:, k - 1] if k else 0.0) + x[:, k]
        constant[:, k] = 0.5 * (constant[:, k - 1] if k else 0.0) + x[:, k]
    for k in reversed(range(9)):
        backward[:, k] = a[:, k] * (backward[:, k + 1] if k < 8 else 0.0) + x[:, k]
    np.testing.assert_allclose(out["backward"], backward, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["forward"], forward, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["constant"], constant, rtol=1e-5, atol=1e-6)


def cleanrl_gae(rewards, values, next_values, terminated, dones, gamma, lam):
    """CleanRL's loop, with next_values[t] the value of the observation after step t."""
    advantages, last = np.zeros_like(rewards), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminated[t]) - values[t]
        last = delta + gamma * lam * (1.0 - dones[t]) * last
        advantages[t] = last
    return advantages


@pytest.mark.parametrize("backend", ["ref", "jax"])
def test_gae_with_terminations_and_truncation_bootstrap(backend: str) -> None:
    rng = np.random.default_rng(7)
    n_envs, horizon, gamma, lam = 3, 40, 0.99, 0.95
    data = {
        "r": rng.normal(size=(n_envs, horizon)),
        "v": rng.normal(size=(n_envs, horizon)),
        "nv": rng.normal(size=(n_envs, horizon)),  # truncated steps bootstrap from these
        "term": (rng.random((n_envs, horizon)) < 0.05).astype(float),
        "trunc": (rng.random((n_envs, horizon)) < 0.05).astype(float),
    }
    data = {k: v.astype("float32") for k, v in data.items()}
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    _, T = prog.bounds
    with prog:
        r, v, nv, term, trunc = (rt.input(k) for k in data)
        done = rt.maximum(term, trunc)
        delta = r + gamma * nv * (1.0 - term) - v
        adv = rt.placeholder(name="adv")
        adv[b, T - 1] = delta[b, T - 1]
        adv[b, t] = delta + gamma * lam * (1.0 - done) * adv[b, t + 1]
        prog.output("adv", adv)
    out = prog.compile(bounds={"B": n_envs, "T": horizon}, backend=backend).run(data)
    done = np.maximum(data["term"], data["trunc"])
    for k in range(n_envs):
        expected = cleanrl_gae(data["r"][k], data["v"][k], data["nv"][k], data["term"][k],
                               done[k], gamma, lam)  # fmt: skip
        np.testing.assert_allclose(out["adv"][k], expected, rtol=1e-5, atol=1e-5)


def n_step_loop(rewards, values, dones, gamma, n):
    horizon = len(rewards)
    out = np.zeros_like(rewards)
    for t in range(horizon):
        total, discount = 0.0, 1.0
        for k in range(t, min(t + n, horizon)):
            total += discount * rewards[k]
            discount *= gamma
            if dones[k]:
                discount = 0.0
                break
        end = min(t + n, horizon)
        out[t] = total + (discount * values[end] if end < horizon else 0.0)
    return out


@pytest.mark.parametrize("backend", ["ref", "jax"])
def test_n_step_returns_equal_a_reference_loop(backend: str) -> None:
    rng = np.random.default_rng(3)
    horizon, n, gamma = 30, 5, 0.9
    rewards = rng.normal(size=horizon).astype("float32")
    values = rng.normal(size=horizon).astype("float32")
    dones = (rng.random(horizon) < 0.1).astype("float32")
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        r, v, d = rt.input("r"), rt.input("v"), rt.input("d")
        # g_k[t]: the return from t looking k steps ahead (g_0 = v), one recurrence per k:
        # g_k[t] = r[t] + gamma (1 - d[t]) g_{k-1}[t + 1], and no bootstrap past the end.
        g = [v] + [None] * n
        for k in range(1, n + 1):
            g[k] = rt.placeholder(name=f"g{k}")
            g[k][T - 1] = r[T - 1]
            g[k][t] = r + gamma * (1.0 - d) * g[k - 1][t + 1]
        prog.output("n_step", g[n])
    out = prog.compile(bounds={T: horizon}, backend=backend).run(
        {"r": rewards, "v": values, "d": dones}
    )
    expected = n_step_loop(rewards, values, dones, gamma, n)
    np.testing.assert_allclose(out["n_step"], expected, rtol=1e-5, atol=1e-5)
