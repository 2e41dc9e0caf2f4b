"""Randomness and distributions for recurrent-tensor programs (`rt.random`, `rt.Categorical`).

key = rt.random.key(seed).fold_in(i).fold_in(b).fold_in(t)    # one key per point
dist = rt.Categorical(logits)
action = dist.sample(key)
log_p, entropy = dist.log_prob(action), dist.entropy()
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rlsys.compiler.builder import current_program
from rlsys.compiler.rules.base import ShapeError
from rlsys.compiler.tensor import RecurrentTensor, constant, lift


def key(seed: int) -> RecurrentTensor:
    """A PRNG key (uint32[2]) from an integer seed; derive per-point keys with fold_in."""
    raw = np.asarray(jax.random.key_data(jax.random.PRNGKey(int(seed))), dtype="uint32")
    return constant(current_program(), raw, dtype="uint32")


def uniform(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    return key.program.apply("uniform", [key], shape=tuple(shape))


def normal(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    return key.program.apply("normal", [key], shape=tuple(shape))


def gumbel(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    """Standard Gumbel noise: argmax(logits + gumbel(key, logits.shape)) samples a category."""
    return key.program.apply("gumbel", [key], shape=tuple(shape))


def permutation(key: RecurrentTensor, n: int) -> RecurrentTensor:
    """A random permutation of 0..n-1 (int32[n])."""
    return key.program.apply("permutation", [key], shape=(int(n),))


class Categorical:
    """A categorical distribution over the last axis of `logits`."""

    def __init__(self, logits: RecurrentTensor) -> None:
        self.logits = logits
        self.program = logits.program

    def sample(self, key: RecurrentTensor) -> RecurrentTensor:
        """The Gumbel-max draw JAX's `jax.random.categorical` makes (the same numbers), written
        as noise from the key alone plus an argmax: in an acting loop the compiler draws the
        noise of every step at once, outside the loop, and leaves only the argmax inside."""
        if not self.logits.shape:
            raise ShapeError("Categorical.sample: logits need a last axis of categories")
        return (self.logits + gumbel(key, tuple(self.logits.shape))).argmax()

    def log_prob(self, action: Any) -> RecurrentTensor:
        return self.program.apply("categorical_log_prob", [self.logits, lift(self.program, action)])

    def entropy(self) -> RecurrentTensor:
        return self.program.apply("categorical_entropy", [self.logits])

    def mode(self) -> RecurrentTensor:
        """The most likely category (greedy action)."""
        return self.logits.argmax()


class DiagGaussian:
    """A Gaussian with diagonal covariance over the last axis: N(mean, exp(log_std)^2)."""

    def __init__(self, mean: RecurrentTensor, log_std: Any) -> None:
        self.mean = mean
        self.program = mean.program
        self.log_std = lift(self.program, log_std)

    def sample(self, key: RecurrentTensor) -> RecurrentTensor:
        """mean + std * noise, with the noise from the key alone (drawn outside an acting loop,
        as for `Categorical.sample`)."""
        return self.mean + self.log_std.exp() * normal(key, tuple(self.mean.shape))

    def log_prob(self, value: Any) -> RecurrentTensor:
        operands = [self.mean, self.log_std, lift(self.program, value)]
        return self.program.apply("gaussian_log_prob", operands)

    def entropy(self) -> RecurrentTensor:
        return self.program.apply("gaussian_entropy", [self.log_std])

    def mode(self) -> RecurrentTensor:
        return self.mean
