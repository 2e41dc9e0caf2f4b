"""Redirecting reads: the shared step of passes that replace one node by another."""

from __future__ import annotations

from dataclasses import replace

from rlsys.compiler.ir import Edge, Graph


def redirect(graph: Graph, replacement: dict[int, int]) -> Graph:
    """Make every read of node k read `replacement[k]` instead (same index), drop k."""
    if not replacement:
        return graph

    def target(node_id: int) -> int:
        while node_id in replacement:
            node_id = replacement[node_id]
        return node_id

    def moved(edge: Edge) -> Edge:
        return Edge(target(edge.node), edge.index) if edge.node in replacement else edge

    nodes = {}
    for node_id, node in graph.nodes.items():
        if node_id in replacement:
            continue
        branches = tuple(replace(b, edge=moved(b.edge)) for b in node.branches)
        nodes[node_id] = replace(node, inputs=tuple(moved(e) for e in node.inputs),
                                 branches=branches)  # fmt: skip
    outputs = tuple((name, moved(edge)) for name, edge in graph.outputs)
    return graph.replace(nodes=nodes, outputs=outputs)
