"""A2C in the style of PureJaxRL: hand-written JAX, an iteration one jitted function.

The A2C of rlsys (`rlsys/algos/a2c.py`) on TimeRL's trivial env (`trivial_env_jax`, vmapped
over envs). One iteration ("update step") maps the runner state (parameters, optimizer
state, env states, last observations, PRNG key) to the next:

    rollout:  lax.scan over the episode of (policy -> Gaussian sample -> vmapped env step)
    GAE:      reverse lax.scan; a truncated episode bootstraps from its final observation
    learn:    grad of the A2C loss over the whole batch; optax clip_by_global_norm + Adam
              with the learning rate annealed linearly over the iterations

The networks are those of `purejaxrl_style_ppo` (lists of (weight, bias), orthogonal init)
plus a state-independent log-std. The iteration is compiled ahead of time
(`jax.jit(update).lower(state).compile()`, timed apart) and called once per iteration, so
that each iteration can be timed (PureJaxRL would scan over the iterations too; on the CPU
one call per iteration of 10^4-10^5 env steps costs the same).
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax

from benchmarks.baselines import A2CSetup
from benchmarks.baselines.purejaxrl_style_ppo import init_mlp, mlp
from benchmarks.baselines.trivial_env_jax import make as make_env

LOG_2PI = math.log(2.0 * math.pi)


def init_params(key: jax.Array, setup: A2CSetup) -> dict:
    k_actor, k_critic = jax.random.split(key)
    sizes = (setup.obs_size, *[setup.hidden] * setup.layers)
    return {
        "actor": init_mlp(k_actor, (*sizes, 1), 0.01),
        "critic": init_mlp(k_critic, (*sizes, 1), 1.0),
        "log_std": jnp.zeros((1,), jnp.float32),
    }


def log_prob(params: dict, mean: jax.Array, action: jax.Array) -> jax.Array:
    z = (action - mean) / jnp.exp(params["log_std"])
    return jnp.sum(-0.5 * z**2 - params["log_std"] - 0.5 * LOG_2PI, axis=-1)


def value(params: dict, obs: jax.Array) -> jax.Array:
    return mlp(params["critic"], obs)[..., 0]


def make_functions(setup: A2CSetup, iterations: int):
    """`init(key) -> runner state`, `update(state) -> (state, mean episode return)`."""
    reset, step = make_env((setup.obs_size,), setup.episode_length)
    reset, step = jax.vmap(reset), jax.vmap(step)
    optimizer = optax.chain(
        optax.clip_by_global_norm(setup.max_grad_norm),
        optax.adam(lambda count: setup.learning_rate * (1.0 - count / iterations),
                   eps=setup.adam_eps),
    )  # fmt: skip
    N = setup.num_envs

    def init(key):
        k_params, k_env, key = jax.random.split(key, 3)
        params = init_params(k_params, setup)
        obs, env_state = reset(jax.random.split(k_env, N))
        return (params, optimizer.init(params), env_state, obs, key)

    def env_step(carry, _):
        params, env_state, obs, key = carry
        key, k_action, k_env = jax.random.split(key, 3)
        mean = mlp(params["actor"], obs)
        action = mean + jnp.exp(params["log_std"]) * jax.random.normal(k_action, mean.shape)
        out = step(jax.random.split(k_env, N), env_state, action)
        done = jnp.logical_or(out.terminated, out.truncated)
        after = jnp.where(done[:, None], out.final_obs, out.obs)
        transition = {
            "obs": obs, "action": action, "value": value(params, obs), "reward": out.reward,
            "next_value": value(params, after) * (1.0 - out.terminated),
            "done": done.astype(jnp.float32),
        }  # fmt: skip
        return (params, out.state, out.obs, key), transition

    def advantages(rollout):
        def back(gae, x):
            delta = x["reward"] + setup.gamma * x["next_value"] - x["value"]
            gae = delta + setup.gamma * setup.gae_lambda * (1.0 - x["done"]) * gae
            return gae, gae

        _, adv = jax.lax.scan(back, jnp.zeros((N,), jnp.float32), rollout, reverse=True)
        return adv

    def loss_fn(params, batch):
        mean = mlp(params["actor"], batch["obs"])
        pg_loss = -(log_prob(params, mean, batch["action"]) * batch["advantage"]).mean()
        v_loss = 0.5 * ((value(params, batch["obs"]) - batch["returns"]) ** 2).mean()
        entropy = jnp.sum(params["log_std"] + 0.5 * (LOG_2PI + 1.0))
        return pg_loss + setup.vf_coef * v_loss - setup.ent_coef * entropy

    def update(state):
        params, opt_state, env_state, obs, key = state
        (_, env_state, obs, key), rollout = jax.lax.scan(
            env_step, (params, env_state, obs, key), None, length=setup.episode_length
        )
        advantage = advantages(rollout)
        batch = {"obs": rollout["obs"], "action": rollout["action"], "advantage": advantage,
                 "returns": advantage + rollout["value"]}  # fmt: skip
        batch = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), batch)
        grads = jax.grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        episodes = rollout["done"].sum()  # every episode ends within one iteration here
        mean_return = rollout["reward"].sum() / jnp.maximum(episodes, 1.0)
        return (params, opt_state, env_state, obs, key), mean_return

    return init, update


def train(setup: A2CSetup, iterations: int, seed: int = 0) -> dict[str, Any]:
    began = time.perf_counter()
    init, update = make_functions(setup, iterations)
    key = jax.random.PRNGKey(seed)
    state = jax.jit(init)(key)
    compiled = jax.jit(update).lower(state).compile()
    jax.block_until_ready(state)
    setup_seconds = time.perf_counter() - began
    iteration_seconds, mean_returns = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        state, mean_return = compiled(state)
        jax.block_until_ready(state)
        iteration_seconds.append(time.perf_counter() - start)
        mean_returns.append(float(mean_return))
    return {"iteration_seconds": iteration_seconds, "setup_seconds": setup_seconds,
            "mean_returns": mean_returns}  # fmt: skip
