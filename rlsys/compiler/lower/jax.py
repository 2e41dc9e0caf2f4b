"""The fast lowering, part 1: values, reading edges, computing one node over its vector dims.

Values during lowering are `Value(array, axes)`: `axes` names the dimensions the array's
leading axes hold (in domain order, except for values a loop stacked, loop dim first, and
values computed from them, in their order); a dimension of the node's domain that is not
among them is an enclosing loop's dimension, fixed at the loop's current index. Then:

- `Compute` of an op: read each input edge into an array over the node's vector dimensions
  (`read_edge`), and apply the op's point rule under one `vmap` per vector dimension
  (inputs that do not vary along a dimension are passed with `in_axes=None`).
- `Compute` of a placeholder: read every definition, then select by region, first wins.
- `Loop` over d: see `jax_loop.py`.
- `read_edge`: an index is evaluated at every point at once (loop dimensions are scalars,
  vector dimensions are `iota`s) and applied as one gather; indices are clipped, which only
  matters at points a placeholder's region excludes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from rlsys.compiler.autodiff import path_nodes, rerun_reads
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Bound, Dim, Slice, as_expr
from rlsys.compiler.ir import Edge, Graph, Node, concrete_shape, is_identity, largest_extent
from rlsys.compiler.lower.chunked_grad import chunk_values, row_chunking, summed_over_chunks
from rlsys.compiler.lower.data_parallel import AXIS, Split
from rlsys.compiler.lower.padded import check_consumer, masked_reduction
from rlsys.compiler.lower.reuse import with_stored_output
from rlsys.compiler.rules import RULES
from rlsys.compiler.schedule import carried_offset, constant_index, index_on, is_same_point, plan


@dataclass
class Value:
    array: Any
    axes: tuple[Dim, ...]


@dataclass
class LastStep(Value):
    """A loop member read after a host loop only at the loop's last step, kept as that
    step's value (`array`, over `axes`) instead of a stack of every step's. A segment
    reading it traces it as a stack (`stacked`), a broadcast that XLA folds into the read."""

    dim: Dim | None = None
    extent: int = 0

    def stacked(self, array: Any) -> Value:
        shape = (self.extent, *np.shape(array))
        return Value(jnp.broadcast_to(array[None], shape), (self.dim, *self.axes))


@dataclass
class Window:
    """The last `size` values of a loop member: window[m] holds the value m + 1 steps back."""

    array: Any
    dim: Dim
    axes: tuple[Dim, ...]  # the axes of each entry (vector dims inside the loop)


@dataclass
class Context:
    graph: Graph
    bounds: dict[Bound, int]
    inputs: Mapping[str, Any]
    values: dict[int, Value] = field(default_factory=dict)
    windows: dict[int, Window] = field(default_factory=dict)
    loop_index: dict[Dim, Any] = field(default_factory=dict)
    # What must outlive a loop (see LoopPlan): the program outputs, and per gradient node
    # the values its re-run reads (it may run after the loops that produced them).
    outputs: frozenset[int] = frozenset()
    grad_reads: dict[int, frozenset[int]] = field(default_factory=dict)
    consumers: dict[int, list[int]] = field(default_factory=dict)
    # loss node -> the gradient of it computed at the same loop level: both come from one
    # vjp, so the forward pass runs once (as with jax.value_and_grad), not twice.
    loss_grads: dict[int, int] = field(default_factory=dict)
    # lazy_where node -> the nodes it runs itself (`rlsys/compiler/lazy.py`); the steps of
    # `deferred` nodes are skipped, left to the lazy_where that runs them
    lazy: dict[int, frozenset[int]] = field(default_factory=dict)
    deferred: frozenset[int] = frozenset()
    # per gradient node, the activations its re-run takes instead of recomputing them
    # (`reuse.py`); in a re-run, those activations' values
    grad_reuse: dict[int, frozenset[int]] = field(default_factory=dict)
    reused: dict[int, Value] = field(default_factory=dict)
    # inside a data-parallel program, how its points are split over devices; `bounds` then
    # holds the split dim's extent on one device (`data_parallel.py`)
    split: Split | None = None
    # nodes whose values nothing reads (`jax_staged.unread_values`): segments skip them
    unread: frozenset[int] = frozenset()

    def child(self, dim: Dim | None = None, index: Any = None, windows=None) -> Context:
        loop_index = dict(self.loop_index) if dim is None else {**self.loop_index, dim: index}
        return Context(self.graph, self.bounds, self.inputs, dict(self.values),
                       {**self.windows, **(windows or {})}, loop_index, self.outputs,
                       self.grad_reads, self.consumers, self.loss_grads, self.lazy,
                       self.deferred, self.grad_reuse, self.reused, self.split,
                       self.unread)  # fmt: skip

    def extent(self, dim: Dim) -> int:
        return self.bounds[dim.bound]


# -- reading edges -------------------------------------------------------------------------


def _coordinate_env(ctx: Context, vector_dims: tuple[Dim, ...], n_slices: int) -> dict:
    """Each vector dim as an iota shaped to broadcast over (vector dims..., slice axes...)."""
    env: dict = dict(ctx.bounds)
    env.update(ctx.loop_index)
    rank = len(vector_dims) + n_slices
    for k, dim in enumerate(vector_dims):
        shape = [1] * rank
        shape[k] = ctx.extent(dim)
        env[dim] = jnp.arange(ctx.extent(dim)).reshape(shape)
    return env


def _source_of(ctx: Context, edge: Edge) -> tuple[Value, dict[Dim, int]]:
    """The value an edge reads, and for a window read, how far back along its dim."""
    producer = ctx.graph[edge.node]
    window = ctx.windows.get(edge.node)
    if window is not None:
        item = index_on(edge, producer, window.dim)
        k = carried_offset(item, window.dim) if item is not None else None
        if k:
            entry = window.array[abs(k) - 1]
            return Value(entry, window.axes), {window.dim: k}
    if edge.node not in ctx.values:
        raise RecurrenceError(f"internal: {producer.label()} read before it was computed")
    return ctx.values[edge.node], {}


def read_edge(ctx: Context, edge: Edge, vector_dims: tuple[Dim, ...]) -> tuple[Any, tuple]:
    """The producer's values at every point of the consumer's vector dims.

    Returns (array, present): `array` has one leading axis per dim of `present` (the vector
    dims the read varies along, in order), then one axis per slice, then the spatial axes.
    """
    producer = ctx.graph[edge.node]
    value, window_shift = _source_of(ctx, edge)
    direct = _direct_read(ctx, producer, edge, value, window_shift, vector_dims)
    if direct is not None:
        return direct
    slices = [i for i in edge.index if isinstance(i, Slice)]
    env = _coordinate_env(ctx, vector_dims, len(slices))
    rank = len(vector_dims) + len(slices)
    present: set[Dim] = set()
    indices = []
    slice_no = 0
    for dim, item in zip(producer.domain, edge.index, strict=True):
        if dim in window_shift:
            continue  # the window entry already is the value at the shifted point
        if dim not in value.axes:
            if item.dims() != {dim} or carried_offset(item, dim) != 0:
                raise RecurrenceError(f"internal: {producer.label()} read at {item} inside "
                                      f"the loop over {dim.name}")  # fmt: skip
            continue
        present |= item.dims() & set(vector_dims)
        if isinstance(item, Slice):
            length = _slice_length(ctx, producer, item)
            shape = [1] * rank
            shape[len(vector_dims) + slice_no] = length
            index = item.start.evaluate(env) + jnp.arange(length).reshape(shape)
            slice_no += 1
        else:
            index = item.evaluate(env)
        at = value.axes.index(dim)  # the stored axes need not be in domain order
        indices.append((at, jnp.clip(jnp.asarray(index), 0, ctx.extent(dim) - 1).reshape(
            [1] * rank if np.ndim(index) == 0 else np.shape(index))))  # fmt: skip
    indices = [index for _, index in sorted(indices, key=lambda entry: entry[0])]
    array = value.array
    if indices:
        # Every dim the read varies along gets its whole extent, even where the indices
        # happen not to vary along it (the stop of `x[0:t + 1]` only sets the padded length).
        varying = tuple(ctx.extent(d) if d in present else 1 for d in vector_dims)
        shape = np.broadcast_shapes(varying + (1,) * len(slices), *(np.shape(j) for j in indices))
        full = [jnp.broadcast_to(i, shape) for i in indices]
        array = array[tuple(full)]
        if array.ndim - len(full[0].shape) < value.array.ndim - len(indices):
            raise RecurrenceError("internal: gather lost spatial axes")
        squeeze = tuple(k for k, d in enumerate(vector_dims) if d not in present)
        array = jnp.squeeze(array, axis=squeeze) if squeeze else array
    order = tuple(d for d in vector_dims if d in present)
    return array, order


def _direct_read(ctx: Context, producer: Node, edge: Edge, value: Value, window_shift,
                 vector_dims) -> tuple[Any, tuple] | None:  # fmt: skip
    """The read without a gather, when every index entry is the current point (`x[b, t]`,
    or a loop's own index), a whole-range slice (`x[0:B]`) or a constant (`x[i, T - 1]`):
    the stored value at those constants, its axes reordered. None for other reads. (XLA
    does not always see through an iota gather, nor through a gather of a broadcast.)"""
    present, slice_axes, fixed = [], [], {}
    for dim, item in zip(producer.domain, edge.index, strict=True):
        if dim in window_shift:
            continue
        stored = dim in value.axes
        if isinstance(item, Slice):
            whole = item.start.constant_value() == 0 and item.stop == as_expr(dim.bound)
            if not (whole and stored):
                return None
            slice_axes.append(value.axes.index(dim))
        elif stored and (at := constant_index(item, ctx.bounds)) is not None:
            fixed[value.axes.index(dim)] = min(max(at, 0), ctx.extent(dim) - 1)
        elif not is_same_point(item, dim) or (stored and dim not in vector_dims):
            return None
        elif stored:
            present.append(value.axes.index(dim))
    present.sort(key=lambda k: vector_dims.index(value.axes[k]))
    array = value.array
    for axis in sorted(fixed, reverse=True):  # the last first: earlier axes keep their place
        array = jax.lax.index_in_dim(array, fixed[axis], axis, keepdims=False)
    kept = [k for k in range(len(value.axes)) if k not in fixed]
    order = [kept.index(k) for k in present + slice_axes]
    if order != sorted(order):
        rest = list(range(len(kept), array.ndim))
        array = jnp.transpose(array, order + rest)
    return array, tuple(value.axes[k] for k in present)


def _slice_length(ctx: Context, producer: Node, item: Slice) -> int:
    """A slice's length; for a variable-size slice, its largest (see `padded.py`)."""
    return largest_extent(item.length(), ctx.bounds)


# -- computing nodes -----------------------------------------------------------------------


def compute_node(ctx: Context, node: Node, vector_dims: tuple[Dim, ...],
                 first: Dim | None = None) -> Value:  # fmt: skip
    """The node's value over `vector_dims`; `first`: a dim to store it along first (a loop
    that streams it along that dim follows)."""
    params = dict(node.params)
    if node.op == "const":
        return Value(jnp.asarray(params["value"].array), ())
    if node.op == "input":
        return _input_value(ctx, node, vector_dims)
    if node.op == "dim_value":
        env = _coordinate_env(ctx, vector_dims, 0)
        if ctx.split is not None and ctx.split.dim in env:  # the point's global coordinate
            env[ctx.split.dim] = env[ctx.split.dim] + ctx.split.offset()
            env[ctx.split.dim.bound] = ctx.split.extent
        extents = [ctx.extent(d) for d in vector_dims]
        value = jnp.broadcast_to(jnp.asarray(params["expr"].evaluate(env), "int32"), extents)
        return Value(value, vector_dims)
    padded = check_consumer(ctx.graph, node)
    if node.op == "merge":
        return _merge_value(ctx, node, vector_dims)
    if node.op == "grad":
        return ctx.values.get(node.id) or _grad_value(ctx, node)
    if node.op == "lazy_where":
        return _lazy_where_value(ctx, node, vector_dims)
    grad = ctx.loss_grads.get(node.id)
    if grad is not None and ctx.graph[grad].inputs[1].node in ctx.values:
        loss, ctx.values[grad] = _loss_and_grad(ctx, ctx.graph[grad])
        return loss
    if RULES[node.op].host is None and node.op != "index":
        vector_dims = _order_of_inputs(ctx, node, vector_dims)
        if first in vector_dims:
            vector_dims = (first, *(d for d in vector_dims if d is not first))
    reads = [read_edge(ctx, edge, vector_dims) for edge in node.inputs]
    stored = ctx.reused.get(node.id)
    if stored is not None and set(stored.axes) == set(vector_dims) == set(reads[0][1]):
        z = in_order(Value(reads[0][0], reads[0][1]), vector_dims)
        return Value(with_stored_output(node.op, z, in_order(stored, vector_dims)), vector_dims)
    if RULES[node.op].host is not None:
        return _host_value(ctx, node, reads, vector_dims)
    if node.op == "index":
        array, present = reads[0]
        return Value(_broadcast_to_dims(ctx, array, present, vector_dims), vector_dims)
    fn = partial(RULES[node.op].point, **params)
    if padded:  # a reduction over a variable-size slice: pass each point's true lengths
        ndim = len(ctx.graph[node.inputs[0].node].shape)
        fn = masked_reduction(node.op, params, ndim, padded)
        env = _coordinate_env(ctx, vector_dims, 0)
        extents = tuple(ctx.extent(d) for d in vector_dims)
        reads += [(jnp.broadcast_to(jnp.asarray(n.evaluate(env)), extents), vector_dims)
                  for _, n in sorted(padded.items())]  # fmt: skip
    array = _vectorized(ctx, fn, reads, vector_dims, RULES[node.op].rows)
    if ctx.split is not None and node.id in ctx.split.reductions:  # over every device's points
        array = ctx.split.combine(node.id, array)
    return Value(array, vector_dims)


def _order_of_inputs(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]):
    """The vector dims in the order of the first input stored over all of them: a loop
    stacks its values loop dim first (`LoopPlan.store`), and computing on them in that order
    needs no transposition, where domain order would transpose each stack (XLA:CPU makes
    that a transposing fusion plus a copy)."""
    if len(vector_dims) < 2:
        return vector_dims
    for edge in node.inputs:
        value = ctx.values.get(edge.node)
        if value is not None and len(value.axes) == len(vector_dims) == len(
            set(value.axes) & set(vector_dims)
        ):
            return value.axes
    return vector_dims


