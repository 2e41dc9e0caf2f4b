"""REINFORCE (Williams 1992) with a learned value baseline; Monte-Carlo or n-step returns.

    act:      as every algorithm here (common.act), with params[i]
    returns:  "mc":    G[t] = r[t] + gamma (1 - done[t]) G[t + 1], to the rollout's end
              "nstep": G_k[t] = r[t] + gamma * (done[t] ? (1 - terminated[t]) V(final_obs[t])
                                                         : G_{k-1}[t + 1]),  G_0 = V(obs),
                       k = n_step (the critic bootstraps after n rewards or at the end)
    learn:    loss = -log_prob * (G - V) + vf_coef * 0.5 (V - G)^2 - ent_coef * entropy,
              averaged over (b, t); one Adam step per iteration

Switching the returns is the one argument `returns="mc" | "nstep"`.
"""

from __future__ import annotations

import rlsys.rt as rt
from rlsys.algos.common import AlgoProgram, next_values, on_policy_program
from rlsys.algos.config import REINFORCEConfig


def _monte_carlo(prog, step, gamma: float):
    i, b, t = prog.dims
    T = prog.bounds[-1]
    ret = rt.placeholder(domain=(i, b, t), name="return")
    ret[i, b, T - 1] = step.reward[i, b, T - 1]
    ret[i, b, t] = step.reward + gamma * (1.0 - step.done) * ret[i, b, t + 1]
    return ret


def _n_step(prog, step, value, next_value, gamma: float, n: int):
    i, b, t = prog.dims
    T = prog.bounds[-1]
    at_end = (1.0 - step.terminated) * next_value  # what a finished or cut episode is worth
    estimate = value
    for k in range(1, n + 1):
        following = rt.placeholder(domain=(i, b, t), name=f"return_{k}")
        following[i, b, T - 1] = step.reward[i, b, T - 1] + gamma * at_end[i, b, T - 1]
        following[i, b, t] = step.reward + gamma * rt.where(
            step.done > 0.5, at_end, estimate[i, b, t + 1]
        )
        estimate = following
    return estimate


def build_reinforce(cfg: REINFORCEConfig) -> AlgoProgram:
    def per_step_loss(prog, model, params_i, rollout, value):
        if cfg.returns == "mc":
            returns = _monte_carlo(prog, rollout.step, cfg.gamma)
        else:
            next_value = next_values(prog, model, params_i, rollout.step,
                                     value.stop_gradient())  # fmt: skip
            # Past num_steps every return has reached the rollout's end: more levels would
            # add nothing but recurrences.
            returns = _n_step(prog, rollout.step, value.stop_gradient(), next_value, cfg.gamma,
                              min(cfg.n_step, cfg.num_steps))  # fmt: skip
        returns = returns.stop_gradient()
        return (
            -rollout.policy.log_prob(rollout.action) * (returns - value.stop_gradient())
            + cfg.vf_coef * 0.5 * (value - returns) ** 2.0
            - cfg.ent_coef * rollout.policy.entropy()
        )

    return on_policy_program(cfg, per_step_loss)
