"""The fast lowering, part 2: steps and loops.

A `Loop` over d runs its body once per index of d (reversed for recurrences that read later
points). Values a member reads at `d - k` come from a window of its last k values carried
from step to step; values read after the loop (by later steps, outputs, or a gradient's
re-run) are stacked over d (the small ones packed into one stack per dtype), except those
read after it only at its last step whose window already carries that value (the parameters
after a run of minibatch updates): the loop's final carry holds them, and nothing is
stacked. Inside a jitted function the loop is a `lax.scan`; the outermost loop over the
iteration dimension can instead run on the host, one jitted call per iteration
(`jax_program.py`), with the same `LoopPlan`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.compiler.index import Dim
from rlsys.compiler.ir import Node, concrete_shape
from rlsys.compiler.lower.jax import Context, Value, Window, compute_node, in_order
from rlsys.compiler.lower.packing import Packing, nbytes
from rlsys.compiler.schedule import (
    Compute,
    Loop,
    carried_offset,
    constant_index,
    index_on,
    is_same_point,
)

PACKED_BYTES = 2**14  # kept values up to this size at one step are stacked packed


def run_steps(ctx: Context, steps) -> None:
    streamed = _streamed_into(ctx, steps)
    for step in steps:
        if isinstance(step, Compute):
            if step.node not in ctx.deferred:  # else its lazy_where runs it (lazy.py)
                ctx.values[step.node] = compute_node(ctx, ctx.graph[step.node],
                                                     step.vector_dims,
                                                     first=streamed.get(step.node))  # fmt: skip
        else:
            run_loop(ctx, step)


def _streamed_into(ctx: Context, steps) -> dict[int, Dim]:
    """The nodes these steps compute that a loop among them streams (see `_streamed`), with
    its dim, and the nodes those are computed from point by point along it: computed with
    that dim first, the scan slices them without a transposition."""
    computed = {step.node for step in steps if isinstance(step, Compute)}
    only_current: dict[int, dict[Dim, bool]] = {}  # node -> dim -> read only at the index

    def note(reader: int, dim: Dim) -> None:
        for edge in ctx.graph[reader].all_edges():
            if edge.node in computed and dim in ctx.graph[edge.node].domain:
                current = is_same_point(index_on(edge, ctx.graph[edge.node], dim), dim)
                dims = only_current.setdefault(edge.node, {})
                dims[dim] = dims.get(dim, True) and current

    for loop in (step for step in steps if isinstance(step, Loop)):
        for member in loop.members:
            note(member, loop.dim)
    first: dict[int, Dim] = {}
    for step in reversed(steps):  # readers before what they read
        if isinstance(step, Compute):
            dims = [d for d, current in only_current.get(step.node, {}).items() if current]
            if len(dims) == 1:
                first[step.node] = dims[0]
                note(step.node, dims[0])
    return first


def _window_sizes(ctx: Context, loop: Loop) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for member in loop.members:
        for edge in ctx.graph[member].all_edges():
            if edge.node in loop.members:
                item = index_on(edge, ctx.graph[edge.node], loop.dim)
                k = carried_offset(item, loop.dim) if item is not None else None
                if k:
                    sizes[edge.node] = max(sizes.get(edge.node, 0), abs(k))
    return sizes


def _inner_axes(node: Node, loop_dims) -> tuple[Dim, ...]:
    return tuple(d for d in node.domain if d not in loop_dims)


def _kept(ctx: Context, loop: Loop) -> frozenset[int]:
    """Members whose values are needed after the loop, so the loop stacks them: outputs,
    members read by a node outside the loop, and what a gradient outside the loop re-reads."""
    outside_grads = [reads for g, reads in ctx.grad_reads.items() if g not in loop.members]
    return frozenset(
        m for m in loop.members
        if m in ctx.outputs
        or any(r not in loop.members for r in ctx.consumers[m])
        or any(m in reads for reads in outside_grads)
    )  # fmt: skip


def carried_to_the_end(ctx: Context, loop: Loop, plan: LoopPlan) -> frozenset[int]:
    """Kept members with a window whose only reads after the loop are at its last step (index
    extent - 1, or 0 for a reverse loop): the final carry's window holds that value."""
    last = 0 if loop.reverse else ctx.extent(loop.dim) - 1
    outside_grads = [reads for g, reads in ctx.grad_reads.items() if g not in loop.members]
    found = set()
    for m in plan.kept & set(plan.window_axes):
        if m in ctx.outputs or any(m in reads for reads in outside_grads):
            continue
        items = [index_on(edge, ctx.graph[m], loop.dim)
                 for r in ctx.consumers[m] if r not in loop.members
                 for edge in ctx.graph[r].all_edges() if edge.node == m]  # fmt: skip
        if items and all(constant_index(item, ctx.bounds) == last for item in items):
            found.add(m)
    return frozenset(found)


