"""What `x[...]` means for a recurrent tensor: the result's domain, spatial shape and edge.

Indices address the tensor's *domain* (its symbolic dimensions), one per dimension in order;
the spatial shape is untouched except for the axes that slices add. For x with domain (a, b)
and spatial shape S:

    index                 result domain   result spatial shape
    x[a, b], x[a+1, b]    (a, b)          S                 a point keeps its dimension
    x[0]   (b implied)    (b,)            S                 a constant drops it
    x[:, 1]               (a,)            S                 `:` means "the dimension itself"
    x[0:A, b]             (b,)            (A, *S)           a constant slice drops it, adds an axis
    x[0:a+1]              (a, b)          (a+1, *S)         a variable slice keeps it (ragged)
    x[min(a+10, A-1), b]  (a, b)          S

Dimensions not indexed (fewer indices than dimensions, or after `...`) are the dimension
itself. Axes added by several slices are prepended in the order of the dimensions they slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Dim, Index, IndexExpr, Slice, as_expr, as_index

Extent = int | IndexExpr  # a spatial axis length: fixed, or symbolic until compile time


@dataclass(frozen=True)
class IndexResult:
    domain: tuple[Dim, ...]
    shape: tuple[Extent, ...]
    index: tuple[Index, ...]  # one per dimension of the indexed tensor


def normalize_indices(raw: Any, domain: Sequence[Dim], what: str) -> tuple[Index, ...]:
    """Expand `...`, `:` and missing trailing indices into one index per dimension."""
    items = list(raw) if isinstance(raw, tuple) else [raw]
    # by identity: `==` on a tensor used as an index builds a node (and failed, misleadingly)
    ellipses = [k for k, item in enumerate(items) if item is Ellipsis]
    if len(ellipses) > 1:
        raise RecurrenceError(f"{what}: at most one `...` in an index")
    if ellipses:
        at = ellipses[0]
        fill = len(domain) - (len(items) - 1)
        items[at : at + 1] = [slice(None)] * max(fill, 0)
    if len(items) > len(domain):
        dims = ", ".join(d.name for d in domain) or "no dimensions"
        raise RecurrenceError(
            f"{what} has domain ({dims}) but was indexed with {len(items)} indices; index "
            "the domain only, and spatial axes with ops such as .take()"
        )
    items += [slice(None)] * (len(domain) - len(items))
    result = []
    for dim, item in zip(domain, items, strict=True):
        if isinstance(item, slice) and item == slice(None):
            result.append(as_expr(dim))
        else:
            _refuse_negative(item, dim, what)
            try:
                result.append(as_index(item))
            except RecurrenceError as err:
                raise RecurrenceError(f"{what}, index of {dim.name}: {err}") from None
    return tuple(result)


def _refuse_negative(item: Any, dim: Dim, what: str) -> None:
    """A negative integer never names a point (they run from 0): NumPy's x[-1] would read or
    define nothing here, silently in a definition, so it is refused where it is written."""
    ends = (item.start, item.stop) if isinstance(item, slice) else (item,)
    for end in ends:
        if isinstance(end, int | np.integer) and not isinstance(end, bool) and end < 0:
            raise RecurrenceError(
                f"{what}, index of {dim.name}: {end} is negative; indices do not wrap around "
                f"as in NumPy: write {dim.bound.name} - {-end} for the point {-end} from the end"
            )


def apply_index(
    domain: Sequence[Dim], shape: Sequence[Extent], raw: Any, order: Sequence[Dim], what: str
) -> IndexResult:
    """Index a tensor of `domain` and `shape`; `order` is the program's dimension order."""
    index = normalize_indices(raw, domain, what)
    used: set[Dim] = set()
    added: list[Extent] = []
    for dim, item in zip(domain, index, strict=True):
        used |= item.dims()
        if isinstance(item, Slice):
            length = item.length()
            constant = length.constant_value()
            if constant is not None and constant < 0:
                raise RecurrenceError(f"{what}: slice {item} of {dim.name} has negative length")
            added.append(constant if constant is not None else length)
    unknown = used - set(order)
    if unknown:
        names = ", ".join(sorted(d.name for d in unknown))
        raise RecurrenceError(
            f"{what}: index uses dimension {names}, which this program does not declare"
        )
    new_domain = tuple(d for d in order if d in used)
    return IndexResult(new_domain, (*added, *shape), index)
