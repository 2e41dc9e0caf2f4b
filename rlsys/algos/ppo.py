"""PPO (Schulman et al. 2017) with CleanRL's `ppo.py` semantics, as one recurrent-tensor program.

Dimensions: i (iteration), u (update step: epochs x minibatches), b (environment), t (step).

    act:    obs[i, b, t] -> policy(params[i]) -> action -> env.step -> obs[i, b, t + 1]
            (episodes continue across iterations: obs[i + 1, b, 0] = next obs of [i, b, T - 1])
    GAE:    adv[i, b, t] = delta + gamma * lambda * (1 - done) * adv[i, b, t + 1]
    learn:  params_u[i, 0] = params[i]; for u: minibatch (u % M) of a fresh permutation per
            epoch (u // M); clipped surrogate + clipped value loss - entropy bonus; global
            grad-norm clipping; Adam with linearly annealed learning rate;
            params[i + 1] = params_u after the last update.

The compiler turns this into: a scan over t for acting, vectorized over b; a reverse scan
for GAE; a scan over u for the updates, each minibatch loss and its gradient vectorized over
the minibatch; and the loop over i on the host (one jitted call per `iterations_per_call`).
Truncated episodes bootstrap from the value of their final observation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import rlsys.rt as rt
from rlsys.algos.config import PPOConfig
from rlsys.envs import GymnasiumEnv, GymnaxEnv


@dataclass
class PPOProgram:
    program: rt.Program
    bounds: dict[str, int]
    env: GymnaxEnv | GymnasiumEnv
    config: PPOConfig


def _networks(env: GymnaxEnv | GymnasiumEnv, cfg: PPOConfig):
    obs_size = math.prod(env.obs_shape)
    outputs = env.num_actions if env.discrete else math.prod(env.action_shape)
    hidden = (cfg.hidden_size,) * cfg.hidden_layers
    actor = rt.nn.MLP((obs_size, *hidden, outputs), output_gain=0.01, seed=cfg.seed,
                      own_params=False)  # fmt: skip
    critic = rt.nn.MLP((obs_size, *hidden, 1), output_gain=1.0, seed=cfg.seed + 1,
                       own_params=False)  # fmt: skip
    log_std = np.zeros(0 if env.discrete else outputs, "float32")
    initial = np.concatenate([actor.initial, critic.initial, log_std])
    cuts = np.cumsum([actor.initial.size, critic.initial.size, log_std.size])
    return actor, critic, initial, [int(c) for c in cuts]


class _Model:
    """Policy and value function of one parameter vector (actor | critic | log_std)."""

    def __init__(self, env: GymnaxEnv | GymnasiumEnv, actor, critic, cuts) -> None:
        self.env, self.actor, self.critic, self.cuts = env, actor, critic, cuts

    def features(self, obs):
        """Observations as vectors (image-shaped observations are flattened)."""
        if len(self.env.obs_shape) == 1:
            return obs
        lead = obs.shape[: len(obs.shape) - len(self.env.obs_shape)]
        return obs.reshape(*lead, math.prod(self.env.obs_shape))

    def policy(self, params, obs):
        out = self.actor(self.features(obs), params.slice_axis(0, self.cuts[0]))
        if self.env.discrete:
            return rt.Categorical(out)
        return rt.DiagGaussian(out, params.slice_axis(self.cuts[1], self.cuts[2]))

    def value(self, params, obs):
        out = self.critic(self.features(obs), params.slice_axis(self.cuts[0], self.cuts[1]))
        return out.reshape(out.shape[:-1])


def make_env(cfg: PPOConfig) -> GymnaxEnv | GymnasiumEnv:
    if cfg.env_backend == "gymnax":
        return GymnaxEnv(cfg.env_id)
    return GymnasiumEnv(cfg.env_id, cfg.num_envs, seed=cfg.seed)


def build_ppo(cfg: PPOConfig) -> PPOProgram:
    env = make_env(cfg)
    batch = cfg.num_envs * cfg.num_steps
    minibatch = batch // cfg.num_minibatches
    updates = cfg.update_epochs * cfg.num_minibatches
    iterations = cfg.num_iterations
    prog = rt.Program(dims=("i", "u", "b", "t"))
    i, u, b, t = prog.dims
    _, _, B, T = prog.bounds
    with prog:
        actor, critic, initial, cuts = _networks(env, cfg)
        model = _Model(env, actor, critic, cuts)
        params = rt.placeholder(shape=initial.shape, domain=(i,), name="params")
        params[0] = rt.const(initial)

        # -- acting: episodes continue from one iteration to the next ------------------------
        key = rt.random.key(cfg.seed).fold_in(i).fold_in(b).fold_in(t)
        obs = rt.placeholder(shape=env.obs_shape, domain=(i, b, t), name="obs")
        policy = model.policy(params[i], obs)
        action = policy.sample(key)
        first = env.reset(rt.random.key(cfg.seed + 1).fold_in(b))
        if isinstance(env, GymnaxEnv):  # in-graph: the environment state is a tensor too
            state = rt.placeholder(shape=(env.state_size,), domain=(i, b, t), name="env_state")
            step = env.step(key, state, action)
            chains = [(state, first.state, step.state), (obs, first.obs, step.obs)]
        else:  # on the host: its state stays in the environment object
            step = env.step(action)
            chains = [(obs, first.obs, step.obs)]
        for tensor, start, following in chains:
            tensor[0, b, 0] = start
            tensor[i + 1, b, 0] = following[i, b, T - 1]
            tensor[i, b, t + 1] = following
        episode = _episode_returns(prog, step)

        # -- advantages -----------------------------------------------------------------------
        value = model.value(params[i], obs)
        next_value = model.value(params[i], step.final_obs)
        delta = step.reward + cfg.gamma * next_value * (1.0 - step.terminated) - value
        advantage = rt.placeholder(domain=(i, b, t), name="advantage")
        advantage[i, b, T - 1] = delta[i, b, T - 1]
        advantage[i, b, t] = (
            delta + cfg.gamma * cfg.gae_lambda * (1.0 - step.done) * advantage[i, b, t + 1]
        )
        log_prob = policy.log_prob(action)

        def flat(x):  # the rollout of iteration i as one batch (b, t flattened)
            whole = x[i, 0:B, 0:T]
            return whole.reshape(batch, *whole.shape[2:])

        data = {
            "obs": flat(obs), "action": flat(action), "log_prob": flat(log_prob),
            "advantage": flat(advantage), "value": flat(value),
        }  # fmt: skip
        data["returns"] = data["advantage"] + data["value"]

        # -- learning: U minibatch updates per iteration ----------------------------------------
        adam = rt.optim.Adam(lr=cfg.learning_rate, eps=1e-5)
        theta = rt.placeholder(shape=initial.shape, domain=(i, u), name="params_u")
        moments = [rt.placeholder(shape=initial.shape, domain=(i, u), name=n) for n in "mv"]
        epoch_key = rt.random.key(cfg.seed + 2).fold_in(i).fold_in(u // cfg.num_minibatches)
        order = rt.random.permutation(epoch_key, batch)
        start = (u % cfg.num_minibatches) * minibatch
        index = order.take(start + rt.const(np.arange(minibatch, dtype="int32")))
        mb = {k: v.take(index) for k, v in data.items()}
        loss = _loss(cfg, model, theta[i, u], mb)
        grad = _clip_by_global_norm(rt.grad(loss, theta), cfg.max_grad_norm)
        fraction = 1.0 - i / iterations if cfg.anneal_lr else 1.0
        lr = cfg.learning_rate * fraction
        count = (i * updates + u + 1) * 1.0
        new_theta, new_m, new_v = adam.update(theta[i, u], moments[0][i, u], moments[1][i, u],
                                              grad, count, lr)  # fmt: skip
        theta[i, 0] = params[i]
        theta[i, u + 1] = new_theta
        params[i + 1] = new_theta[i, updates - 1]
        for moment, new in zip(moments, (new_m, new_v), strict=True):
            moment[0, 0] = 0.0
            moment[i + 1, 0] = new[i, updates - 1]
            moment[i, u + 1] = new

        prog.output("loss", loss[i, 0:updates].mean())
        prog.output("episode_return_sum", episode["sum"])
        prog.output("episodes", episode["count"])
        prog.output("reward", step.reward[i, 0:B, 0:T].mean())
    bounds = {"I": iterations, "U": updates, "B": cfg.num_envs, "T": cfg.num_steps}
    return PPOProgram(prog, bounds, env, cfg)


def _episode_returns(prog: rt.Program, step) -> dict:
    """Sum and count of the returns of episodes that ended in each iteration."""
    i, _, b, t = prog.dims
    _, _, B, T = prog.bounds
    running = rt.placeholder(domain=(i, b, t), name="episode_return")
    total = running + step.reward
    carried = total * (1.0 - step.done)
    running[0, b, 0] = 0.0
    running[i + 1, b, 0] = carried[i, b, T - 1]
    running[i, b, t + 1] = carried
    ended = (step.done * total)[i, 0:B, 0:T]
    return {"sum": ended.sum(), "count": step.done[i, 0:B, 0:T].sum()}


def _loss(cfg: PPOConfig, model: _Model, params, mb: dict):
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


def _clip_by_global_norm(grad, max_norm: float):
    norm = (grad * grad).sum().sqrt()
    return grad * (max_norm / rt.maximum(norm, max_norm))
