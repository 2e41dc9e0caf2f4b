"""DQN (Mnih et al. 2015) with CleanRL's `dqn.py` semantics, as one recurrent-tensor program.

Dimensions: i (iteration), u (gradient step), b (environment), t (step).

    act:     ε-greedy on Q(params[i], obs); ε falls linearly with the env step
             (start_e -> end_e over exploration_fraction * total_steps)
    store:   buffer[i + 1] = buffer[i] with slot i % S overwritten by the B x T transitions
             (obs, action, reward, next obs, terminated) of iteration i: a ring buffer of
             S = ceil(buffer_size / (B x T)) slots, carried like the parameters (two rings:
             observations in the env's dtype, bytes for Atari frames; the rest as floats)
    learn:   for u < U: sample minibatch_size rows uniformly from the filled part; TD target
             r + gamma * (1 - terminated) * max_a Q(target[i], next obs); MSE (or Huber) loss;
             one Adam step, taken once learning_starts env steps are stored
    target:  target[i + 1] = tau * params[i + 1] + (1 - tau) * target[i] when the iteration
             crossed a multiple of target_network_frequency steps (after learning starts)

Next obs of a truncated episode is its final observation (CleanRL's `real_next_obs`), and
only termination cuts the bootstrap. The compiler makes acting a scan over t vectorized over
b, the U updates a scan over u, and the iterations a host loop; the buffer is part of what a
checkpoint holds, so a resumed run gives the metrics of an uninterrupted one.
"""

from __future__ import annotations

import math

import numpy as np

import rlsys.rt as rt
from rlsys.algos.common import (
    AlgoProgram,
    act,
    annealed,
    conv_torso,
    make_env,
    obs_vectors,
    output_episode_stats,
)
from rlsys.algos.config import DQNConfig
from rlsys.errors import UsageError


class EpsilonGreedy:
    """A policy over Q-values (last axis): a uniformly random action with probability
    `epsilon`, else the greedy one. `mode()` is the greedy action."""

    def __init__(self, q_values, epsilon) -> None:
        self.q_values, self.epsilon = q_values, epsilon

    def sample(self, key):
        explore = rt.random.uniform(key.fold_in(0)) < self.epsilon
        num_actions = self.q_values.shape[-1]
        random_action = (rt.random.uniform(key.fold_in(1)) * float(num_actions)).astype("int32")
        return rt.where(explore, rt.minimum(random_action, num_actions - 1), self.mode())

    def mode(self):
        return self.q_values.argmax()


class QNetwork:
    """An MLP (relu) from observations to one Q-value per action, or with `--network cnn`
    (images) one layer on the features of a CNN torso, as CleanRL's Atari DQN; `initial`
    is the parameter vector at init (head | torso). `epsilon` (a number or tensor) is what
    `policy` explores with."""

    def __init__(self, env, cfg) -> None:
        if not env.discrete:
            raise UsageError(f"dqn needs discrete actions; {cfg.env} has continuous actions "
                             f"of shape {env.action_shape}",
                             hint="use ppo, a2c or reinforce for continuous actions")  # fmt: skip
        self.env = env
        self.obs_size = math.prod(env.obs_shape)
        self.torso = conv_torso(env, cfg, seed=cfg.seed + 1)
        if self.torso is None:
            inputs, hidden = self.obs_size, (cfg.hidden_size,) * cfg.hidden_layers
        else:
            inputs, hidden = self.torso.features, ()
        self.head = rt.nn.MLP((inputs, *hidden, env.num_actions), activation="relu",
                              seed=cfg.seed, own_params=False)  # fmt: skip
        torso = np.zeros(0, "float32") if self.torso is None else self.torso.initial
        self.initial = np.concatenate([self.head.initial, torso])
        self.epsilon = cfg.end_e

    def flat(self, obs):
        """Observations as vectors (`obs_vectors`): the replay buffer keeps them so."""
        return obs_vectors(self.env, obs)

    def q_values(self, params, obs_vectors):
        if self.torso is None:
            return self.head(obs_vectors, params)
        cut = self.head.initial.size
        features = self.torso(obs_vectors, params.slice_axis(cut, self.initial.size))
        return self.head(features, params.slice_axis(0, cut))

    def policy(self, params, obs) -> EpsilonGreedy:
        return EpsilonGreedy(self.q_values(params, self.flat(obs)), self.epsilon)


