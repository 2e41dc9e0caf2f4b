"""Atari (ale-py) and MuJoCo tasks through `gymnasium:<id>`, and what their large
observations ask of the compiler and of `rlsys eval`."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlsys.cli import main
from rlsys.envs import GymnasiumEnv, atari

PONG = "ALE/Pong-v5"
FRAMES = (atari.FRAME_STACK, 84, 84)
NATURE_TORSO = 1_684_128  # the Nature CNN's convolutions and dense layer (test_cnn.py)


def _parameter_vectors(out: Path) -> set[int]:
    """Sizes of the one-row vectors a checkpoint carries (parameters, optimizer moments)."""
    with np.load(out / "checkpoint.npz") as saved:
        return {saved[k].shape[1] for k in saved.files if saved[k].ndim == 2}


def _metrics(out: Path) -> list[dict]:
    with (out / "metrics.csv").open() as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def ale():
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install 'rlsys[atari]')")
    pytest.importorskip("cv2", reason="OpenCV is not installed (pip install 'rlsys[atari]')")


def test_atari_frames_come_preprocessed_and_stacked(ale) -> None:
    env = GymnasiumEnv(PONG, num_envs=2, seed=0)
    assert (env.obs_shape, env.num_actions) == (FRAMES, 6)
    assert env.max_episode_steps == 108_000 // atari.FRAME_SKIP  # the game's frame limit
    obs = env.host_reset()
    size = math.prod(FRAMES)
    # Frames stay bytes (0-255); the networks scale them (`obs_vectors`).
    assert env.obs_dtype == "uint8" and obs.dtype == np.uint8
    assert obs.shape == (2, size) and obs.max() > 1
    packed = env.host_step(np.zeros(2, "int64"))  # NOOP
    assert packed.dtype == np.uint8 and packed.shape == (2, 2 * size + 12)
    # reward, terminated, truncated: a float32's 4 bytes each, between the two frames
    reward, terminated, truncated = packed[:, size : size + 12].copy().view(np.float32).T
    assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}  # Pong's rewards, unclipped
    assert not terminated.any() and not truncated.any()


def test_ale_py_s_older_ids_are_atari_games_too(ale) -> None:
    """`PongNoFrameskip-v4` is registered by ale-py, not gymnasium: known once asked for."""
    assert atari.is_atari("PongNoFrameskip-v4") and not atari.is_atari("CartPole-v1")
    env = GymnasiumEnv("PongNoFrameskip-v4", num_envs=1, seed=0)
    assert (env.obs_shape, env.num_actions) == (FRAMES, 6)
    assert env.host_reset().shape == (1, math.prod(FRAMES))


def test_ppo_trains_and_evaluates_on_pong(ale, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", f"gymnasium:{PONG}", "--total-steps", "64",
            "--num-envs", "2", "--num-steps", "16", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = _metrics(out)
    assert len(rows) == 2 and all(np.isfinite(float(r["loss"])) for r in rows)
    # --network auto took the CNN: torso, actor head (512 -> 6), critic head (512 -> 1)
    assert NATURE_TORSO + 513 * 6 + 513 in _parameter_vectors(out)
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "1", "--max-steps", "40"]) == 0
    line = capsys.readouterr().out
    assert "ppo on gymnasium:ALE/Pong-v5: mean return" in line
    assert "over 1 episode (greedy actions)" in line


def test_dqn_trains_and_evaluates_on_pong_through_the_cnn(ale, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["train", "dqn", "--env", f"gymnasium:{PONG}", "--total-steps", "64",
            "--num-envs", "2", "--num-steps", "16", "--buffer-size", "64",
            "--learning-starts", "32", "--minibatch-size", "8", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = _metrics(out)
    assert len(rows) == 2 and np.isfinite(float(rows[-1]["loss"]))
    assert NATURE_TORSO + 513 * 6 in _parameter_vectors(out)  # torso and Q-head (512 -> 6)
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "1", "--max-steps", "40"]) == 0
    assert "dqn on gymnasium:ALE/Pong-v5: mean return" in capsys.readouterr().out


def _small_pong_dqn():
    """DQN on Pong, built (not compiled): 2 envs x 16 steps, a ring of 2 slots."""
    from rlsys.algos.config import DQNConfig
    from rlsys.algos.dqn import build_dqn

    return build_dqn(DQNConfig(env=f"gymnasium:{PONG}", num_envs=2, num_steps=16,
                               total_steps=64, buffer_size=64, learning_starts=32,
                               minibatch_size=8).validate())  # fmt: skip


def test_dqn_keeps_atari_frames_as_bytes_in_its_replay_buffer(ale) -> None:
    """Observations go to rings of their own in the env's dtype: Pong's frames take a byte
    each there, a quarter of a float's, and each is kept once (`dqn._Replay`: a 10,000-step
    buffer of Pong holds 10,000 x 34 / 32 frame stacks, 300 MB, not 2 x 10,000 as floats,
    2.26 GB)."""
    rings = {n.name: n for n in _small_pong_dqn().program.graph() if n.op == "merge"}
    frames, finals, floats = rings["replay_obs"], rings["replay_final_obs"], rings["replay"]
    assert (frames.dtype, frames.shape) == ("uint8", (2 * 34, *FRAMES))  # 2 slots of 2 x 17
    assert (finals.dtype, finals.shape) == ("uint8", (2 * 2, *FRAMES))  # 1 per env and slot
    assert (floats.dtype, floats.shape) == ("float32", (64, 4))  # action, reward, ends


def test_dqn_runs_the_target_network_one_update_at_a_time(ale) -> None:
    """The TD targets of the U updates of an iteration do not depend on u (the target network
    is fixed through them), so the plan vectorized them over u: every update's next frames
    and the CNN's activations over them, held at once (0.9 GB for Pong). The targets are
    small, but they come from large values that only the update loop reads, so they move
    into the loop with them (`schedule._sink_inputs`): one update's frames at a time."""
    from rlsys.compiler.pipeline import run_pipeline
    from rlsys.compiler.schedule import build_schedule

    graph, _ = run_pipeline(_small_pong_dqn().program.graph())
    schedule = build_schedule(graph, graph.nodes)
    u = graph.dims[1]
    convs = [n for n in graph if n.op == "conv2d" and u in n.domain]  # not the acting ones
    assert len(convs) == 6  # the online and the target network's three layers
    assert all(u in schedule.loops_of.get(n.id, ()) for n in convs)  # in the loop over u


