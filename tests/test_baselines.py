"""Smoke tests of the PPO baselines of benchmarks/cases/ppo_cartpole.py (not of learning).

Each baseline trains 2 iterations (2 x 8 envs x 128 steps) and must return finite numbers
under the shared keys; the time-to-target bookkeeping is tested on its own.
"""

from __future__ import annotations

import importlib
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


def test_the_case_has_the_four_systems_and_sb3_as_baseline():
    case = load_case(ROOT / "benchmarks" / "cases", "ppo_cartpole")
    assert case.system_names == ["rlsys-ppo", "purejaxrl-style", "cleanrl-style", "sb3"]
    assert case.baseline == "sb3"
