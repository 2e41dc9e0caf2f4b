"""`rlsys profile -- python SCRIPT` on unmodified RL scripts: the operations and categories
the collectors give each kind of program (gymnasium, JAX, CleanRL-style torch, SB3 with
worker processes, `rlsys train`)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from rlsys.cli import main
from rlsys.profiler.summary import load_summary

ROOT = Path(__file__).resolve().parents[1]
THREE = ("inference", "simulation", "backpropagation")

SPINNING_ENV = """
    import time
    import gymnasium as gym
    import numpy as np

    class Spinning(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            until = time.perf_counter() + 0.001
            while time.perf_counter() < until:
                pass
            return np.zeros(1, np.float32), 0.0, False, False, {}

    env = gym.wrappers.TimeLimit(Spinning(), 1000)
    env.reset(seed=0)
    for _ in range(100):
        env.step(0)
"""

ENVPOOL_LOOP = """
    import envpool
    import numpy as np

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4)
    env.reset()
    for _ in range(100):
        env.step(np.zeros(4, dtype=np.int32))
"""

JAX_LOOP = """
    import gymnasium as gym
    import jax
    import jax.numpy as jnp
    import numpy as np

    def policy(params, obs):
        return jnp.tanh(obs @ params["w1"]) @ params["w2"]

    @jax.jit
    def act(params, obs):
        return jnp.argmax(policy(params, obs))

    def loss(params, obs):
        return jnp.mean(policy(params, obs) ** 2)

    @jax.jit
    def update(params, obs):
        grads = jax.grad(loss)(params, obs)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    key = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(key, (4, 32)), "w2": jax.random.normal(key, (32, 2))}
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    batch = []
    for step in range(128):
        obs, reward, terminated, truncated, _ = env.step(int(act(params, obs)))
        batch.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
        if len(batch) == 32:
            params = jax.block_until_ready(update(params, np.stack(batch)))
            batch = []
"""

CLEANRL_STYLE = f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from benchmarks.baselines import Hyper, cleanrl_style_ppo

    hyper = Hyper(num_envs=4, num_steps=32, update_epochs=2, num_minibatches=2)
    cleanrl_style_ppo.train(2 * hyper.batch_size, 0, hyper=hyper)
"""

SB3_SUBPROC = """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    if __name__ == "__main__":
        torch.set_num_threads(1)
        env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv)
        model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, device="cpu",
                    seed=0)
        model.learn(256)
        env.close()
"""


def profile(tmp_path: Path, source: str) -> dict:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "profile"
    assert main(["profile", "--quiet", "--out", str(out), "--", sys.executable, str(script)]) == 0
    return load_summary(out)


def assert_three_operations_with_backend(summary: dict) -> None:
    operations = summary["operations"]
    for name in THREE:
        assert operations[name]["calls"] > 0 and operations[name]["seconds"] > 0, name
    assert operations["simulation"]["categories"]["simulator"] > 0
    for name in ("inference", "backpropagation"):
        assert operations[name]["categories"]["backend"] > 0, name


def test_an_environment_spinning_1ms_per_step_is_simulation(tmp_path: Path) -> None:
    simulation = profile(tmp_path, SPINNING_ENV)["operations"]["simulation"]
    assert simulation["calls"] == 101  # 100 steps and the reset; the wrapper's are inside
    assert simulation["categories"]["simulator"] >= 0.95 * simulation["seconds"]
    assert simulation["events"]["simulator"] == 101  # one interval per outermost call


def test_envpool_steps_are_simulation(tmp_path: Path) -> None:
    pytest.importorskip("envpool")
    simulation = profile(tmp_path, ENVPOOL_LOOP)["operations"]["simulation"]
    assert simulation["calls"] == 101  # step's own send/recv are inside it
    assert simulation["categories"]["simulator"] > 0


def test_a_plain_jax_loop(tmp_path: Path) -> None:
    summary = profile(tmp_path, JAX_LOOP)
    assert_three_operations_with_backend(summary)
    operations = summary["operations"]
    assert operations["inference"]["calls"] == 128  # one per `act`: jitted, no gradient
    assert operations["backpropagation"]["calls"] == 4  # one per `update`: it took a grad
    transitions = summary["total"]["transitions"]
    assert transitions["python->backend"] > 0 and transitions["python->simulator"] > 0


def test_a_cleanrl_style_torch_ppo(tmp_path: Path) -> None:
    summary = profile(tmp_path, CLEANRL_STYLE)
    assert_three_operations_with_backend(summary)
    # 2 iterations x 2 epochs x 2 minibatches: one backward and one Adam step each, nested
    # calls (autograd.backward inside Tensor.backward) not counted again.
    assert summary["operations"]["backpropagation"]["calls"] == 2 * 2 * 2 * 2


def test_sb3_ppo_with_subprocess_environments(tmp_path: Path) -> None:
    summary = profile(tmp_path, SB3_SUBPROC)
    assert_three_operations_with_backend(summary)
    processes = summary["processes"]
    assert len(processes) >= 3  # the script and its two environment workers
    stepping = [p for p in processes if p["operations"].get("simulation", {}).get("calls")]
    assert len(stepping) >= 3  # the workers step their environments, the script the VecEnv


def test_rlsys_train_on_a_host_environment(tmp_path: Path) -> None:
    """About 10 s (20 s on a loaded 2-core machine), mostly compiling the PPO program."""
    out = tmp_path / "profile"
    command = [sys.executable, "-m", "rlsys.cli", "train", "ppo", "--env",
               "gymnasium:CartPole-v1", "--total-steps", "2048", "--quiet",
               "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(["profile", "--quiet", "--out", str(out), "--", *command]) == 0
    operations = load_summary(out)["operations"]
    for name in THREE:
        assert operations[name]["calls"] > 0 and operations[name]["seconds"] > 0, name
    assert operations["inference"]["calls"] > operations["backpropagation"]["calls"]