def test_an_atari_evaluation_keeps_no_observation_per_step(ale, tmp_path, staged_loops) -> None:
    """Evaluation needs each step's reward and end of episode; the observation the last step
    returns (read after the loop, where the next iteration would start) comes from the
    loop's carry. So no stack holds a frame per step, and an episode up to the game's 27,000
    steps takes no more memory than a short one (before, two of 13,380 steps took 14.5 GiB)."""
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", f"gymnasium:{PONG}", "--total-steps", "32",
            "--num-envs", "2", "--num-steps", "16", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    staged_loops.clear()  # training's
    assert main(["eval", str(out), "--episodes", "2", "--max-steps", "20"]) == 0
    (acting,) = [loop for loop in staged_loops if loop.stack_shapes]
    frame_bytes = 4 * math.prod(FRAMES)
    rows = {m: math.prod(s.shape[1:]) * s.dtype.itemsize for m, s in acting.stack_shapes.items()}
    assert rows and all(row < frame_bytes for row in rows.values()), rows
    assert acting.last_steps  # the returned observation, kept from the carry


def test_a_process_s_first_game_prints_no_emulator_banner(ale) -> None:
    """ale-py prints its banner once per process, at the first game: in a fresh one."""
    code = "from rlsys.envs import atari; atari.register(); atari.make('ALE/Pong-v5').reset()"
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert "Stella" not in made.stdout + made.stderr


def test_atari_without_ale_py_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    argv = ["train", "ppo", "--env", f"gymnasium:{PONG}", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Atari games need ale-py: pip install 'rlsys[atari]'" in err
    assert "Traceback" not in err


def test_a_host_loop_slices_its_large_step_outputs_inside(ale) -> None:
    """The reward and flags of a packed Atari step are sliced in the acting loop, so the
    loop keeps those slices, not every step's two frame stacks (`schedule._sink_slices`)."""
    from rlsys.algos.config import PPOConfig
    from rlsys.algos.ppo import build_ppo

    config = PPOConfig(env=f"gymnasium:{PONG}", num_envs=2, num_steps=8, total_steps=32,
                       num_minibatches=2).validate()  # fmt: skip
    built = build_ppo(config)
    rows = built.program.compile(bounds=built.bounds).explain(file=io.StringIO())
    step = next(r for r in rows if r.op == "gymnasium_step")
    readers = [r for r in rows if r.op == "slice_axis" and r.decisions == step.decisions]
    assert len(readers) >= 4  # obs, reward, terminated, truncated (and the final obs)


def test_ppo_runs_on_mujoco_with_continuous_actions(tmp_path: Path) -> None:
    pytest.importorskip("mujoco", reason="MuJoCo is not installed (pip install 'rlsys[mujoco]')")
    env = GymnasiumEnv("HalfCheetah-v5", num_envs=2, seed=0)
    assert (env.obs_shape, env.action_shape, env.discrete) == ((17,), (6,), False)
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "gymnasium:HalfCheetah-v5", "--total-steps", "128",
            "--num-envs", "2", "--num-steps", "32", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = _metrics(out)
    assert len(rows) == 2 and all(np.isfinite(float(r["loss"])) for r in rows)


def test_mujoco_warnings_are_python_warnings_not_printed(capfd) -> None:
    """MuJoCo's C library prints a warning for every model it compiles (gymnasium's MuJoCo
    models warn of `settotalmass` once per env); making a MuJoCo env routes them to Python's
    `warnings`, which show each message once."""
    mujoco = pytest.importorskip("mujoco", reason="MuJoCo is not installed")
    GymnasiumEnv("HalfCheetah-v5", num_envs=2, seed=0)
    deprecated = ('<mujoco><compiler settotalmass="1"/>'
                  '<worldbody><geom size="1"/></worldbody></mujoco>')  # fmt: skip
    with pytest.warns(RuntimeWarning, match="MuJoCo: .*settotalmass"):
        mujoco.MjModel.from_xml_string(deprecated)
    assert "settotalmass" not in capfd.readouterr().out
