"""Per-dimension dependence analysis: which dimension of which op is a loop, which a vector.

The method is the classic loop-nest construction for recurrence equations (Allen and
Kennedy's codegen), applied to recurrent tensors:

    def plan(nodes, loop_dims):
        graph = dependences among `nodes`, minus those carried by an enclosing loop
        for scc in strongly_connected_components(graph), producers first:
            if scc is one node without a self-dependence:
                Compute(node)            # vectorized over every dim not in loop_dims
            else:
                d = outermost dim that carries a dependence inside scc
                Loop(d, body=plan(scc, loop_dims + (d,)))   # a sequential scan over d

A dependence is *carried* along d when its index on d is not d itself (`d - 1`, `d + 1`, a
slice); one whose index is d itself is satisfied within the same iteration. So in a PPO
program the acting chain (obs -> policy -> env step -> obs[t + 1]) becomes a scan over t
nested in the scan over i that the parameter update (theta[i + 1] = ...) makes, while the
batch dimension b, which no dependence crosses, is vectorized everywhere.

A cycle that no dimension carries (`x[t] = x[t] + 1`) has no base case; a scan that would
have to read both earlier and later points of itself cannot be ordered. Both are errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Affine, Dim, Index, Slice
from rlsys.compiler.ir import Edge, Graph, Node


class ScheduleError(RecurrenceError):
    """A dependence structure that no loop order can compute."""


@dataclass(frozen=True)
class Compute:
    node: int
    vector_dims: tuple[Dim, ...]


@dataclass(frozen=True)
class Loop:
    dim: Dim
    reverse: bool  # True when the recurrence reads later points (returns, GAE)
    members: frozenset[int]
    body: tuple[Compute | Loop, ...]


Step = Compute | Loop


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Step, ...]
    loops_of: dict[int, tuple[Dim, ...]] = field(default_factory=dict)  # node -> loop dims

    def decision(self, node: Node, dim: Dim) -> str:
        return "scan" if dim in self.loops_of.get(node.id, ()) else "vectorize"


def index_on(edge: Edge, producer: Node, dim: Dim) -> Index | None:
    """The index an edge uses for the producer's dimension `dim` (None: not in its domain)."""
    for d, item in zip(producer.domain, edge.index, strict=True):
        if d is dim:
            return item
    return None


def is_same_point(item: Index | None, dim: Dim) -> bool:
    return isinstance(item, Affine) and item.single_dim() == (dim, 0)


def constant_index(item: Index | None, bounds) -> int | None:
    """The point an index entry always reads (`T - 1`, `0`), or None if it varies or is a
    slice. `bounds` gives the extents' values."""
    if item is None or isinstance(item, Slice) or item.dims():
        return None
    return int(item.evaluate(bounds))


def carried_offset(item: Index, dim: Dim) -> int | None:
    """k for an index `dim + k`; None for any other form (slices, min/max, other dims)."""
    if isinstance(item, Affine):
        single = item.single_dim()
        if single is not None and single[0] is dim:
            return single[1]
    return None


def dependences(graph: Graph, nodes: Iterable[int], loop_dims: tuple[Dim, ...]):
    """(consumer, producer, edge) among `nodes`, without those carried by a loop dim."""
    members = set(nodes)
    for node_id in members:
        node = graph[node_id]
        for edge in node.all_edges():
            if edge.node not in members:
                continue
            producer = graph[edge.node]
            carried = any(
                not is_same_point(index_on(edge, producer, d), d)
                for d in loop_dims
                if d in producer.domain
            )
            if not carried:
                yield node_id, edge.node, edge


