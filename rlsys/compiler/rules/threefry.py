"""Threefry-2x32 random numbers that lower to straight-line code: JAX's keys, fast on CPU.

JAX lowers its threefry hash on CPU as a rolled loop of five steps (it compiles faster).
Inside a scan over environment steps with 8 environments that loop is most of the cost of a
step: XLA:CPU pays per executed operation, and each loop step runs about twenty small ones,
while the unrolled hash is one fused elementwise kernel. This module defines a JAX PRNG
implementation whose seed, split, fold_in and random_bits follow JAX's default threefry
(with `jax_threefry_partitionable`, the default since JAX 0.5) number for number, on an
unrolled hash. `typed_key(raw)` wraps a raw uint32[2] key in it, so that `jax.random`
functions (and environments such as gymnax, which call them) draw exactly the numbers they
would draw from the raw key, only faster. `tests/test_threefry.py` checks the equality.

The hash is Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3", SC 2011): rounds of add, rotate, xor, with the key schedule injected every
four rounds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import define_prng_impl

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x, bits: int):
    return lax.shift_left(x, np.uint32(bits)) | lax.shift_right_logical(x, np.uint32(32 - bits))


def threefry2x32(k0, k1, x0, x1):
    """The Threefry-2x32 hash of the counter pairs (x0, x1) under the key (k0, k1), all
    uint32 (x0 and x1 of one shape; k0 and k1 broadcast)."""
    schedule = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + schedule[0], x1 + schedule[1]
    for block in range(5):
        for bits in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, bits) ^ x0
        x0 = x0 + schedule[(block + 1) % 3]
        x1 = x1 + schedule[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _counters(shape: tuple[int, ...]):
    """Counters 0..n-1 over `shape`, as (high, low) uint32 words (n below 2^32 here)."""
    low = lax.iota(np.uint32, int(np.prod(shape, dtype=np.int64))).reshape(shape)
    return jnp.zeros(shape, np.uint32), low


def _seed(seed):
    """[high, low] 32-bit words of an integer seed (high is 0 for a 32-bit seed)."""
    seed = jnp.asarray(seed)
    high = seed >> 32 if seed.dtype.itemsize == 8 else jnp.zeros_like(seed)
    return jnp.stack([high.astype(np.uint32), seed.astype(np.uint32)])


def _split(key, shape: tuple[int, ...]):
    high, low = _counters(tuple(shape))
    bits0, bits1 = threefry2x32(key[0], key[1], high, low)
    return jnp.stack([bits0, bits1], axis=bits0.ndim)


def _fold_in(key, data):
    data = lax.convert_element_type(jnp.asarray(data), np.uint32)
    bits0, bits1 = threefry2x32(key[0], key[1], np.uint32(0), data)
    return jnp.stack([bits0, bits1])


def _random_bits(key, bit_width: int, shape: tuple[int, ...]):
    high, low = _counters(tuple(shape))
    bits0, bits1 = threefry2x32(key[0], key[1], high, low)
    if bit_width == 64:
        wide = np.uint64
        return (lax.convert_element_type(bits0, wide) << wide(32)) | lax.convert_element_type(
            bits1, wide
        )
    mixed = bits0 ^ bits1
    return mixed if bit_width == 32 else lax.convert_element_type(mixed, f"uint{bit_width}")


UNROLLED_THREEFRY = define_prng_impl(
    key_shape=(2,), seed=_seed, split=_split, random_bits=_random_bits, fold_in=_fold_in,
    name="rlsys_threefry2x32_unrolled", tag="rfy",
)  # fmt: skip


def typed_key(raw) -> jax.Array:
    """A raw uint32[2] threefry key (or a batch of them) as a typed key of the unrolled
    implementation: the same numbers from every `jax.random` function."""
    return jax.random.wrap_key_data(raw, impl=UNROLLED_THREEFRY)


def raw_key(key: jax.Array) -> jax.Array:
    return jax.random.key_data(key)
