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


def test_atari_frames_arrive_as_bytes_the_network_scales() -> None:
    """envpool's Atari frames are uint8 (0-255): they stay bytes in the packed step and the
    networks divide them by 255 (`obs_vectors`); before, they reached the CNN as 0-255 floats."""
    import rlsys.rt as rt
    from rlsys.algos.common import obs_vectors

    env = EnvpoolEnv("Pong-v5", num_envs=2, seed=0)
    assert env.obs_shape == (4, 84, 84) and env.obs_dtype == "uint8"
    frames = env.host_reset()
    assert frames.dtype == np.uint8 and frames.max() > 1
    packed = env.host_step(np.zeros(2, "int32"))
    assert packed.dtype == np.uint8 and packed.shape == (2, 2 * frames.shape[1] + 12)
    prog = rt.Program(dims=("i",))
    with prog:
        prog.output("x", obs_vectors(env, rt.const(frames[0].reshape(4, 84, 84), "uint8")))
    scaled = prog.compile(bounds={"I": 1}).run()["x"]
    np.testing.assert_allclose(scaled, frames[0] / 255.0, rtol=1e-6)
