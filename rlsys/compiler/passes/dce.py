"""Dead-code elimination: keep only the nodes the outputs depend on."""

from __future__ import annotations

from collections.abc import Iterable

from rlsys.compiler.ir import Graph


def needed_nodes(graph: Graph, roots: Iterable[int] | None = None) -> set[int]:
    """The nodes `roots` (default: the outputs) depend on, the roots included."""
    needed: set[int] = set()
    stack = [edge.node for _, edge in graph.outputs] if roots is None else list(roots)
    while stack:
        node_id = stack.pop()
        if node_id not in needed:
            needed.add(node_id)
            stack.extend(edge.node for edge in graph[node_id].all_edges())
    return needed


def eliminate_dead_code(graph: Graph) -> Graph:
    needed = needed_nodes(graph)
    return graph.replace(nodes={i: n for i, n in graph.nodes.items() if i in needed})
