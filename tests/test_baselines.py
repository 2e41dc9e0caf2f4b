"""Smoke tests of the PPO baselines of benchmarks/cases/ppo_cartpole.py (not of learning).

Each baseline trains 2 iterations (2 x 8 envs x 128 steps) and must return finite numbers
under the shared keys; the time-to-target bookkeeping is tested on its own.
"""

from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path
from types import ModuleType

import pytest

from rlsys.bench.case import load_case

ROOT = Path(__file__).resolve().parents[1]
STEPS = 2 * 1024  # two iterations


@pytest.fixture
def baselines(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))

    def load(name: str) -> ModuleType:
        return importlib.import_module(f"benchmarks.baselines{'.' + name if name else ''}")

    return load


def _check(result: dict, keys: frozenset[str], iterations: int = 2) -> None:
    assert set(result) == keys
    assert result["iterations"] == iterations
    assert result["env_steps"] == iterations * 1024
    assert len(result["iteration_returns"]) == iterations
    # a random policy ends CartPole episodes within ~20 steps: every iteration has some
    assert all(0.0 < r <= 500.0 for r in result["iteration_returns"])
    assert 0.0 < result["final_return"] <= 500.0
    for key in ("compile_seconds", "run_seconds"):
        assert math.isfinite(result[key]) and result[key] >= 0.0
    assert result["run_seconds"] > 0.0
    assert result["steps_to_target"] is None and result["time_to_target_s"] is None


def test_progress_meets_the_target_over_the_last_ten_iterations_with_episodes(baselines):
    progress = baselines("").Progress(batch_size=1024, target=475.0, clock_start=0.0)
    for _ in range(9):
        assert not progress.add(500.0 * 2, 2)
    assert not progress.add(0.0, 0)  # no episode ended: NaN, not counted
    assert math.isnan(progress.returns[-1])
    assert progress.add(480.0, 1)  # the 10th iteration with episodes
    assert progress.steps_to_target == 11 * 1024
    assert progress.time_to_target_s > 0.0
    assert progress.window_mean() == pytest.approx((9 * 500.0 + 480.0) / 10)
    assert progress.add(0.0, 1)  # stays reached


def test_purejaxrl_style_runs_whole_and_chunked(baselines):
    ppo = baselines("purejaxrl_style_ppo")
    keys = baselines("").RESULT_KEYS
    whole = ppo.train(STEPS, seed=0)
    _check(whole, keys)
    chunked = ppo.train(STEPS, seed=0, chunk=1, target=475.0)
    _check(chunked, keys)
    # the same computation, one jit or one jitted call per iteration
    assert chunked["iteration_returns"] == pytest.approx(whole["iteration_returns"], rel=1e-5)


def test_cleanrl_style_runs_and_is_deterministic(baselines):
    ppo = baselines("cleanrl_style_ppo")
    keys = baselines("").RESULT_KEYS
    first = ppo.train(STEPS, seed=1, target=475.0)
    _check(first, keys)
    assert ppo.train(STEPS, seed=1)["iteration_returns"] == first["iteration_returns"]


def test_sb3_runs(baselines):
    pytest.importorskip("stable_baselines3")
    result = baselines("sb3_ppo").train(STEPS, seed=0, target=475.0)
    _check(result, baselines("").RESULT_KEYS)


