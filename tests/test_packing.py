"""Packing named arrays into one buffer per dtype, large ones into their own
(`rlsys/compiler/lower/packing.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.compiler.lower.packing import OWN_BUFFER_BYTES, PackedStacks, Packing


def _arrays() -> dict:
    rng = np.random.default_rng(0)
    return {
        ("value", 3): rng.normal(size=(8, 4)).astype(np.float32),
        ("value", 7): rng.integers(0, 9, size=(8,)).astype(np.int32),
        ("index", 0): np.int32(5),  # a scalar
        ("window", 2): rng.normal(size=(1, 8, 11)).astype(np.float32),
        ("input", 0): rng.integers(0, 2**32, size=(8, 2), dtype=np.uint32),
    }


def test_arrays_round_trip_through_one_buffer_per_dtype() -> None:
    arrays = _arrays()
    packing = Packing({k: jax.ShapeDtypeStruct(np.shape(a), a.dtype) for k, a in arrays.items()})
    buffers = jax.jit(packing.pack)(arrays)
    assert sorted(str(b.dtype) for b in buffers) == ["float32", "int32", "uint32"]
    assert sum(b.size for b in buffers) == sum(np.size(a) for a in arrays.values())
    back = jax.jit(packing.unpack)(buffers)
    assert back.keys() == arrays.keys()
    for key, array in arrays.items():
        assert back[key].dtype == array.dtype and back[key].shape == np.shape(array)
        np.testing.assert_array_equal(back[key], array)


def test_a_large_array_gets_a_buffer_of_its_own_which_unpacks_without_a_copy() -> None:
    arrays = _arrays()
    large = np.arange(OWN_BUFFER_BYTES // 4, dtype=np.float32).reshape(64, -1)  # 64 KiB
    arrays[("value", 9)] = large
    packing = Packing({k: jax.ShapeDtypeStruct(np.shape(a), a.dtype) for k, a in arrays.items()})
    buffers = jax.jit(packing.pack)(arrays)
    assert sorted(str(b.dtype) for b in buffers) == ["float32", "float32", "int32", "uint32"]
    assert any(b.size == large.size for b in buffers)  # alone in its buffer
    unpack = jax.jit(packing.unpack)
    np.testing.assert_array_equal(unpack(buffers)[("value", 9)], large)
    # unpacked, it is its buffer as it is: no slice or copy of it in the program
    text = unpack.lower(buffers).compile().as_text()
    assert f"f32[{large.size}]" not in " ".join(
        line for line in text.splitlines() if "slice(" in line or "copy(" in line
    )


def test_stacks_written_one_row_per_step_read_back_per_member() -> None:
    steps, rng = 5, np.random.default_rng(1)
    rows = {10: jax.ShapeDtypeStruct((8, 4), jnp.float32),
            11: jax.ShapeDtypeStruct((8,), jnp.int32),
            12: jax.ShapeDtypeStruct((8, 2), jnp.float32),
            13: jax.ShapeDtypeStruct((128, 128), jnp.float32)}  # fmt: skip
    packing = Packing(rows, rows=steps)
    expected = {m: np.zeros((steps, *s.shape), s.dtype) for m, s in rows.items()}

    @jax.jit
    def write(buffers, values, at):
        stacks = PackedStacks(packing, buffers)
        assert sorted(stacks) == [10, 11, 12, 13]  # the members a step writes
        return stacks.written(values, at)

    buffers = packing.zeros()
    for at in (3, 0, 4):  # any order; rows not written stay zero
        values = {m: rng.normal(size=s.shape).astype(s.dtype) for m, s in rows.items()}
        buffers = write(buffers, values, np.int32(at))
        for m, v in values.items():
            expected[m][at] = v
    stacked = jax.jit(packing.unpack)(buffers)
    for m, array in expected.items():
        np.testing.assert_array_equal(stacked[m], array)
