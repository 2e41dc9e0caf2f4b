"""Demand analysis: which points of each tensor the outputs need, and are they all defined?

Starting from the outputs (every point of their domains), each read propagates a box of
demanded points to its producer: for every dimension, the range of the index over the
consumer's demanded box (computed exactly: at the box's corners where the index moves one
way along each dim, else by evaluating it at every point). A placeholder passes on to each
definition only the part of its demand inside that definition's region. This runs to a
fixed point (boxes only grow, and are bounded). Its cost does not grow with the extents of
the dims (a million iterations cost what ten do): ranges come from corners, and regions
are compared piece by piece, a piece being a run of points every region treats alike.

It reports, at compile time and with the tensor, index and line:
- a read outside a tensor's bounds (`x[t + 1]` at t = T - 1 with no definition guarding it);
- a demanded point of a placeholder that no definition covers (`x[0]` never defined).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Affine, Bound, Dim, IndexExpr, MinMax, Slice
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


def _pieces(span: tuple[int, int], ends: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """`span` (lo, hi) cut at `ends`: the starts and stops of its pieces."""
    lo, hi = span
    if lo >= hi:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cuts = sorted({lo, hi, *(e for e in ends if lo < e < hi)})
    return np.array(cuts[:-1], dtype=np.int64), np.array(cuts[1:], dtype=np.int64)


def _evaluate_region(region, bounds) -> Box:
    return tuple((int(lo.evaluate(bounds)), int(hi.evaluate(bounds))) for lo, hi in region)


def _grid(node: Node, box: Box, dims: frozenset[Dim], bounds, corners: bool) -> dict:
    """Each dim the index uses at every point of the box, or only at its first and last
    (`corners`), as broadcastable arrays."""
    env: dict = dict(bounds)
    used = [d for d in node.domain if d in dims]
    for k, dim in enumerate(used):
        lo, hi = box[node.domain.index(dim)]
        shape = [1] * len(used)
        values = np.unique([lo, hi - 1]) if corners else np.arange(lo, hi)
        shape[k] = len(values)
        env[dim] = values.reshape(shape)
    return env


def _slopes(expr: IndexExpr) -> dict[Dim, set[int]]:
    """The signs (-1, 1) of each dim's coefficients in the expression's affine parts."""
    if isinstance(expr, MinMax):
        merged: dict[Dim, set[int]] = {}
        for arg in expr.args:
            for dim, signs in _slopes(arg).items():
                merged.setdefault(dim, set()).update(signs)
        return merged
    if not isinstance(expr, Affine):
        return {dim: {-1, 1} for dim in expr.dims()}  # no shape known: not monotone
    return {s: {1 if c > 0 else -1} for s, c in expr.terms if isinstance(s, Dim)}


def _monotone(item: IndexExpr | Slice) -> bool:
    """Whether the index only rises or only falls along each dim, so that its least and
    greatest values over a box are at the box's corners (a slice: its ends, and its length
    the same everywhere, so that it is empty at every point or none)."""
    if isinstance(item, Slice):
        if item.length().dims():
            return False
        exprs = [item.start, item.stop]
    else:
        exprs = [item]
    return all(len(signs) == 1 for e in exprs for signs in _slopes(e).values())


def _propagate(graph: Graph, consumer: Node, edge: Edge, box: Box, bounds, demand_box) -> None:
    if any(lo >= hi for lo, hi in box):
        return
    producer = graph[edge.node]
    needed = []
    for dim, item in zip(producer.domain, edge.index, strict=True):
        env = _grid(consumer, box, item.dims(), bounds, corners=_monotone(item))
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

    Only the dims some definition restricts are enumerated (usually just t), and only piece
    by piece: the box's range of such a dim cut at every region's ends, one point standing
    for each piece. Raises when a demanded point is covered by no definition.
    """
    regions = [_evaluate_region(b.region, bounds) for b in node.branches]
    constrained = [k for k, dim in enumerate(node.domain)
                   if any(r[k] != (0, bounds[dim.bound]) for r in regions)]  # fmt: skip
    pieces = [_pieces(box[k], [end for r in regions for end in r[k]]) for k in constrained]
    grids = np.meshgrid(*(starts for starts, _ in pieces), indexing="ij") if pieces else []
    lasts = np.meshgrid(*(stops - 1 for _, stops in pieces), indexing="ij") if pieces else []
    covered = np.zeros(tuple(len(starts) for starts, _ in pieces), bool)
    boxes: list[Box | None] = []
    for region in regions:
        mine = ~covered
        for grid, k in zip(grids, constrained, strict=True):
            mine &= (grid >= region[k][0]) & (grid < region[k][1])
        covered |= mine
        inside = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, region, strict=True)]
        for n, k in enumerate(constrained):
            hits = grids[n][mine]
            inside[k] = (int(hits.min()), int(lasts[n][mine].max()) + 1) if hits.size else (0, 0)
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
