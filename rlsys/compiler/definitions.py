"""`x[b, t + 1] = value`: turning one definition of a placeholder into a `Branch`.

The left side names the points being defined, one index per dimension of x:

    the dimension itself   t      every t
    a shift                t + k  the points t + k for t in range; value read at t - k
    a constant             0, T-1 only that point; the value must not vary along t

Definitions are ordered: at a point that several define, the first one written applies,
so write special cases (t == 0) before the general rule (a default `x[b, t] = ...`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlsys.compiler.builder import user_source_line
from rlsys.compiler.errors import IndexExprError, RecurrenceError
from rlsys.compiler.index import Affine, IndexExpr, Slice, Symbol, as_expr
from rlsys.compiler.indexing import normalize_indices
from rlsys.compiler.ir import Branch, Edge
from rlsys.compiler.rules import ShapeError
from rlsys.compiler.tensor import RecurrentTensor, constant, lift

if TYPE_CHECKING:
    from rlsys.compiler.index import Dim


def define(target: RecurrentTensor, key: Any, value: Any) -> None:
    node, program = target.node, target.program
    source = user_source_line()
    where = f"{target.label}[...] = ... (at {source})"
    if node.op != "merge":
        raise RecurrenceError(
            f"{where}: {target.label} is not a placeholder; only tensors made with "
            "rt.placeholder() are defined with `x[...] = value`"
        )
    index = normalize_indices(key, node.domain, target.label)
    region, shifts, fixed = [], {}, {}
    for dim, item in zip(node.domain, index, strict=True):
        lo, hi, shift = _lhs_range(dim, item, where)
        region.append((lo, hi))
        if shift is None:
            fixed[dim] = item
        else:
            shifts[dim] = shift
    value = _coerce_value(program, target, value, where)
    value_index = []
    for dim in value.domain:
        if dim in shifts:
            value_index.append(as_expr(dim) - shifts[dim])
        elif dim in fixed:
            raise RecurrenceError(
                f"{where}: the value varies along {dim.name} but the left side fixes "
                f"{dim.name} = {fixed[dim]}; index the value too, e.g. value[..., {fixed[dim]}]"
            )
        else:
            raise RecurrenceError(
                f"{where}: the value varies along {dim.name}, which is not in the domain of "
                f"{target.label} ({', '.join(d.name for d in node.domain)})"
            )
    edge = Edge(value.node_id, tuple(value_index))
    _refuse_shadowed(program, node, tuple(region), where)
    program.add_branch(node.id, Branch(tuple(region), edge, source))


def _refuse_shadowed(program, node, region, where: str) -> None:
    """The first matching definition wins, so one written after a definition that covers all
    its points, whatever the bounds, never applies: a base case after the general rule
    (`x[t] = ...; x[0] = ...`), or an optimizer's update of a parameter already defined
    everywhere. That silently ignored the later definition."""
    for earlier in program.branches(node.id):
        pairs = zip(earlier.region, region, strict=True)
        if all(
            _at_most(lo, new_lo) and _at_most(new_hi, hi) for (lo, hi), (new_lo, new_hi) in pairs
        ):
            raise RecurrenceError(
                f"{where}: this definition never applies: the earlier one at {earlier.source} "
                "defines every point it does, and the first matching definition wins; write "
                "special cases (base cases) before the general rule"
            )


def _at_most(a: IndexExpr, b: IndexExpr) -> bool:
    """a <= b for every value of the bounds (each >= 1), provably; False when unsure."""
    try:
        diff = b - a
    except IndexExprError:  # a min less a min: no canonical form, so not provable here
        return False
    if not isinstance(diff, Affine) or diff.dims():
        return False
    if any(coeff < 0 for _, coeff in diff.terms):
        return False
    return diff.const + sum(coeff for _, coeff in diff.terms) >= 0


def _lhs_range(dim: Dim, item: Any, where: str) -> tuple[IndexExpr, IndexExpr, int | None]:
    """(lo, hi, shift) of the points of `dim` a left-side index defines; shift None = fixed."""
    bound = as_expr(dim.bound)
    if isinstance(item, Slice):
        raise RecurrenceError(f"{where}: the left side indexes {dim.name} with a slice {item}; "
                              "define points: t, t + k or a constant")  # fmt: skip
    if not item.dims():
        if _at_most(bound, item):  # x[T] = ...: past the last point for every T, never applies
            raise RecurrenceError(
                f"{where}: {dim.name} = {item} is outside 0..{dim.bound.name} - 1 whatever "
                f"the bounds; the last point is {dim.bound.name} - 1"
            )
        return item, item + 1, None
    single = item.single_dim() if isinstance(item, Affine) else None
    if single is None or single[0] is not dim:
        raise RecurrenceError(
            f"{where}: the left side indexes {dim.name} with {item}; use {dim.name}, "
            f"{dim.name} + k or a constant there"
        )
    k = single[1]
    return as_expr(max(k, 0)), bound + min(k, 0), k


def _coerce_value(program, target: RecurrentTensor, value: Any, where: str) -> RecurrentTensor:
    node = target.node
    # a dimension or index expression (x[t] = t) is lifted to its int32 value below
    plain = not isinstance(value, RecurrentTensor | Symbol | IndexExpr)
    if plain and np.ndim(value) == 0 and _concrete(node.shape):
        value = np.broadcast_to(np.asarray(value), node.shape)
        return constant(program, value, dtype=node.dtype)
    value = lift(program, value)
    if value.dtype != node.dtype:
        raise ShapeError(
            f"{where}: {target.label} is {node.dtype} but the value is {value.dtype}; "
            f"convert it with .astype('{node.dtype}')"
        )
    if tuple(value.shape) != tuple(node.shape):
        raise ShapeError(
            f"{where}: {target.label} has spatial shape {node.shape} but the value has "
            f"{value.shape}"
        )
    return value


def _concrete(shape: tuple) -> bool:
    return all(isinstance(n, int) for n in shape)
