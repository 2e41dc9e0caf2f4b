"""The example scripts the README points to keep working (and say what they claim)."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recurrences_example() -> None:
    example = load("recurrences")
    np.testing.assert_array_equal(example.doubling(), 2.0 ** np.arange(8))
    np.testing.assert_allclose(
        example.returns(np.ones(5, "float32"), np.array([0, 0, 1, 0, 0], "float32")),
        [2.71, 1.9, 1.0, 1.9, 1.0], rtol=1e-6,
    )  # fmt: skip
    exe, rewards = example.bandit()
    assert rewards[-10:].mean() > 0.9 > rewards[:10].mean()  # it learns the best arm
    rows = {row.tensor: row.decisions for row in exe.explain(file=io.StringIO())}
    assert rows["theta"] == {"i": "scan"}
