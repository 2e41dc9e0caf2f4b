"""Shapes written with bounds (`x[b, 0:T].reshape(2 * T)`, a constant broadcast to a slice's
shape by `linear_recurrence`) made concrete once the bounds are known.

The ops' JAX functions take the shape as given, and a bound symbol there failed inside JAX
(a TypeError); a reshape whose sizes do not match for these bounds is named here instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from rlsys.compiler.index import Bound, as_expr
from rlsys.compiler.ir import Graph, concrete_shape
from rlsys.compiler.rules import ShapeError

SHAPED_OPS = ("reshape", "broadcast_to")


def bind_shape_params(graph: Graph, bounds: Mapping[Bound, int]) -> Graph:
    nodes = dict(graph.nodes)
    for node in graph:
        if node.op not in SHAPED_OPS:
            continue
        shape, source_node = node.param("shape"), graph[node.inputs[0].node]
        symbolic = [as_expr(n) for n in (*shape, *source_node.shape) if not isinstance(n, int)]
        if not symbolic or any(e.dims() for e in symbolic):  # known, or varies per point
            continue
        concrete = tuple(n if isinstance(n, int) else int(as_expr(n).evaluate(bounds))
                         for n in shape)  # fmt: skip
        source = concrete_shape(source_node, bounds)
        if node.op == "reshape" and math.prod(source) != math.prod(concrete):
            given = ", ".join(f"{b.name}={v}" for b, v in bounds.items())
            target = str(concrete) if concrete == tuple(shape) else f"{tuple(shape)} = {concrete}"
            raise ShapeError(f"{node.label()} at {node.source}: cannot reshape {source} into "
                             f"{target} with {given}")  # fmt: skip
        params = {**dict(node.params), "shape": concrete}
        nodes[node.id] = replace(node, params=tuple(sorted(params.items())))
    return graph.replace(nodes=nodes)
