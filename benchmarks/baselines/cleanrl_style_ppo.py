"""PPO in the style of CleanRL's `ppo.py`: PyTorch, gymnasium vector envs, one Python loop.

Per iteration: anneal the learning rate; step 8 CartPole-v1 environments (`SyncVectorEnv`)
num_steps times, acting with the current policy under `no_grad`; GAE from the value of the
last observation; then epochs x minibatches of the PPO loss (clipped surrogate, clipped value
loss, entropy bonus), each followed by gradient clipping and an Adam step. One thread
(`torch.set_num_threads(1)`), CPU.

Autoreset: gymnasium 1.x defaults to NEXT_STEP (the step after a `done` returns the reset
observation and ignores the action), which CleanRL's loop, written for gymnasium 0.29, does
not expect. We ask for `AutoresetMode.SAME_STEP`, the 0.29 behaviour CleanRL assumes: the
step that ends an episode already returns the first observation of the next one, so every
transition stored is a real one. As in CleanRL, `done = terminated or truncated` ends the
GAE recursion and the bootstrap (truncated episodes are not bootstrapped).

With an Atari id (`ALE/...`, the `ppo_atari` case) the environments are rlsys's
preprocessed games (`rlsys/envs/atari.py`, so both systems step the same frames) and the
agent is CleanRL's `ppo_atari.py` network: the Nature CNN shared by a linear actor and critic,
reading the frames (bytes, 0-255, stored as floats) divided by 255.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from benchmarks.baselines import HYPER, Hyper, Progress

ENV_ID = "CartPole-v1"


def _layer(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class _Bytes(nn.Module):
    """CleanRL's `x / 255.0`: frames arrive as bytes (0-255), the network reads [0, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 255.0


