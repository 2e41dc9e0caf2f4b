"""Common-subexpression elimination: equal ops on equal reads are computed once.

Two nodes are equal when op, domain, shape, dtype, params and input edges (after earlier
merges) are equal. Placeholders and inputs are never merged: each is its own tensor; nor are
host ops, whose calls have effects (two steps of one environment are two steps).
"""

from __future__ import annotations

from rlsys.compiler.ir import Edge, Graph
from rlsys.compiler.passes.rewrite import redirect
from rlsys.compiler.rules import RULES

NEVER_MERGED = {"merge", "input"}


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    seen: dict[tuple, int] = {}
    replacement: dict[int, int] = {}

    def resolved(edge: Edge) -> Edge:
        return Edge(replacement.get(edge.node, edge.node), edge.index)

    for node_id in sorted(graph.nodes):  # ids are a topological order outside recurrences
        node = graph[node_id]
        if node.op in NEVER_MERGED or RULES[node.op].host is not None:
            continue
        key = (node.op, node.domain, node.shape, node.dtype, node.params,
               tuple(resolved(e) for e in node.inputs))  # fmt: skip
        if key in seen:
            replacement[node_id] = seen[key]
        else:
            seen[key] = node_id
    return redirect(graph, replacement)
