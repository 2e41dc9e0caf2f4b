"""A2C (Mnih et al. 2016, synchronous): one gradient step on each short rollout.

act:    as every algorithm here (common.act), with params[i]
adv:    GAE(gamma, lambda) over the rollout; lambda = 1 gives n-step returns to the
        rollout's end, bootstrapped by the critic
learn:  loss = -log_prob * adv + vf_coef * 0.5 (value - returns)^2 - ent_coef * entropy,
        averaged over (b, t); params[i + 1] = Adam step on its gradient (global-norm clipped)
"""

from __future__ import annotations

import rlsys.rt as rt
from rlsys.algos.common import (
    ActorCritic,
    AlgoProgram,
    act,
    annealed,
    gae,
    make_env,
    output_episode_stats,
)
from rlsys.algos.config import A2CConfig


def build_a2c(cfg: A2CConfig) -> AlgoProgram:
    env = make_env(cfg)
    prog = rt.Program(dims=("i", "b", "t"))
    i = prog.dims[0]
    _, B, T = prog.bounds
    with prog:
        model = ActorCritic(env, cfg)
        params = rt.placeholder(shape=model.initial.shape, domain=(i,), name="params")
        params[0] = rt.const(model.initial)
        rollout = act(prog, env, model, params[i], cfg.seed)
        value = model.value(params[i], rollout.obs)
        next_value = model.value(params[i], rollout.step.final_obs)
        advantage = gae(prog, rollout, value, next_value, cfg.gamma, cfg.gae_lambda)
        advantage = advantage.stop_gradient()
        returns = advantage + value.stop_gradient()
        per_step = (
            -rollout.policy.log_prob(rollout.action) * advantage
            + cfg.vf_coef * 0.5 * (value - returns) ** 2.0
            - cfg.ent_coef * rollout.policy.entropy()
        )
        loss = per_step[i, 0:B, 0:T].mean()
        optimizer = rt.optim.Adam(lr=lambda i: annealed(cfg, i), eps=1e-5,
                                  max_grad_norm=cfg.max_grad_norm)  # fmt: skip
        optimizer.minimize(loss, params)
        prog.output("loss", loss)
        output_episode_stats(prog, rollout.step)
    bounds = {"I": cfg.num_iterations, "B": cfg.num_envs, "T": cfg.num_steps}
    return AlgoProgram(prog, bounds, env, cfg)
