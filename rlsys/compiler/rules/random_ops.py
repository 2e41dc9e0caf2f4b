"""Random numbers from explicit keys, and the distributions policies sample from.

A key is a uint32[2] tensor (a raw JAX PRNG key). Programs derive one key per point from a
seed with `fold_in` of the point's dimensions, so results do not depend on how the compiler
vectorizes or orders the work: the same seed gives the same numbers under every lowering.
The numbers are JAX's (threefry), drawn through `threefry.typed_key` so that they compile
to straight-line code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rlsys.compiler.rules.base import ShapeError, TensorType, promote, register
from rlsys.compiler.rules.threefry import raw_key, typed_key

KEY = TensorType((2,), "uint32")


def _check_key(op: str, key: TensorType) -> None:
    if key.shape != (2,) or key.dtype != "uint32":
        raise ShapeError(f"{op}: expected a key (uint32[2], from rt.random.key), got {key}")


def _fold_in_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    key, data = types
    _check_key("fold_in", key)
    if data.shape != () or not jnp.issubdtype(data.dtype, jnp.integer):
        raise ShapeError(f"fold_in: the data must be an integer scalar, got {data}")
    return KEY


def _sample_infer(dtype: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        _check_key("random", types[0])
        return TensorType(tuple(params["shape"]), dtype)

    return infer


def _categorical_log_prob_infer(types, params) -> TensorType:
    logits, action = types
    if logits.shape[:-1] != action.shape or not jnp.issubdtype(action.dtype, jnp.integer):
        raise ShapeError(f"categorical_log_prob: logits {logits.shape} and integer actions "
                         f"{action.shape} ({action.dtype}) do not fit")  # fmt: skip
    return TensorType(action.shape, promote([logits.dtype, "float32"]))


def _last_axis_reduced(types, params) -> TensorType:
    return TensorType(types[0].shape[:-1], promote([types[0].dtype, "float32"]))


def _categorical_log_prob(logits, action):
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(log_p, action[..., None], axis=-1)[..., 0]


def _categorical_entropy(logits):
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def _gaussian_log_prob(mean, log_std, value):
    z = (value - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


def _gaussian_entropy(log_std):
    return jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e), axis=-1)


def _permutation(key, shape):
    """A random permutation of 0..n-1 by sorting random numbers: with the index packed into
    the low bits of each uint32 sort key, XLA sorts one array of integers, which on CPU is
    about 3x faster than `jax.random.permutation`'s key-value sort (its cost dominated PPO's
    learning phase). Items whose random high bits tie keep their index order: about
    n^2 / 2^(33 - log2 n) tied pairs per permutation (0.125 for n = 1024), a negligible bias
    for shuffling minibatches. Above 2^16 items too few random bits remain, so JAX's own
    shuffle is used."""
    n = shape[0]
    index_bits = max(1, (n - 1).bit_length())
    if index_bits > 16:
        return jax.random.permutation(typed_key(key), n).astype("int32")
    index_mask = (1 << index_bits) - 1
    bits = jax.random.bits(typed_key(key), (n,), jnp.uint32)
    packed = (bits & jnp.uint32(~index_mask & 0xFFFFFFFF)) | jnp.arange(n, dtype=jnp.uint32)
    return (jnp.sort(packed) & jnp.uint32(index_mask)).astype("int32")


register("fold_in", _fold_in_infer,
         lambda key, data: raw_key(jax.random.fold_in(typed_key(key), data)))  # fmt: skip
register("permutation", _sample_infer("int32"), _permutation)
register("uniform", _sample_infer("float32"),
         lambda key, shape: jax.random.uniform(typed_key(key), shape))  # fmt: skip
register(
    "normal", _sample_infer("float32"), lambda key, shape: jax.random.normal(typed_key(key), shape)
)
register("gumbel", _sample_infer("float32"),
         lambda key, shape: jax.random.gumbel(typed_key(key), shape))  # fmt: skip
register("categorical_log_prob", _categorical_log_prob_infer, _categorical_log_prob)
register("categorical_entropy", _last_axis_reduced, _categorical_entropy)
register("gaussian_log_prob", lambda types, params: _last_axis_reduced(types[:1], params),
         _gaussian_log_prob)  # fmt: skip
register("gaussian_entropy", _last_axis_reduced, _gaussian_entropy)
