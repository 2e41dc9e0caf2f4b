"""What the algorithms share: environments, the actor-critic model, acting, returns.

Every algorithm here is one recurrent-tensor program over dimensions i (iteration),
b (environment), t (step), plus its own (PPO adds u, the update step). Acting is the same for
all: episodes continue across iterations,

    obs[0, b, 0] = env.reset()
    obs[i, b, t + 1] = step.obs
    obs[i + 1, b, 0] = step.obs[i, b, T - 1]

with step = env.step(policy(params[i], obs).sample(key[i, b, t])).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rlsys.rt as rt
from rlsys.compiler.errors import RecurrenceError
from rlsys.envs import EnvpoolEnv, GymnasiumEnv, GymnaxEnv, TrivialEnv
from rlsys.errors import UsageError

Env = GymnaxEnv | TrivialEnv | GymnasiumEnv  # EnvpoolEnv is a GymnasiumEnv


@dataclass
class AlgoProgram:
    """A built algorithm: the program, its bounds, its environment and configuration.

    Its outputs per iteration: loss, episode_return_sum, episodes (see `episode_returns`),
    and those in `stops`: training stops with their message (what, and a hint) at an
    iteration where one is above 0.
    """

    program: rt.Program
    bounds: dict[str, int]
    env: Env
    config: Any
    stops: dict[str, tuple[str, str]] = field(default_factory=dict)


ENV_HINT = ("environments are gymnax:<id>, gymnasium:<id> (Atari: gymnasium:ALE/<Game>-v5), "
            "envpool:<id> or trivial:<spec>, with Box observations and Discrete or Box "
            "actions")  # fmt: skip


def make_env(cfg) -> Env:
    """The environment of a config's --env; one it cannot make is a usage error."""
    try:
        if cfg.env_backend == "gymnax":
            return GymnaxEnv(cfg.env_id)
        if cfg.env_backend == "trivial":
            return TrivialEnv(cfg.env_id)
        if cfg.env_backend == "envpool":
            return EnvpoolEnv(cfg.env_id, cfg.num_envs, seed=cfg.seed)
        return GymnasiumEnv(cfg.env_id, cfg.num_envs, seed=cfg.seed)
    except RecurrenceError as err:
        raise UsageError(str(err), hint=ENV_HINT) from None


def conv_torso(env: Env, cfg, seed: int):
    """The CNN torso the networks read observations with (`cfg.network`), or None."""
    shape = env.obs_shape
    image = len(shape) == 3 and min(shape[1:]) >= rt.nn.smallest_image_side()
    if cfg.network == "cnn" and not image:
        raise UsageError(f"--network cnn needs image observations (C, H, W) of at least "
                         f"{rt.nn.smallest_image_side()}x{rt.nn.smallest_image_side()}; "
                         f"{cfg.env} observes {shape}",
                         hint="use --network mlp (or auto) for this environment")  # fmt: skip
    if cfg.network == "cnn" or (cfg.network == "auto" and image):
        return rt.nn.ConvTorso(shape, seed=seed)
    return None


def obs_vectors(env: Env, obs):
    """Observations as the vectors networks read: image-shaped ones flattened, and frames
    kept as bytes (`env.obs_dtype` uint8: Atari's, whose stacks then take a quarter of the
    memory) scaled to [0, 1] floats, as CleanRL's Atari scripts divide by 255."""
    if len(env.obs_shape) > 1:
        lead = obs.shape[: len(obs.shape) - len(env.obs_shape)]
        obs = obs.reshape(*lead, math.prod(env.obs_shape))
    if env.obs_dtype == "uint8":
        obs = obs.astype("float32") / 255.0
    return obs


