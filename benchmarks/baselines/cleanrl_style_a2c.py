"""A2C in the style of CleanRL's single-file scripts: PyTorch, a host vector env, one loop.

The A2C of rlsys (`rlsys/algos/a2c.py`) on TimeRL's trivial env (`trivial_env_numpy`), as
CleanRL's `ppo_continuous_action.py` would write it with one epoch over the full batch:

* actor and critic MLPs (tanh, orthogonal init: gain sqrt(2) hidden, 0.01 actor output,
  1.0 critic output), a state-independent log-std parameter: a diagonal Gaussian policy;
* per iteration: anneal the learning rate, step the envs `episode_length` times acting under
  `no_grad`, GAE(gamma, lambda) where a truncated episode bootstraps from the value of its
  final observation, then one Adam step (global-norm clipped) on
  -log_prob * adv + vf_coef * 0.5 (value - returns)^2 - ent_coef * entropy, averaged over
  the batch (advantages not normalized, as in rlsys's A2C).

One thread (`torch.set_num_threads(1)`), CPU, as `cleanrl_style_ppo`.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.baselines import A2CSetup
from benchmarks.baselines.trivial_env_numpy import TrivialVectorEnv


def _layer(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(sizes: list[int], output_gain: float) -> nn.Sequential:
    modules: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes[:-1]):
        modules += [_layer(fan_in, fan_out, math.sqrt(2.0)), nn.Tanh()]
    return nn.Sequential(*modules, _layer(sizes[-2], sizes[-1], output_gain))


class Agent(nn.Module):
    def __init__(self, obs_size: int, action_size: int, hidden: int, layers: int) -> None:
        super().__init__()
        sizes = [obs_size, *[hidden] * layers]
        self.actor_mean = _mlp([*sizes, action_size], 0.01)
        self.critic = _mlp([*sizes, 1], 1.0)
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_size))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """(action, its log-probability, the policy's entropy, the value) for `obs`."""
        mean = self.actor_mean(obs)
        dist = torch.distributions.Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(-1), dist.entropy().sum(-1), self.value(obs)


def train(setup: A2CSetup, iterations: int, seed: int = 0) -> dict[str, Any]:
    began = time.perf_counter()
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    T, N, D = setup.episode_length, setup.num_envs, setup.obs_size
    envs = TrivialVectorEnv(N, (D,), T, seed=seed)
    agent = Agent(D, 1, setup.hidden, setup.layers)
    optimizer = torch.optim.Adam(agent.parameters(), lr=setup.learning_rate, eps=setup.adam_eps)
    obs = torch.zeros((T, N, D))
    actions = torch.zeros((T, N, 1))
    rewards, values, next_values, dones = (torch.zeros((T, N)) for _ in range(4))
    next_obs_np, _ = envs.reset()
    next_obs = torch.as_tensor(next_obs_np)
    setup_seconds = time.perf_counter() - began

    iteration_seconds, mean_returns = [], []
    for iteration in range(iterations):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = setup.learning_rate * (1.0 - iteration / iterations)

        ended_sum, ended_count, running = 0.0, 0, np.zeros(N)
        for t in range(T):
            obs[t] = next_obs
            with torch.no_grad():
                action, _, _, value = agent.act(next_obs)
            actions[t], values[t] = action, value
            next_obs_np, reward, terminated, truncated, info = envs.step(action.numpy())
            done = np.logical_or(terminated, truncated)
            running += reward
            ended_sum, ended_count = ended_sum + running[done].sum(), ended_count + done.sum()
            running[done] = 0.0
            next_obs = torch.as_tensor(next_obs_np)
            # The value after this step: of the next obs, or of the final obs when it ended
            # (a truncated episode bootstraps); terminated steps do not bootstrap at all.
            after = torch.where(torch.as_tensor(done)[:, None],
                                torch.as_tensor(info["final_obs"]), next_obs)  # fmt: skip
            with torch.no_grad():
                next_values[t] = agent.value(after) * torch.as_tensor(1.0 - terminated)
            rewards[t] = torch.as_tensor(reward)
            dones[t] = torch.as_tensor(done, dtype=torch.float32)

        with torch.no_grad():  # GAE, backwards over the episode
            advantages = torch.zeros((T, N))
            gae = torch.zeros(N)
            for t in reversed(range(T)):
                delta = rewards[t] + setup.gamma * next_values[t] - values[t]
                gae = delta + setup.gamma * setup.gae_lambda * (1.0 - dones[t]) * gae
                advantages[t] = gae
            returns = advantages + values

        _, log_prob, entropy, value = agent.act(obs.reshape(-1, D), actions.reshape(-1, 1))
        pg_loss = -(log_prob * advantages.reshape(-1)).mean()
        v_loss = 0.5 * ((value - returns.reshape(-1)) ** 2).mean()
        loss = pg_loss + setup.vf_coef * v_loss - setup.ent_coef * entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), setup.max_grad_norm)
        optimizer.step()
        iteration_seconds.append(time.perf_counter() - start)
        mean_returns.append(float(ended_sum) / max(int(ended_count), 1))
    return {"iteration_seconds": iteration_seconds, "setup_seconds": setup_seconds,
            "mean_returns": mean_returns}  # fmt: skip
