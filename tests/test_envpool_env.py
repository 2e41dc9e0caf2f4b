"""envpool host environments: same-step resets, and PPO through `rlsys train`."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from rlsys.cli import main
from rlsys.envs import EnvpoolEnv

pytest.importorskip("envpool", reason="envpool is not installed (pip install 'rlsys[envpool]')")


def test_finished_episodes_restart_in_the_same_step() -> None:
    env = EnvpoolEnv("CartPole-v1", num_envs=3, seed=0)
    assert (env.obs_shape, env.num_actions, env.max_episode_steps) == ((4,), 2, 500)
    obs = env.host_reset()
    assert obs.shape == (3, 4) and np.all(np.abs(obs) <= 0.05)  # CartPole starts near 0
    pushes = np.ones(3, "int32")  # always right: every pole falls within ~10 steps
    ended = np.zeros(3, bool)
    for _ in range(30):
        packed = env.host_step(pushes)
        obs, reward, terminated, truncated, final = np.split(packed, [4, 5, 6, 7], axis=1)
        done = terminated[:, 0] > 0
        assert np.all(reward == 1.0) and np.all(truncated == 0.0)
        # A finished episode's last observation has the pole past 12 degrees; its next
        # observation is already the first one of a new episode.
        assert np.all(np.abs(final[done, 2]) > 0.2094)
        assert np.all(np.abs(obs[done]) <= 0.05)
        assert np.array_equal(obs[~done], final[~done])
        ended |= done
    assert ended.all()


def test_ppo_runs_on_envpool_cartpole(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "envpool:CartPole-v1", "--total-steps", "512",
            "--num-envs", "4", "--num-steps", "32", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    with (out / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    returns = [float(r["episode_return"]) for r in rows if int(r["episodes"])]
    assert returns and all(5 <= r <= 500 for r in returns)  # CartPole episode lengths


def test_an_unknown_envpool_id_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["train", "ppo", "--env", "envpool:NoSuchEnv-v0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown envpool environment 'NoSuchEnv-v0'" in err and "Traceback" not in err
