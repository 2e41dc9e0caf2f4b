"""A PPO-shaped program (gymnax CartPole, MLP policy) gets the schedule TimeRL describes."""

from __future__ import annotations

import io

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.envs import GymnaxEnv

GAMMA, LAMBDA = 0.99, 0.95


def ppo_shaped_program():
    prog = rt.Program(dims=("i", "b", "t"))
    i, b, t = prog.dims
    _, B, T = prog.bounds
    with prog:
        env = GymnaxEnv("CartPole-v1")
        actor = rt.nn.MLP((4, 64, 64, 2), output_gain=0.01, seed=0, name="actor")
        critic = rt.nn.MLP((4, 64, 64, 1), output_gain=1.0, seed=1, name="critic")
        key = rt.random.key(0).fold_in(i).fold_in(b).fold_in(t)
        state = rt.placeholder(shape=(env.state_size,), name="state")
        obs = rt.placeholder(shape=env.obs_shape, name="obs")
        first = env.reset(rt.random.key(1).fold_in(i).fold_in(b))
        state[i, b, 0] = first.state
        obs[i, b, 0] = first.obs
        policy = rt.Categorical(actor(obs))
        action = policy.sample(key)
        step = env.step(key, state, action)
        state[i, b, t + 1] = step.state
        obs[i, b, t + 1] = step.obs
        value = critic(obs).reshape(())
        next_value = critic(step.final_obs).reshape(())
        delta = step.reward + GAMMA * next_value * (1.0 - step.terminated) - value
        advantage = rt.placeholder(name="advantage")
        advantage[i, b, T - 1] = delta[i, b, T - 1]
        advantage[i, b, t] = delta + GAMMA * LAMBDA * (1.0 - step.done) * advantage[i, b, t + 1]
        returns = (advantage + value).stop_gradient()
        batch = advantage[i, 0:B, 0:T]
        normalized = ((advantage - batch.mean()) / (batch.std() + 1e-8)).stop_gradient()
        log_p = policy.log_prob(action)
        ratio = (log_p - log_p.stop_gradient()).exp()
        clipped = rt.minimum(ratio * normalized, rt.where(ratio > 1.2, 1.2, ratio) * normalized)
        per_step = -clipped + 0.5 * (value - returns) ** 2.0 - 0.01 * policy.entropy()
        loss = per_step[i, 0:B, 0:T].mean()
        rt.optim.Adam(lr=2.5e-4, max_grad_norm=0.5).minimize(loss, [actor.params, critic.params])
        prog.output("loss", loss)
        prog.output("reward", step.reward[i, 0:B, 0:T].mean())
    return prog


@pytest.fixture(scope="module")
def compiled():
    prog = ppo_shaped_program()
    return prog.compile(bounds={"I": 3, "B": 4, "T": 16})


def test_explain_shows_the_timerl_schedule(compiled) -> None:
    rows = compiled.explain(file=io.StringIO())
    by_name = {row.tensor: row.decisions for row in rows}
    by_op = {}
    for row in rows:
        by_op.setdefault(row.op, []).append(row.decisions)
    # The acting chain obs -> policy -> env step -> obs[t + 1] is a scan over t.
    assert by_name["obs"] == {"i": "scan", "b": "vectorize", "t": "scan"}
    assert by_name["state"] == by_name["obs"]
    in_the_loop = {"i": "scan", "b": "vectorize", "t": "scan"}
    hoisted = {"i": "scan", "b": "vectorize", "t": "vectorize"}
    # What depends on the step's key alone, the action's Gumbel noise and the reset after an
    # episode end, is drawn for every step at once, outside the acting scan.
    assert by_op["gymnax_step_before_reset"] == [in_the_loop]
    assert by_op["gymnax_reset_after"] == [hoisted]
    assert by_op["gumbel"] == [hoisted]
    assert by_op["argmax"] == [in_the_loop]
    # GAE reads later points: a reverse scan over t.
    assert by_name["advantage"] == {"i": "scan", "b": "vectorize", "t": "reverse scan"}
    # The loss and its backward are vectorized over b and t.
    assert by_op["categorical_log_prob"] == [{"i": "scan", "b": "vectorize", "t": "vectorize"}]
    assert by_op["categorical_entropy"] == [{"i": "scan", "b": "vectorize", "t": "vectorize"}]
    assert all(d == {"i": "scan"} for d in by_op["grad"])
    # Parameters are sequential over i.
    assert by_name["actor"] == {"i": "scan"} and by_name["critic"] == {"i": "scan"}


def test_it_runs_and_is_reproducible(compiled) -> None:
    first, second = compiled.run(), compiled.run()
    assert first["loss"].shape == (3,) and first["reward"].shape == (3,)
    assert np.isfinite(first["loss"]).all()
    np.testing.assert_array_equal(first["loss"], second["loss"])
    np.testing.assert_allclose(first["reward"], 1.0)  # CartPole pays 1 per step


def test_dot_export_names_the_tensors(compiled) -> None:
    dot = compiled.graph(format="dot")
    assert dot.startswith("digraph rlsys {")
    assert '"obs\\n' in dot and "[t+1]" not in dot.split("->")[0]
