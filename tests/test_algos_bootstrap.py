"""`next_values`: the critic's value after each step, computed lazily, equals the critic
run on every final observation wherever GAE uses it (not after a termination); and
`bootstrapped_returns` less the critic's value is GAE with lambda = 1."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.algos.common import (
    acting_actor_critic,
    bootstrapped_returns,
    gae,
    make_env,
    next_values,
)
from rlsys.algos.config import A2CConfig

CASES = [
    ("trivial:3:4", 10, True),  # episodes of 4 in rollouts of 10: truncated mid-way
    ("trivial:3:10", 10, False),  # episodes end with the rollout
    ("gymnax:CartPole-v1", 40, False),  # episodes terminate
]


def _run(env_id: str, steps: int, outputs) -> dict:
    """Three iterations of an actor-critic's rollouts (other parameters each iteration) and
    the tensors `outputs(prog, model, params_i, rollout, value)` names, per iteration."""
    cfg = A2CConfig(env=env_id, num_envs=4, num_steps=steps, total_steps=4 * steps * 3,
                    hidden_size=8).validate()  # fmt: skip
    env = make_env(cfg)
    prog = rt.Program(dims=("i", "b", "t"))
    i = prog.dims[0]
    _, B, T = prog.bounds
    with prog:
        model, params, rollout = acting_actor_critic(prog, env, cfg)
        params[i + 1] = params[i] * 0.9
        value = model.value(params[i], rollout.obs)
        tensors = outputs(prog, model, params[i], rollout, value)
        for name, tensor in tensors.items():
            prog.output(name, tensor[i, 0:B, 0:T])
    return prog.compile(bounds={"I": 3, "B": 4, "T": steps}).run()


@pytest.mark.parametrize(("env_id", "steps", "mid_way"), CASES)
def test_next_values_equal_the_critic_on_every_final_observation(env_id, steps, mid_way):
    def outputs(prog, model, params_i, rollout, value):
        step = rollout.step
        return {"lazy": next_values(prog, model, params_i, step, value),
                "dense": model.value(params_i, step.final_obs),
                "terminated": step.terminated, "truncated": step.truncated}  # fmt: skip

    out = _run(env_id, steps, outputs)
    used = out["terminated"] == 0
    np.testing.assert_allclose(out["lazy"][used], out["dense"][used], rtol=1e-6, atol=1e-6)
    assert bool(out["truncated"][..., :-1].any()) == mid_way


@pytest.mark.parametrize(("env_id", "steps", "mid_way"), CASES)
def test_bootstrapped_returns_less_the_value_are_gae_with_lambda_one(env_id, steps, mid_way):
    def outputs(prog, model, params_i, rollout, value):
        next_value = next_values(prog, model, params_i, rollout.step, value)
        return {"gae": gae(prog, rollout, value, next_value, 0.9, 1.0),
                "returns": bootstrapped_returns(prog, model, params_i, rollout.step, 0.9),
                "value": value, "done": rollout.step.done}  # fmt: skip

    out = _run(env_id, steps, outputs)
    assert out["done"].any()
    np.testing.assert_allclose(out["returns"] - out["value"], out["gae"], rtol=1e-5, atol=1e-5)
