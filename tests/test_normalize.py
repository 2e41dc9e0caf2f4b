"""Running normalization statistics (rlsys/algos/normalize.py) against NumPy."""

from __future__ import annotations

import numpy as np

import rlsys.rt as rt
from rlsys.algos.normalize import PRIOR_COUNT, RunningMoments


def test_running_moments_are_the_moments_of_all_earlier_iterations() -> None:
    prog = rt.Program(dims=("i", "b"))
    i, _ = prog.dims
    _, B = prog.bounds
    with prog:
        x = rt.input("x", shape=(2,), domain=prog.dims)
        stats = RunningMoments(prog, (2,), "x")
        stats.update(x[i, 0:B].reshape(6, 2))
        prog.output("mean", stats.mean + 0.0)
        prog.output("var", stats.var + 0.0)
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(5, 6, 2)) * [1.0, 30.0] + [0.5, -200.0]).astype("float32")
    out = prog.compile(bounds={"I": 5, "B": 6}).run({"x": data})
    np.testing.assert_allclose(out["mean"][0], [0.0, 0.0])
    np.testing.assert_allclose(out["var"][0], [1.0, 1.0])
    for k in range(1, 5):  # the statistics iteration k sees: all samples before it ...
        seen = data[:k].reshape(-1, 2).astype("float64")
        n, c = len(seen), PRIOR_COUNT  # ... and the prior (0, 1), weighing c samples
        mean = seen.mean(0) * n / (n + c)
        var = (c * (1.0 + mean**2) + n * (seen.var(0) + (seen.mean(0) - mean) ** 2)) / (n + c)
        np.testing.assert_allclose(out["mean"][k], mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["var"][k], var, rtol=1e-5)
