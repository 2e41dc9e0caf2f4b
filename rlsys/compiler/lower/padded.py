"""Variable-size slices in the JAX lowering: padded to their largest length, masked where
the padding could change a result.

`x[t:T]` has T - t entries at point t: a ragged axis, which no JAX array has. The lowering
gives it T entries everywhere (`ir.concrete_shape` takes the largest length; `read_edge`
reads past the end with clipped, harmless indices) and keeps the true length symbolic in
the node's shape. Padding never leaks into a result because the ops that may consume a
padded axis are only:

    elementwise ops     each entry on its own: padded entries stay padded entries
    reductions          sum, mean, max, min, std over the axis: the padded entries are
                        masked out, using the length evaluated at each point

Anything else (a matmul, cumsum or reshape along it, an output, a placeholder) is refused
at compile time with the tensor's name and line: the reference backend runs those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from rlsys.compiler.builder import assigned_name
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import IndexExpr, as_expr
from rlsys.compiler.ir import Graph, Node
from rlsys.compiler.rules.base import normalize_axes
from rlsys.compiler.rules.elementwise import ARITHMETIC, COMPARISON, UNARY
from rlsys.compiler.rules.reduce import REDUCTIONS

ELEMENTWISE = {*UNARY, *ARITHMETIC, *COMPARISON, "where", "cast", "integer_pow"}


def variable_axes(node: Node) -> dict[int, IndexExpr]:
    """The spatial axes of a node whose length varies with a dim, and those lengths."""
    return {
        axis: as_expr(extent)
        for axis, extent in enumerate(node.shape)
        if not isinstance(extent, int) and as_expr(extent).dims()
    }


def check_consumer(graph: Graph, node: Node) -> dict[int, IndexExpr]:
    """The padded axes of a node's input (a reduction's), after checking that the node may
    read padded inputs at all. {} when none of its inputs is padded."""
    padded = [(e, variable_axes(graph[e.node])) for e in node.all_edges()]
    padded = [(e, axes) for e, axes in padded if axes]
    if not padded:
        return {}
    if node.op in ELEMENTWISE:
        return {}
    if node.op in REDUCTIONS:
        return padded[0][1]
    producer = graph[padded[0][0].node]
    where = f" (at {node.source})" if node.source else ""
    raise RecurrenceError(
        f"{_named(node)}: {node.op} of {_named(producer)}, whose size varies from point to "
        f"point (a variable-size slice), is not supported by backend='jax'{where}; it "
        "supports elementwise ops and sum/mean/max/min/std over such a slice. Use "
        "backend='ref', or a fixed-size slice with a mask"
    )


def _named(node: Node) -> str:
    """The user's name for a node: its own, else the variable its line assigns."""
    return node.name or assigned_name(node.source) or node.label()


def masked_reduction(op: str, params: dict[str, Any], ndim: int,
                     lengths: dict[int, IndexExpr]) -> Callable[..., Any]:  # fmt: skip
    """The reduction's point function with one extra argument per padded axis: the true
    length at that point. Entries at or past it do not count."""
    axes = normalize_axes(op, params.get("axis"), ndim)
    keepdims = params.get("keepdims", False)
    ragged = sorted(lengths)

    def reduce(x, *true_lengths):
        mask = jnp.ones(x.shape, bool)
        for axis, n in zip(ragged, true_lengths, strict=True):
            shape = [1] * x.ndim
            shape[axis] = x.shape[axis]
            mask = mask & (jnp.arange(x.shape[axis]).reshape(shape) < n)
        count = jnp.sum(mask, axis=axes, keepdims=keepdims)
        if op == "sum":
            return jnp.sum(jnp.where(mask, x, 0), axis=axes, keepdims=keepdims)
        if op in ("max", "min"):
            info = jnp.finfo if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo
            fill = info(x.dtype).min if op == "max" else info(x.dtype).max
            return REDUCTIONS[op](jnp.where(mask, x, fill), axis=axes, keepdims=keepdims)
        mean = jnp.sum(jnp.where(mask, x, 0), axis=axes, keepdims=True) / jnp.sum(
            mask, axis=axes, keepdims=True)  # fmt: skip
        if op == "mean":
            return mean if keepdims else jnp.squeeze(mean, axis=axes)
        squares = jnp.sum(jnp.where(mask, (x - mean) ** 2, 0), axis=axes, keepdims=keepdims)
        return jnp.sqrt(squares / count)

    return reduce
