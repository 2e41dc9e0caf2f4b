"""Fold identity reads: `x[b, t]` of an x with domain (b, t) is x itself."""

from __future__ import annotations

from rlsys.compiler.ir import Graph, is_identity
from rlsys.compiler.passes.rewrite import redirect


def fold_identity_index(graph: Graph) -> Graph:
    replacement = {}
    for node in graph:
        if node.op != "index":
            continue
        (edge,) = node.inputs
        producer = graph[edge.node]
        if producer.domain == node.domain and is_identity(edge, producer):
            replacement[node.id] = edge.node
    return redirect(graph, replacement)
