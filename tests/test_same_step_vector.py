"""`SameStepVector` gives exactly what gymnasium's SyncVectorEnv (SAME_STEP) gives."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlsys.envs.same_step_vector import SameStepVector


@pytest.mark.parametrize(("env_id", "max_steps"), [("CartPole-v1", 30), ("Pendulum-v1", 7)])
def test_same_results_as_sync_vector_env_across_resets(env_id: str, max_steps: int) -> None:
    """A short episode limit makes truncations happen; CartPole also terminates."""

    def make() -> gym.Env:
        return gym.make(env_id, max_episode_steps=max_steps)

    ours = SameStepVector([make] * 3)
    theirs = gym.vector.SyncVectorEnv([make] * 3, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = ours.reset(seed=11)
    expected, _ = theirs.reset(seed=11)
    np.testing.assert_array_equal(obs, expected)
    theirs.action_space.seed(3)
    ended = 0
    for _ in range(60):
        action = theirs.action_space.sample()
        obs, reward, terminated, truncated, info = ours.step(action)
        e_obs, e_reward, e_terminated, e_truncated, e_info = theirs.step(action)
        np.testing.assert_array_equal(obs, e_obs)
        np.testing.assert_array_equal(reward, e_reward)
        np.testing.assert_array_equal(terminated, e_terminated)
        np.testing.assert_array_equal(truncated, e_truncated)
        finished = e_info.get("_final_obs", np.zeros(3, bool))
        for k in range(3):
            last = e_info["final_obs"][k] if finished[k] else e_obs[k]
            np.testing.assert_array_equal(info["final_obs"][k], last)
        ended += int(finished.sum())
    assert ended >= 6  # the comparison covered resets
    ours.close()
    theirs.close()
