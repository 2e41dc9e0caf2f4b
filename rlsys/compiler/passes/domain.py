"""Domain reduction: drop the dimensions an op's value does not vary along.

    x[b, 0] = 1.0
    x[b, t + 1] = x[b, t] * 2.0      # the same for every b

x is declared over (b, t) but is the same for every b, so it is computed once per t and read
by every b: B times less work, and one fewer vmap.

A node varies along a dim when something it computes from does (a least fixpoint, so a
recurrence that only copies a constant does not vary along its own dim):

    const                 nothing
    input, host op        every dim of its domain (data from outside)
    dim_value             the dims of its expression
    merge (placeholder)   its definitions' reads, and each dim along which its definitions
                          split the domain (which one applies depends on the coordinate)
    other ops             their reads: an edge varies along the consumer dims its index uses
                          for the producer dims the producer varies along, and along the dims
                          of a variable slice's length

A gradient's parameter keeps its whole domain (d loss / d param is per point of it), and so
do inputs and host ops (data from outside varies along all of their dims); a dim that some
reader slices is kept too (the slice is an axis of the reader's value). Readers that see
a reduced node through its old domain (a program output, a sink, a gradient's loss, which a
gradient sums over its points) read it through an `index` node that broadcasts it back. A
reduced node's readers drop the index entries of the dims it lost.
"""

from __future__ import annotations

from dataclasses import replace

from rlsys.compiler.index import Dim, Slice, as_expr
from rlsys.compiler.ir import Edge, Graph, Node, identity_index
from rlsys.compiler.rules import RULES


def reduce_domains(graph: Graph) -> Graph:
    varies = _variation(graph)
    new_domain = {
        n.id: tuple(d for d in n.domain if d in varies[n.id])
        for n in graph
        if not set(n.domain) <= varies[n.id]
    }
    if not new_domain:
        return graph
    nodes = {}
    for node in graph:
        domain = new_domain.get(node.id, node.domain)
        branches = tuple(replace(b, region=_kept_region(node, b.region, domain),
                                 edge=_reread(graph, b.edge, new_domain))
                         for b in node.branches)  # fmt: skip
        inputs = tuple(_reread(graph, e, new_domain) for e in node.inputs)
        nodes[node.id] = replace(node, domain=domain, inputs=inputs, branches=branches)
    expanded: dict[int, int] = {}  # reduced node -> its broadcast back to the old domain

    def through_old_domain(edge: Edge) -> Edge:
        if edge.node not in new_domain:
            return edge
        if edge.node not in expanded:
            old, kept = graph[edge.node], nodes[edge.node]
            expanded[edge.node] = new_id = max(nodes) + 1
            read = Edge(kept.id, identity_index(kept.domain))
            nodes[new_id] = replace(
                old,
                id=new_id,
                op="index",
                inputs=(read,),
                branches=(),
                name=None,  # explain() shows the reduced node under the user's name
                params=(("dtype", old.dtype), ("shape", old.shape)),
            )
        return Edge(expanded[edge.node], edge.index)

    for node in graph:
        if node.op == "grad":
            loss, param = node.inputs[0], nodes[node.id].inputs[1]  # the loss's old index
            nodes[node.id] = replace(nodes[node.id], inputs=(through_old_domain(loss), param))
    outputs = tuple((name, through_old_domain(e)) for name, e in graph.outputs)
    return graph.replace(nodes=nodes, outputs=outputs)


def _kept_dims(graph: Graph) -> dict[int, set[Dim]]:
    """Dims a node keeps whatever it reads: all of them for inputs, host ops and gradients'
    parameters; and each dim some reader slices (a slice is an axis of the reader's value,
    which must keep its length)."""
    kept: dict[int, set[Dim]] = {n.id: set() for n in graph}
    for node in graph:
        if node.op == "input" or RULES[node.op].host is not None:
            kept[node.id] |= set(node.domain)
        if node.op == "grad":
            kept[node.inputs[1].node] |= set(graph[node.inputs[1].node].domain)
        for edge in node.all_edges():
            producer = graph[edge.node]
            kept[edge.node] |= {d for d, item in zip(producer.domain, edge.index, strict=True)
                                if isinstance(item, Slice)}  # fmt: skip
    return kept


def _variation(graph: Graph) -> dict[int, set[Dim]]:
    varies = _kept_dims(graph)
    changed = True
    while changed:  # grows monotonically to the least fixpoint
        changed = False
        for node in graph:
            found = _own_variation(graph, node, varies)
            if not found <= varies[node.id]:
                varies[node.id] |= found
                changed = True
    return varies


def _own_variation(graph: Graph, node: Node, varies: dict[int, set[Dim]]) -> set[Dim]:
    domain = set(node.domain)
    if node.op == "dim_value":
        return set(node.param("expr").dims())
    found = {d for extent in node.shape if not isinstance(extent, int)
             for d in as_expr(extent).dims()}  # fmt: skip
    for edge in node.all_edges():
        producer = graph[edge.node]
        for dim, item in zip(producer.domain, edge.index, strict=True):
            if dim in varies[edge.node]:
                found |= item.dims()
    for k, dim in enumerate(node.domain):
        if node.branches and any(not _full(b.region[k], dim) for b in node.branches):
            found.add(dim)
    return found & domain


def _full(bounds, dim: Dim) -> bool:
    lo, hi = bounds
    return lo.constant_value() == 0 and hi == as_expr(dim.bound)


def _kept_region(node: Node, region, domain: tuple[Dim, ...]):
    return tuple(r for d, r in zip(node.domain, region, strict=True) if d in domain)


def _reread(graph: Graph, edge: Edge, new_domain: dict[int, tuple]) -> Edge:
    """The edge after its producer lost dims: without their entries."""
    producer = graph[edge.node]
    kept = new_domain.get(edge.node, producer.domain)
    index = tuple(i for d, i in zip(producer.domain, edge.index, strict=True) if d in kept)
    return Edge(edge.node, index)