def _conv(channels: int, out: int, side: int, stride: int) -> nn.Conv2d:
    layer = nn.Conv2d(channels, out, side, stride)
    nn.init.orthogonal_(layer.weight, math.sqrt(2.0))
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int) -> None:
        super().__init__()
        root2 = math.sqrt(2.0)
        if len(obs_shape) == 3:  # images: CleanRL's ppo_atari.py network
            self.torso = nn.Sequential(
                _Bytes(), _conv(obs_shape[0], 32, 8, 4), nn.ReLU(),
                _conv(32, 64, 4, 2), nn.ReLU(),
                _conv(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                _layer(64 * 7 * 7, 512, root2), nn.ReLU(),
            )  # fmt: skip
            self.critic, self.actor = _layer(512, 1, 1.0), _layer(512, num_actions, 0.01)
            return
        self.torso = nn.Identity()
        obs_size = math.prod(obs_shape)

        def trunk(outputs: int, gain: float) -> nn.Sequential:
            return nn.Sequential(
                _layer(obs_size, hidden, root2), nn.Tanh(),
                _layer(hidden, hidden, root2), nn.Tanh(),
                _layer(hidden, outputs, gain),
            )  # fmt: skip

        self.critic = trunk(1, 1.0)
        self.actor = trunk(num_actions, 0.01)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.torso(obs)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """(action, its log-probability, the policy's entropy, the value) for `obs`."""
        features = self.torso(obs)
        dist = torch.distributions.Categorical(logits=self.actor(features))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(features).squeeze(-1)


def env_maker(env_id: str):
    """A function making one environment: an Atari id's preprocessed game, else gym.make."""
    from rlsys.envs import atari

    if atari.is_atari(env_id):
        atari.register()
        return lambda: atari.make(env_id)
    return lambda: gym.make(env_id)


def make_envs(num_envs: int, env_id: str = ENV_ID) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv(
        [env_maker(env_id)] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def train(total_steps: int, seed: int, *, target: float | None = None,
          clock_start: float | None = None, hyper: Hyper = HYPER,
          env_id: str = ENV_ID) -> dict[str, Any]:  # fmt: skip
    """Train for `total_steps` env steps (whole iterations), stopping early once `target` is
    met; see `Progress.result` for the keys. `compile_seconds` is the setup (envs, agent)."""
    began = time.perf_counter()
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    progress = Progress(hyper.batch_size, target=target, clock_start=clock_start)
    envs = make_envs(hyper.num_envs, env_id)
    obs_shape = tuple(envs.single_observation_space.shape)
    agent = Agent(obs_shape, envs.single_action_space.n, hyper.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=hyper.learning_rate, eps=hyper.adam_eps)
    num_iterations = hyper.iterations(total_steps)
    T, N = hyper.num_steps, hyper.num_envs
    obs = torch.zeros((T, N, *obs_shape))
    actions = torch.zeros((T, N), dtype=torch.long)
    log_probs, rewards, dones, values = (torch.zeros((T, N)) for _ in range(4))
    running = np.zeros(N)

    next_obs_np, _ = envs.reset(seed=seed)
    next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
    next_done = torch.zeros(N)
    setup_seconds = time.perf_counter() - began
    run_began = time.perf_counter()
    iteration = 0
    for iteration in range(1, num_iterations + 1):
        fraction = 1.0 - (iteration - 1.0) / num_iterations
        for group in optimizer.param_groups:
            group["lr"] = fraction * hyper.learning_rate

        ended_sum, ended_count = 0.0, 0
        for t in range(T):
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, log_prob, _, value = agent.act(next_obs)
            actions[t], log_probs[t], values[t] = action, log_prob, value
            next_obs_np, reward, terminated, truncated, _ = envs.step(action.numpy())
            done = np.logical_or(terminated, truncated)
            running += reward
            ended_sum += float(running[done].sum())
            ended_count += int(done.sum())
            running[done] = 0.0
            rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
            next_done = torch.as_tensor(done, dtype=torch.float32)

        with torch.no_grad():  # GAE, backwards; dones[t + 1] is the done of step t
            next_value = agent.value(next_obs)
            advantages = torch.zeros((T, N))
            gae = torch.zeros(N)
            for t in reversed(range(T)):
                if t == T - 1:
                    not_done, after = 1.0 - next_done, next_value
                else:
                    not_done, after = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + hyper.gamma * after * not_done - values[t]
                gae = delta + hyper.gamma * hyper.gae_lambda * not_done * gae
                advantages[t] = gae
            returns = advantages + values

        b_obs = obs.reshape(-1, *obs_shape)
        b_actions, b_log_probs = actions.reshape(-1), log_probs.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        )  # fmt: skip
        indices = np.arange(hyper.batch_size)
        for _ in range(hyper.update_epochs):
            np.random.shuffle(indices)
            for start in range(0, hyper.batch_size, hyper.minibatch_size):
                mb = torch.as_tensor(indices[start : start + hyper.minibatch_size])
                _, new_log_prob, entropy, new_value = agent.act(b_obs[mb], b_actions[mb])
                ratio = (new_log_prob - b_log_probs[mb]).exp()
                adv = b_advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = ratio.clamp(1.0 - hyper.clip_coef, 1.0 + hyper.clip_coef)
                pg_loss = torch.max(-adv * ratio, -adv * clipped).mean()
                v_clipped = b_values[mb] + (new_value - b_values[mb]).clamp(
                    -hyper.clip_coef, hyper.clip_coef
                )
                v_loss = 0.5 * torch.max((new_value - b_returns[mb]) ** 2,
                                         (v_clipped - b_returns[mb]) ** 2).mean()  # fmt: skip
                loss = pg_loss - hyper.ent_coef * entropy.mean() + hyper.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), hyper.max_grad_norm)
                optimizer.step()

        if progress.add(ended_sum, ended_count):
            break
    run_seconds = time.perf_counter() - run_began
    envs.close()
    return progress.result(iterations=iteration, compile_seconds=setup_seconds,
                           run_seconds=run_seconds)  # fmt: skip