class ActorCritic:
    """Policy and value networks whose weights are slices of one parameter vector:
    actor | critic | log_std (continuous actions only) | torso (CNN only). With an MLP
    (tanh) the two networks are separate; with a CNN they share its torso and are one layer
    each on its features, as in CleanRL's and SB3's Atari PPO. `initial` is that vector at
    init. `obs_norm` (a `normalize.Normalizer`), when given, normalizes the observation
    vectors the networks see."""

    def __init__(self, env: Env, cfg, obs_norm=None) -> None:
        self.env = env
        self.obs_norm = obs_norm
        outputs = env.num_actions if env.discrete else math.prod(env.action_shape)
        self.torso = conv_torso(env, cfg, seed=cfg.seed + 2)
        if self.torso is None:
            inputs, hidden = math.prod(env.obs_shape), (cfg.hidden_size,) * cfg.hidden_layers
        else:
            inputs, hidden = self.torso.features, ()
        self.actor = rt.nn.MLP((inputs, *hidden, outputs), output_gain=0.01, seed=cfg.seed,
                               own_params=False)  # fmt: skip
        self.critic = rt.nn.MLP((inputs, *hidden, 1), output_gain=1.0, seed=cfg.seed + 1,
                                own_params=False)  # fmt: skip
        log_std = np.zeros(0 if env.discrete else outputs, "float32")
        torso = np.zeros(0, "float32") if self.torso is None else self.torso.initial
        pieces = [self.actor.initial, self.critic.initial, log_std, torso]
        self.initial = np.concatenate(pieces)
        self.cuts = [int(c) for c in np.cumsum([p.size for p in pieces])]

    def vectors(self, obs):
        return obs_vectors(self.env, obs)

    def features(self, params, obs):
        """What the heads see: observation vectors, normalized if the model has `obs_norm`,
        through the CNN torso if it has one. (The policy and the value build the same torso
        nodes from the same inputs; the compiler's CSE keeps one.)"""
        obs = self.vectors(obs)
        obs = obs if self.obs_norm is None else self.obs_norm(obs)
        if self.torso is None:
            return obs
        return self.torso(obs, params.slice_axis(self.cuts[2], self.cuts[3]))

    def policy(self, params, obs):
        out = self.actor(self.features(params, obs), params.slice_axis(0, self.cuts[0]))
        if self.env.discrete:
            return rt.Categorical(out)
        return rt.DiagGaussian(out, params.slice_axis(self.cuts[1], self.cuts[2]))

    def value(self, params, obs):
        features = self.features(params, obs)
        out = self.critic(features, params.slice_axis(self.cuts[0], self.cuts[1]))
        return out.reshape(out.shape[:-1])


def acting_model(env: Env, cfg, obs_norm=None):
    """The model whose `policy(params, obs)` acts: DQN's Q-network, else the actor-critic
    (with `obs_norm`, if any)."""
    from rlsys.algos.config import DQNConfig

    if isinstance(cfg, DQNConfig):
        from rlsys.algos.dqn import QNetwork  # dqn.py builds on this module

        return QNetwork(env, cfg)
    return ActorCritic(env, cfg, obs_norm)


@dataclass
class Rollout:
    obs: Any
    action: Any
    policy: Any
    step: Any  # .reward .terminated .truncated .done .final_obs


