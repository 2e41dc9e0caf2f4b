"""The fast lowering, part 4: host loops, for programs with host ops (see `stages.py`).

A loop containing a host op runs in Python, one step at a time; between host ops, each
host-free run of steps is one jitted function (a *segment*):

    for d in range(D):                             # a host loop over d
        values, args = segment_1(reads)            # jitted: the steps before host op 1,
        out = host_op_1(*args)                     #   and host op 1's inputs
        values = segment_2(reads)                  # Python: numpy arrays in and out
        ...                                        # jitted, the step's last segment:
        carry, stacks = finish(carry, stacks, values)  # the windows move one step, and
                                                   #   what is read after the loop is
                                                   #   written into stacks[d]

Loops without host ops stay inside their segment as `lax.scan`s. A segment reads only what
its steps need: values computed earlier, windows of the enclosing host loops, their indices
(as traced scalars, so one compiled function serves every step) and the program inputs.

*Segmented* compilation (`cut=True`) also ends segments before and after the loops and after
the gradients of a step list (`_cuts`), for a program without host ops too: XLA:CPU keeps
the compiler state of every fused kernel of a program until the whole program is compiled
(about 1 MiB each), so several smaller programs peak lower than one (`JaxExecutable`'s
`segmented`).

Everything is traced and compiled once, by an abstract pass at construction in which values
are `ShapeDtypeStruct`s and host ops are not called, so a bad program fails at `compile()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.heap import release_freed_heap
from rlsys.compiler.lower.backend_options import backend_options
from rlsys.compiler.lower.data_parallel import Split
from rlsys.compiler.lower.jax import (
    Context,
    LastStep,
    Value,
    Window,
    call_host,
    domain_axes,
    host_arguments,
    host_result,
    in_domain_order,
)
from rlsys.compiler.lower.jax_loop import LoopPlan, carried_to_the_end, run_steps, zeros
from rlsys.compiler.lower.packing import PackedStacks, Packing, nbytes
from rlsys.compiler.lower.profiled import profiled_call
from rlsys.compiler.passes.dce import needed_nodes
from rlsys.compiler.schedule import Compute, Loop, Step, point_bytes
from rlsys.compiler.stages import has_host

INDEX = jax.ShapeDtypeStruct((), jnp.int32)


def _compiled(lowered: jax.stages.Lowered) -> jax.stages.Compiled:
    """The segment compiled (with the backend's options, `backend_options.py`), and what
    compiling it freed handed back to the OS (`heap.py`): segments compile one after
    another, and the next one's compilation did not reuse all of that memory. The scaling
    sweep's envs=64 point, `segmented="auto"`: peak RSS 138–148 MiB above the idle process
    (median 141, 15 runs) with the trim, 143–152 (median 150, 7 runs) without."""
    compiled = lowered.compile(compiler_options=backend_options() or None)
    release_freed_heap()
    return compiled


def _nodes(steps: Iterable[Step]) -> set[int]:
    nodes: set[int] = set()
    for step in steps:
        nodes |= {step.node} if isinstance(step, Compute) else set(step.members)
    return nodes


def _reads(ctx: Context, steps: list[Step]) -> tuple[set[int], set[int]]:
    """What the steps read: values computed before them, and windows of the enclosing
    loops (including a window of one of the steps' own nodes: its earlier iterations).
    A gradient reads the inputs of its path."""
    nodes = _nodes(steps)
    reads = {e.node for n in nodes for e in ctx.graph[n].all_edges()}
    reads |= {r for n in nodes for r in ctx.grad_reads.get(n, ())}
    values = {n for n in reads - nodes if n in ctx.values or regenerated(ctx, n)}
    return values, {n for n in reads if n in ctx.windows}


_REGENERATED_BYTES = 1 << 20
_SMALL_CONSTANT_BYTES = 1 << 10


def regenerated(ctx: Context, node_id: int) -> bool:
    """Whether the node is a large broadcast of a small constant, which every segment
    reading it computes again (XLA fuses a broadcast into its readers) instead of one
    segment computing it and every call passing it on: DQN's replay buffer starts as such
    zeros, read by the merge that starts the buffer at i = 0, and for Pong with a 10,000-step
    buffer the zeros held 545 MB for the whole run. In-graph iterations compute them where
    they read them too (`JaxExecutable._prologue`)."""
    node = ctx.graph[node_id]
    if node.op != "broadcast_to" or node.domain or point_bytes(node) < _REGENERATED_BYTES:
        return False
    return all(ctx.graph[e.node].op == "const" and not ctx.graph[e.node].domain
               and point_bytes(ctx.graph[e.node]) <= _SMALL_CONSTANT_BYTES
               for e in node.all_edges())  # fmt: skip


def with_regenerated(ctx: Context, steps: list[Step], values: set[int]) -> list[Step]:
    """The steps after those computing the regenerated values they read, and their constants."""
    broadcasts = sorted(n for n in values if regenerated(ctx, n))
    constants = sorted({e.node for n in broadcasts for e in ctx.graph[n].all_edges()})
    return [Compute(n, ()) for n in (*constants, *broadcasts)] + steps


class Segment:
    """Host-free steps as one jitted function, followed by at most one host op. The last
    segment of a host loop's step also moves the loop's windows (`finish`) and writes the
    step's kept values into `stacks` (when given: their zeros), which saves calls and
    transfers per step. With `split` (a segmented program's iteration, no host op), each
    device runs the steps on its share of the points (`data_parallel.py`), and the values
    the segment passes on stay spread over the devices for the next segment."""

    def __init__(self, ctx: Context, steps: list[Step], host: Compute | None,
                 finish: LoopPlan | None = None, stacks: dict | None = None,
                 split: Split | None = None) -> None:  # fmt: skip
        steps = [s for s in steps if not (isinstance(s, Compute) and s.node in ctx.unread)]
        values, _ = _reads(ctx, steps + ([host] if host else []))
        steps = with_regenerated(ctx, steps, values)
        self.template, self.steps, self.host, self.finish = ctx, steps, host, finish
        nodes = _nodes(steps)
        values, windows = _reads(ctx, steps + ([host] if host else []))
        if finish is not None:  # the windows' and stacks' new entries: this step's values
            values |= {m for m in (*finish.window_axes, *(stacks or ())) if m not in nodes}
        self.value_reads, self.window_reads = sorted(values), sorted(windows)
        # The loop's own windows, read from the carry this segment moves (not passed twice)
        own = set(finish.window_axes) if finish is not None else set()
        self.carried_reads = [n for n in self.window_reads if n in own]
        self.axes = {n: ctx.values[n].axes for n in self.value_reads}
        self.last_steps = {n: v for n in self.value_reads
                           if isinstance(v := ctx.values[n], LastStep)}  # fmt: skip
        self.loop_dims = tuple(ctx.loop_index)
        self.live = _live_after(ctx, nodes, moves_windows=finish is not None)
        self.operation = _operation(ctx, nodes, host)
        self.out_axes: dict[int, tuple] = {}  # filled while tracing
        carry = jax.eval_shape(finish.initial_carry) if finish else {}  # shapes, no zeros
        args = self._arguments(ctx, carry, stacks or {})
        values, host_args, _, _ = jax.eval_shape(self._traced, *args)  # sets out_axes
        # The carry and stacks are donated: nothing reads them after the step's last segment
        # (the loop goes on with the ones it returns), so XLA writes them in place. A replay
        # ring (DQN's) is a window: written a slot per iteration, not copied whole.
        donated = (4, 5) if finish is not None else ()
        if split is None:
            traced = jax.jit(self._traced, donate_argnums=donated)
        else:
            traced = self._over_devices(split, args, donated)
        self.compiled = _compiled(traced.lower(*args))
        self._record(ctx, values, host_args, call=False)

    def run(self, ctx: Context, carry: dict | None = None,
            stacks: dict | None = None) -> tuple[dict, dict]:  # fmt: skip
        """Run the steps (and host op) on `ctx`; with `finish`, return the next carry and
        stacks."""
        arguments = self._arguments(ctx, carry or {}, stacks or {})
        values, host_args, carry, stacks = profiled_call(self.operation, self.compiled,
                                                         *arguments)  # fmt: skip
        self._record(ctx, values, host_args, call=True)
        return carry, stacks

    def _arguments(self, ctx: Context, carry: dict, stacks: dict) -> tuple:
        return (
            ctx.inputs,
            {n: ctx.values[n].array for n in self.value_reads},
            {n: ctx.windows[n].array for n in self.window_reads if n not in self.carried_reads},
            tuple(ctx.loop_index[d] for d in self.loop_dims),
            carry,
            stacks,
        )

    def _over_devices(self, split: Split, args: tuple, donated: tuple[int, ...]):
        """`_traced` on every device, each on its points: the arguments and results spread
        along the split dim where they have it, the same on every device elsewhere."""
        inputs, values, windows, indices, carry, stacks = args
        if self.host is not None or stacks:
            raise RecurrenceError("internal: only a host-free iteration's segments are split")
        window_axes = self.finish.window_axes if self.finish else {}
        in_specs = (
            {name: PartitionSpec() for name in inputs},
            {n: split.spec(self.axes[n]) for n in values},
            {n: split.spec(self.template.windows[n].axes, leading=1) for n in windows},
            tuple(PartitionSpec() for _ in indices),
            {m: split.spec(window_axes[m], leading=1) for m in carry},
            {},
        )  # fmt: skip
        out_specs = ({n: split.spec(a) for n, a in self.out_axes.items()}, (), in_specs[4], {})
        over_devices = jax.shard_map(partial(self._traced, split=split), mesh=split.mesh,
                                     in_specs=in_specs, out_specs=out_specs)  # fmt: skip
        # Each argument where the segment before left it: one the steps do not read (a
        # window the step overwrites) would otherwise be pruned, or expected on one device.
        shardings = jax.tree.map(split.sharding, in_specs,
                                 is_leaf=lambda x: isinstance(x, PartitionSpec))  # fmt: skip
        return jax.jit(over_devices, in_shardings=shardings, keep_unused=True,
                       donate_argnums=donated)  # fmt: skip

    def _traced(self, inputs, values, windows, indices, carry, stacks, split=None):
        t = self.template
        ctx = Context(
            t.graph, t.bounds if split is None else split.local_bounds(t.bounds), inputs,
            {n: self._value(n, a) for n, a in values.items()},
            {n: Window(a, t.windows[n].dim, t.windows[n].axes)
             for n, a in {**windows, **{n: carry[n] for n in self.carried_reads}}.items()},
            dict(zip(self.loop_dims, indices, strict=True)),
            t.outputs, t.grad_reads, t.consumers, t.loss_grads, t.lazy, t.deferred,
            t.grad_reuse, split=split,
        )  # fmt: skip
        run_steps(ctx, self.steps)
        new = {n: v for n, v in ctx.values.items() if n not in values and n in self.live}
        self.out_axes = {n: v.axes for n, v in new.items()}
        host_args = () if self.host is None else tuple(
            host_arguments(ctx, ctx.graph[self.host.node], self.host.vector_dims))  # fmt: skip
        if self.finish is not None:
            carry = self.finish.shift_windows(carry, ctx.values)
            at = ctx.loop_index[self.finish.loop.dim]
            stacks = _written(stacks, {m: in_domain_order(ctx, m) for m in stacks}, at)
        return {n: v.array for n, v in new.items()}, host_args, carry, stacks

    def _value(self, node: int, array: Any) -> Value:
        last = self.last_steps.get(node)
        return Value(array, self.axes[node]) if last is None else last.stacked(array)

    def _record(self, ctx: Context, values: dict, host_args: tuple, call: bool) -> None:
        """Put the steps' values and the host op's result (if any) into `ctx`."""
        ctx.values.update({n: Value(a, self.out_axes[n]) for n, a in values.items()})
        if self.host is not None:
            node = ctx.graph[self.host.node]
            result = call_host(node, *host_args) if call else host_result(
                ctx, node, self.host.vector_dims)  # fmt: skip
            ctx.values[node.id] = Value(result, self.host.vector_dims)


def _written(stacks: dict | PackedStacks, values: dict, at: Any) -> dict | tuple:
    """The stacks with this step's `values` written at index `at`."""
    if isinstance(stacks, PackedStacks):
        return stacks.written(values, at)
    return {m: jax.lax.dynamic_update_index_in_dim(s, values[m], at, 0) for m, s in stacks.items()}


def _operation(ctx: Context, nodes: set[int], host: Compute | None) -> str | None:
    """What `rlsys profile` calls the segment: computing a gradient is backpropagation,
    computing a host op's inputs (the action an environment steps with) is inference."""
    if any(ctx.graph[n].op == "grad" for n in nodes):
        return "backpropagation"
    return "inference" if host is not None and nodes else None


def unread_values(ctx: Context, steps: tuple[Step, ...]) -> frozenset[int]:
    """The nodes whose values nothing reads. A loss computed with its gradient (`loss_grads`:
    one vjp) re-runs the ops on its path rather than read its inputs; so what only such a
    loss reads, and what only nodes like these read, need not be computed, unless it is an
    output or a re-run reads it. One XLA program drops such ops by itself, but a segment
    returning them to the next (where the loss is) cannot: A2C's segment before its gradient
    would compute the critic over the whole rollout for nothing. A loss counts only where
    its gradient is in the same segment (the same step list, with no loop, host op or other
    gradient between them), where it is sure to be computed with it."""
    losses = set()

    def visit(steps: tuple[Step, ...]) -> None:
        at = {s.node: k for k, s in enumerate(steps) if isinstance(s, Compute)}
        for loss, grad in ctx.loss_grads.items():
            if loss in at and grad in at and at[loss] < at[grad] and all(
                isinstance(s, Compute) and not has_host(ctx.graph, s)
                and ctx.graph[s.node].op != "grad" for s in steps[at[loss] + 1 : at[grad]]
            ):  # fmt: skip
                losses.add(loss)
        for step in steps:
            if isinstance(step, Loop):
                visit(step.body)

    visit(steps)
    read = ctx.outputs.union(*ctx.grad_reads.values(), losses)
    unread = needed_nodes(ctx.graph, losses) - read  # what the losses depend on
    while dropped := {n for n in unread if not _readers_within(ctx.consumers[n], unread, losses)}:
        unread -= dropped
    return frozenset(unread)


def _readers_within(consumers: list[int], unread: set[int], losses: set[int]) -> bool:
    return all(c in unread or c in losses for c in consumers)


def _live_after(ctx: Context, nodes: set[int], moves_windows: bool) -> set[int]:
    """The nodes computed by a segment that anything after it reads: other nodes, the
    program's outputs, a gradient's re-run, or (unless the segment moves them) the windows."""
    later_grads = [reads for g, reads in ctx.grad_reads.items() if g not in nodes]
    return {
        n for n in nodes - ctx.unread
        if (any(c not in nodes for c in ctx.consumers[n]) and not regenerated(ctx, n))
        or n in ctx.outputs
        or any(n in reads for reads in later_grads)
        or (not moves_windows and n in ctx.windows)
    }  # fmt: skip


def _cuts(ctx: Context, steps: list[Step]) -> set[int]:
    """Where segmented compilation ends segments (after the steps at these positions): before
    and after each loop and after each gradient, up to the last gradient. An acting loop, an
    advantages' scan, and a gradient's re-run of the forward pass with its backward pass are
    most of an iteration's kernels, and so is what comes before a loop (the noise an acting
    loop draws for all its steps; a critic's values for the advantages: 51 loop fusions with
    the scan at the scaling sweep's envs=64 point, whose compilation set the peak). Cut
    before the loops too, that point compiled to a peak of 132–139 MiB above the idle process
    instead of 141–150, and ran 0–6% slower. What follows the last gradient (the optimizer's
    update, metrics) is small, and every segment costs a call per iteration. A gradient
    recomputes the values of its path that an earlier segment computed and passed on for
    other readers (a critic's values for GAE with lambda < 1), which one XLA program would
    have merged: part of what segmenting costs. What only the gradient's re-run reads, no
    segment computes (`unread_values`)."""
    grads = [k for k, step in enumerate(steps)
             if isinstance(step, Compute) and ctx.graph[step.node].op == "grad"]  # fmt: skip
    if not grads:
        return set()
    loops = [k for k, step in enumerate(steps[: grads[-1]]) if isinstance(step, Loop)]
    return {*grads, *loops, *(k - 1 for k in loops if k > 0)}


class StagedSteps:
    """A list of steps run from the host: segments, and host loops nested in them. With
    `finish`, the steps are a host loop's body and the last segment moves its windows (and
    writes `stacks`). With `cut`, segments also end at `_cuts`; with `split`, each runs
    over devices (`Segment`)."""

    def __init__(self, ctx: Context, steps: Iterable[Step], finish: LoopPlan | None = None,
                 stacks: dict | None = None, cut: bool = False,
                 split: Split | None = None) -> None:  # fmt: skip
        self.parts: list[Segment | StagedLoop] = []
        pending: list[Step] = []
        steps = list(steps)
        cuts = _cuts(ctx, steps) if cut else set()
        for k, step in enumerate(steps):
            if not has_host(ctx.graph, step):
                pending.append(step)
                if k in cuts:
                    self.parts.append(Segment(ctx, pending, None, split=split))
                    pending = []
            elif isinstance(step, Compute):
                self.parts.append(Segment(ctx, pending, step))
                pending = []
            else:
                if pending:
                    self.parts.append(Segment(ctx, pending, None))
                    pending = []
                self.parts.append(StagedLoop(ctx, step, cut=cut))
        if finish is not None or pending:
            self.parts.append(Segment(ctx, pending, None, finish, stacks, split))

    def segments(self) -> Iterator[Segment]:
        """Every compiled segment, those of nested host loops too."""
        for part in self.parts:
            if isinstance(part, Segment):
                yield part
            else:
                yield from part.body.segments()

    def run(self, ctx: Context, carry: dict | None = None,
            stacks: dict | None = None) -> tuple[dict, dict] | None:  # fmt: skip
        """Run the steps on `ctx`; as a loop body, return the loop's next carry and stacks."""
        for part in self.parts[:-1]:
            part.run(ctx)
        last = self.parts[-1] if self.parts else None
        if isinstance(last, Segment):
            return last.run(ctx, carry, stacks)
        return last and last.run(ctx)


class Rotated:
    """A host loop whose step is [segment A -> host op -> segment B], run rotated: B of one
    step and A of the next are one jitted call, so a step costs one dispatch, not two.

        A(0); host(0)                                      # start
        for d in 0 .. D-2:  (B(d), A(d+1)); host(d+1)      # one call
        B(D-1), the stacks arranged                        # finish
    Inside the call, A reads the loop's windows as B has just moved them.

    The calls' arrays are packed (`packing.py`): what changes from step to step (the
    stacks, donated; the windows and A's values, the *state*), what does not (small values
    read from outside the loop, the *constants*), the host result and two loop indices.
    Unpacked, the call took and returned some thirty arrays, which cost more than its work."""

    def __init__(self, ctx: Context, loop: Loop, first: Segment, second: Segment,
                 carry: dict, stacks: dict,
                 arrange: Callable[[dict, dict], tuple[dict, dict]]) -> None:  # fmt: skip
        if first.loop_dims != second.loop_dims:
            raise RecurrenceError("internal: the rotated segments run in different loops")
        self.first, self.second, self.host = first, second, ctx.graph[first.host.node]
        self.at, self.arrange = first.loop_dims.index(loop.dim), arrange
        self.started = sorted(first.out_axes)  # A's values: what B (and the last step) read
        reads = self._reads(ctx, carry)
        self.large = {k for k, a in reads.items() if nbytes(a) > _PACKED_CONSTANT_BYTES}
        constants, large = self._split(reads)
        self.constants = Packing(constants)
        self.state = Packing(self._state(carry, {n: ctx.values[n].array for n in self.started}))
        rows = {m: jax.ShapeDtypeStruct(s.shape[1:], s.dtype) for m, s in stacks.items()}
        self.stacks = Packing(rows, rows=ctx.extent(loop.dim))
        start = (constants, large, ctx.inputs, carry, INDEX)
        self._start = _compiled(jax.jit(self._started).lower(*start))
        packed = jax.eval_shape(self._started, *start)[:3]  # constants, state, stacks
        args = (packed[2], packed[1], ctx.values[self.host.id].array, INDEX, INDEX,
                packed[0], large, ctx.inputs)  # fmt: skip
        # The stacks and the state are donated: XLA writes them in place.
        self.compiled = _compiled(jax.jit(self._traced, donate_argnums=(0, 1)).lower(*args))
        self._finish = _compiled(jax.jit(self._finished).lower(*args[:4], *args[5:]))

    def _reads(self, ctx: Context, carry: dict) -> dict:
        """What the calls read that stays the same for a whole loop run: values and windows
        from outside the loop, and the enclosing loops' indices. Small ones are packed; large
        ones (a replay buffer) are passed as they are, not copied into a buffer every run
        (`_split`)."""
        reads = {("value", n): ctx.values[n].array
                 for segment in (self.first, self.second) for n in segment.value_reads
                 if n not in self.first.out_axes and n != self.host.id}  # fmt: skip
        reads |= {("window", n): ctx.windows[n].array
                  for segment in (self.first, self.second) for n in segment.window_reads
                  if n not in carry}  # fmt: skip
        indices = (ctx.loop_index[d] for d in self.first.loop_dims)
        return reads | {("index", k): i for k, i in enumerate(indices) if k != self.at}

    def _split(self, reads: dict) -> tuple[dict, dict]:
        """The reads to pack, and the large ones (passed as they are)."""
        return ({k: a for k, a in reads.items() if k not in self.large},
                {k: a for k, a in reads.items() if k in self.large})  # fmt: skip

    def _arguments(self, segment: Segment, index, carry: dict, values: dict, constants: dict,
                   inputs) -> tuple:  # fmt: skip
        """A segment's arguments (as `Segment._arguments` gives them) inside a call."""
        values = {n: values[n] if n in values else constants[("value", n)]
                  for n in segment.value_reads}  # fmt: skip
        windows = {n: carry[n] if n in carry else constants[("window", n)]
                   for n in segment.window_reads}  # fmt: skip
        indices = tuple(index if k == self.at else constants[("index", k)]
                        for k in range(len(segment.loop_dims)))  # fmt: skip
        return inputs, values, windows, indices

    def _started(self, constants, large, inputs, carry, index):
        """A(0): the packed constants, state and (zero) stacks, and host(0)'s arguments."""
        reads = {**constants, **large}
        started, host_args, _, _ = self.first._traced(
            *self._arguments(self.first, index, carry, {}, reads, inputs), {}, {}
        )
        return (self.constants.pack(constants), self._packed_state(carry, started),
                self.stacks.zeros(), host_args)  # fmt: skip

    def _state(self, carry: dict, started: dict) -> dict:
        """The state after a step's A: the loop's windows and A's values."""
        return {**{("window", m): a for m, a in carry.items()},
                **{("value", n): started[n] for n in self.started}}  # fmt: skip

    def _packed_state(self, carry: dict, started: dict) -> tuple:
        return self.state.pack(self._state(carry, started))

    def _second(self, stacks, state, host_result, previous, constants, large, inputs):
        """B of the step `previous`: the moved windows and the stacks written."""
        constants = {**self.constants.unpack(constants), **large}
        state = self.state.unpack(state)
        carry = {m: a for (kind, m), a in state.items() if kind == "window"}
        values = {n: a for (kind, n), a in state.items() if kind == "value"}
        values[self.host.id] = host_result
        args = self._arguments(self.second, previous, carry, values, constants, inputs)
        _, _, carry, stacks = self.second._traced(*args, carry, PackedStacks(self.stacks, stacks))
        return carry, stacks, constants

    def _traced(self, stacks, state, host_result, previous, following, constants, large, inputs):
        carry, stacks, constants = self._second(stacks, state, host_result, previous, constants,
                                                large, inputs)  # fmt: skip
        args = self._arguments(self.first, following, carry, {}, constants, inputs)
        started, host_args, _, _ = self.first._traced(*args, {}, {})
        return stacks, self._packed_state(carry, started), host_args

    def _finished(self, stacks, state, host_result, previous, constants, large, inputs):
        """B of the last step, and the stacks unpacked and arranged in domain order (with the
        last steps' values, `StagedLoop._arranged`)."""
        carry, stacks, _ = self._second(stacks, state, host_result, previous, constants, large,
                                        inputs)  # fmt: skip
        return self.arrange(self.stacks.unpack(stacks), carry)

    def run(self, loop: StagedLoop, ctx: Context, order: list[int]) -> tuple[dict, dict]:
        """Run the loop's steps in `order`; return its stacks, arranged, and its last steps'
        values (`StagedLoop._arranged`). A step in Python is the call and the host op,
        nothing else."""
        carry = zeros(loop.carry_shapes)  # a run's own: the calls donate it
        inner = loop.inner(ctx, carry, order[0])
        constants, large = self._split(self._reads(inner, carry))
        previous = loop.device_index(order[0])
        constants, state, stacks, host_args = profiled_call(
            self.first.operation, self._start,
            constants, large, inner.inputs, carry, previous,
        )  # fmt: skip
        result = call_host(self.host, *host_args)
        for index in order[1:]:
            following = loop.device_index(index)
            stacks, state, host_args = profiled_call(
                self.first.operation, self.compiled,
                stacks, state, result, previous, following, constants, large, inner.inputs,
            )  # fmt: skip
            result = call_host(self.host, *host_args)
            previous = following
        return profiled_call(
            self.second.operation, self._finish,
            stacks, state, result, previous, constants, large, inner.inputs,
        )  # fmt: skip


_PACKED_CONSTANT_BYTES = 1 << 16  # larger constants are passed unpacked (see Rotated)


_KEPT_INDICES = 4096  # loop indices kept on the device, per loop (an acting loop's steps)
# A scalar index onto the device: a compiled identity copies it in about 10 µs, where
# `jax.device_put` takes about 100 µs. A NumPy scalar passed to a call instead would be
# copied by every call that reads it (several per step).
_on_device = jax.jit(lambda index: index)


class StagedLoop:
    """A loop run one step at a time from Python: one containing a host op, or the iteration
    loop of a segmented program. `run` keeps each step's values on the device, in stacks the
    step's last segment writes; `step` (for a caller that wants them after every step)
    returns them instead."""

    def __init__(self, ctx: Context, loop: Loop, stacked: bool = True, cut: bool = False,
                 split: Split | None = None) -> None:  # fmt: skip
        self.loop = loop
        self._indices: dict[int, jax.Array] = {}
        _on_device(np.int32(0))  # compiled now, once per process, not in a run's first step
        plan = LoopPlan.make(ctx, loop)
        # read after the loop only at its last step: kept from the final carry, not stacked
        self.last_steps = carried_to_the_end(ctx, loop, plan) if stacked else frozenset()
        plan = dataclasses.replace(plan, kept=plan.kept - self.last_steps)
        self.window_axes, self.kept = plan.window_axes, sorted(plan.kept)
        # Shapes only: each run starts from zeros of its own, since the step's last segment
        # donates the carry and stacks it is given (`Segment`).
        self.carry_shapes = carry = jax.eval_shape(plan.initial_carry)
        self.stack_shapes = stacks = jax.eval_shape(plan.initial_stacks) if stacked else {}
        inner = self._inner(ctx, carry, INDEX)
        self.body = StagedSteps(inner, loop.body, finish=plan, stacks=stacks, cut=cut,
                                split=split)  # fmt: skip
        parts = self.body.parts
        rotatable = (stacked and len(parts) == 2 and isinstance(parts[0], Segment)
                     and parts[0].host is not None and parts[1].host is None)  # fmt: skip
        self._extent = extent = ctx.extent(loop.dim)
        self.layouts = {}  # kept member -> (its axes once stored, the stacks' permutation)
        for m in self.kept:  # what the loop leaves behind: the stacked shapes
            entry = inner.values[m]  # its steps are written in domain order (Segment)
            dims, shape = domain_axes(inner, m), np.shape(entry.array)
            step_shape = (*(shape[entry.axes.index(d)] for d in dims), *shape[len(dims) :])
            ordered, perm = self.layouts[m] = plan.domain_layout(m, len(step_shape) + 1)
            shape = (extent, *step_shape)
            ctx.values[m] = Value(jax.ShapeDtypeStruct(tuple(shape[p] for p in perm),
                                                       entry.array.dtype), ordered)  # fmt: skip
        for m in self.last_steps:
            window = self.carry_shapes[m]  # (size, *the entry)
            step_value = jax.ShapeDtypeStruct(window.shape[1:], window.dtype)
            ctx.values[m] = self._last_step(m, step_value)
        self.rotated = (Rotated(inner, loop, *parts, carry, stacks, self._arranged)
                        if rotatable else None)  # fmt: skip
        # The stacks' arrangement in domain order, compiled here: as eager ops the
        # transpositions would cost a dispatch each per run (and a first lowering in it).
        if stacked and self.rotated is None:
            self._arrange = _compiled(jax.jit(self._arranged).lower(stacks, carry))

    def _arranged(self, stacks: dict, carry: dict) -> tuple[dict, dict]:
        """The stacks in domain order, and the last steps' values from the final carry."""
        return ({m: jnp.transpose(a, self.layouts[m][1]) for m, a in stacks.items()},
                {m: carry[m][0] for m in self.last_steps})  # fmt: skip

    def _last_step(self, member: int, array: Any) -> LastStep:
        return LastStep(array, self.window_axes[member], self.loop.dim, self._extent)

    def inner(self, ctx: Context, carry: dict, index: int) -> Context:
        """The context of step `index`, for running it (compiling uses a traced index)."""
        return self._inner(ctx, carry, self.device_index(index))

    def device_index(self, index: int) -> jax.Array:
        """`index` on the device, made once: each call would copy a host index there."""
        if index not in self._indices:
            if len(self._indices) >= _KEPT_INDICES:
                self._indices.clear()
            self._indices[index] = _on_device(np.int32(index))
        return self._indices[index]

    def _inner(self, ctx: Context, carry: dict, index: Any) -> Context:
        windows = {m: Window(a, self.loop.dim, self.window_axes[m]) for m, a in carry.items()}
        return ctx.child(self.loop.dim, index, windows)

    def step(self, ctx: Context, carry: dict, index: int) -> tuple[dict, dict[int, Any]]:
        """Step `index` of the loop: the next carry and the kept members' values."""
        inner = self._inner(ctx, carry, _on_device(np.int32(index)))  # rarely repeated
        carry, _ = self.body.run(inner, carry, {})
        return carry, {m: in_domain_order(inner, m) for m in self.kept}

    def run(self, ctx: Context) -> None:
        extent = ctx.extent(self.loop.dim)
        order = list(range(extent - 1, -1, -1) if self.loop.reverse else range(extent))
        if self.rotated is not None:
            stored = self.rotated.run(self, ctx, order)
        else:
            carry, stacks = zeros(self.carry_shapes), zeros(self.stack_shapes)
            for index in order:
                carry, stacks = self.body.run(self.inner(ctx, carry, index), carry, stacks)
            stored = self._arrange(stacks, carry)
        stacked, last = stored
        ctx.values.update({m: Value(a, self.layouts[m][0]) for m, a in stacked.items()})
        ctx.values.update({m: self._last_step(m, a) for m, a in last.items()})
