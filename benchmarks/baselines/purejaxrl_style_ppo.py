"""PPO in the style of PureJaxRL: hand-written JAX, everything under one `jax.jit`.

One iteration ("update step") is a function of the runner state (parameters, optimizer
state, environment states, last observations, running episode returns, PRNG key):

    rollout:  lax.scan over num_steps of (policy -> sample -> vmapped gymnax step)
    GAE:      reverse lax.scan over the rollout, bootstrapped from the value of the last obs
    learn:    lax.scan over epochs of (permute the batch; lax.scan over minibatches of
              (grad of the PPO loss; optax clip_by_global_norm + Adam with a linear schedule)))

and training is a `lax.scan` of it over the iterations. No flax: the MLPs are lists of
(weight, bias) with `jax.nn.initializers.orthogonal`.

As in PureJaxRL (and CleanRL), `done` (terminated or truncated at 500 steps; gymnax 1.x
reports them apart) stops both the bootstrap and the GAE recursion: truncated episodes are
not bootstrapped. Episode returns are
tracked like PureJaxRL's LogWrapper: a running return per environment, reported and zeroed
when its episode ends (gymnax resets the environment inside `step`).

`train(..., chunk=None)` is the faithful form: initialization and all iterations one jitted
function, compiled ahead of time (`.lower(...).compile()`) so compilation is timed apart.
`train(..., chunk=K)` jits K iterations per call instead, so that the host can look at the
returns between calls and stop at the target (the time-to-475 measurement).
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax

from benchmarks.baselines import HYPER, Hyper, Progress

ENV_ID = "CartPole-v1"


# -- networks ----------------------------------------------------------------------------------
def init_mlp(key: jax.Array, sizes: tuple[int, ...], output_gain: float) -> list[dict]:
    """Orthogonal weights (gain sqrt(2) in hidden layers, `output_gain` last), zero biases."""
    layers = []
    keys = jax.random.split(key, len(sizes) - 1)
    for n, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        gain = output_gain if n == len(sizes) - 2 else math.sqrt(2.0)
        weight = jax.nn.initializers.orthogonal(gain)(k, (fan_in, fan_out), jnp.float32)
        layers.append({"w": weight, "b": jnp.zeros((fan_out,), jnp.float32)})
    return layers


def mlp(layers: list[dict], x: jax.Array) -> jax.Array:
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def init_params(key: jax.Array, obs_size: int, num_actions: int, hidden: int) -> dict:
    k_actor, k_critic = jax.random.split(key)
    return {
        "actor": init_mlp(k_actor, (obs_size, hidden, hidden, num_actions), 0.01),
        "critic": init_mlp(k_critic, (obs_size, hidden, hidden, 1), 1.0),
    }


def policy_and_value(params: dict, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Log-probabilities of the actions, and the value, of a batch of observations."""
    log_probs = jax.nn.log_softmax(mlp(params["actor"], obs))
    return log_probs, mlp(params["critic"], obs)[..., 0]


# -- the training functions ----------------------------------------------------------------------
def make_functions(total_steps: int, hyper: Hyper = HYPER):
    """`init(key) -> runner state`, `update(state, _) -> (state, (return_sum, episodes))`."""
    import gymnax  # here: the A2C baseline imports this module's networks without gymnax

    env, env_params = gymnax.make(ENV_ID)
    obs_size = math.prod(env.observation_space(env_params).shape)
    num_actions = env.action_space(env_params).n
    num_updates = hyper.iterations(total_steps)
    updates_per_iteration = hyper.update_epochs * hyper.num_minibatches

    def schedule(count):  # linear annealing per iteration, as PureJaxRL's linear_schedule
        iteration = count // updates_per_iteration
        return hyper.learning_rate * (1.0 - iteration / num_updates)

    optimizer = optax.chain(
        optax.clip_by_global_norm(hyper.max_grad_norm),
        optax.adam(learning_rate=schedule, eps=hyper.adam_eps),
    )
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key):
        k_params, k_env, key = jax.random.split(key, 3)
        params = init_params(k_params, obs_size, num_actions, hyper.hidden)
        obs, env_state = reset(jax.random.split(k_env, hyper.num_envs), env_params)
        running = jnp.zeros((hyper.num_envs,), jnp.float32)
        return (params, optimizer.init(params), env_state, obs, running, key)

    def env_step(carry, _):
        params, env_state, obs, running, key = carry
        key, k_action, k_env = jax.random.split(key, 3)
        log_probs, value = policy_and_value(params, obs)
        action = jax.random.categorical(k_action, log_probs)
        log_prob = jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0]
        keys = jax.random.split(k_env, hyper.num_envs)
        next_obs, env_state, reward, terminated, truncated, _ = step(
            keys, env_state, action, env_params
        )
        done = jnp.logical_or(terminated, truncated).astype(jnp.float32)
        running = running + reward
        transition = {
            "obs": obs, "action": action, "log_prob": log_prob, "value": value,
            "reward": reward, "done": done, "ended_return": running * done,
        }  # fmt: skip
        return (params, env_state, next_obs, running * (1.0 - done), key), transition

    def advantages(rollout, last_value):
        def back(carry, x):
            gae, next_value = carry
            delta = x["reward"] + hyper.gamma * next_value * (1.0 - x["done"]) - x["value"]
            gae = delta + hyper.gamma * hyper.gae_lambda * (1.0 - x["done"]) * gae
            return (gae, x["value"]), gae

        _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), rollout,
                              reverse=True)  # fmt: skip
        return adv, adv + rollout["value"]

    def loss_fn(params, mb):
        log_probs, value = policy_and_value(params, mb["obs"])
        log_prob = jnp.take_along_axis(log_probs, mb["action"][:, None], axis=1)[:, 0]
        ratio = jnp.exp(log_prob - mb["log_prob"])
        adv = (mb["advantage"] - mb["advantage"].mean()) / (mb["advantage"].std() + 1e-8)
        clipped = jnp.clip(ratio, 1.0 - hyper.clip_coef, 1.0 + hyper.clip_coef)
        pg_loss = jnp.maximum(-adv * ratio, -adv * clipped).mean()
        v_clipped = mb["value"] + jnp.clip(value - mb["value"], -hyper.clip_coef,
                                           hyper.clip_coef)  # fmt: skip
        v_loss = 0.5 * jnp.maximum((value - mb["target"]) ** 2,
                                   (v_clipped - mb["target"]) ** 2).mean()  # fmt: skip
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        return pg_loss + hyper.vf_coef * v_loss - hyper.ent_coef * entropy

    def minibatch_step(carry, mb):
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, mb)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def epoch(carry, key):
        params, opt_state, batch = carry
        order = jax.random.permutation(key, hyper.batch_size)
        minibatches = jax.tree.map(
            lambda x: x[order].reshape(hyper.num_minibatches, hyper.minibatch_size,
                                       *x.shape[1:]),
            batch,
        )  # fmt: skip
        (params, opt_state), _ = jax.lax.scan(minibatch_step, (params, opt_state), minibatches)
        return (params, opt_state, batch), None

    def update(state, _):
        params, opt_state, env_state, obs, running, key = state
        (_, env_state, obs, running, key), rollout = jax.lax.scan(
            env_step, (params, env_state, obs, running, key), None, length=hyper.num_steps
        )
        _, last_value = policy_and_value(params, obs)
        advantage, target = advantages(rollout, last_value)
        batch = {k: rollout[k] for k in ("obs", "action", "log_prob", "value")}
        batch |= {"advantage": advantage, "target": target}
        batch = jax.tree.map(lambda x: x.reshape(hyper.batch_size, *x.shape[2:]), batch)
        key, k_epochs = jax.random.split(key)
        (params, opt_state, _), _ = jax.lax.scan(
            epoch, (params, opt_state, batch), jax.random.split(k_epochs, hyper.update_epochs)
        )
        stats = (rollout["ended_return"].sum(), rollout["done"].sum())
        return (params, opt_state, env_state, obs, running, key), stats

    return init, update, num_updates