@pytest.mark.parametrize("name", ["cleanrl_style_ppo", "sb3_ppo"])
def test_the_torch_baselines_run_atari_through_the_nature_cnn(baselines, name: str):
    """One iteration of 2 envs x 32 steps on Pong (the `ppo_atari` case); Pong's rewards are
    -1, 0 or 1 per step, and no episode ends that soon."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    pytest.importorskip("stable_baselines3")
    from benchmarks.baselines import Hyper

    hyper = Hyper(num_envs=2, num_steps=32)
    result = baselines(name).train(64, seed=0, hyper=hyper, env_id="ALE/Pong-v5")
    assert result["iterations"] == 1 and result["env_steps"] == 64
    assert math.isnan(result["final_return"]) and result["run_seconds"] > 0.0


def test_the_case_has_the_four_systems_and_sb3_as_baseline():
    case = load_case(ROOT / "benchmarks" / "cases", "ppo_cartpole")
    assert case.system_names == ["rlsys-ppo", "purejaxrl-style", "cleanrl-style", "sb3"]
    assert case.baseline == "sb3"


# -- the A2C baselines of benchmarks/cases/scaling_sweep.py and their trivial env -------------
def _rlsys_trivial_rollout(actions, starts_shape: tuple[int, ...], episode: int) -> dict:
    """rlsys's TrivialEnv stepped with `actions` (B, T, 1) from its own reset."""
    import rlsys.rt as rt
    from rlsys.envs import TrivialEnv

    env = TrivialEnv(f"{'x'.join(map(str, starts_shape))}:{episode}")
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    with prog:
        action = rt.input("action", shape=(1,))
        first = env.reset(rt.random.key(1).fold_in(b))
        state = rt.placeholder(shape=(2,), domain=(b, t))
        obs = rt.placeholder(shape=env.obs_shape, domain=(b, t))
        step = env.step(rt.random.key(0).fold_in(b).fold_in(t), state, action)
        for tensor, start, following in [(state, first.state, step.state),
                                         (obs, first.obs, step.obs)]:  # fmt: skip
            tensor[b, 0] = start
            tensor[b, t + 1] = following
        for name in ("reward", "terminated", "truncated", "final_obs", "obs"):
            prog.output(name, getattr(step, name) if name != "obs" else obs)
    B, T = actions.shape[:2]
    return prog.compile(bounds={"B": B, "T": T}).run({"action": actions})


