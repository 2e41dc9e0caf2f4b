"""The IR verifier: the invariants every pass must keep (run between passes in debug mode)."""

from __future__ import annotations

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.ir import Edge, Graph, Node
from rlsys.compiler.rules import RULES


class VerifyError(RecurrenceError):
    """A pass produced a malformed graph: a bug in rlsys, not in the user's program."""


def verify(graph: Graph) -> Graph:
    for node_id, node in graph.nodes.items():
        if node.id != node_id:
            raise VerifyError(f"node {node.label()} is stored under id {node_id}")
        if node.op not in RULES:
            raise VerifyError(f"{node.label()}: op {node.op!r} has no rules")
        for edge in node.all_edges():
            _verify_edge(graph, node, edge)
        if node.branches and node.op != "merge":
            raise VerifyError(f"{node.label()}: only placeholders have definitions")
    for name, edge in graph.outputs:
        if edge.node not in graph.nodes:
            raise VerifyError(f"output {name!r} reads a node that is gone")
    return graph


def _verify_edge(graph: Graph, node: Node, edge: Edge) -> None:
    if edge.node not in graph.nodes:
        raise VerifyError(f"{node.label()} reads node {edge.node}, which is not in the graph")
    producer = graph[edge.node]
    if len(edge.index) != len(producer.domain):
        raise VerifyError(f"{node.label()} reads {producer.label()} with {len(edge.index)} "
                          f"indices for {len(producer.domain)} dims")  # fmt: skip
    stray = edge.dims() - set(node.domain)
    if stray:
        names = ", ".join(sorted(d.name for d in stray))
        raise VerifyError(f"{node.label()} reads {producer.label()} with dims {names} that "
                          "are not in its own domain")  # fmt: skip
