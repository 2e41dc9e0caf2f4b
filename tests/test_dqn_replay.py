"""DQN's replay buffer keeps each observation once, and a truncated episode's final one apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.algos import dqn
from rlsys.algos.config import DQNConfig
from rlsys.cli import main

# MountainCar's episodes are truncated at 200 steps and, early in training, never end
# otherwise: the runs below store many truncations, some of them before an iteration's
# last step (those whose final observation is kept apart).
MOUNTAIN_CAR = dict(env="gymnax:MountainCar-v0", num_envs=4, num_steps=32, total_steps=8192,
                    buffer_size=4096, learning_starts=512, seed=3)  # fmt: skip


class _ObsAndNextObs(dqn._Replay):
    """The replay buffer as a transition per row: obs and next obs side by side (the layout
    before each observation was kept once, as CleanRL's buffer for vector observations)."""

    def __init__(self, prog, cfg, env, slots, rollout) -> None:
        i, step = prog.dims[0], rollout.step
        _, _, B, T = prog.bounds
        rows, shape = cfg.num_envs * cfg.num_steps, env.obs_shape
        pair = rt.concat([rollout.obs.reshape(1, *shape), step.final_obs.reshape(1, *shape)])
        floats = rt.concat([rollout.action.astype("float32").reshape(1), step.reward.reshape(1),
                            step.terminated.reshape(1)])  # fmt: skip
        self.pairs = dqn._ring(prog, slots, pair[i, 0:B, 0:T].reshape(rows, 2, *shape),
                               "replay_obs")  # fmt: skip
        self.floats = dqn._ring(prog, slots, floats[i, 0:B, 0:T].reshape(rows, 3), "replay")
        self.capacity = slots * rows

    def sample(self, picks, flat) -> dict:
        mb = picks.shape[0]
        pairs, floats = self.pairs.take(picks), self.floats.take(picks)

        def column(k: int, batch=floats):
            return batch.slice_axis(k, k + 1, axis=1).reshape(mb, *batch.shape[2:])

        return {"obs": flat(column(0, pairs)), "next_obs": flat(column(1, pairs)),
                "action": column(0), "reward": column(1), "terminated": column(2)}  # fmt: skip


def _losses_and_rings(config: DQNConfig) -> tuple[list[float], dict[str, int]]:
    built = dqn.build_dqn(config)
    rings = {n.name: int(np.prod(n.shape)) * np.dtype(n.dtype).itemsize
             for n in built.program.graph() if n.op == "merge"}  # fmt: skip
    exe = built.program.compile(bounds=built.bounds)
    losses = []
    exe.run(on_iteration=lambda i, out: losses.append(float(out["loss"])))
    return losses, rings


def test_each_observation_is_kept_once_with_the_losses_of_obs_and_next_obs_pairs(
    monkeypatch,
) -> None:
    """The same losses, bit for bit, as a buffer of (obs, next obs) pairs, in about half its
    memory; without the final observations kept apart, truncated transitions would bootstrap
    from the next episode's first observation and the losses would differ."""
    config = DQNConfig(**MOUNTAIN_CAR).validate()
    kept_once, rings = _losses_and_rings(config)
    frames = rings["replay_obs"] + rings["replay_final_obs"]
    monkeypatch.setattr(dqn, "_Replay", _ObsAndNextObs)
    pairs, pair_rings = _losses_and_rings(config)
    assert kept_once == pairs and len(pairs) == 64 and any(pairs)
    # 4,096 transitions of 2 floats: 33 frames per 32 transitions, 1 per env apart
    assert frames == 4096 * (33 / 32 + 1 / 32) * 2 * 4
    assert pair_rings["replay_obs"] == 4096 * 2 * 2 * 4

    monkeypatch.undo()
    original = dqn._Replay.__init__

    def without_finals(self, *args) -> None:
        original(self, *args)
        self.finals = None

    monkeypatch.setattr(dqn._Replay, "__init__", without_finals)
    assert _losses_and_rings(config)[0] != pairs


def test_an_episode_truncated_twice_in_an_iteration_stops_training(tmp_path: Path,
                                                                   capsys) -> None:  # fmt: skip
    """One final observation per env and iteration is kept: an env whose episodes end by
    truncation more than once in an iteration's steps stops the run with one clear line."""
    out = tmp_path / "run"
    argv = ["train", "dqn", "--env", "gymnax:MountainCar-v0", "--num-envs", "1",
            "--num-steps", "512", "--total-steps", "2048", "--learning-starts", "512",
            "--train-frequency", "4", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "truncated episodes twice in 512 steps" in err and "--num-steps" in err
    assert "Traceback" not in err
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("steps", [1, 2])
def test_short_iterations_store_and_learn(steps: int) -> None:
    """With one step per iteration nothing is kept apart (the frame after the step is its
    final observation); with two, the first step's truncation is."""
    config = DQNConfig(**{**MOUNTAIN_CAR, "num_steps": steps, "total_steps": 2048,
                          "train_frequency": 1, "learning_starts": 256}).validate()  # fmt: skip
    losses, rings = _losses_and_rings(config)
    assert ("replay_final_obs" in rings) == (steps > 1)
    assert len(losses) == 2048 // (4 * steps) and all(np.isfinite(losses)) and any(losses)
