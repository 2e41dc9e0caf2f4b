"""The unrolled threefry implementation draws exactly JAX's numbers; permutations are
permutations, uniformly placed; the distributions' samples are JAX's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.compiler.rules.random_ops import _permutation
from rlsys.compiler.rules.threefry import UNROLLED_THREEFRY, raw_key, typed_key

DRAWS = {
    "bits": lambda k: jax.random.bits(k, (7,)),
    "bits8": lambda k: jax.random.bits(k, (3, 4), jnp.uint8),
    "split": lambda k: (
        jax.random.key_data(jax.random.split(k, 3))
        if jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
        else jax.random.split(k, 3)
    ),
    "uniform": lambda k: jax.random.uniform(k, (5,)),
    "normal": lambda k: jax.random.normal(k, (5, 2)),
    "categorical": lambda k: jax.random.categorical(k, jnp.array([[0.1, 0.5, -0.3]] * 6)),
    "permutation": lambda k: jax.random.permutation(k, 11),
}


@pytest.mark.parametrize("seed", [0, 7, 2**31 - 1])
@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_unrolled_keys_draw_jax_numbers(draw: str, seed: int) -> None:
    raw = jax.random.key_data(jax.random.PRNGKey(seed))
    expected = DRAWS[draw](raw)
    np.testing.assert_array_equal(np.asarray(DRAWS[draw](typed_key(raw))), np.asarray(expected))


@pytest.mark.parametrize("seed", [0, 5, -3, 2**31 - 1])
def test_seeding_matches(seed: int) -> None:
    ours = jax.random.key_data(jax.random.key(seed, impl=UNROLLED_THREEFRY))
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.random.PRNGKey(seed)))


def test_fold_in_and_vmapped_keys_match() -> None:
    raws = jax.random.split(jax.random.PRNGKey(3), 4)
    ours = jax.jit(jax.vmap(lambda r: raw_key(jax.random.fold_in(typed_key(r), 12))))(raws)
    theirs = jax.vmap(lambda r: jax.random.fold_in(r, 12))(raws)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("n", [1, 2, 5, 1024, 70_000])
def test_permutation_is_a_permutation(n: int) -> None:
    order = np.asarray(_permutation(jax.random.key_data(jax.random.PRNGKey(n)), (n,)))
    assert order.dtype == np.int32
    np.testing.assert_array_equal(np.sort(order), np.arange(n))


def test_permutation_places_items_uniformly() -> None:
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    orders = np.asarray(jax.jit(jax.vmap(lambda k: _permutation(k, (8,))))(keys))
    where_zero = np.argmax(orders == 0, axis=1)
    counts = np.bincount(where_zero, minlength=8)
    # 500 expected per slot; a chi-square with 7 dof above 24.3 has probability 0.001
    chi2 = float(((counts - 500) ** 2 / 500).sum())
    assert chi2 < 24.3, counts


def test_distributions_sample_what_jax_samples() -> None:
    """`rt.Categorical.sample` (Gumbel noise + argmax) and `rt.DiagGaussian.sample` draw
    JAX's numbers from each point's key: jax.random.categorical's and mean + std * normal."""
    logits = np.array([[0.3, -0.2, 0.1], [2.0, -1.0, 0.5]], "float32")
    mean, log_std = np.array([0.5, -1.0], "float32"), np.array([0.2, -0.3], "float32")
    prog = rt.Program(dims=("i",))
    (i,) = prog.dims
    with prog:
        key = rt.random.key(7).fold_in(i)
        prog.output("category", rt.Categorical(rt.const(logits)).sample(key))
        prog.output("gaussian", rt.DiagGaussian(rt.const(mean), rt.const(log_std)).sample(key))
    out = prog.compile(bounds={"I": 64}).run()
    keys = [jax.random.fold_in(jax.random.PRNGKey(7), n) for n in range(64)]
    np.testing.assert_array_equal(
        out["category"], [np.asarray(jax.random.categorical(k, logits)) for k in keys]
    )
    expected = [mean + np.exp(log_std) * np.asarray(jax.random.normal(k, (2,))) for k in keys]
    np.testing.assert_allclose(out["gaussian"], expected, rtol=1e-6, atol=1e-6)