def in_order(value: Value, axes: tuple[Dim, ...]):
    """`value`'s array with its leading axes (the same dims) in the order `axes`."""
    if value.axes == tuple(axes):
        return value.array
    perm = [value.axes.index(d) for d in axes]
    return jnp.transpose(value.array, perm + list(range(len(perm), value.array.ndim)))


def domain_axes(ctx: Context, node: int) -> tuple[Dim, ...]:
    """A node's stored axes in the order of its domain."""
    return tuple(d for d in ctx.graph[node].domain if d in ctx.values[node].axes)


def in_domain_order(ctx: Context, node: int):
    """A node's stored array with its leading axes in the order of its domain."""
    return in_order(ctx.values[node], domain_axes(ctx, node))


def _host_value(ctx: Context, node: Node, reads, vector_dims) -> Value:
    """A host op met inside a jitted function: one ordered callback with the whole batch
    (calls keep program order). Host loops (`jax_staged.py`) call host ops directly."""
    arrays = [_broadcast_to_dims(ctx, a, present, vector_dims) for a, present in reads]
    value = io_callback(partial(call_host, node), host_result(ctx, node, vector_dims), *arrays,
                        ordered=True)  # fmt: skip
    return Value(value, vector_dims)


def host_arguments(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]) -> list:
    """A host op's inputs, each with one leading axis per vector dim (the whole batch)."""
    reads = [read_edge(ctx, edge, vector_dims) for edge in node.inputs]
    return [_broadcast_to_dims(ctx, a, present, vector_dims) for a, present in reads]