def strongly_connected(nodes: list[int], deps: dict[int, set[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative; components come dependencies-first."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(deps[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def plan(graph: Graph, nodes: Iterable[int], loop_dims: tuple[Dim, ...]) -> list[Step]:
    """The steps computing `nodes` inside loops over `loop_dims` (others are read as given)."""
    return _plan(graph, sorted(set(nodes)), loop_dims, {})


def build_schedule(graph: Graph, needed: Iterable[int]) -> Schedule:
    loops_of: dict[int, tuple[Dim, ...]] = {}
    steps = _plan(graph, sorted(set(needed)), (), loops_of)
    steps = _fuse_iteration_loop(graph, steps, graph.dims[0], loops_of)
    return Schedule(tuple(steps), loops_of)


def _step_nodes(step: Step) -> set[int]:
    return {step.node} if isinstance(step, Compute) else set(step.members)


def _fuse_iteration_loop(graph: Graph, steps: list[Step], dim: Dim, loops_of) -> list[Step]:
    """Merge the top-level work along the iteration dim into one loop where legal.

    The plan gives each recurrence over i its own loop (the parameter update, an episode
    return tracker, ...) and vectorizes over i what no recurrence holds. One loop is better:
    it runs on the host one iteration at a time, and per-iteration values are computed when
    needed instead of for all iterations at once. A node may join when everything it reads
    from the loop is from the same or an earlier iteration.
    """
    loops = [s for s in steps if isinstance(s, Loop) and s.dim is dim and not s.reverse]
    if len(loops) < 1:
        return steps
    fused = set().union(*(_step_nodes(s) for s in steps if any(
        dim in graph[n].domain for n in _step_nodes(s)) and not (isinstance(s, Loop) and (
            s.dim is not dim or s.reverse))))  # fmt: skip
    changed = True
    while changed:
        changed = False
        later = _depends_on(graph, fused) - fused
        for node_id in sorted(fused):
            if not _may_join(graph, node_id, fused, later, dim):
                fused.discard(node_id)
                changed = True
                break
    if not any(set(loop.members) & fused for loop in loops):
        return steps
    before = [s for s in steps if not _step_nodes(s) & fused and not _step_nodes(s) & _depends_on(
        graph, fused)]  # fmt: skip
    after = [s for s in steps if s not in before and not _step_nodes(s) <= fused]
    for node_id in fused:
        loops_of.pop(node_id, None)
    body = _plan(graph, sorted(fused), (dim,), loops_of)
    return [*before, Loop(dim, False, frozenset(fused), tuple(body)), *after]


def _may_join(graph: Graph, node_id: int, fused: set[int], later: set[int], dim: Dim) -> bool:
    for edge in graph[node_id].all_edges():
        if edge.node in later:
            return False  # it reads something computed after the loop
        if edge.node in fused:
            item = index_on(edge, graph[edge.node], dim)
            k = carried_offset(item, dim) if item is not None else None
            if k is None or k > 0:
                return False  # it reads a later, fixed or sliced iteration
    return True


def _depends_on(graph: Graph, sources: set[int]) -> set[int]:
    """Every node that reads, directly or not, one of `sources` (sources included)."""
    consumers = graph.consumers()
    seen, stack = set(sources), list(sources)
    while stack:
        for reader in consumers.get(stack.pop(), ()):
            if reader not in seen:
                seen.add(reader)
                stack.append(reader)
    return seen


def _plan(graph: Graph, nodes: list[int], loop_dims: tuple[Dim, ...], loops_of) -> list[Step]:
    deps: dict[int, set[int]] = {n: set() for n in nodes}
    self_loops: set[int] = set()
    internal: list[tuple[int, int, Edge]] = []
    for consumer, producer, edge in dependences(graph, nodes, loop_dims):
        deps[consumer].add(producer)
        internal.append((consumer, producer, edge))
        if consumer == producer:
            self_loops.add(consumer)
    steps: list[Step] = []
    for component in strongly_connected(nodes, deps):
        if len(component) == 1 and component[0] not in self_loops:
            node = graph[component[0]]
            loops_of[node.id] = loop_dims
            steps.append(Compute(node.id, tuple(d for d in node.domain if d not in loop_dims)))
            continue
        members = frozenset(component)
        edges = [(c, p, e) for c, p, e in internal if c in members and p in members]
        dim, reverse = _loop_dim(graph, members, edges, loop_dims)
        body = _plan(graph, component, (*loop_dims, dim), loops_of)
        steps.append(Loop(dim, reverse, members, tuple(body)))
    return _sink_inputs(graph, _sink_slices(graph, steps, loop_dims, loops_of), loop_dims,
                        loops_of)  # fmt: skip


SINKABLE = ("slice_axis", "reshape")  # ops that only select or rearrange their input
# A loop's value this large at one point is sliced inside it. A packed Atari step of one
# env (two frame stacks as bytes, reward and flags) is 56 KB; CartPole's 44 bytes.
LARGE_POINT_BYTES = 2**15


def _sink_slices(graph: Graph, steps: list[Step], loop_dims, loops_of) -> list[Step]:
    """Move into a loop the slices taken after it of its large values, point by point.

    The plan vectorizes a slice that no recurrence holds after the loop that made its input,
    so the loop stacks the whole input over its dim. For a host environment's packed step
    output (observation, reward, flags and final observation of every env) that is the
    loop's length times every frame: evaluating an Atari policy over its 27,000-step episode
    limit stacked 6 GB per episode to read the rewards and flags after the loop (with the
    observations it was about 11 frame stacks a step, 4 now: `rlsys/evaluate.py`). Sliced
    inside the loop, only the slices the program reads later are stacked (and the input not
    at all, if nothing else reads it after the loop). Small values stay as they are: one
    vectorized slice after the loop costs less than one per step."""
    result = list(steps)
    for loop in [s for s in steps if isinstance(s, Loop)]:
        k = result.index(loop)
        direct = {s.node for s in loop.body if isinstance(s, Compute)}
        later = set().union(*(_step_nodes(s) for s in result[k + 1 :]))
        sunk = [s for s in result[k + 1 :] if isinstance(s, Compute)
                and _may_sink(graph, graph[s.node], loop, direct, later)]  # fmt: skip
        if sunk:
            result = _absorbed(graph, result, loop, sunk, loop_dims, loops_of, first=False)
    return result


def _sink_inputs(graph: Graph, steps: list[Step], loop_dims, loops_of) -> list[Step]:
    """Move into a loop the large values computed before it that only it reads, each at
    the point it is read, with what is computed from them before the loop for it alone.

    The plan vectorizes over a loop's dim what no recurrence holds, before the loop, so
    every point's value is held at once. PPO's minibatches are such values: the rows of
    update u, gathered from the rollout (and, for a CNN, their images moved channels last).
    For Atari frames that was all 16 minibatches of 256 frame stacks, 0.45 GB, twice, while
    one update reads one. Computed inside the loop, one point's value is live at a time.
    A small value computed from large ones moves in with them: DQN's TD targets (a float
    per sample) come from the target network's CNN over each update's next frames, and all
    32 updates' frames and activations were held at once (0.9 GB for Pong). Values under
    LARGE_POINT_BYTES a point that do not come from large ones stay as they are: one
    vectorized op costs less than one per step."""
    loops = [s for s in steps if isinstance(s, Loop)]
    if not loops:
        return steps
    consumers = graph.consumers()
    result = list(steps)
    for loop in loops:
        movable: list[Compute] = []
        inside = set(loop.members)
        # latest first: when a value is looked at, whether its readers may move is decided
        for step in reversed(result[: result.index(loop)]):
            if isinstance(step, Compute) and _only_read_inside(graph, graph[step.node], loop,
                                                                inside, consumers):  # fmt: skip
                movable.insert(0, step)
                inside.add(step.node)
        large: set[int] = set()
        for step in movable:  # in program order: producers first
            node = graph[step.node]
            if (point_bytes(node) >= LARGE_POINT_BYTES
                    or any(edge.node in large for edge in node.all_edges())):  # fmt: skip
                large.add(node.id)
        sunk = [step for step in movable if step.node in large]
        if sunk:
            result = _absorbed(graph, result, loop, sunk, loop_dims, loops_of, first=True)
    return result


def _absorbed(graph: Graph, result: list[Step], loop: Loop, sunk: list[Compute], loop_dims,
              loops_of, first: bool) -> list[Step]:  # fmt: skip
    """`result` with the `sunk` steps moved into `loop`, each computed at the loop's point:
    at the start of its body (`first`: values it reads) or at the end (values of it)."""
    inner = (*loop_dims, loop.dim)
    body = tuple(Compute(s.node, tuple(d for d in graph[s.node].domain if d not in inner))
                 for s in sunk)  # fmt: skip
    for s in sunk:
        loops_of[s.node] = inner
    merged = Loop(loop.dim, loop.reverse, loop.members | {s.node for s in sunk},
                  (*body, *loop.body) if first else (*loop.body, *body))  # fmt: skip
    return [merged if s is loop else s for s in result if s not in sunk]


def _only_read_inside(graph: Graph, node: Node, loop: Loop, inside: set[int],
                      consumers) -> bool:  # fmt: skip
    """Whether `node` varies along the loop's dim and is read only by nodes of the loop (or
    that may move into it), each at the point it is computing."""
    if loop.dim not in node.domain:
        return False
    readers = consumers.get(node.id, ())
    if not readers or any(reader not in inside for reader in readers):
        return False
    return all(is_same_point(index_on(edge, node, loop.dim), loop.dim)
               for reader in readers for edge in graph[reader].all_edges()
               if edge.node == node.id)  # fmt: skip


def _may_sink(graph: Graph, node: Node, loop: Loop, direct: set[int], later: set[int]) -> bool:
    if node.op not in SINKABLE or loop.dim not in node.domain:
        return False
    reads_large = False
    for edge in node.all_edges():
        if edge.node in loop.members:
            producer = graph[edge.node]
            if edge.node not in direct or not is_same_point(index_on(edge, producer, loop.dim),
                                                            loop.dim):  # fmt: skip
                return False
            reads_large |= point_bytes(producer) >= LARGE_POINT_BYTES
        elif edge.node in later:
            return False  # computed after the loop
    return reads_large


def point_bytes(node: Node) -> int:
    """The bytes of the node's value at one point of its domain."""
    size = 1
    for extent in node.shape:
        size *= extent if isinstance(extent, int) else 1
    return size * np.dtype(node.dtype).itemsize


def _loop_dim(graph: Graph, members, edges, loop_dims) -> tuple[Dim, bool]:
    for dim in graph.dims:
        if dim in loop_dims:
            continue
        offsets = []
        for _, producer, edge in edges:
            item = index_on(edge, graph[producer], dim)
            if item is not None and not is_same_point(item, dim):
                offsets.append((edge, producer, item))
        if not offsets:
            continue
        lacking = [graph[m] for m in members if dim not in graph[m].domain]
        if lacking:
            raise ScheduleError(_describe(graph, members, (
                f"a recurrence along {dim.name} passes through {lacking[0].label()}, which "
                f"does not vary along {dim.name}")))  # fmt: skip
        return dim, _direction(graph, members, dim, offsets)
    raise ScheduleError(_describe(graph, members, (
        "these tensors depend on each other at the same point, so no order computes them; "
        "a recurrence needs a base case and a shifted index, e.g. x[0] = ... and "
        "x[t + 1] = f(x[t])")))  # fmt: skip


def _direction(graph: Graph, members, dim: Dim, offsets) -> bool:
    signs = set()
    for _, producer, item in offsets:
        k = carried_offset(item, dim)
        if k is None:
            if isinstance(item, Slice) or item.dims() - {dim}:
                raise ScheduleError(_describe(graph, members, (
                    f"the recurrence along {dim.name} reads {graph[producer].label()} with "
                    f"index {item}; inside a recurrence use {dim.name} - k or {dim.name} + k "
                    "(slices of a recurrence are not supported yet)")))  # fmt: skip
            raise ScheduleError(_describe(graph, members, (
                f"cannot order the recurrence along {dim.name}: {graph[producer].label()} is "
                f"read at {item}")))  # fmt: skip
        signs.add(k > 0)
    if len(signs) > 1:
        raise ScheduleError(_describe(graph, members, (
            f"the recurrence along {dim.name} reads both earlier and later points of itself, "
            "so it can run neither forwards nor backwards")))  # fmt: skip
    return signs.pop()


def _describe(graph: Graph, members, message: str) -> str:
    named = sorted(members, key=lambda m: (graph[m].name is None, m))
    node = graph[named[0]]
    where = f" (at {node.source})" if node.source else ""
    labels = ", ".join(graph[m].label() for m in named[:6])
    return f"{node.label()}: {message}; tensors involved: {labels}{where}"