def _streamed(ctx: Context, loop: Loop) -> frozenset[int]:
    """Values computed before the loop that its members read only at the current index.

    They are fed to the scan as slices, one per step (what `lax.scan` calls xs), instead of
    being indexed inside the body: XLA then never carries the whole array through the loop
    (a gather from a loop-carried array made T = 10k scans 20x slower on CPU).
    """
    only_current: dict[int, bool] = {}
    for member in loop.members:
        for edge in ctx.graph[member].all_edges():
            value = ctx.values.get(edge.node)
            if edge.node in loop.members or value is None or loop.dim not in value.axes:
                continue
            item = index_on(edge, ctx.graph[edge.node], loop.dim)
            current = is_same_point(item, loop.dim)
            only_current[edge.node] = only_current.get(edge.node, True) and current
    return frozenset(node for node, current in only_current.items() if current)


@dataclass
class LoopPlan:
    """What one loop carries between steps, streams in, keeps after it, and its body."""

    ctx: Context
    loop: Loop
    window_axes: dict[int, tuple[Dim, ...]]
    kept: frozenset[int]
    streamed: frozenset[int]
    # the axes of each kept member's value at one step, as the body computed them
    kept_axes: dict[int, tuple[Dim, ...]] = field(default_factory=dict)

    @classmethod
    def make(cls, ctx: Context, loop: Loop) -> LoopPlan:
        loop_dims = (*ctx.loop_index, loop.dim)
        window_axes = {m: _inner_axes(ctx.graph[m], loop_dims) for m in _window_sizes(ctx, loop)}
        return cls(ctx, loop, window_axes, _kept(ctx, loop), _streamed(ctx, loop))

    def scan_inputs(self, first, size: int, reverse: bool = False) -> tuple[Any, dict]:
        """The per-step inputs of `size` consecutive steps from index `first` (downwards
        when `reverse`): each index, and the streamed values' slices at it (the loop dim
        moved to the front). A slice, never a gather: the steps are contiguous."""
        sign = -1 if reverse else 1
        indices = first + sign * np.arange(size, dtype=np.int32)  # a constant, not a fusion
        lowest = first - size + 1 if reverse else first
        slices = {}
        for node in self.streamed:
            value = self.ctx.values[node]
            axis = value.axes.index(self.loop.dim)
            part = jax.lax.dynamic_slice_in_dim(value.array, lowest, size, axis=axis)
            part = jnp.moveaxis(part, axis, 0)
            slices[node] = jnp.flip(part, axis=0) if reverse else part
        return indices, slices

    def initial_carry(self, inside: bool = False) -> dict[int, Any]:
        """Zeros for the windows; `inside` a program split over devices, those along the
        split dim differ from device to device (as the body's values will)."""
        carry = {m: self._zeros(m, size) for m, size in _window_sizes(self.ctx, self.loop).items()}
        split = self.ctx.split
        if inside and split is not None:
            carry = {m: split.varying(z, self.window_axes[m]) for m, z in carry.items()}
        return carry

    def initial_stacks(self) -> dict[int, Any]:
        """Zeros for the kept members' values at every step (loop dim first), for a loop run
        from the host that writes each step's values in place (`jax_staged.py`)."""
        return {m: self._zeros(m, self.ctx.extent(self.loop.dim)) for m in sorted(self.kept)}

    def _zeros(self, member: int, length: int) -> Any:
        """`length` entries of a member's value at one step."""
        node = self.ctx.graph[member]
        loop_dims = (*self.ctx.loop_index, self.loop.dim)
        extents = tuple(self.ctx.extent(d) for d in _inner_axes(node, loop_dims))
        return jnp.zeros((length, *extents, *concrete_shape(node, self.ctx.bounds)), node.dtype)

    def body(self, carry: dict[int, Any], inputs) -> tuple[dict[int, Any], dict[int, Any]]:
        """One step (`inputs` from `scan_inputs`): the new carry, and the kept members'
        values at this step."""
        loop = self.loop
        index, slices = inputs
        windows = {m: Window(carry[m], loop.dim, self.window_axes[m]) for m in carry}
        inner = self.ctx.child(loop.dim, index, windows)
        for node, array in slices.items():
            axes = self.ctx.values[node].axes
            inner.values[node] = Value(array, tuple(d for d in axes if d is not loop.dim))
        run_steps(inner, loop.body)
        self.kept_axes.update({m: inner.values[m].axes for m in self.kept})
        kept = {m: inner.values[m].array for m in self.kept}
        return self.shift_windows(carry, inner.values), kept

    def store(self, stacked: dict[int, Any]) -> None:
        """Record the kept members' values as stacked: the loop dim first, then the axes the
        body computed them over (`kept_axes`, recorded when the body was traced). Consumers
        read them in that order (`jax.py`); a transposition into domain order here made XLA
        emit a transposing fusion and a copy per stack."""
        for member, array in stacked.items():
            self.ctx.values[member] = Value(array, (self.loop.dim, *self.inner_axes(member)))

    def store_final(self, carry: dict[int, Any], members: frozenset[int]) -> None:
        """Record members read after the loop only at its last step, from the final carry:
        that value at every index (XLA folds the broadcast into the one read)."""
        extent = self.ctx.extent(self.loop.dim)
        self.store({m: jnp.broadcast_to(carry[m][0], (extent, *carry[m].shape[1:]))
                    for m in members})  # fmt: skip

    def inner_axes(self, member: int) -> tuple[Dim, ...]:
        """The axes of a member's value at one step: as computed, else in domain order."""
        node = self.ctx.graph[member]
        loop_dims = (*self.ctx.loop_index, self.loop.dim)
        return self.kept_axes.get(member) or _inner_axes(node, loop_dims)

    def domain_layout(self, member: int, ndim: int) -> tuple[tuple[Dim, ...], list[int]]:
        """The axes of a kept member in domain order, and the permutation of its stacked
        array (loop dim first) that puts them so (host loops store that way)."""
        axes = (self.loop.dim, *self.inner_axes(member))
        ordered = tuple(d for d in self.ctx.graph[member].domain if d in axes)
        return ordered, [axes.index(d) for d in ordered] + list(range(len(axes), ndim))

    def shift_windows(self, carry: dict[int, Any], values: dict[int, Value]) -> dict[int, Any]:
        """The carry of the next step: each window with this step's value in front (in the
        window's axis order, whatever order the step computed it in)."""
        arrays = {m: in_order(values[m], self.window_axes[m]) for m in carry}
        return {m: jnp.concatenate([arrays[m][None], carry[m][:-1]]) for m in carry}