def host_result(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]) -> jax.ShapeDtypeStruct:
    extents = tuple(ctx.extent(d) for d in vector_dims)
    return jax.ShapeDtypeStruct(extents + concrete_shape(node, ctx.bounds), node.dtype)


def call_host(node: Node, *arrays) -> np.ndarray:
    host = RULES[node.op].host
    return np.asarray(host(*(np.asarray(a) for a in arrays), **dict(node.params)), node.dtype)


def _vectorized(ctx: Context, fn, reads, vector_dims: tuple[Dim, ...], rows: bool = False):
    """Apply a point function over vector dims: one vmap per dim, innermost dim first; or,
    when every input varies along all of them or none, one vmap over their product (or, for
    a `rows` op whose first input alone varies, one call on all of its rows)."""
    shapes = {tuple(present) for _, present in reads}
    if vector_dims in shapes and shapes <= {(), vector_dims}:
        rows = rows and bool(reads[0][1]) and not any(p for _, p in reads[1:])
        if len(vector_dims) > 1 or rows:
            return _vectorized_flat(ctx, fn, reads, vector_dims, rows)
    return _vectorized_nested(ctx, fn, reads, vector_dims)


def _vectorized_nested(ctx: Context, fn, reads, vector_dims: tuple[Dim, ...]):
    arrays = [array for array, _ in reads]
    for level in reversed(range(len(vector_dims))):
        dim = vector_dims[level]
        in_axes = [0 if dim in present else None for _, present in reads]
        if any(axis == 0 for axis in in_axes):
            fn = jax.vmap(fn, in_axes=in_axes)
        else:  # nothing varies along this dim: compute once, broadcast after
            fn = _broadcast_result(fn, ctx.extent(dim))
    return fn(*arrays)


