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
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.rules.base import ShapeError, checked_type
from rlsys.compiler.tensor import RecurrentTensor, constant, lift


def key(seed: int) -> RecurrentTensor:
    """A PRNG key (uint32[2]) from an integer seed; derive per-point keys with fold_in."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):  # int(1.7) is 1
        raise RecurrenceError(f"rt.random.key: the seed must be an integer, got {seed!r}")
    raw = np.asarray(jax.random.key_data(jax.random.PRNGKey(int(seed))), dtype="uint32")
    return constant(current_program(), raw, dtype="uint32")


def uniform(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    return _key(key, "uniform").program.apply("uniform", [key], shape=_shape(shape, "uniform"))


def normal(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    return _key(key, "normal").program.apply("normal", [key], shape=_shape(shape, "normal"))


def gumbel(key: RecurrentTensor, shape: tuple[int, ...] = ()) -> RecurrentTensor:
    """Standard Gumbel noise: argmax(logits + gumbel(key, logits.shape)) samples a category."""
    return _key(key, "gumbel").program.apply("gumbel", [key], shape=_shape(shape, "gumbel"))


def permutation(key: RecurrentTensor, n: int) -> RecurrentTensor:
    """A random permutation of 0..n-1 (int32[n])."""
    return _key(key, "permutation").program.apply(
        "permutation", [key], shape=_shape((n,), "permutation")
    )


def _key(key: Any, op: str) -> RecurrentTensor:
    if not isinstance(key, RecurrentTensor):  # an int seed or a JAX key: no program to join
        raise RecurrenceError(
            f"{op}: the key {key!r} is not a tensor; make one with rt.random.key(seed), and "
            "one per point with .fold_in(i).fold_in(b)..."
        )
    return key


def _shape(shape: Any, op: str) -> tuple[int, ...]:
    return tuple(checked_type(shape, "float32", f"rt.random.{op}").shape)


class Categorical:
    """A categorical distribution over the last axis of `logits`."""

    def __init__(self, logits: RecurrentTensor) -> None:
        if not isinstance(logits, RecurrentTensor) or not logits.shape:  # log_prob failed in JAX
            shape = getattr(logits, "shape", None)
            raise ShapeError(f"Categorical: logits need a last axis of categories, got shape "
                             f"{shape} ({getattr(logits, 'label', logits)})")  # fmt: skip
        self.logits = logits
        self.program = logits.program

    def sample(self, key: RecurrentTensor) -> RecurrentTensor:
        """The Gumbel-max draw JAX's `jax.random.categorical` makes (the same numbers), written
        as noise from the key alone plus an argmax: in an acting loop the compiler draws the
        noise of every step at once, outside the loop, and leaves only the argmax inside."""
        return (self.logits + gumbel(_key(key, "Categorical.sample"),
                                     tuple(self.logits.shape))).argmax()  # fmt: skip

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
