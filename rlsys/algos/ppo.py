"""PPO (Schulman et al. 2017) with CleanRL's `ppo.py` semantics, as one recurrent-tensor program.

Dimensions: i (iteration), u (update step: epochs x minibatches), b (environment), t (step).

    act:    obs[i, b, t] -> policy(params[i]) -> action -> env.step -> obs[i, b, t + 1]
            (episodes continue across iterations: obs[i + 1, b, 0] = next obs of [i, b, T - 1])
    GAE:    adv[i, b, t] = delta + gamma * lambda * (1 - done) * adv[i, b, t + 1]
    learn:  params_u[i, 0] = params[i]; for u: minibatch (u % M) of a fresh permutation per
            epoch (u // M), all drawn once per iteration; clipped surrogate + clipped value
            loss - entropy bonus; global grad-norm clipping; Adam with linearly annealed
            learning rate;
            params[i + 1] = params_u after the last update.

The compiler turns this into: a scan over t for acting, vectorized over b; a reverse scan
for GAE; a scan over u for the updates, each minibatch loss and its gradient vectorized over
the minibatch; and the loop over i on the host (one jitted call per `iterations_per_call`).
Truncated episodes bootstrap from the value of their final observation.

For continuous control (CleanRL's `ppo_continuous_action.py`), `normalize_obs` and
`normalize_reward` add running statistics over i (`normalize.py`): the networks see
observations normalized by those of earlier iterations, and GAE uses rewards scaled by the
running std of discounted returns.
"""

from __future__ import annotations

import math

import numpy as np

import rlsys.rt as rt
from rlsys.algos.common import (
    ActorCritic,
    AlgoProgram,
    acting_actor_critic,
    annealed,
    gae,
    make_env,
    next_values,
    output_episode_stats,
)
from rlsys.algos.config import PPOConfig
from rlsys.algos.normalize import Normalizer, RunningMoments, scaled_rewards


def build_ppo(cfg: PPOConfig) -> AlgoProgram:
    env = make_env(cfg)
    batch = cfg.num_envs * cfg.num_steps
    minibatch = batch // cfg.num_minibatches
    updates = cfg.update_epochs * cfg.num_minibatches
    prog = rt.Program(dims=("i", "u", "b", "t"))
    i, u = prog.dims[:2]
    _, _, B, T = prog.bounds
    with prog:
        obs_stats, obs_norm = None, None
        if cfg.normalize_obs:
            obs_stats = RunningMoments(prog, (math.prod(env.obs_shape),), "obs")
            obs_norm = Normalizer(obs_stats.mean, obs_stats.var, cfg.obs_clip)
        # acts and learns on normalized observations
        model, params, rollout = acting_actor_critic(prog, env, cfg, obs_norm)
        obs, action, step = rollout.obs, rollout.action, rollout.step

        def flat(x):  # the rollout of iteration i as one batch (b, t flattened)
            whole = x[i, 0:B, 0:T]
            return whole.reshape(batch, *whole.shape[2:])

        if obs_stats is not None:  # the next iteration's statistics include these observations
            obs_stats.update(model.vectors(flat(obs)))
        reward = step.reward
        if cfg.normalize_reward:
            reward = scaled_rewards(prog, step, cfg.gamma, cfg.reward_clip, batch)
        value = model.value(params[i], obs)
        next_value = next_values(prog, model, params[i], step, value)
        advantage = gae(prog, rollout, value, next_value, cfg.gamma, cfg.gae_lambda, reward)
        log_prob = rollout.policy.log_prob(action)

        data = {
            "obs": flat(obs), "action": flat(action), "log_prob": flat(log_prob),
            "advantage": flat(advantage), "value": flat(value),
        }  # fmt: skip
        data["returns"] = data["advantage"] + data["value"]

        # -- learning: U minibatch updates per iteration ----------------------------------------
        adam = rt.optim.Adam(lr=cfg.learning_rate, eps=1e-5)
        theta = rt.placeholder(shape=model.initial.shape, domain=(i, u), name="params_u")
        moments = [rt.placeholder(shape=model.initial.shape, domain=(i, u), name=n) for n in "mv"]
        # One shuffle per epoch, all drawn once per iteration (not once per update step:
        # sorting is what a shuffle costs); update u trains on the u-th run of `minibatch`
        # indices, i.e. minibatch u % M of epoch u // M.
        epochs_key = rt.random.key(cfg.seed + 2).fold_in(i)
        orders = rt.concat([rt.random.permutation(epochs_key.fold_in(epoch), batch)
                            for epoch in range(cfg.update_epochs)])  # fmt: skip
        index = orders.take(u * minibatch + rt.const(np.arange(minibatch, dtype="int32")))
        mb = {k: v.take(index) for k, v in data.items()}
        loss = _loss(cfg, model, theta[i, u], mb)
        (grad,) = rt.optim.clip_by_global_norm([rt.grad(loss, theta)], cfg.max_grad_norm)
        count = (i * updates + u + 1) * 1.0
        new_theta, new_m, new_v = adam.update(theta[i, u], moments[0][i, u], moments[1][i, u],
                                              grad, count, annealed(cfg, i))  # fmt: skip
        theta[i, 0] = params[i]
        theta[i, u + 1] = new_theta
        params[i + 1] = new_theta[i, updates - 1]
        for moment, new in zip(moments, (new_m, new_v), strict=True):
            moment[0, 0] = 0.0
            moment[i + 1, 0] = new[i, updates - 1]
            moment[i, u + 1] = new

        prog.output("loss", loss[i, 0:updates].mean())
        output_episode_stats(prog, step)
    bounds = {"I": cfg.num_iterations, "U": updates, "B": cfg.num_envs, "T": cfg.num_steps}
    return AlgoProgram(prog, bounds, env, cfg)


def _loss(cfg: PPOConfig, model: ActorCritic, params, mb: dict):
    policy = model.policy(params, mb["obs"])
    ratio = (policy.log_prob(mb["action"]) - mb["log_prob"]).exp()
    advantage = mb["advantage"]
    if cfg.norm_adv:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    clipped_ratio = ratio.clip(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
    pg_loss = rt.maximum(-advantage * ratio, -advantage * clipped_ratio).mean()
    value = model.value(params, mb["obs"])
    v_loss = (value - mb["returns"]) ** 2.0
    if cfg.clip_vloss:
        v_clipped = mb["value"] + (value - mb["value"]).clip(-cfg.clip_coef, cfg.clip_coef)
        v_loss = rt.maximum(v_loss, (v_clipped - mb["returns"]) ** 2.0)
    entropy = policy.entropy().mean()
    return pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * 0.5 * v_loss.mean()