def _vectorized_flat(ctx: Context, fn, reads, vector_dims: tuple[Dim, ...], rows: bool):
    """One vmap over the vector dims merged into one axis (reshapes, free in XLA). Nested
    vmaps of a matmul make XLA transpose the batch for the gradient's dot: the gradient of
    an MLP over (256 envs, 250 steps) ran 3.5x slower nested than flat on CPU."""
    extents = tuple(ctx.extent(d) for d in vector_dims)
    size, rank = math.prod(extents), len(vector_dims)
    arrays = [jnp.reshape(a, (size, *jnp.shape(a)[rank:])) if p else a for a, p in reads]
    if rows:
        result = fn(*arrays)
    else:
        result = jax.vmap(fn, in_axes=[0 if p else None for _, p in reads])(*arrays)
    return jax.tree.map(lambda r: jnp.reshape(r, (*extents, *jnp.shape(r)[1:])), result)


def _broadcast_result(fn, extent: int):
    def wrapped(*args):
        result = fn(*args)
        return jnp.broadcast_to(result, (extent, *jnp.shape(result)))

    return wrapped


def _broadcast_to_dims(ctx: Context, array, present: tuple[Dim, ...], vector_dims):
    """Give `array` (leading axes `present`) one leading axis per vector dim, in order."""
    for k, dim in enumerate(vector_dims):
        if dim not in present:
            array = jnp.expand_dims(array, k)
            array = jnp.repeat(array, ctx.extent(dim), axis=k)
    return array


