"""Ops that rearrange spatial axes: reshape, slice, take, concat, transpose, broadcast,
bitcast (bytes read as a wider type) and set_rows (some rows replaced)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rlsys.compiler.rules.base import (
    ShapeError,
    TensorType,
    broadcast_shapes,
    normalize_axes,
    promote,
    register,
)


def _reshape_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    (x,) = types
    shape = tuple(params["shape"])
    symbolic = not all(isinstance(n, int) for n in (*x.shape, *shape))
    if not symbolic and math.prod(x.shape) != math.prod(shape):  # symbolic: bounds unknown yet
        raise ShapeError(f"reshape: cannot reshape {x.shape} into {shape}")
    return TensorType(shape, x.dtype)


def _slice_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    (x,) = types
    (axis,) = normalize_axes("slice_axis", params["axis"], len(x.shape))
    start, stop = params["start"], params["stop"]
    if not 0 <= start <= stop <= x.shape[axis]:
        raise ShapeError(f"slice_axis: {start}:{stop} is outside axis {axis} of {x.shape}")
    shape = list(x.shape)
    shape[axis] = stop - start
    return TensorType(tuple(shape), x.dtype)


def _take_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    x, index = types
    if not jnp.issubdtype(index.dtype, jnp.integer):
        raise ShapeError(f"take: the index must be an integer tensor, not {index.dtype}")
    (axis,) = normalize_axes("take", params.get("axis", 0), len(x.shape))
    return TensorType((*x.shape[:axis], *index.shape, *x.shape[axis + 1 :]), x.dtype)


def _concat_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    first = types[0]
    (axis,) = normalize_axes("concat", params.get("axis", 0), len(first.shape))
    for other in types[1:]:
        if len(other.shape) != len(first.shape) or any(
            a != b
            for k, (a, b) in enumerate(zip(first.shape, other.shape, strict=True))
            if k != axis
        ):
            raise ShapeError(
                f"concat: shapes {first.shape} and {other.shape} differ off axis {axis}"
            )
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), promote([t.dtype for t in types]))


def _transpose_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    (x,) = types
    perm = tuple(params["perm"])
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"transpose: {perm} is not a permutation of {len(x.shape)} axes")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


def _broadcast_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    shape = tuple(params["shape"])
    if broadcast_shapes("broadcast_to", [types[0].shape, shape]) != shape:
        raise ShapeError(f"broadcast_to: {types[0].shape} does not broadcast to {shape}")
    return TensorType(shape, types[0].dtype)


def _bitcast_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    """Groups of narrow items along the last axis read as one wider item each: uint8 (..., 4)
    as float32 (...), say. Only widening: a host op packs mixed fields into bytes."""
    (x,) = types
    dtype = str(jnp.dtype(params["dtype"]))
    size = jnp.dtype(dtype).itemsize
    ratio, rest = divmod(size, jnp.dtype(x.dtype).itemsize)
    if rest or ratio < 2 or not x.shape or x.shape[-1] != ratio:
        raise ShapeError(f"bitcast: {x.dtype} {x.shape} cannot be read as {dtype}; the last "
                         f"axis must hold one {dtype}'s {size} bytes")  # fmt: skip
    return TensorType(x.shape[:-1], dtype)


def _set_rows_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    """x with its rows from `start` (along the first axis) replaced by `rows`."""
    x, start, rows = types
    if not x.shape:
        raise ShapeError("set_rows: a scalar has no rows to replace; index an array")
    if start.shape or not jnp.issubdtype(start.dtype, jnp.integer):
        raise ShapeError(f"set_rows: the start must be an integer scalar, not {start.dtype} "
                         f"{start.shape}")  # fmt: skip
    fits = len(rows.shape) == len(x.shape)
    if fits and isinstance(rows.shape[0], int) and isinstance(x.shape[0], int):
        fits = rows.shape[0] <= x.shape[0]  # extents may be symbolic until bounds are given
    if not fits or tuple(rows.shape[1:]) != tuple(x.shape[1:]) or rows.dtype != x.dtype:
        raise ShapeError(f"set_rows: rows of {x.dtype} {x.shape} are {x.dtype} "
                         f"(n, {', '.join(map(str, x.shape[1:]))}) with n <= {x.shape[0]}, not "
                         f"{rows.dtype} {rows.shape}; cast or reshape them")  # fmt: skip
    return x


def _slice_point(x, *, axis: int, start: int, stop: int):
    return jax.lax.slice_in_dim(x, start, stop, axis=axis % x.ndim)  # a slice, not a gather


register("reshape", _reshape_infer, lambda x, shape: jnp.reshape(x, shape))
register("slice_axis", _slice_infer, _slice_point)
register("take", _take_infer, lambda x, index, axis=0: jnp.take(x, index, axis=axis))
register("concat", _concat_infer, lambda *xs, axis=0: jnp.concatenate(xs, axis=axis))
register("transpose", _transpose_infer, lambda x, perm: jnp.transpose(x, perm))
register("broadcast_to", _broadcast_infer, lambda x, shape: jnp.broadcast_to(x, shape))
# A start past x.shape[0] - n is clamped to it, as XLA's dynamic update does.
register("set_rows", _set_rows_infer,
         lambda x, start, rows: jax.lax.dynamic_update_slice_in_dim(x, rows, start, 0))  # fmt: skip
register("bitcast", _bitcast_infer, lambda x, dtype: jax.lax.bitcast_convert_type(x, dtype))
