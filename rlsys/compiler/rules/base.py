"""The rule record and the registry it is kept in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import IndexExpr, Symbol
from rlsys.compiler.indexing import Extent


class ShapeError(RecurrenceError):
    """Input shapes or dtypes that an op cannot combine."""


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Extent, ...]
    dtype: str


def checked_type(shape: Any, dtype: Any, what: str) -> TensorType:
    """The type a user declared (`rt.placeholder`, `rt.input`, `.astype`, random draws), or a
    ShapeError naming `what`: a bad shape or dtype otherwise failed inside NumPy or XLA."""
    try:
        name = str(np.dtype(dtype))
    except TypeError:
        raise ShapeError(f"{what}: {dtype!r} is not a dtype; use e.g. 'float32', 'int32', "
                         "'uint8' or 'bool'") from None  # fmt: skip
    if np.dtype(name).kind not in "biuf":
        raise ShapeError(f"{what}: dtype {name} is not a number or bool type")
    narrow = str(jax.dtypes.canonicalize_dtype(name))
    if narrow != name:  # 64-bit types without JAX's x64 mode
        raise ShapeError(
            f"{what}: dtype {name} would silently be {narrow} (JAX runs without 64-bit types "
            f"here); use {narrow}"
        )
    if not isinstance(shape, tuple | list):
        raise ShapeError(f"{what}: shape {shape!r} is not a tuple; write shape=({shape!r},)")
    for n in shape:
        symbolic = isinstance(n, Symbol | IndexExpr)  # a bound (B) or an expression of them
        whole = isinstance(n, int | np.integer) and not isinstance(n, bool)
        if not symbolic and (not whole or n < 0):
            raise ShapeError(f"{what}: shape {tuple(shape)} needs sizes that are integers >= 0")
    return TensorType(tuple(int(n) if isinstance(n, np.integer) else n for n in shape), name)


Infer = Callable[[Sequence[TensorType], Mapping[str, Any]], TensorType]


@dataclass(frozen=True)
class OpRule:
    name: str
    infer: Infer
    point: Callable[..., Any] | None  # None for structural and host ops
    # A host op runs Python on the host, once for the whole batch of its vector dims (a
    # gymnasium vector env steps all its envs in one call): host(*batched_inputs, **params).
    host: Callable[..., Any] | None = None
    # The point function also takes its first input with leading row axes when the others
    # have none (a matmul of rows through one matrix): the vectorizer may then call it once
    # on all rows instead of vmapping it, so that it sees how many rows there are.
    rows: bool = False


RULES: dict[str, OpRule] = {}


def register(name: str, infer: Infer, point: Callable[..., Any] | None,
             host: Callable[..., Any] | None = None, rows: bool = False) -> None:  # fmt: skip
    if name in RULES:
        raise ValueError(f"op {name!r} registered twice")
    RULES[name] = OpRule(name, infer, point, host, rows)


def promote(dtypes: Sequence[str]) -> str:
    # JAX's promotion lattice (int32 with float32 is float32, not NumPy's float64).
    return str(jnp.result_type(*dtypes))


def broadcast_shapes(op: str, shapes: Sequence[tuple[Extent, ...]]) -> tuple[Extent, ...]:
    """NumPy broadcasting that also accepts symbolic extents (equal, or one side 1)."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[Extent] = []
    for axis in range(rank):
        extents = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        extents.discard(1)
        if len(extents) > 1:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise ShapeError(f"{op}: spatial shapes {listed} do not broadcast")
        result.append(extents.pop() if extents else 1)
    return tuple(result)


def largest_divisor(n: int, least: int, most: int) -> int | None:
    """The largest divisor of `n` from `least` to `most` (None if there is none): how ops
    split rows or images into equal chunks."""
    return next((d for d in range(min(n, most), least - 1, -1) if n % d == 0), None)


def normalize_axes(op: str, axis: Any, rank: int) -> tuple[int, ...]:
    axes = tuple(range(rank)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    normal = []
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(f"{op}: axis {a} is out of range for a spatial rank of {rank}")
        normal.append(a % rank)
    return tuple(normal)
