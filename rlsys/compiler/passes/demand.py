"""Demand analysis: which points of each tensor the outputs need, and are they all defined?

Starting from the outputs (every point of their domains), each read propagates a box of
demanded points to its producer: for every dimension, the range of the index over the
consumer's demanded box (computed exactly, by evaluating the index at those points). A
placeholder passes on to each definition only the part of its demand inside that
definition's region. This runs to a fixed point (boxes only grow, and are bounded).

It reports, at compile time and with the tensor, index and line:
- a read outside a tensor's bounds (`x[t + 1]` at t = T - 1 with no definition guarding it);
- a demanded point of a placeholder that no definition covers (`x[0]` never defined).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Bound, Dim, IndexExpr, Slice
from rlsys.compiler.ir import Edge, Graph, Node

Box = tuple[tuple[int, int], ...]  # half-open (lo, hi) per domain dim


def check_demand(graph: Graph, bounds: Mapping[Bound, int]) -> dict[int, Box]:
    """The demanded box of every needed node; raises RecurrenceError on a bad read."""
    demand: dict[int, Box] = {}
    queue: deque[int] = deque()

    def demand_box(node: Node, box: Box) -> None:
        old = demand.get(node.id)
        new = box if old is None else tuple(
            (min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(old, box, strict=True))  # fmt: skip
        if new != old:
            demand[node.id] = new
            queue.append(node.id)

    for _, edge in graph.outputs:
        node = graph[edge.node]
        demand_box(node, tuple((0, bounds[d.bound]) for d in node.domain))
    while queue:
        node = graph[queue.popleft()]
        box = demand[node.id]
        if node.op == "merge":
            for branch, inside in zip(node.branches, _branch_boxes(node, box, bounds), strict=True):
                if inside is not None:
                    _propagate(graph, node, branch.edge, inside, bounds, demand_box)
        else:
            for edge in node.inputs:
                _propagate(graph, node, edge, box, bounds, demand_box)
    return demand


def _evaluate_region(region, bounds) -> Box:
    return tuple((int(lo.evaluate(bounds)), int(hi.evaluate(bounds))) for lo, hi in region)


def _grid(node: Node, box: Box, dims: frozenset[Dim], bounds) -> dict:
    """Each dim the index uses at every point of the box (broadcastable arrays)."""
    env: dict = dict(bounds)
    used = [d for d in node.domain if d in dims]
    for k, dim in enumerate(used):
        lo, hi = box[node.domain.index(dim)]
        shape = [1] * len(used)
        shape[k] = hi - lo
        env[dim] = np.arange(lo, hi).reshape(shape)
    return env


def _propagate(graph: Graph, consumer: Node, edge: Edge, box: Box, bounds, demand_box) -> None:
    if any(lo >= hi for lo, hi in box):
        return
    producer = graph[edge.node]
    needed = []
    for dim, item in zip(producer.domain, edge.index, strict=True):
        env = _grid(consumer, box, item.dims(), bounds)
        if isinstance(item, Slice):
            starts, stops = np.broadcast_arrays(item.start.evaluate(env), item.stop.evaluate(env))
            nonempty = stops > starts
            if not nonempty.any():
                return  # an empty slice reads nothing
            lo, hi = int(starts[nonempty].min()), int(stops[nonempty].max())
            _check_range(consumer, producer, dim, item, env, starts, bounds, lo)
            _check_range(consumer, producer, dim, item, env, stops - 1, bounds, hi - 1)
        else:
            values = np.asarray(item.evaluate(env))
            lo, hi = int(values.min()), int(values.max()) + 1
            _check_range(consumer, producer, dim, item, env, values, bounds, lo)
            _check_range(consumer, producer, dim, item, env, values, bounds, hi - 1)
        needed.append((lo, hi))
    demand_box(producer, tuple(needed))


def _check_range(consumer, producer, dim, item, env, values, bounds, extreme: int) -> None:
    bound = bounds[dim.bound]
    if 0 <= extreme < bound:
        return
    at = np.argwhere(np.asarray(values) == extreme)
    point = _point_text(consumer, item, env, at[0] if len(at) else None)
    location = f" (defined at {consumer.source})" if consumer.source else ""
    raise RecurrenceError(
        f"{consumer.label()}: reads {producer.label()} at {dim.name}={extreme} (index {item}, "
        f"at {point}), outside 0..{bound - 1}; give the boundary point its own definition "
        f"(e.g. x[{dim.name.upper()} - 1] = ...) or shrink the index{location}"
    )


def _point_text(consumer: Node, item: IndexExpr | Slice, env, position) -> str:
    used = [d for d in consumer.domain if d in item.dims()]
    if position is None or not used:
        return "every point"
    coords = [int(np.ravel(env[d])[position[k]]) for k, d in enumerate(used)]
    return ", ".join(f"{d.name}={c}" for d, c in zip(used, coords, strict=True))


def _branch_boxes(node: Node, box: Box, bounds) -> list[Box | None]:
    """The demanded points each definition computes (first wins), as bounding boxes.

    Only the dims some definition restricts are enumerated (usually just t), so this stays
    small. Raises when a demanded point is covered by no definition.
    """
    regions = [_evaluate_region(b.region, bounds) for b in node.branches]
    constrained = [k for k, dim in enumerate(node.domain)
                   if any(r[k] != (0, bounds[dim.bound]) for r in regions)]  # fmt: skip
    axes = [np.arange(*box[k]) for k in constrained]
    grids = np.meshgrid(*axes, indexing="ij") if axes else []
    covered = np.zeros(tuple(len(a) for a in axes), bool)
    boxes: list[Box | None] = []
    for region in regions:
        mine = ~covered
        for grid, k in zip(grids, constrained, strict=True):
            mine &= (grid >= region[k][0]) & (grid < region[k][1])
        covered |= mine
        inside = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, region, strict=True)]
        for n, k in enumerate(constrained):
            hits = grids[n][mine]
            inside[k] = (int(hits.min()), int(hits.max()) + 1) if hits.size else (0, 0)
        empty = not mine.any() or any(lo >= hi for lo, hi in inside)
        boxes.append(None if empty else tuple(inside))
    if not covered.all() or not node.branches:
        first = np.argwhere(~covered)[0] if covered.ndim else ()
        values = {k: int(grids[n][tuple(first)]) for n, k in enumerate(constrained)}
        where = ", ".join(f"{d.name}={values.get(k, box[k][0])}" for k, d in enumerate(node.domain))
        location = f" (defined at {node.source})" if node.source else ""
        raise RecurrenceError(
            f"{node.label()}: {node.label()} is read at {where}, where none of its "
            f"{len(node.branches)} definitions applies; add a definition that covers it{location}"
        )
    return boxes