def _input_value(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]) -> Value:
    name = node.param("name")
    if name not in ctx.inputs:
        raise RecurrenceError(f"input {name!r} was not given to run(); pass it by name")
    array = jnp.asarray(ctx.inputs[name])
    for axis, dim in reversed(list(enumerate(node.domain))):
        if dim not in vector_dims:
            array = jax.lax.dynamic_index_in_dim(array, ctx.loop_index[dim], axis, keepdims=False)
    return Value(array, vector_dims)


def _merge_value(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]) -> Value:
    if (step := _step_from_zeros(ctx, node, vector_dims)) is not None:
        array, _ = read_edge(ctx, step.edge, ())
        return Value(array.astype(node.dtype), ())
    env = _coordinate_env(ctx, vector_dims, 0)
    extents = tuple(ctx.extent(d) for d in vector_dims)
    spatial = concrete_shape(node, ctx.bounds)
    result = None
    for branch in reversed(node.branches):  # the first definition must win: apply it last
        array, present = read_edge(ctx, branch.edge, vector_dims)
        array = _broadcast_to_dims(ctx, array, present, vector_dims)
        array = jnp.broadcast_to(array, extents + spatial).astype(node.dtype)
        inside = jnp.ones(extents, bool)
        for dim, (lo, hi) in zip(node.domain, branch.region, strict=True):
            coord = env[dim]
            inside = inside & (coord >= lo.evaluate(env)) & (coord < hi.evaluate(env))
        inside = inside.reshape(extents + (1,) * len(spatial))
        result = array if result is None else jnp.where(inside, array, result)
    if result is None:
        raise RecurrenceError(f"{node.label()} has no definition (at {node.source})")
    return Value(result, vector_dims)