def test_the_baselines_trivial_envs_step_like_rlsys(baselines):
    import jax
    import jax.numpy as jnp
    import numpy as np

    numpy_env = baselines("trivial_env_numpy")
    State = baselines("trivial_env_jax").State
    B, T, episode = 3, 12, 5
    actions = np.random.default_rng(0).uniform(-3, 3, (B, T, 1)).astype("float32")
    ours = _rlsys_trivial_rollout(actions, (4,), episode)
    host = numpy_env.TrivialVectorEnv(B, (4,), episode, seed=0)
    host.reset()
    _, jax_step = baselines("trivial_env_jax").make((4,), episode)
    jax_step = jax.jit(jax.vmap(jax_step))
    state = State(jnp.zeros(B), jnp.zeros(B, jnp.int32))
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    for t in range(T):
        position = ours["obs"][:, t, 0]  # start (or restart) both where rlsys is
        host.position = position.copy()
        state = State(jnp.asarray(position), state.steps)
        obs, reward, terminated, truncated, info = host.step(actions[:, t])
        out = jax_step(keys, state, jnp.asarray(actions[:, t]))
        state = out.state
        for got_obs, got in [(obs, (reward, terminated, truncated, info["final_obs"])),
                             (np.asarray(out.obs), (out.reward, out.terminated, out.truncated,
                                                    out.final_obs))]:  # fmt: skip
            np.testing.assert_array_equal(got[0], ours["reward"][:, t])
            np.testing.assert_array_equal(got[1], ours["terminated"][:, t] > 0)
            np.testing.assert_array_equal(got[2], ours["truncated"][:, t] > 0)
            np.testing.assert_array_equal(got[3], ours["final_obs"][:, t])
            assert got_obs.shape == (B, 4) and got_obs.dtype == np.float32
            assert np.all(got_obs == got_obs[:, :1]) and np.all(np.abs(got_obs) <= 1.0 + 3 * T)
            if (t + 1) % episode:  # within an episode the next obs is the moved position
                np.testing.assert_array_equal(got_obs, ours["final_obs"][:, t])
            else:  # a fresh episode from uniform(-1, 1)
                assert np.all(np.abs(got_obs) <= 1.0)
    assert ours["truncated"].sum() == B * (T // episode)


@pytest.mark.parametrize("name", ["cleanrl_style_a2c", "purejaxrl_style_a2c"])
def test_the_a2c_baselines_run_an_iteration(baselines, name: str):
    setup = baselines("").A2CSetup(num_envs=4, episode_length=8, obs_size=3, hidden=8, layers=3)
    result = baselines(name).train(setup, iterations=2, seed=1)
    assert len(result["iteration_seconds"]) == len(result["mean_returns"]) == 2
    assert all(s > 0 for s in result["iteration_seconds"]) and result["setup_seconds"] >= 0
    # an episode of 8 steps from [-1, 1] with moves of at most 1 loses at most 8 * 9
    assert all(-72.0 <= r < 0.0 for r in result["mean_returns"])
    again = baselines(name).train(setup, iterations=2, seed=1)
    assert again["mean_returns"] == pytest.approx(result["mean_returns"], rel=1e-5)


def test_the_scaling_sweep_varies_one_factor_at_a_time_and_pivots_its_table():
    from rlsys.bench.runner import CaseRun
    from rlsys.bench.table import Summary, markdown

    case = load_case(ROOT / "benchmarks" / "cases", "scaling_sweep")
    assert len(case.systems) == 36 and case.baseline == "cleanrl@base"
    base = {"envs": 256, "episode": 250, "width": 64, "layers": 2}
    for system in case.systems:
        point = system.name.split("@")[1]
        factors = inspect.getmodule(system.run).grid()[point]
        assert sum(factors[k] != v for k, v in base.items()) == (point != "base")
    seconds = {"rlsys": 0.1, "auto": 0.125, "purejaxrl": 0.2, "cleanrl": 1.0}
    rows = [Summary(system=s.name, runs=1, failed=0,
                    metrics={"iter_s": seconds[s.name.split("@")[0]], "above_idle_mib": 50.0,
                             "peak_rss_mib": 300.0,
                             "devices": 1.0 if s.name.startswith("auto") else 2.0})
            for s in case.systems if not s.name.endswith("@layers=4")]  # fmt: skip
    run = CaseRun(case, case.system_names, {}, reps=1, quick=True, seed=0)
    text = markdown(run, rows, command="rlsys bench run scaling_sweep", machine={})
    pivot = [line for line in text.splitlines() if line.startswith("| base |")]
    memory = " | ".join(["50 (300)"] * 4)
    # the point's row, then its rates: 3.719 GFLOP over each time, and over cleanrl's / 5
    assert pivot == ["| base | 256 | 250 | 64 | 2 | 0.100 | 0.125 | 0.200 | 1.000 | 10.00× | "
                     f"2.00× | 8.00× | 1.60× | {memory} | 2 | 1 |",
                     "| base | 3.72 | 18.6 | 37.2 | 29.8 | 18.6 | 3.7 |"]  # fmt: skip
    assert "| layers=4 | 256 | 250 | 64 | 4 |" + " — |" * 14 in text.splitlines()
    assert "| layers=4 | 10.01 |" + " — |" * 5 in text.splitlines()


def test_the_sweeps_least_work_counts_every_product_an_iteration_needs_once():
    case = load_case(ROOT / "benchmarks" / "cases", "scaling_sweep")
    least_gflop = inspect.getmodule(case.systems[0].run).least_gflop
    # One row, 16 observations, one hidden layer of 2, one output per network: a forward pass
    # is 16*2 + 2*1 = 34 multiply-adds. Actor and critic forward 68, their weight gradients
    # 68, their input gradients the output layer's only (2 each): 140, or 280 FLOP.
    assert least_gflop({"envs": 1, "episode": 1, "width": 2, "layers": 1}) * 1e9 == 280
    # A second hidden layer of 2 adds 2*2 = 4 multiply-adds to each network's forward pass,
    # weight gradients and input gradients: 2 networks * 3 * 4, 2 FLOP each.
    two = least_gflop({"envs": 1, "episode": 1, "width": 2, "layers": 2}) * 1e9
    assert two == 280 + 2 * 2 * 3 * 4
    assert least_gflop({"envs": 3, "episode": 5, "width": 2, "layers": 1}) * 1e9 == 15 * 280