def build_dqn(cfg: DQNConfig) -> AlgoProgram:
    env = make_env(cfg)
    prog = rt.Program(dims=("i", "u", "b", "t"))
    i, u, _, t = prog.dims
    steps_per_iteration = cfg.batch_size
    updates = cfg.updates_per_iteration
    slots = -(-cfg.buffer_size // steps_per_iteration)  # whole iterations, rounded up
    with prog:
        model = QNetwork(env, cfg)
        params = rt.placeholder(shape=model.initial.shape, domain=(i,), name="params")
        target = rt.placeholder(shape=model.initial.shape, domain=(i,), name="target_params")
        params[0] = rt.const(model.initial)
        target[0] = rt.const(model.initial)

        # -- act: ε-greedy, ε linear in the env step ------------------------------------------
        env_step = (i * cfg.num_steps + t) * cfg.num_envs * 1.0  # steps taken before this one
        duration = cfg.exploration_fraction * cfg.total_steps
        slope = (cfg.end_e - cfg.start_e) / duration
        model.epsilon = rt.maximum(cfg.start_e + slope * env_step, cfg.end_e)
        rollout = act(prog, env, model, params[i], cfg.seed)
        step = rollout.step

        # -- store: this iteration's transitions overwrite the oldest slot --------------------
        # Two rings: the observations (obs and next obs) in the env's dtype, so Atari's frames
        # stay bytes, and the floats (action, reward, terminated).
        shape = env.obs_shape
        frames = rt.concat([rollout.obs.reshape(1, *shape), step.final_obs.reshape(1, *shape)])
        floats = rt.concat([rollout.action.astype("float32").reshape(1),
                            step.reward.reshape(1), step.terminated.reshape(1)])  # fmt: skip
        ring = _Ring(prog, slots, steps_per_iteration)
        stored_frames = ring.store(frames, "replay_obs")
        stored_floats = ring.store(floats, "replay")

        # -- learn: U gradient steps on uniform samples of the filled part --------------------
        capacity = ring.capacity
        filled = rt.minimum((i + 1) * steps_per_iteration, capacity).astype("float32")
        sample_key = rt.random.key(cfg.seed + 2).fold_in(i).fold_in(u)
        picks = rt.random.uniform(sample_key, (cfg.minibatch_size,)) * filled
        picks = rt.minimum(picks.astype("int32"), capacity - 1)
        seen, scalars = stored_frames.take(picks), stored_floats.take(picks)
        mb = cfg.minibatch_size

        def column(k: int, batch=scalars):
            return batch.slice_axis(k, k + 1, axis=1).reshape(mb, *batch.shape[2:])

        columns = {
            "obs": model.flat(column(0, seen)), "next_obs": model.flat(column(1, seen)),
            "action": column(0), "reward": column(1), "terminated": column(2),
        }  # fmt: skip

        theta = rt.placeholder(shape=model.initial.shape, domain=(i, u), name="params_u")
        moments = [rt.placeholder(shape=model.initial.shape, domain=(i, u), name=name)
                   for name in ("adam_m", "adam_v")]  # fmt: skip
        loss = _td_loss(cfg, model, theta[i, u], target[i], columns)
        (grad,) = rt.optim.clip_by_global_norm([rt.grad(loss, theta)], cfg.max_grad_norm)
        first_learning = cfg.learning_starts // steps_per_iteration  # first i past the start
        learning = i * 1.0 >= first_learning
        count = rt.maximum((i - first_learning) * updates + u + 1, 1).astype("float32")
        adam = rt.optim.Adam(lr=cfg.learning_rate)
        stepped = adam.update(theta[i, u], moments[0][i, u], moments[1][i, u], grad, count,
                              annealed(cfg, i))  # fmt: skip
        before = (theta[i, u], moments[0][i, u], moments[1][i, u])
        new_theta, new_m, new_v = (
            rt.where(learning, new, old) for new, old in zip(stepped, before, strict=True)
        )
        theta[i, 0] = params[i]
        theta[i, u + 1] = new_theta
        learned = new_theta[i, updates - 1]
        params[i + 1] = learned
        for moment, new in zip(moments, (new_m, new_v), strict=True):
            moment[0, 0] = 0.0
            moment[i + 1, 0] = new[i, updates - 1]
            moment[i, u + 1] = new

        # -- target network: updated at the end of an iteration that crossed a multiple ------
        every = cfg.target_network_frequency
        crossed = (i + 1) * steps_per_iteration // every > i * steps_per_iteration // every
        blended = cfg.tau * learned + (1.0 - cfg.tau) * target[i]
        target[i + 1] = rt.where(crossed & learning, blended, target[i])

        prog.output("loss", loss[i, 0:updates].mean())
        output_episode_stats(prog, step)
    bounds = {"I": cfg.num_iterations, "U": updates, "B": cfg.num_envs, "T": cfg.num_steps}
    return AlgoProgram(prog, bounds, env, cfg)


class _Ring:
    """A replay ring: `slots` slots of one iteration's `per_slot` transitions each, carried
    over i; iteration i's transitions overwrite slot i % slots."""

    def __init__(self, prog: rt.Program, slots: int, per_slot: int) -> None:
        self.prog, self.slots, self.per_slot = prog, slots, per_slot
        self.capacity = slots * per_slot

    def store(self, transition, name: str):
        """The ring after iteration i stored `transition` (domain (i, b, t)) of every b, t."""
        i = self.prog.dims[0]
        _, _, B, T = self.prog.bounds
        shape, dtype = transition.shape, transition.dtype
        rows = transition[i, 0:B, 0:T].reshape(self.per_slot, *shape)
        ring = rt.placeholder(shape=(self.capacity, *shape), dtype=dtype, domain=(i,),
                              name=name)  # fmt: skip
        ring[0] = rt.const(0, dtype).broadcast_to((self.capacity, *shape))
        # Only the slot is written: the ring, a window passed from iteration to iteration,
        # is updated in place (`jax_staged.Segment` donates it), not copied.
        stored = ring[i].set_rows(i % self.slots * self.per_slot, rows)
        ring[i + 1] = stored
        return stored


def _td_loss(cfg: DQNConfig, model: QNetwork, params, target_params, mb: dict):
    next_q = model.q_values(target_params, mb["next_obs"]).max(axis=-1)
    td_target = mb["reward"] + cfg.gamma * (1.0 - mb["terminated"]) * next_q
    actions = rt.const(np.arange(model.env.num_actions, dtype="float32"))
    chosen = (mb["action"].reshape(cfg.minibatch_size, 1) == actions).astype("float32")
    q_taken = (model.q_values(params, mb["obs"]) * chosen).sum(axis=-1)
    error = q_taken - td_target.stop_gradient()
    if cfg.loss == "mse":
        return (error * error).mean()
    # Huber (smooth L1, delta 1): quadratic near 0, linear beyond.
    size = error.abs()
    return rt.where(size < 1.0, 0.5 * error * error, size - 0.5).mean()