def _step_from_zeros(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]):
    """The recurrence branch of `x[0] = zeros; x[i + 1] = f(x)[i]` (one dim i), read at one
    step of the loop over i from the window of f(x), which starts as zeros: that branch alone
    then gives x at every step, the first included. Choosing between the two with a select
    read and wrote the whole of x at every step, and kept XLA from updating x in place (DQN's
    replay ring: 545 MB for Pong's 10,000 steps)."""
    if vector_dims or len(node.domain) != 1 or len(node.branches) != 2:
        return None
    (dim,) = node.domain
    start, step = sorted(node.branches, key=lambda b: not _is_zeros(ctx.graph, b.edge.node))
    window = ctx.windows.get(step.edge.node)
    if window is None or window.dim is not dim or not _is_zeros(ctx.graph, start.edge.node):
        return None
    item = index_on(step.edge, ctx.graph[step.edge.node], dim)
    back = carried_offset(item, dim) if item is not None else None
    regions = [tuple(as_expr(e).constant_value() for e in b.region[0]) for b in (start, step)]
    return step if back == -1 and regions[0] == (0, 1) and regions[1][0] == 1 else None


def _is_zeros(graph: Graph, node_id: int) -> bool:
    """A constant of zeros, or a broadcast of one."""
    node = graph[node_id]
    if node.op == "broadcast_to":
        node = graph[node.inputs[0].node]
    return node.op == "const" and not node.domain and not np.any(node.param("value").array)


def _lazy_where_value(ctx: Context, node: Node, vector_dims: tuple[Dim, ...]) -> Value:
    """where(mask, value, otherwise), computing the value's branch only at the points where
    the mask holds (`rlsys/compiler/lazy.py`): those points are gathered, `rows` at a time,
    and the branch is run at each as at one point of a loop over every dim, vmapped."""
    from rlsys.compiler.lower.jax_loop import run_steps  # loops run nodes, nodes run loops

    mask_edge, value_edge, otherwise_edge = node.inputs
    branch = ctx.lazy[node.id]
    loop_dims = (*ctx.loop_index, *vector_dims)
    steps = plan(ctx.graph, branch, loop_dims)

    def at_point(*coordinates):
        inner = ctx.child()
        inner.loop_index.update(zip(vector_dims, coordinates, strict=True))
        inner.deferred = ctx.deferred - branch
        run_steps(inner, steps)
        return read_edge(inner, value_edge, ())[0]

    extents = tuple(ctx.extent(d) for d in vector_dims)
    size = math.prod(extents)
    mask = read_edge(ctx, mask_edge, vector_dims)
    needed = _broadcast_to_dims(ctx, *mask, vector_dims).reshape(size, -1).any(axis=1)
    rows = node.param("rows")
    rows = size if rows is None else max(1, min(size, int(as_expr(rows).evaluate(ctx.bounds))))
    order = _needed_first(needed)
    point = jax.eval_shape(at_point, *(jnp.int32(0) for _ in vector_dims))

    def chunk(k, values):
        flat = jax.lax.dynamic_slice(order, (k * rows,), (rows,))
        coordinates = jnp.unravel_index(jnp.minimum(flat, size - 1), extents)
        computed = jax.vmap(at_point, axis_size=rows)(*coordinates)  # no dims: one point
        return values.at[flat].set(computed, mode="drop")

    trips = (jnp.sum(needed) + rows - 1) // rows
    values = jnp.zeros((size, *point.shape), point.dtype)
    if ctx.split is not None:  # the loop's carry: as its chunks' values
        values = ctx.split.varying(values, vector_dims)
    values = jax.lax.fori_loop(0, trips, chunk, values).reshape(*extents, *point.shape)
    reads = [mask, (values, vector_dims), read_edge(ctx, otherwise_edge, vector_dims)]
    return Value(_vectorized(ctx, jnp.where, reads, vector_dims), vector_dims)