# -- the public entry point ----------------------------------------------------------------------
def train(total_steps: int, seed: int, *, target: float | None = None,
          clock_start: float | None = None, chunk: int | None = None,
          hyper: Hyper = HYPER) -> dict[str, Any]:  # fmt: skip
    """Train for `total_steps` env steps (whole iterations); see `Progress.result` for keys.

    `chunk=None`: one jitted call for everything (cannot stop early; the target, if given,
    is still evaluated afterwards, with the time of reaching it unknown). `chunk=K`: K
    iterations per call, stopping after the call in which `target` is met.
    """
    progress = Progress(hyper.batch_size, target=None if chunk is None else target,
                        clock_start=clock_start)  # fmt: skip
    # Building counts as compiling, as for rlsys (whose build imports gymnax and makes the env).
    began = time.perf_counter()
    init, update, num_updates = make_functions(total_steps, hyper)
    key = jax.random.PRNGKey(seed)
    if chunk is None:
        return _train_whole(init, update, num_updates, key, progress, hyper, target, began)

    init_c = jax.jit(init).lower(key).compile()
    state = init_c(key)
    calls: dict[int, Any] = {}

    def compiled(size: int):
        if size not in calls:
            fn = jax.jit(lambda s: jax.lax.scan(update, s, None, length=size))
            calls[size] = fn.lower(state).compile()
        return calls[size]

    compiled(min(chunk, num_updates))
    compile_seconds = time.perf_counter() - began
    run_began = time.perf_counter()
    done = 0
    while done < num_updates:
        size = min(chunk, num_updates - done)
        if size not in calls:  # the last, shorter chunk: its compilation is not run time
            before = time.perf_counter()
            compiled(size)
            extra = time.perf_counter() - before
            compile_seconds += extra
            run_began += extra
        state, (sums, counts) = calls[size](state)
        done += size
        reached = False
        for s, c in zip(sums.tolist(), counts.tolist(), strict=True):
            reached = progress.add(s, c)
            if reached:
                break
        if reached:
            break
    run_seconds = time.perf_counter() - run_began
    return progress.result(iterations=done, compile_seconds=compile_seconds,
                           run_seconds=run_seconds)  # fmt: skip


def _train_whole(init, update, num_updates, key, progress, hyper, target,
                 began: float) -> dict[str, Any]:  # fmt: skip
    def whole(key):
        return jax.lax.scan(update, init(key), None, length=num_updates)

    compiled = jax.jit(whole).lower(key).compile()
    compile_seconds = time.perf_counter() - began
    run_began = time.perf_counter()
    state, (sums, counts) = compiled(key)
    jax.block_until_ready(state)
    run_seconds = time.perf_counter() - run_began
    for s, c in zip(sums.tolist(), counts.tolist(), strict=True):
        progress.add(s, c)
    result = progress.result(iterations=num_updates, compile_seconds=compile_seconds,
                             run_seconds=run_seconds)  # fmt: skip
    if target is not None:  # when it was met, by steps only
        after = Progress(hyper.batch_size, target=target)
        for r in result["iteration_returns"]:
            if after.add(0.0 if math.isnan(r) else r, 0.0 if math.isnan(r) else 1.0):
                result["steps_to_target"] = after.steps_to_target
                break
    return result
