"""DQN (Mnih et al. 2015) with CleanRL's `dqn.py` semantics, as one recurrent-tensor program.

Dimensions: i (iteration), u (gradient step), b (environment), t (step).

    act:     ε-greedy on Q(params[i], obs); ε falls linearly with the env step
             (start_e -> end_e over exploration_fraction * total_steps)
    store:   buffer[i + 1] = buffer[i] with slot i % S overwritten by the B x T transitions
             (obs, action, reward, next obs, terminated) of iteration i: a ring buffer of
             S = ceil(buffer_size / (B x T)) slots, carried like the parameters, in which
             each observation is kept once (`_Replay`; Atari's frames as bytes)
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
    slots = cfg.buffer_slots
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
        replay = _Replay(prog, cfg, env, slots, rollout)
        capacity = replay.capacity

        # -- learn: U gradient steps on uniform samples of the filled part --------------------
        filled = rt.minimum((i + 1) * steps_per_iteration, capacity).astype("float32")
        sample_key = rt.random.key(cfg.seed + 2).fold_in(i).fold_in(u)
        picks = rt.random.uniform(sample_key, (cfg.minibatch_size,)) * filled
        picks = rt.minimum(picks.astype("int32"), capacity - 1)
        columns = replay.sample(picks, model.flat)

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
    lost = (
        f"{cfg.env} truncated episodes twice in {cfg.num_steps} steps of one env; DQN's "
        "replay buffer keeps one truncated episode's final observation per env and iteration"
    )
    hint = "pass a --num-steps under the environment's episode length"
    return AlgoProgram(prog, bounds, env, cfg, stops={"final_obs_lost": (lost, hint)})


def _ring(prog: rt.Program, slots: int, rows, name: str):
    """A replay ring of `slots` slots, carried over i, into whose slot i % slots iteration i
    writes `rows` (domain (i,)): the ring after that write."""
    i = prog.dims[0]
    per_slot, shape, dtype = rows.shape[0], rows.shape[1:], rows.dtype
    capacity = slots * per_slot
    ring = rt.placeholder(shape=(capacity, *shape), dtype=dtype, domain=(i,), name=name)
    ring[0] = rt.const(0, dtype).broadcast_to((capacity, *shape))
    # Only the slot is written: the ring, a window passed from iteration to iteration, is
    # updated in place (`jax_staged.Segment` donates it), not copied.
    stored = ring[i].set_rows(i % slots * per_slot, rows)
    ring[i + 1] = stored
    return stored


class _Replay:
    """The replay buffer: the transitions of the last `slots` iterations, each observation
    kept once (as SB3's `optimize_memory_usage`, but exact at truncations).

    An iteration's slot of the frames ring holds each env's T observations in step order and
    the observation after its last step, so a transition's next observation is the frame
    after its own. Where the episode ended at that step, that frame is the next episode's
    first: after a termination nothing reads the next observation (no bootstrap), and after
    a truncation it is the episode's final observation, which a second ring keeps, one frame
    per env and iteration. One is enough when episodes last at least T - 1 steps; an
    iteration that truncated one env's episodes twice counts them in `final_obs_lost`
    (training stops on it). Frames stay in the env's dtype (bytes for Atari); action,
    reward, terminated and whether the final observation is kept apart are floats.
    """

    def __init__(self, prog: rt.Program, cfg: DQNConfig, env, slots: int, rollout) -> None:
        i, step = prog.dims[0], rollout.step
        _, _, B, T = prog.bounds
        envs, steps, shape = cfg.num_envs, cfg.num_steps, env.obs_shape
        self.steps, self.shape, self.capacity = steps, shape, slots * envs * steps

        def window(x, *last: int):  # x over iteration i's steps, as (envs, steps, *last)
            return x[i, 0:B, 0:T].reshape(envs, steps, *last)

        after = step.final_obs[i, 0:B, T - 1].reshape(envs, 1, *shape)  # after the last step
        frames = rt.concat([window(rollout.obs, *shape), after], axis=1)
        self.frames = _ring(prog, slots, frames.reshape(envs * (steps + 1), *shape),
                            "replay_obs")  # fmt: skip

        # Truncated before its last step, an env's next observation is kept apart.
        cut = window(step.truncated * (1.0 - step.terminated))
        cut = cut * rt.const(np.arange(steps) < steps - 1, "float32")
        columns = (rollout.action.astype("float32"), step.reward, step.terminated)
        floats = rt.concat([*(window(c, 1) for c in columns), cut.reshape(envs, steps, 1)],
                           axis=2)  # fmt: skip
        self.floats = _ring(prog, slots, floats.reshape(envs * steps, 4), "replay")
        self.finals = None
        if steps > 1:  # (with one step, the frame after it is its final observation)
            first_cut = cut.argmax(axis=1) + rt.const(np.arange(envs, dtype="int32") * steps)
            finals = window(step.final_obs, *shape).reshape(envs * steps, *shape)
            self.finals = _ring(prog, slots, finals.take(first_cut), "replay_final_obs")
        prog.output("final_obs_lost", rt.maximum(cut.sum(axis=1) - 1.0, 0.0).sum())

    def sample(self, picks, flat) -> dict:
        """The transitions at rows `picks` (int32, each < capacity): obs and next_obs as
        `flat` makes them, action, reward and terminated."""
        mb = picks.shape[0]
        run = picks // self.steps  # the (slot, env) the transition is in: T + 1 frames each
        floats = self.floats.take(picks)

        def column(k: int, batch=floats):
            return batch.slice_axis(k, k + 1, axis=1).reshape(mb, *batch.shape[2:])

        # Both frames in one gather: with two, XLA wrote the slot into a copy of the ring for
        # the second reader.
        own_and_next = (picks + run).reshape(mb, 1) + rt.const(np.arange(2, dtype="int32"))
        pairs = self.frames.take(own_and_next)
        following = column(1, pairs)
        if self.finals is not None:
            kept_apart = column(3).reshape(mb, *(1,) * len(self.shape)) > 0.5
            following = rt.where(kept_apart, self.finals.take(run), following)
        return {"obs": flat(column(0, pairs)), "next_obs": flat(following),
                "action": column(0), "reward": column(1), "terminated": column(2)}  # fmt: skip


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