def _needed_first(needed):
    """The flat indices of `needed`'s true entries in order, then its size: what
    jnp.nonzero(needed, size=needed.size, fill_value=needed.size) gives. Each entry's rank
    among the true ones is a running count, taken here by two products with triangular
    matrices of ones (exact in float32 below 2^24) over needed as a square-ish matrix:
    XLA:CPU compiles jnp.nonzero's prefix sum into about 14 fusions, which cost compile
    memory (`benchmarks/HISTORY.md`, "Where the sweep's memory goes"), and runs it slower
    (64,000 entries, jitted alone: 0.84 ms against 0.49)."""
    size = needed.shape[0]
    if size >= 2**24:
        return jnp.nonzero(needed, size=size, fill_value=size)[0]
    width = max(1, math.isqrt(size - 1) + 1)
    height = -(-size // width)
    grid = jnp.pad(needed.astype(jnp.float32), (0, height * width - size)).reshape(height, width)
    # NumPy's triangles and range are constants of the program; jnp's would be computed in
    # it, by a fusion each
    within = grid @ np.triu(np.ones((width, width), np.float32))  # counts up to each entry
    before = np.tril(np.ones((height, height), np.float32), -1) @ grid.sum(axis=1)
    rank = (within + before[:, None]).reshape(-1)[:size].astype(jnp.int32) - 1
    target = jnp.where(needed, rank, size)
    positions = np.arange(size, dtype=np.int32)
    return jnp.full(size, size, jnp.int32).at[target].set(positions, mode="drop")


def _grad_value(ctx: Context, node: Node) -> Value:
    """Re-run the ops between param and loss as a function of param, under jax.grad."""
    return _loss_and_grad(ctx, node)[1]


def _loss_and_grad(ctx: Context, node: Node) -> tuple[Value, Value]:
    """The loss at every point and d(sum of them)/d param, from one vjp of the ops between
    param and loss re-run as a function of param. Points are independent: their losses
    add up.

    A flat parameter vector that the loss slices (an MLP's weights and biases, actor |
    critic) is differentiated piece by piece (`_slices_of`): each slice reads its pieces
    and the gradient is one concatenation. Differentiating the whole vector would sum a
    zero-padded copy of it per slice, which XLA:CPU does not fold (about a third of a PPO
    minibatch update)."""
    loss_edge, param_edge = node.inputs
    loop_dims = tuple(ctx.loop_index)
    path = path_nodes(ctx.graph, param_edge.node, loss_edge.node, loop_dims)
    param = ctx.values[param_edge.node]
    if loss_edge.node not in path:  # the loss does not read param at its point: d/dparam is 0
        return ctx.values.get(loss_edge.node), Value(jnp.zeros_like(param.array), param.axes)
    axis, slices = _slices_of(ctx.graph, param_edge.node, path)
    steps = plan(ctx.graph, path - {param_edge.node} - set(slices), loop_dims)
    axis += len(param.axes)  # the array's axis: vectorized dims come first
    size = param.array.shape[axis] if slices else 0
    cuts = sorted({b for bounds in slices.values() for b in bounds} - {0, size})
    starts = [0, *cuts]
    loss_axes: list[tuple] = []

    from rlsys.compiler.lower.jax_loop import run_steps  # loops run nodes, nodes run loops

    def joined(parts, start: int, stop: int):
        inside = [p for p, s in zip(parts, starts, strict=True) if start <= s < stop]
        return inside[0] if len(inside) == 1 else jnp.concatenate(inside, axis=axis)

    # Split over devices, a loss reducing all points is taken over each device's, and so
    # its gradient; they are combined once, after (each chunk's would cost a collective).
    split = ctx.split
    per_device = split is not None and split.reductions.get(loss_edge.node) in ("sum", "mean")

    def loss_of(base: Context, *parts):
        inner = base.child()
        inner.loss_grads = {}  # the loss here is the plain forward pass
        if per_device:
            inner.split = split.without(loss_edge.node)
        inner.reused = {m: base.values[m] for m in stored}
        whole = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)
        inner.values[param_edge.node] = Value(whole, param.axes)
        for slice_node, (start, stop) in slices.items():
            inner.values[slice_node] = Value(joined(parts, start, stop), param.axes)
        run_steps(inner, steps)
        loss_axes.append(inner.values[loss_edge.node].axes)
        return inner.values[loss_edge.node].array

    pieces = jnp.split(param.array, cuts, axis=axis) if cuts else [param.array]
    if per_device:  # differentiated per device, else JAX would sum each chunk's over devices
        pieces = [jax.lax.pcast(piece, AXIS, to="varying") for piece in pieces]

    def loss_and_grads(base: Context):
        loss, pullback = jax.vjp(partial(loss_of, base), *pieces)
        return loss, pullback(jnp.ones_like(loss))

    chunking = row_chunking(ctx.graph, ctx.bounds, node, path, steps, ctx.values, ctx.windows)
    # computed before the re-run (by the acting loop, say): outputs it takes, not recomputes
    stored = {m for m in ctx.grad_reuse.get(node.id, ()) if m in ctx.values}
    if chunking is None:
        loss, grads = loss_and_grads(ctx)
    else:  # the same sum (or mean) over points, a chunk of points at a time
        reads = rerun_reads(ctx.graph, path, param_edge.node, loop_dims) | stored
        extent = ctx.extent(chunking.dim)

        def run_chunk(start, size: int):
            chunk = ctx.child()
            chunk.bounds = {**ctx.bounds, chunking.dim.bound: size}
            chunk.values.update(chunk_values(ctx.values, chunking.dim, start, size, reads))
            return loss_and_grads(chunk)

        loss, grads = summed_over_chunks(chunking, extent, run_chunk)
    grad = grads[0] if len(grads) == 1 else jnp.concatenate(grads, axis=axis)
    if per_device:  # one collective for both
        loss, grad = split.combine(loss_edge.node, (loss, grad))
    return Value(loss, loss_axes[-1]), Value(grad, param.axes)


def _slices_of(graph: Graph, param: int, path: set[int]) -> tuple[int, dict[int, tuple]]:
    """The slice_axis nodes on `path` that read `param` at the same point, directly or as
    slices of such slices, all along one axis: that axis, and each one's range in `param`
    ({} when there are none, or several axes)."""
    rank = len(graph[param].shape)
    slices = [graph[n] for n in path if graph[n].op == "slice_axis"]
    axes: set[int] = set()
    found: dict[int, tuple[int, int]] = {}

    def visit(source: Node, offset: int) -> None:
        for node in slices:
            edge = node.inputs[0]
            if (edge.node == source.id and node.domain == source.domain
                    and is_identity(edge, source)):  # fmt: skip
                start = offset + node.param("start")
                axes.add(node.param("axis") % rank)
                found[node.id] = (start, offset + node.param("stop"))
                visit(node, start)

    visit(graph[param], 0)
    if len(axes) != 1:
        return 0, {}
    return axes.pop(), found
