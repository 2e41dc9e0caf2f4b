"""Running normalization statistics as recurrences over the iteration dimension i.

    mean[0] = 0, var[0] = 1
    mean[i + 1], var[i + 1] = merge(mean[i], var[i] over i * N samples,
                                    mean and var of the N samples of iteration i)

`merge` is the parallel form of Welford's update (Chan et al.): exact for the pooled
moments, no sums of squares that lose precision. Like the parameters, the statistics are
placeholders over i, so the loop carries them and checkpoints hold them.

Observation normalization (CleanRL's NormalizeObservation) acts and learns at iteration i
with the statistics of the observations of iterations before i: the policy acting must not
depend on the observations it is about to produce. Reward scaling (NormalizeReward) divides
the rewards of iteration i by the running std of discounted returns including iteration i:
rewards are only used after acting, so the latest statistics are available.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlsys.rt as rt

EPSILON = 1e-8  # added to the variance before its square root
PRIOR_COUNT = 1e-4  # the weight of the initial (0, 1) statistics, as gymnasium's RunningMeanStd


class RunningMoments:
    """Mean and variance over i of samples shaped `shape`.

    `mean` and `var` are the statistics before iteration i; call `update(batch)` once with
    the (N, *shape) samples of iteration i (N the same at every i); it returns the statistics
    after them (at i, what mean[i + 1] and var[i + 1] will be)."""

    def __init__(self, prog: rt.Program, shape: tuple[int, ...], name: str) -> None:
        self.i = prog.dims[0]
        self.mean = rt.placeholder(shape=shape, domain=(self.i,), name=f"{name}_mean")
        self.var = rt.placeholder(shape=shape, domain=(self.i,), name=f"{name}_var")
        self.mean[0] = 0.0
        self.var[0] = 1.0

    def update(self, batch) -> tuple[Any, Any]:
        samples = int(batch.shape[0])
        # The count is a function of i (every iteration adds N samples): no carry needed.
        count = (self.i * samples) * 1.0 + PRIOR_COUNT
        n = float(samples)
        batch_mean = batch.mean(axis=0)
        batch_var = ((batch - batch_mean) ** 2.0).mean(axis=0)
        delta = batch_mean - self.mean
        total = count + n
        new_mean = self.mean + delta * (n / total)
        new_var = (self.var * count + batch_var * n + delta**2.0 * (count * n / total)) / total
        self.mean[self.i + 1] = new_mean
        self.var[self.i + 1] = new_var
        return new_mean, new_var


class Normalizer:
    """x -> clip((x - mean) / sqrt(var + eps), -clip, clip); mean and var are tensors (the
    running statistics of training) or arrays (a checkpoint's, at evaluation)."""

    def __init__(self, mean: Any, var: Any, clip: float) -> None:
        if isinstance(mean, np.ndarray):
            mean, var = rt.const(mean.astype("float32")), rt.const(var.astype("float32"))
        self.mean, self.var, self.clip = mean, var, clip

    def __call__(self, x):
        return ((x - self.mean) / (self.var + EPSILON).sqrt()).clip(-self.clip, self.clip)


def scaled_rewards(prog: rt.Program, step, gamma: float, clip: float, batch_size: int):
    """Rewards divided by the running std of discounted returns (not centred: the sign of a
    reward stays), clipped to [-clip, clip]. The discounted return restarts at each episode's
    end and continues across iterations, like the episode return."""
    i, b, t = prog.dims[0], prog.dims[-2], prog.dims[-1]
    B, T = prog.bounds[-2], prog.bounds[-1]
    before = rt.placeholder(domain=(i, b, t), name="discounted_return")
    discounted = before * gamma + step.reward
    carried = discounted * (1.0 - step.done)
    before[0, b, 0] = 0.0
    before[i + 1, b, 0] = carried[i, b, T - 1]
    before[i, b, t + 1] = carried
    returns = RunningMoments(prog, (), "return")
    _, var = returns.update(discounted[i, 0:B, 0:T].reshape(batch_size))
    return (step.reward / (var + EPSILON).sqrt()).clip(-clip, clip)
