"""A2C (Mnih et al. 2016, synchronous): one gradient step on each short rollout.

act:    as every algorithm here (common.act), with params[i]
adv:    GAE(gamma, lambda) over the rollout; lambda = 1 (the default) is the n-step returns
        to the rollout's end, bootstrapped by the critic, less the critic's value: G - V
        (`common.bootstrapped_returns`), which the gradient computes with V itself
learn:  loss = -log_prob * adv + vf_coef * 0.5 (value - returns)^2 - ent_coef * entropy,
        averaged over (b, t); params[i + 1] = Adam step on its gradient (global-norm clipped)
"""

from __future__ import annotations

from rlsys.algos.common import (
    AlgoProgram,
    bootstrapped_returns,
    gae,
    next_values,
    on_policy_program,
)
from rlsys.algos.config import A2CConfig


def build_a2c(cfg: A2CConfig) -> AlgoProgram:
    def per_step_loss(prog, model, params_i, rollout, value):
        if cfg.gae_lambda == 1.0:
            returns = bootstrapped_returns(prog, model, params_i, rollout.step, cfg.gamma)
            returns = returns.stop_gradient()
            advantage = returns - value.stop_gradient()
        else:
            next_value = next_values(prog, model, params_i, rollout.step, value)
            advantage = gae(prog, rollout, value, next_value, cfg.gamma, cfg.gae_lambda)
            advantage = advantage.stop_gradient()
            returns = advantage + value.stop_gradient()
        return (
            -rollout.policy.log_prob(rollout.action) * advantage
            + cfg.vf_coef * 0.5 * (value - returns) ** 2.0
            - cfg.ent_coef * rollout.policy.entropy()
        )

    return on_policy_program(cfg, per_step_loss)
