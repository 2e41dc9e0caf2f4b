"""The trivial environment: its dynamics against a plain Python loop, and training on it."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.cli import main
from rlsys.envs import TrivialEnv

EPISODE = 5


def _rollout(actions: np.ndarray, backend: str) -> dict[str, np.ndarray]:
    """Step TrivialEnv("3x2:5") with the given actions (B, T, 1) from its reset."""
    env = TrivialEnv(f"3x2:{EPISODE}")
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        action = rt.input("action", shape=(1,))
        key = rt.random.key(0).fold_in(b).fold_in(t)
        first = env.reset(rt.random.key(1).fold_in(b))
        state = rt.placeholder(shape=(2,), domain=(b, t))
        obs = rt.placeholder(shape=env.obs_shape, domain=(b, t))
        step = env.step(key, state, action)
        for tensor, start, following in [(state, first.state, step.state),
                                         (obs, first.obs, step.obs)]:  # fmt: skip
            tensor[b, 0] = start
            tensor[b, t + 1] = following
        for name in ("reward", "terminated", "truncated", "done", "final_obs"):
            prog.output(name, getattr(step, name))
        prog.output("obs", obs)
    B, T = actions.shape[:2]
    return prog.compile(bounds={"B": B, "T": T}, backend=backend).run({"action": actions})


@pytest.mark.parametrize("backend", ["ref", "jax"])
def test_trivial_env_matches_a_python_loop(backend: str) -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-3, 3, size=(2, 12, 1)).astype("float32")
    out = _rollout(actions, backend)
    assert out["obs"].shape == (2, 12, 3, 2) and out["final_obs"].shape == (2, 12, 3, 2)
    for b in range(2):
        position = out["obs"][b, 0, 0, 0]
        assert -1.0 <= position <= 1.0
        for t in range(12):
            assert np.all(out["obs"][b, t] == out["obs"][b, t, 0, 0])  # broadcast state
            moved = np.float32(position + np.clip(actions[b, t, 0], -1.0, 1.0))
            last = (t + 1) % EPISODE == 0  # every episode lasts exactly EPISODE steps
            assert out["reward"][b, t] == pytest.approx(-abs(moved), abs=1e-6)
            assert np.allclose(out["final_obs"][b, t], moved, atol=1e-6)
            assert out["truncated"][b, t] == out["done"][b, t] == float(last)
            assert out["terminated"][b, t] == 0.0
            if t + 1 < 12:
                position = out["obs"][b, t + 1, 0, 0]
                if not last:  # a new episode starts from a random position instead
                    assert position == pytest.approx(moved, abs=1e-6)


@pytest.mark.parametrize("env_id", ["", "64x", "0", "8:0", "a:b", "4:5:6"])
def test_a_bad_trivial_id_is_one_line_and_exit_2(env_id: str, tmp_path: Path, capsys) -> None:
    argv = ["train", "a2c", "--env", f"trivial:{env_id}", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "expected trivial:SHAPE[:STEPS]" in err and "Traceback" not in err


def test_a2c_trains_on_the_trivial_env(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["train", "a2c", "--env", "trivial:4x4:8", "--total-steps", "512", "--num-envs",
            "4", "--num-steps", "16", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == 8
    # 4 envs x 16 steps = 8 episodes of 8 steps per iteration; each step loses at most
    # |position| + 1 <= 8 + 1 (8 steps of at most 1 from within [-1, 1]).
    assert all(int(r["episodes"]) == 8 for r in rows)
    returns = [float(r["episode_return"]) for r in rows]
    assert all(-8 * 9 <= r < 0 for r in returns)


def test_the_policy_gradient_does_not_flow_through_the_sampled_action() -> None:
    """d log_prob(a) / d mean of a sampled Gaussian action is the score (a - mean) / std^2,
    not 0 as it would be if the sample were differentiated as mean + std * noise."""
    from rlsys.algos.common import acting_actor_critic
    from rlsys.algos.config import A2CConfig

    cfg = A2CConfig(env="trivial:4:8", num_envs=4, num_steps=8, hidden_size=8, hidden_layers=1)
    env = TrivialEnv(cfg.env_id)
    prog = rt.Program(dims=("i", "b", "t"))
    i = prog.dims[0]
    _, B, T = prog.bounds
    with prog:
        model, params, rollout = acting_actor_critic(prog, env, cfg)
        loss = rollout.policy.log_prob(rollout.action)[i, 0:B, 0:T].mean()
        grad = rt.grad(loss, params)
        params[i + 1] = params[i] - 0.0 * grad
        prog.output("grad", grad)
    out = prog.compile(bounds={"I": 1, "B": 4, "T": 8}).run()["grad"][0]
    actor, log_std = out[: model.cuts[0]], out[model.cuts[1] :]
    assert np.abs(actor).max() > 1e-4  # the mean's weights get a gradient
    assert log_std[0] != pytest.approx(-1.0, abs=1e-3)  # mean(z^2 - 1), not -1
