"""Named arrays of fixed shapes packed into one flat buffer per dtype.

A compiled call pays for every array it takes or returns: on CPU about 0.5 µs per argument
and 1.5-2.5 µs per result, before any work. A host loop's step is one tiny call (a policy on
8 observations), so a step's two dozen arrays cost more than its arithmetic. Packed, the
same step takes and returns a handful of buffers; unpacking inside the call is slicing and
reshaping, which XLA fuses into the ops that read them.

`Packing(shapes)` packs whole arrays (`pack` / `unpack`). `Packing(shapes, rows=T)` packs
stacks: each member's values at T steps, one row per step (`write_row` writes one step's
values into row `at`, in place when the buffers are donated).

An array (or a stack's row) of OWN_BUFFER_BYTES or more gets a buffer of its own: packing
it would copy it into the shared buffer at every step and out of it when unpacked, for an
argument saved. An Atari host loop's stacks (the frame stacks of 8 envs, 0.9 MB a row) were
unpacked after 1,024 steps by copying 110 MB out of the shared buffer per member, then
copied again into domain order (benchmarks/HISTORY.md, thirty-eighth session).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def nbytes(array: Any) -> int:
    """The bytes of an array (or a `ShapeDtypeStruct`, a tracer): what decides whether it is
    worth packing."""
    return math.prod(np.shape(array)) * np.dtype(array.dtype).itemsize


OWN_BUFFER_BYTES = 2**16


class Packing:
    """Where each named array lives: its buffer, an offset and a size in it."""

    def __init__(self, shapes: Mapping[Hashable, Any], rows: int | None = None) -> None:
        self.rows, self.shapes = rows, dict(shapes)
        keys = sorted(shapes, key=repr)  # any order works; this one is reproducible
        own = [k for k in keys if nbytes(shapes[k]) >= OWN_BUFFER_BYTES]
        shared = [k for k in keys if k not in own]
        shared_dtypes = sorted({np.dtype(shapes[k].dtype) for k in shared}, key=str)
        # the buffers: one shared per dtype, then one per large array
        buffers = [shared_dtypes.index(np.dtype(shapes[k].dtype)) for k in shared]
        buffers += range(len(shared_dtypes), len(shared_dtypes) + len(own))
        self.dtypes = [*shared_dtypes, *(np.dtype(shapes[k].dtype) for k in own)]
        self.sizes = [0] * len(self.dtypes)
        self.places: dict[Hashable, tuple[int, int, int, tuple[int, ...]]] = {}
        for key, buffer in zip([*shared, *own], buffers, strict=True):
            shape = tuple(shapes[key].shape)
            size = math.prod(shape)
            self.places[key] = (buffer, self.sizes[buffer], size, shape)
            self.sizes[buffer] += size

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.places)

    def _flat(self, arrays: Mapping[Hashable, Any], lead: tuple[int, ...]) -> tuple:
        parts: list[list] = [[] for _ in self.dtypes]
        for key, (buffer, _, size, _) in self.places.items():  # in offset order
            parts[buffer].append(jnp.reshape(arrays[key], (*lead, size)))
        return tuple(jnp.concatenate(p, axis=-1) for p in parts)

    def pack(self, arrays: Mapping[Hashable, Any]) -> tuple:
        """The buffers holding `arrays` (traced)."""
        return self._flat(arrays, (self.rows,) if self.rows is not None else ())

    def unpack(self, buffers: tuple) -> dict[Hashable, Any]:
        """The arrays back from their buffers (traced)."""
        lead = (self.rows,) if self.rows is not None else ()
        return {key: jnp.reshape(buffers[b][..., at : at + size], (*lead, *shape))
                for key, (b, at, size, shape) in self.places.items()}  # fmt: skip

    def zeros(self) -> tuple:
        lead = (self.rows,) if self.rows is not None else ()
        return tuple(jnp.zeros((*lead, n), d) for n, d in zip(self.sizes, self.dtypes, strict=True))

    def write_row(self, buffers: tuple, values: Mapping[Hashable, Any], at: Any) -> tuple:
        """Stacks with one step's `values` written into row `at` (traced)."""
        rows = self._flat(values, ())
        return tuple(jax.lax.dynamic_update_index_in_dim(buffer, row, at, 0)
                     for buffer, row in zip(buffers, rows, strict=True))  # fmt: skip


class PackedStacks:
    """Packed stacks inside a traced step: iterating gives the members whose values the
    step writes, `written(values, at)` the stacks after writing them (as a dict of stacks
    would, one `dynamic_update_index_in_dim` per member)."""

    def __init__(self, packing: Packing, buffers: tuple) -> None:
        self.packing, self.buffers = packing, buffers

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.packing)

    def written(self, values: Mapping[Hashable, Any], at: Any) -> tuple:
        return self.packing.write_row(self.buffers, values, at)
