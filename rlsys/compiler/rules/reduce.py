"""Ops over spatial axes: reductions, cumulative and discounted sums, matmul, softmax."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rlsys.compiler.rules.base import (
    ShapeError,
    TensorType,
    largest_divisor,
    normalize_axes,
    promote,
    register,
)

REDUCTIONS = {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min, "std": jnp.std}


def _reduce(name: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        (x,) = types
        axes = normalize_axes(name, params.get("axis"), len(x.shape))
        keep = params.get("keepdims", False)
        shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape) if keep or k not in axes)
        dtype = x.dtype if name in ("max", "min", "sum") else promote([x.dtype, "float32"])
        return TensorType(shape, dtype)

    return infer


def _along_axis(name: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        x = types[0]
        normalize_axes(name, params.get("axis", 0), len(x.shape))
        for other in types[1:]:
            if other.shape != x.shape:
                raise ShapeError(f"{name}: shapes {x.shape} and {other.shape} differ")
        return x

    return infer


def _discounted_cum_sum(x, done=None, *, gamma: float, axis: int = 0):
    """y[k] = x[k] + gamma * (1 - done[k]) * y[k+1] along `axis`, y past the end = 0."""
    x = jnp.moveaxis(x, axis, 0)
    keep = jnp.ones_like(x) if done is None else 1.0 - jnp.moveaxis(done, axis, 0).astype(x.dtype)

    def step(carry, inputs):
        value, cont = inputs
        carry = value + gamma * cont * carry
        return carry, carry

    _, ys = jax.lax.scan(step, jnp.zeros_like(x[0]), (x, keep), reverse=True)
    return jnp.moveaxis(ys, 0, axis)


def _linear_recurrence(x, a, *, axis: int = 0, reverse: bool = True):
    """y[k] = a[k] * y[k+1] + x[k] along `axis` (y past the end = 0); with reverse=False,
    y[k] = a[k] * y[k-1] + x[k]. A parallel (associative) scan: composing two steps
    y -> a1 y + b1 then y -> a2 y + b2 gives y -> (a2 a1) y + (a2 b1 + b2)."""
    x, a = jnp.moveaxis(x, axis, 0), jnp.moveaxis(a, axis, 0).astype(x.dtype)

    def compose(earlier, later):
        (a1, b1), (a2, b2) = earlier, later
        return a2 * a1, a2 * b1 + b2

    _, y = jax.lax.associative_scan(compose, (a, x), reverse=reverse)
    return jnp.moveaxis(y, 0, axis)


def _argmax_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    (x,) = types
    (axis,) = normalize_axes("argmax", params.get("axis", -1), len(x.shape))
    return TensorType(tuple(n for k, n in enumerate(x.shape) if k != axis), "int32")


def _matmul_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    a, b = types
    if not a.shape or not b.shape:
        raise ShapeError("matmul: both operands need at least one spatial axis")
    inner_a = a.shape[-1]
    inner_b = b.shape[-2] if len(b.shape) > 1 else b.shape[0]
    if inner_a != inner_b:
        raise ShapeError(f"matmul: inner sizes differ ({a.shape} @ {b.shape})")
    shape = (*a.shape[:-1], *(b.shape[-1:] if len(b.shape) > 1 else ()))
    return TensorType(shape, promote([a.dtype, b.dtype]))


def _with_weight_gradient(weight_gradient):
    """a @ b (a's rows through matrix b) whose gradient in b is `weight_gradient(a, g)`
    instead of the dot aᵀ·g that JAX's own rule gives: that dot contracts the rows of both
    operands, which XLA:CPU runs in its Eigen kernel at about half the speed of the forward
    product (YNNPACK takes a product only when its left operand is contracted along its
    last axis; `benchmarks/xla_breakdown.py ppo`)."""

    @jax.custom_vjp
    def matmul(a, b):
        return a @ b

    def forward(a, b):
        return a @ b, (a, b)

    def backward(saved, g):
        a, b = saved
        return (g @ b.T).astype(a.dtype), weight_gradient(a, g).astype(b.dtype)

    matmul.defvjp(forward, backward)
    return matmul


def _outer_products_summed(a, g):
    """Sum over a's rows of their outer products with g's, a multiply-reduce XLA fuses into
    one loop (over batch dims too): a policy's 64x2 output layer on 256 rows, 16 µs
    against a 26-45 µs dot."""
    rows = a[..., :, None] * g[..., None, :]
    return rows.reshape(-1, a.shape[-1], g.shape[-1]).sum(axis=0)


def _transposed_rows_times(a, g):
    """aᵀ·g with aᵀ copied out first, behind an optimization barrier (XLA would fold a plain
    transpose back into the product), so that YNNPACK takes the product. For a few hundred
    rows the copy costs less than the slow kernel (PPO's 64x64 layers on minibatches of
    256: 13.5-28 µs against 30-38); for thousands it does not."""
    transposed = jax.lax.optimization_barrier(a.reshape(-1, a.shape[-1]).T)
    return transposed @ g.reshape(-1, g.shape[-1])


def _row_chunk(rows: int) -> int | None:
    """The chunk of rows `_chunked_rows_times` sums over: the largest divisor of `rows` up
    to 2048, if it is at least 128 (else None: no good chunking)."""
    chunk = largest_divisor(rows, 128, 2048)
    return chunk if chunk is not None and chunk < rows else None


def _chunked_rows_times(a, g):
    """aᵀ·g as a sum over chunks of rows of their own products (a batched product, then a
    sum): for a one-column g, XLA:CPU otherwise runs one matrix-vector product down all the
    rows in its Eigen kernel. 64,000 rows of 64: 2.2 ms against 0.39 (`weight_grad_dots` in
    benchmarks/RESULTS.md); of 256, jitted alone: 29 ms against 1.4."""
    a, g = a.reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
    chunk = _row_chunk(a.shape[0])
    if chunk is None:
        return a.T @ g
    count = a.shape[0] // chunk
    per_chunk = jnp.einsum("cri,cro->cio", a.reshape(count, chunk, -1),
                           g.reshape(count, chunk, -1))  # fmt: skip
    return per_chunk.sum(axis=0)


def _row_block(rows: int) -> int | None:
    """The block of rows `_blocked_rows_times` sums over: the largest divisor of `rows` from
    32 to 64 (None if there is none)."""
    return largest_divisor(rows, 32, 64)


def _blocked_rows_times(a, g):
    """aᵀ·g as a sum over blocks of 32-64 rows of their own products, each block of a
    transposed into a copy behind an optimization barrier (as in `_transposed_rows_times`),
    so that YNNPACK takes the batched product and fuses the sum over blocks into it. A 64x64
    layer's weight gradient over a 4,000-row chunk of the scaling sweep's gradient: 310-437
    µs against Eigen's 587-916 (Intel Xeon, jitted in a loop); 64x128 and 128x64 gain as
    well; 128x128, 256x256 and 16x256 do not (Eigen's kernel does well there), and in
    place, 16x16 lost (`_BLOCKED_SIDES`)."""
    a, g = a.reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
    block = _row_block(a.shape[0])
    count = a.shape[0] // block
    blocks = jax.lax.optimization_barrier(jnp.swapaxes(a.reshape(count, block, -1), 1, 2))
    return jnp.einsum("cir,cro->cio", blocks, g.reshape(count, block, -1)).sum(axis=0)


_NARROW_OUTPUT = 4  # outputs up to this wide: the multiply-reduce (wider favour the dot)
_FEW_ROWS = 512  # rows up to this many: the transposed copy (64x64 layer: 39 µs against 60
# at 512 rows, 20 against 27 at 256; 88-98 against 83-89 at 1024)
_narrow_matmul = _with_weight_gradient(_outer_products_summed)
_few_rows_matmul = _with_weight_gradient(_transposed_rows_times)
_one_output_matmul = _with_weight_gradient(_chunked_rows_times)
_MANY_ROWS = 4096  # rows from this many: the chunked sum for one output
_blocked_matmul = _with_weight_gradient(_blocked_rows_times)
# Weights the blocked sum is for: both sides 32 to 128, 64x128 at most. Narrower ones gain
# little alone and lost in place: the scaling sweep's 16x16 layers (64,000 rows) took its
# iteration from 34 to 37 ms (one process, alternating).
_BLOCKED_SIDES, _BLOCKED_MAX_WEIGHT = (32, 128), 64 * 128


def _matmul(a, b):
    """Rows through a matrix get a gradient suited to XLA:CPU where the default is slow:
    2 to 4 outputs (a policy head over a few actions, a Q-head) the multiply-reduce above;
    one output (a value head) on _MANY_ROWS rows or more, the chunked sum above; more than
    4, when a holds at most _FEW_ROWS rows, the transposed copy above, and on more rows, for
    a weight from 32x32 to 64x128 on CPU, the blocked sum above. Rows are a's leading
    axes: a minibatch it holds, or the points of vector dims (`OpRule.rows`). Everything
    else is jnp.matmul: for one output on fewer rows XLA turns the gradient into a reduce of
    its own (the multiply-reduce made it a YNNPACK reduce of about 165 µs in PPO's update)."""
    rows = math.prod(a.shape[:-1])
    if b.ndim == 2 and 2 <= b.shape[1] <= _NARROW_OUTPUT:
        return _narrow_matmul(a, b)
    if b.ndim == 2 and b.shape[1] == 1 and rows >= _MANY_ROWS and _row_chunk(rows):
        return _one_output_matmul(a, b)
    wide = b.ndim == 2 and b.shape[1] > _NARROW_OUTPUT
    if wide and a.ndim >= 2 and rows <= _FEW_ROWS:
        return _few_rows_matmul(a, b)
    sides = (a.shape[-1], b.shape[-1])
    small_weight = (_BLOCKED_SIDES[0] <= min(sides) and max(sides) <= _BLOCKED_SIDES[1]
                    and math.prod(sides) <= _BLOCKED_MAX_WEIGHT)  # fmt: skip
    if wide and small_weight and _row_block(rows) and jax.default_backend() == "cpu":
        return _blocked_matmul(a, b)
    return jnp.matmul(a, b)


def _softmax_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    (x,) = types
    normalize_axes("softmax", params.get("axis", -1), len(x.shape))
    return TensorType(x.shape, promote([x.dtype, "float32"]))


for _name, _fn in REDUCTIONS.items():
    register(_name, _reduce(_name), _fn)
register("cumsum", _along_axis("cumsum"), lambda x, axis=0: jnp.cumsum(x, axis=axis))
register("discounted_cum_sum", _along_axis("discounted_cum_sum"), _discounted_cum_sum)
register("linear_recurrence", _along_axis("linear_recurrence"), _linear_recurrence)
register("matmul", _matmul_infer, _matmul, rows=True)
register("argmax", _argmax_infer, lambda x, axis=-1: jnp.argmax(x, axis=axis).astype("int32"))
register("softmax", _softmax_infer, lambda x, axis=-1: jax.nn.softmax(x, axis=axis))
register("log_softmax", _softmax_infer, lambda x, axis=-1: jax.nn.log_softmax(x, axis=axis))
