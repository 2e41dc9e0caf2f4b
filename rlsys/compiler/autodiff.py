"""Gradients: `rt.grad(loss, param)` is the derivative of loss at a point with respect to
param at the same point, everything else held fixed:

    g[i] = d loss[i] / d param[i]        (typically param has domain (i,), loss is a scalar)

Both lowerings take the derivative with JAX: they re-run the ops on the paths from param to
loss as a function of param and apply `jax.grad` to it. Reads of other tensors (observations
collected by an acting loop, say) are constants of that function, so no gradient flows
through an environment; `stop_gradient` cuts a path explicitly. Because the re-run is
planned like any other part of the program, a loss over (b, t) is differentiated vectorized
over b and t even when the acting loop that produced its inputs was a scan over t.
"""

from __future__ import annotations

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Dim
from rlsys.compiler.ir import Edge, Graph, identity_index
from rlsys.compiler.rules import TensorType
from rlsys.compiler.schedule import is_same_point
from rlsys.compiler.tensor import RecurrentTensor


def grad(loss: RecurrentTensor, param: RecurrentTensor) -> RecurrentTensor:
    """The gradient of scalar `loss` with respect to `param`, at every point of param."""
    for what, tensor in (("loss", loss), ("param", param)):
        if not isinstance(tensor, RecurrentTensor):
            raise RecurrenceError(f"grad: the {what} {tensor!r} is not a tensor of the program")
        if "float" not in tensor.dtype:  # JAX's gradient of an integer is float0, not a number
            raise RecurrenceError(
                f"grad: the {what} {tensor.label} is {tensor.dtype}; gradients are taken of and "
                "with respect to floating-point tensors (.astype('float32'))"
            )
    program = loss.program
    if param.program is not program:
        raise RecurrenceError(f"grad: {param.label} belongs to another program than the loss")
    if loss.shape != ():
        raise RecurrenceError(
            f"grad: {loss.label} has spatial shape {loss.shape}; reduce it to a scalar first, "
            "e.g. loss.sum() or loss.mean()"
        )
    extra = [d.name for d in loss.domain if d not in param.domain]
    if extra:
        raise RecurrenceError(
            f"grad: {loss.label} varies along {', '.join(extra)} but {param.label} does not; "
            f"reduce those dims first, e.g. loss[..., 0:{extra[0].upper()}].mean()"
        )
    edges = [Edge(t.node_id, identity_index(t.domain)) for t in (loss, param)]
    type_ = TensorType(param.shape, param.dtype)
    params = {"shape": type_.shape, "dtype": type_.dtype}
    return program.add_node("grad", edges, param.domain, type_, params)


def check_first_order(graph: Graph) -> None:
    """Refuse a gradient whose loss reads, at the same point, a gradient that depends on its
    param (a second derivative): the JAX lowering gave zeros for it, silently (the inner gradient is
    computed before the re-run, as data), and the reference failed inside JAX."""
    for node in graph:
        if node.op != "grad":
            continue
        loss, param = node.inputs
        path = path_nodes(graph, param.node, loss.node, graph.dims)  # same-point paths only
        inner = next((graph[n] for n in sorted(path) if graph[n].op == "grad"), None)
        if inner is not None:
            raise RecurrenceError(
                f"grad at {node.source}: its loss reads the gradient at {inner.source}, which "
                "depends on the same parameter; second derivatives are not supported (cut the "
                "path with .stop_gradient() if the inner gradient is data)"
            )


def path_nodes(graph: Graph, source: int, target: int, loop_dims: tuple[Dim, ...]) -> set[int]:
    """Nodes on a dependence path source -> ... -> target (both included), not counting
    dependences carried along `loop_dims` (those read other iterations of the loop), nor
    paths through a `stop_gradient` (`_joined_stops` excepted): its derivative is 0, so what
    lies behind it is a constant of the re-run (an action sampled in an acting scan is read
    as data, rather than the whole scan re-run, and differentiated, to get zeros)."""
    consumers: dict[int, set[int]] = {n: set() for n in graph.nodes}
    producers: dict[int, set[int]] = {n: set() for n in graph.nodes}
    stops = []
    for node in graph:
        for edge in node.all_edges():
            producer = graph[edge.node]
            carried = any(
                not is_same_point(index, dim)
                for dim, index in zip(producer.domain, edge.index, strict=True)
                if dim in loop_dims
            )
            if carried:
                continue
            if node.op == "stop_gradient":
                stops.append((edge.node, node.id))
                continue
            consumers[edge.node].add(node.id)
            producers[node.id].add(edge.node)
    path = _reach(source, consumers) & _reach(target, producers)
    return _joined_stops(graph, path, stops, consumers, producers, source, target)


def _joined_stops(
    graph: Graph,
    path: set[int],
    stops: list[tuple[int, int]],
    consumers: dict,
    producers: dict,
    source: int,
    target: int,
) -> set[int]:
    """The path with the `stop_gradient`s of its own values on it, and what they lead to on
    the way to the loss, where that is all at the same point: the re-run computes such a
    value anyway, so it takes the constant from there, rather than have it computed apart
    beforehand (A2C's advantage G - V reads the critic's V, which the value loss's re-run
    computes: one pass of the critic over the rollout, not two). A stop that would bring in
    a value of another point (the state of an acting scan, x[t + 1] from step t) stays a cut:
    that would re-run the scan."""
    for m, n in stops:
        if m not in path:
            continue
        consumers[m].add(n)
        producers[n].add(m)
        joined = _reach(source, consumers) & _reach(target, producers)
        added = joined - path
        if all(_same_point(graph, edge) for c in joined for edge in graph[c].all_edges()
               if edge.node in added):  # fmt: skip
            path = joined
        else:
            consumers[m].discard(n)
            producers[n].discard(m)
    return path


def _same_point(graph: Graph, edge: Edge) -> bool:
    producer = graph[edge.node]
    return all(is_same_point(index, dim)
               for dim, index in zip(producer.domain, edge.index, strict=True))  # fmt: skip


def _reach(start: int, neighbours: dict[int, set[int]]) -> set[int]:
    seen, stack = {start}, [start]
    while stack:
        for nxt in neighbours[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def rerun_reads(graph: Graph, path: set[int], param: int, loop_dims: tuple[Dim, ...]) -> set[int]:
    """The values a gradient's re-run of `path` reads: the parameter, what the path's ops read
    from off the path (data), and path values read along a carried dependence (an earlier
    iteration's). The path's other values are recomputed, so they need not be kept."""
    reads = {param}
    for m in path - {param}:
        for edge in graph[m].all_edges():
            carried = any(
                not is_same_point(index, dim)
                for dim, index in zip(graph[edge.node].domain, edge.index, strict=True)
                if dim in loop_dims
            )
            if edge.node not in path or carried:
                reads.add(edge.node)
    return reads
