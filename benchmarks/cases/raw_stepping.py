"""Raw environment stepping: how many CartPole-v1 steps per second with random actions?

No policy, no learning: the ceiling that the simulator side of any training loop runs into.
Every system does the same kind of work — step CartPole-v1 with uniformly random actions,
starting a new episode whenever one ends — and counts one env step per environment
transition. Actions are drawn before the timed region (numpy) or inside the compiled loop
(jax.random), so sampling them costs (almost) nothing in the timed region.

Auto-reset: gymnasium's SyncVectorEnv runs with `autoreset_mode=SAME_STEP`, which resets a
finished sub-environment inside the same `step()` call, like gymnax's `step` and like the
`gymnasium-1` loop (step, then reset if done). Under the default NEXT_STEP mode every
episode end would cost one extra `step()` call that ignores its action, which is not an
environment transition. envpool always resets on the next step; see its system.
"""

from __future__ import annotations

import time

from rlsys.bench import Case, System, child_main, installed, report

ENV_ID = "CartPole-v1"
# Each system's `env_steps` param is the number of env transitions in its timed region,
# (full, --quick): about 1 s of timed work each on a 2-core CPU, so that a full case (5 runs
# per system, imports and compilation included) takes about a minute and a half. The tables
# report rates, so the sizes may differ between systems.


def _size(env_steps: tuple[int, int], quick: bool) -> int:
    full, small = env_steps
    return small if quick else full


def run_gymnasium(*, quick: bool, seed: int, num_envs: int, env_steps: tuple[int, int]) -> None:
    import gymnasium as gym
    import numpy as np

    steps = _size(env_steps, quick) // num_envs
    rng = np.random.default_rng(seed)
    if num_envs == 1:
        env = gym.make(ENV_ID)
        actions = rng.integers(0, 2, size=steps).tolist()  # python ints: what env.step wants
        env.reset(seed=seed)
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        seconds = time.perf_counter() - start
    else:
        env = gym.vector.SyncVectorEnv(
            [lambda: gym.make(ENV_ID) for _ in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        actions = rng.integers(0, 2, size=(steps, num_envs))
        env.reset(seed=seed)
        start = time.perf_counter()
        for action in actions:
            env.step(action)
        seconds = time.perf_counter() - start
    env.close()
    report(env_steps=steps * num_envs, seconds=seconds)


def run_gymnax(*, quick: bool, seed: int, num_envs: int, env_steps: tuple[int, int]) -> None:
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make(ENV_ID)
    # A few calls of one compiled scan: enough steps per call that dispatch is negligible.
    calls = 4
    steps = _size(env_steps, quick) // (calls * num_envs)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def one_step(carry, _):
        key, state, reward_sum = carry
        key, k_action, k_step = jax.random.split(key, 3)
        actions = jax.random.randint(k_action, (num_envs,), 0, 2)
        # step returns (obs, state, reward, terminated, truncated, info) and auto-resets
        keys = jax.random.split(k_step, num_envs)
        _, state, reward, _, _, _ = step(keys, state, actions, params)
        return (key, state, reward_sum + reward.sum()), None

    @jax.jit
    def rollout(key, state):
        (key, state, reward_sum), _ = jax.lax.scan(
            one_step, (key, state, jnp.zeros(())), None, length=steps
        )
        return key, state, reward_sum

    key, k_reset = jax.random.split(jax.random.key(seed))
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)
    # compile_seconds: the first call, which traces and compiles, then runs one call's work.
    start = time.perf_counter()
    key, state, reward_sum = jax.block_until_ready(rollout(key, state))
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(calls):
        key, state, reward_sum = rollout(key, state)
    jax.block_until_ready(reward_sum)
    seconds = time.perf_counter() - start
    report(env_steps=calls * steps * num_envs, seconds=seconds, compile_seconds=compile_seconds)


def run_envpool(*, quick: bool, seed: int, num_envs: int, env_steps: tuple[int, int]) -> None:
    import envpool
    import numpy as np

    steps = _size(env_steps, quick) // num_envs
    env = envpool.make_gymnasium(ENV_ID, num_envs=num_envs, seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, size=(steps, num_envs))
    env.reset()
    start = time.perf_counter()
    # envpool resets a finished env on its next step (ignoring that step's action), like
    # gymnasium's NEXT_STEP mode; those reset steps are counted as env steps here.
    for action in actions:
        env.step(action)
    seconds = time.perf_counter() - start
    env.close()
    report(env_steps=steps * num_envs, seconds=seconds)


CASE = Case(
    name="raw_stepping",
    description=(
        "CartPole-v1 stepped with random actions, no policy: gymnasium (single and "
        "SyncVectorEnv), gymnax (vmap + lax.scan under one jit), envpool."
    ),
    baseline="gymnasium-1",
    systems=[
        System(
            "gymnasium-1",
            run=run_gymnasium,
            params={"num_envs": 1, "env_steps": (100_000, 10_000)},
            description="one gymnasium.make env, reset when an episode ends",
        ),
        System(
            "gymnasium-sync-8",
            run=run_gymnasium,
            params={"num_envs": 8, "env_steps": (100_000, 10_000)},
            description="gymnasium SyncVectorEnv of 8, autoreset_mode SAME_STEP",
        ),
        System(
            "gymnax-jit-8",
            run=run_gymnax,
            params={"num_envs": 8, "env_steps": (1_500_000, 150_000)},
            description="gymnax, 8 envs vmapped, lax.scan inside one jit",
        ),
        System(
            "gymnax-jit-512",
            run=run_gymnax,
            params={"num_envs": 512, "env_steps": (4_000_000, 400_000)},
            description="gymnax, 512 envs vmapped, lax.scan inside one jit",
        ),
        System(
            "envpool-8",
            run=run_envpool,
            params={"num_envs": 8, "env_steps": (400_000, 40_000)},
            description="envpool, 8 envs, synchronous steps",
            available=installed("envpool"),
            missing="envpool extra not installed (pip install 'rlsys[envpool]')",
        ),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