def act(prog: rt.Program, env: Env, model: ActorCritic, params_i, seed: int,
        greedy: bool = False) -> Rollout:  # fmt: skip
    """The acting loop with parameters `params_i` (e.g. params[i]); `greedy` takes the most
    likely action instead of sampling (evaluation)."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    T = prog.bounds[-1]
    key = rt.random.key(seed).fold_in(i).fold_in(b).fold_in(t)
    obs = rt.placeholder(shape=env.obs_shape, dtype=env.obs_dtype, domain=(i, b, t), name="obs")
    policy = model.policy(params_i, obs)
    # A sampled action is data: no gradient flows back through the sample (a Gaussian
    # log_prob of its own reparameterized sample would have no gradient in the mean).
    action = policy.mode() if greedy else policy.sample(key).stop_gradient()
    first = env.reset(rt.random.key(seed + 1).fold_in(b))
    if env.in_graph:  # the environment state is a tensor too
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
    return Rollout(obs, action, policy, step)


def acting_actor_critic(prog: rt.Program, env: Env, cfg, obs_norm=None):
    """(model, params, rollout): the actor-critic, its parameter vector params[i] (params[0]
    its initialization; the algorithm's optimizer defines params[i + 1]) and the rollout
    acting with params[i]. Called inside `with prog:`."""
    i = prog.dims[0]
    model = ActorCritic(env, cfg, obs_norm)
    params = rt.placeholder(shape=model.initial.shape, domain=(i,), name="params")
    params[0] = rt.const(model.initial)
    return model, params, act(prog, env, model, params[i], cfg.seed)


def next_values(prog: rt.Program, model: ActorCritic, params_i, step, value):
    """The critic's value of the observation after each step, V(final_obs), for
    bootstrapping. Where the episode goes on, that observation is the next step's: its
    value is value[t + 1]. A terminated episode does not bootstrap (GAE multiplies by
    1 - terminated). So the critic runs on final observations only where an episode was
    truncated and at the rollout's last step: lazily (`rt.lazy_where`), on those points
    alone, 2 * B at a time, instead of on every (b, t)."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    T = prog.bounds[-1]
    following = rt.placeholder(domain=(i, b, t), name="following_value")
    following[i, b, T - 1] = 0.0  # the rollout's last step always runs the critic
    following[i, b, t] = value[i, b, t + 1]
    return rt.lazy_where(_cut(prog, step) > 0.0, model.value(params_i, step.final_obs),
                         following, rows=2 * prog.bounds[-2])  # fmt: skip


def _cut(prog: rt.Program, step):
    """1 where the critic bootstraps: where an episode was truncated or the rollout ends,
    unless the episode was terminated there; else 0."""
    t, T = prog.dims[-1], prog.bounds[-1]
    last_step = 1 - rt.minimum(T - 1 - t, 1)
    return (1.0 - step.terminated) * rt.maximum(step.truncated, last_step)


def bootstrapped_returns(prog: rt.Program, model: ActorCritic, params_i, step, gamma: float):
    """Discounted returns to the end of each episode or of the rollout, bootstrapped by the
    critic where an episode was truncated or the rollout cut it:

        G[t] = r[t] + gamma (1 - terminated[t]) (V(final_obs[t]) if cut at t else G[t + 1])

    G - V is GAE with lambda = 1 (its deltas telescope within an episode), but G reads the
    critic on final observations only: the loss's gradient, which computes V over the
    rollout anyway, can then take the advantage G - V with it, where GAE needs V at every
    step before its backward recursion (one more pass of the critic over the rollout)."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    T = prog.bounds[-1]
    cut = _cut(prog, step)
    bootstrap = rt.lazy_where(cut > 0.0, model.value(params_i, step.final_obs), 0.0,
                              rows=2 * prog.bounds[-2])  # fmt: skip
    kept = gamma * (1.0 - step.terminated)  # of what follows a step
    returns = rt.placeholder(domain=(i, b, t), name="return")
    returns[i, b, T - 1] = (step.reward + kept * bootstrap)[i, b, T - 1]
    returns[i, b, t] = step.reward + kept * (bootstrap + (1.0 - cut) * returns[i, b, t + 1])
    return returns


def gae(prog: rt.Program, rollout: Rollout, value, next_value, gamma: float, lam: float,
        reward=None):  # fmt: skip
    """Generalized advantage estimates; truncated episodes bootstrap from their final obs.
    `reward`: the reward to learn from, if not the environment's (e.g. scaled)."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    T = prog.bounds[-1]
    step = rollout.step
    reward = step.reward if reward is None else reward
    delta = reward + gamma * next_value * (1.0 - step.terminated) - value
    advantage = rt.placeholder(domain=(i, b, t), name="advantage")
    advantage[i, b, T - 1] = delta[i, b, T - 1]
    advantage[i, b, t] = delta + gamma * lam * (1.0 - step.done) * advantage[i, b, t + 1]
    return advantage


def episode_returns(prog: rt.Program, step) -> dict:
    """Sum and count of the returns of episodes that ended in each iteration."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    B, T = prog.bounds[-2], prog.bounds[-1]
    running = rt.placeholder(domain=(i, b, t), name="episode_return")
    total = running + step.reward
    carried = total * (1.0 - step.done)
    running[0, b, 0] = 0.0
    running[i + 1, b, 0] = carried[i, b, T - 1]
    running[i, b, t + 1] = carried
    ended = (step.done * total)[i, 0:B, 0:T]
    return {"sum": ended.sum(), "count": step.done[i, 0:B, 0:T].sum()}


def output_episode_stats(prog: rt.Program, step) -> None:
    episode = episode_returns(prog, step)
    prog.output("episode_return_sum", episode["sum"])
    prog.output("episodes", episode["count"])


def annealed(cfg, i) -> Any:
    """The learning rate at iteration i: linear to 0 when cfg.anneal_lr."""
    return (
        cfg.learning_rate * (1.0 - i / cfg.num_iterations) if cfg.anneal_lr else cfg.learning_rate
    )


def on_policy_program(cfg, per_step_loss) -> AlgoProgram:
    """An algorithm that takes one Adam step per iteration on its own rollout (A2C,
    REINFORCE): `per_step_loss(prog, model, params_i, rollout, value)` gives the loss at
    each (i, b, t); its mean over the rollout is minimized."""
    env = make_env(cfg)
    prog = rt.Program(dims=("i", "b", "t"))
    i = prog.dims[0]
    _, B, T = prog.bounds
    with prog:
        model, params, rollout = acting_actor_critic(prog, env, cfg)
        value = model.value(params[i], rollout.obs)
        per_step = per_step_loss(prog, model, params[i], rollout, value)
        loss = per_step[i, 0:B, 0:T].mean()
        optimizer = rt.optim.Adam(lr=lambda i: annealed(cfg, i), eps=1e-5,
                                  max_grad_norm=cfg.max_grad_norm)  # fmt: skip
        optimizer.minimize(loss, params)
        prog.output("loss", loss)
        output_episode_stats(prog, rollout.step)
    bounds = {"I": cfg.num_iterations, "B": cfg.num_envs, "T": cfg.num_steps}
    return AlgoProgram(prog, bounds, env, cfg)
