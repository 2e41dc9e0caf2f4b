"""gymnax environments as ops (`rlsys/envs/gymnax_env.py`): the step split in two ops, the
reset drawn from the key alone, computes what gymnax's own `step` computes."""

from __future__ import annotations

import csv

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.cli import main
from rlsys.envs import GymnaxEnv


def _random_rollout(split_reset: bool) -> dict[str, np.ndarray]:
    """Random actions in 4 CartPoles for 200 steps: every step's parts."""
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        env = GymnaxEnv("CartPole-v1")
        env._split_reset = split_reset
        key = rt.random.key(0).fold_in(b).fold_in(t)
        state = rt.placeholder(shape=(env.state_size,), name="state")
        first = env.reset(rt.random.key(1).fold_in(b))
        action = (rt.random.uniform(key.fold_in(1)) * 2.0).astype("int32")
        step = env.step(key, state, action)
        state[b, 0] = first.state
        state[b, t + 1] = step.state
        for part in ("obs", "state", "reward", "terminated", "truncated", "final_obs"):
            prog.output(part, getattr(step, part))
    return prog.compile(bounds={"B": 4, "T": 200}).run()


def test_the_split_step_computes_gymnax_step() -> None:
    assert GymnaxEnv("CartPole-v1")._split_reset  # CartPole keeps gymnax's `step`
    split, whole = _random_rollout(True), _random_rollout(False)
    assert split["terminated"].sum() >= 20  # episodes ended, and were reset, many times
    assert split.keys() == whole.keys()
    for part, values in split.items():
        np.testing.assert_allclose(values, whole[part], rtol=1e-6, atol=1e-6, err_msg=part)


@pytest.mark.parametrize("env_id", ["Catch-bsuite", "FourRooms-misc", "FrozenLake-misc"])
def test_integer_states_and_a_scalar_observation_train(env_id: str, tmp_path) -> None:
    """The program keeps a state as float32: one of integers only (Catch, FourRooms: every
    leaf an int32) is cast back before gymnax reads it. FrozenLake's observation is a number
    (the cell), read as a vector of one."""
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", f"gymnax:{env_id}", "--total-steps", "1024",
            "--num-envs", "4", "--num-steps", "32", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == 8 and all(np.isfinite(float(r["loss"])) for r in rows)
    assert main(["eval", str(out), "--episodes", "2", "--max-steps", "50"]) == 0