def zeros(shapes: dict[int, Any]) -> dict[int, Any]:
    """Zeros of the given shapes and dtypes (a carry or stacks to start from).

    NumPy's zeros put on the device, not `jnp.zeros`: that compiles an XLA program for each
    new shape, and PPO's carry took 110 ms of a run's first call so (AMD EPYC, 2 cores). The
    calls that take these buffers may donate them: JAX copies or adopts a host array, so
    the run owns its buffers either way."""
    return {m: jax.device_put(np.zeros(s.shape, s.dtype)) for m, s in shapes.items()}


def run_loop(ctx: Context, loop: Loop) -> None:
    plan = LoopPlan.make(ctx, loop)
    at_end = carried_to_the_end(ctx, loop, plan)
    plan = dataclasses.replace(plan, kept=plan.kept - at_end)
    inputs = plan.scan_inputs(0, ctx.extent(loop.dim))
    packings: list[Packing] = []  # the small kept values' packing, set when tracing the body

    def step(carry, inputs):
        carry, kept = plan.body(carry, inputs)
        return carry, _packed_small(kept, packings)

    carry, (packed, stacked) = jax.lax.scan(step, plan.initial_carry(inside=True), inputs,
                                            reverse=loop.reverse)  # fmt: skip
    if packed:
        stacked |= Packing(packings[-1].shapes, rows=ctx.extent(loop.dim)).unpack(packed)
    plan.store(stacked)
    plan.store_final(carry, at_end)


def _packed_small(kept: dict[int, Any], packings: list[Packing]) -> tuple[tuple, dict[int, Any]]:
    """A step's kept values as the scan stacks them: those of at most PACKED_BYTES in one
    flat row per dtype (`packing.py`; its layout appended to `packings`), the others as they
    are. Every stacked array is a dynamic-update-slice per step, about a microsecond each
    on XLA:CPU: PPO's acting step on 8 gymnax CartPoles wrote 3 float stacks and an int one
    (24 XLA thunks a step in all); packed, 4.73 instead of 4.86 ms per iteration (12 rounds
    alternating in one process; another 8 rounds 5.12 and 5.35)."""
    small = {m: a for m, a in kept.items() if nbytes(a) <= PACKED_BYTES}
    if len(small) < 2:
        return (), kept
    packings.append(Packing({m: jax.ShapeDtypeStruct(a.shape, a.dtype) for m, a in small.items()}))
    return packings[-1].pack(small), {m: a for m, a in kept.items() if m not in small}
