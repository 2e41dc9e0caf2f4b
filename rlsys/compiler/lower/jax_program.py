"""The fast lowering, part 3: the whole program as jitted JAX functions.

A program whose schedule has one top-level loop over the iteration dimension (the usual RL
program: parameters updated from one iteration to the next) runs that loop on the host:

    pre  = prologue(inputs)                         # everything before the loop, once
    for i0 in range(0, I, K):                       # one jitted call per K iterations
        carry, kept[i0:i0+K] = iterations(inputs, pre, carry, i0)   # a lax.scan of K
        on_iteration(i, outputs of iteration i)     # progress, logging, early stop
    outputs = epilogue(inputs, pre, stack(kept))    # everything after the loop

so training reports progress and can be stopped between calls, while K (the compile option
`iterations_per_call`) amortizes the cost of a call. Other programs become one jitted
function. A program with host ops (a gymnasium environment) runs its loops that contain them
from the host instead, with jitted segments in between (`jax_staged.py`), one iteration per
call. So does a program compiled `segmented=True`, its segments cut around its loops and
after its gradients: on CPU, several smaller XLA programs need less memory to compile than one
(about a third less for the A2C scaling sweep's small points), for some speed.
`segmented="auto"` keeps the segments only where compiling clearly sets the peak: when a
segment's temporaries exceed SEGMENTED_TEMPORARIES, running needs much of what compiling
does, and the program is compiled again, unsegmented. Everything is traced and compiled by
the constructor, so a bad program fails at `compile()`, never inside `run()`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from rlsys.compiler.autodiff import path_nodes, rerun_reads
from rlsys.compiler.errors import RecurrenceError, UnsplittableError
from rlsys.compiler.heap import GrowthTrim
from rlsys.compiler.index import Bound
from rlsys.compiler.ir import Graph, is_identity
from rlsys.compiler.lazy import check_not_differentiated, lazy_branches
from rlsys.compiler.lower.data_parallel import Split, plan_split
from rlsys.compiler.lower.hlo_work import matmul_flops
from rlsys.compiler.lower.jax import Context, Value, in_domain_order
from rlsys.compiler.lower.jax_loop import LoopPlan, run_steps, zeros
from rlsys.compiler.lower.jax_staged import (
    StagedLoop,
    StagedSteps,
    regenerated,
    unread_values,
    with_regenerated,
)
from rlsys.compiler.lower.memory_schedule import compile_frugally, temporaries
from rlsys.compiler.lower.profiled import profiled_call
from rlsys.compiler.lower.reuse import reusable
from rlsys.compiler.program import InputSpec, check_inputs
from rlsys.compiler.schedule import Loop, Schedule
from rlsys.compiler.sinks import Sink, fire, fire_all, is_sink_output
from rlsys.compiler.stages import has_host

IterationCallback = Callable[[int, dict[str, np.ndarray]], bool | None]

# `segmented="auto"` keeps the segments when the largest one's temporaries are below this.
# Compiling one program holds about 1 MiB per fused kernel. On the scaling sweep, segments
# lowered the process's peak by 83-110 MiB at the points whose largest segment needs 16-48
# MiB of temporaries, but by 44-46 MiB at those needing 65 MiB (envs=512, episode=500),
# where running sets more of the peak, and there they cost 10-15% in speed (envs=512: 116
# against 103 ms per iteration, alternating in one process).
SEGMENTED_TEMPORARIES = 56 * 2**20
HOST_OPS = "it has host ops"  # why a program with host ops cannot be split


@dataclass(frozen=True)
class LoopState:
    """Where a host loop is: iterations done, and what it carries to the next (by node id)."""

    done: int
    carry: dict[str, np.ndarray]


def gradient_reads(graph: Graph, schedule: Schedule) -> tuple[dict, dict]:
    """For each gradient node, the values its re-run of the ops between its parameter and its
    loss (within the loops the gradient runs in) reads, and the activations it takes instead
    of recomputing them (`reuse.py`): the first, a superset of the second, is what a loop
    must keep for it, or a jitted segment pass to it."""
    reads, reused = {}, {}
    for node in graph:
        if node.op == "grad":
            loss_edge, param_edge = node.inputs
            loops = schedule.loops_of.get(node.id, ())
            path = path_nodes(graph, param_edge.node, loss_edge.node, loops)
            check_not_differentiated(graph, node, path)
            reused[node.id] = reusable(graph, path, schedule.loops_of, loops)
            reads[node.id] = frozenset(
                rerun_reads(graph, path, param_edge.node, loops) | reused[node.id]
            )
    return reads, reused


def losses_with_gradients(graph: Graph, schedule: Schedule) -> dict[int, int]:
    """Loss node -> a gradient node of it read at the same point, in the same loops."""
    pairs = {}
    for node in graph:
        if node.op == "grad":
            loss, param = node.inputs
            loops = schedule.loops_of.get(node.id, ())
            same_loops = loops == schedule.loops_of.get(loss.node, ())
            # a loss that does not depend on the param is computed as usual (its gradient: 0)
            depends = loss.node in path_nodes(graph, param.node, loss.node, loops)
            if same_loops and depends and is_identity(loss, graph[loss.node]):
                pairs.setdefault(loss.node, node.id)
    return pairs


def _context(graph: Graph, bounds, inputs, schedule: Schedule, values=None) -> Context:
    lazy = lazy_branches(graph, schedule.loops_of)
    grad_reads, reused = gradient_reads(graph, schedule)
    ctx = Context(
        graph, bounds, inputs,
        outputs=frozenset(e.node for _, e in graph.outputs),
        grad_reads=grad_reads,
        grad_reuse=reused,
        consumers=graph.consumers(),
        loss_grads=losses_with_gradients(graph, schedule),
        lazy=lazy,
        deferred=frozenset().union(*lazy.values()),
    )  # fmt: skip
    ctx.unread = unread_values(ctx, schedule.steps)
    ctx.values.update(values or {})
    return ctx


def _outputs(ctx: Context) -> dict[str, Any]:
    return {name: in_domain_order(ctx, edge.node) for name, edge in ctx.graph.outputs}


def _traced(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except RecurrenceError as err:  # raised while tracing: drop JAX's frames
        raise type(err)(str(err)) from None


def _even_chunk(extent: int, wanted: int) -> int:
    """A number of iterations per call near `wanted` that divides `extent`, when one is
    within a factor 2: then one compiled function serves every call (a shorter last call
    would be a second XLA compilation, as long as the first)."""
    wanted = min(wanted, extent)
    for size in range(wanted, max(1, wanted // 2) - 1, -1):
        if extent % size == 0:
            return size
    return wanted


class JaxExecutable:
    """A compiled program: `run(inputs, on_iteration=None)` returns outputs by name."""

    def __init__(self, graph: Graph, bounds: dict[Bound, int], schedule: Schedule,
                 specs: Mapping[str, InputSpec], host_loop: bool = True,
                 iterations_per_call: int = 1, segmented: bool | str = False,
                 devices: int = 1) -> None:  # fmt: skip
        self.ir, self.bounds, self.schedule, self.input_specs = graph, bounds, schedule, specs
        whole = isinstance(iterations_per_call, int) and not isinstance(iterations_per_call, bool)
        if not whole or iterations_per_call < 1:
            raise RecurrenceError(
                f"iterations_per_call must be an integer >= 1, got {iterations_per_call!r}"
            )
        if segmented not in (False, True, "auto"):
            raise RecurrenceError(f"segmented must be False, True or 'auto', got {segmented!r}")
        self.pass_timings: list = []
        loops = [k for k, s in enumerate(schedule.steps)
                 if isinstance(s, Loop) and s.dim is graph.dims[0]]  # fmt: skip
        self.host_loop = host_loop and len(loops) == 1
        self._staged_parts: list[StagedSteps] = []
        self.split = self._split(devices)
        # where the iterations run, and (with compile(devices="auto")) why
        self.placement = "one device" if self.split is None else f"split over {devices} devices"
        self.placement_seconds: dict[int, float] = {}  # timed by compile(devices="auto")
        self._compile(iterations_per_call, loops, cut=bool(segmented))
        if segmented == "auto" and self._largest_segment_temporaries() > SEGMENTED_TEMPORARIES:
            # Running sets much of the peak: segments would save little memory, and one
            # program is faster (segments recompute what a gradient's re-run shares with
            # earlier steps).
            self._compile(iterations_per_call, loops, cut=False)

    @property
    def devices(self) -> int:
        """The devices the iterations run on."""
        return 1 if self.split is None else self.split.devices

    def unsplittable(self) -> str:
        """Why no compilation of this program can split its iterations ("" if one can)."""
        if any(has_host(self.ir, step) for step in self.schedule.steps):
            return HOST_OPS
        return "" if self.host_loop else "it has no loop over its iterations"

    def _split(self, devices: int) -> Split | None:
        """How `devices` devices share the iterations' points (`data_parallel.py`)."""
        if not isinstance(devices, int) or devices < 1:
            raise RecurrenceError(f"devices must be a positive integer or 'auto', got {devices!r}")
        if devices == 1:
            return None
        why = self.unsplittable()
        if why:
            raise UnsplittableError(
                devices,
                f"a split runs each device's share of every iteration, and {why}",
                host_ops=why == HOST_OPS,
            )
        return plan_split(self.ir, self.schedule, self.bounds, devices, self.ir.dims[0])

    def _compile(self, iterations_per_call: int, loops: list[int], cut: bool) -> None:
        """Trace and compile: as segments run from the host (for host ops, or `cut`: see
        `jax_staged.py`), else as jitted calls of whole iterations, or one jitted function."""
        self.iterations_per_call = iterations_per_call
        self.segmented = cut
        self.staged = cut or any(has_host(self.ir, step) for step in self.schedule.steps)
        # a recompilation (segmented="auto") must not keep the first one's executables alive
        self._staged_parts, self._staged_loop = [], None
        abstract = {n: jax.ShapeDtypeStruct(s.shape, s.dtype) for n, s in self.input_specs.items()}
        if self.host_loop and self.staged:
            _traced(partial(self._compile_staged_loop, abstract, loops[0]))
        elif self.host_loop:
            _traced(partial(self._compile_host_loop, abstract, loops[0]))
        elif self.staged:
            staged = _traced(
                lambda: StagedSteps(self._context(abstract), self.schedule.steps, cut=cut)
            )
            self._staged_parts = [staged]
            self._compiled = partial(self._run_staged, staged)
        else:
            whole = jax.jit(self._whole)
            self._compiled = _traced(lambda: compile_frugally(whole.lower(abstract)))

    def _largest_segment_temporaries(self) -> int:
        """Bytes of temporaries of the compiled segment that needs the most (0 if none)."""
        return max((temporaries(segment.compiled) for part in self._staged_parts
                    for segment in part.segments()), default=0)  # fmt: skip

    # -- one jitted function ----------------------------------------------------------------
    def _whole(self, inputs):
        ctx = _context(self.ir, self.bounds, inputs, self.schedule)
        run_steps(ctx, self.schedule.steps)
        return _outputs(ctx)

    def _context(self, inputs, values=None) -> Context:
        return _context(self.ir, self.bounds, inputs, self.schedule, values)

    # -- with host ops: host loops and jitted segments (jax_staged.py) ------------------------
    def _run_staged(self, staged: StagedSteps, inputs) -> dict[str, Any]:
        ctx = self._context(inputs)
        staged.run(ctx)
        return _outputs(ctx)

    def _compile_staged_loop(self, abstract, position: int) -> None:
        """The same three parts as `_compile_host_loop`, run from the host; one iteration
        per call (the iteration loop's steps already run in Python)."""
        steps = self.schedule.steps
        self._pre, self._loop, self._post = steps[:position], steps[position], steps[position + 1 :]
        ctx = self._context(abstract)
        cut = self.segmented
        prologue = StagedSteps(ctx, self._pre, cut=cut)
        after = ctx.child()
        # outputs after every call; split over devices only without host ops (`_split`)
        loop = StagedLoop(after, self._loop, stacked=False, cut=cut, split=self.split)
        epilogue = StagedSteps(after, self._post, cut=cut)
        self._staged_parts = [prologue, loop.body, epilogue]
        self._staged_loop = loop
        self._carry_shapes = loop.carry_shapes
        self.iterations_per_call = 1

        def run_prologue(inputs) -> Context:
            pre = self._context(inputs)
            prologue.run(pre)
            return pre

        def one_iteration(inputs, pre: Context, carry, start):
            carry, kept = loop.step(pre, carry, int(start))
            # On the host: they are reported right after, and an eager op per output would
            # cost a dispatch each (the acting loop waits for the device every step anyway).
            return carry, {m: np.asarray(v)[None] for m, v in kept.items()}

        def run_epilogue(inputs, pre: Context, stacked) -> dict[str, Any]:
            post = pre.child()
            LoopPlan.make(post, self._loop).store(stacked)
            epilogue.run(post)
            return _outputs(post)

        self._prologue_fn, self._epilogue_fn = run_prologue, run_epilogue
        self._calls = {1: one_iteration}
        self.iteration_outputs = {name: edge.node for name, edge in self.ir.outputs
                                  if edge.node in loop.kept}  # fmt: skip

    # -- host loop over the iteration dimension ---------------------------------------------
    def _compile_host_loop(self, abstract, position: int) -> None:
        steps = self.schedule.steps
        self._pre, self._loop, self._post = steps[:position], steps[position], steps[position + 1 :]
        self._axes: dict[int, tuple] = {}
        self._kept_axes: dict[int, tuple] = {}  # set when the iterations are traced
        pre_shapes = jax.eval_shape(self._prologue, abstract)
        self._prologue_fn = jax.jit(self._prologue).lower(abstract).compile()
        plan = LoopPlan.make(_context(self.ir, self.bounds, {}, self.schedule), self._loop)
        self._carry_shapes = carry_shapes = jax.eval_shape(plan.initial_carry)
        extent = self.bounds[self._loop.dim.bound]
        self.iterations_per_call = _even_chunk(extent, self.iterations_per_call)
        self._calls = {}  # iterations per call -> compiled function (a shorter last call)
        start = jax.ShapeDtypeStruct((), jnp.int32)
        shapes = (abstract, pre_shapes, carry_shapes, start)
        _, kept_shapes = jax.eval_shape(partial(self._iterations, size=1), *shapes)
        place = self._placement(plan, pre_shapes, kept_shapes)
        # The carry is donated: the next call takes the one this call returns, so XLA
        # updates it in place (a replay ring) instead of copying it at every call. Not when
        # split: there it made a device's temporaries be mapped afresh in some iterations
        # (`test_heap.py`'s split test failed in 2 of 8 runs, passed in 4 of 4 without).
        donated = (2,) if self.split is None else ()
        for size in {min(self.iterations_per_call, extent), extent % self.iterations_per_call}:
            if size:
                traced = jax.jit(place(partial(self._iterations, size=size)),
                                 donate_argnums=donated)  # fmt: skip
                self._calls[size] = compile_frugally(traced.lower(*shapes))
        stacked = {m: jax.ShapeDtypeStruct((extent, *s.shape[1:]), s.dtype)
                   for m, s in kept_shapes.items()}  # fmt: skip
        self._epilogue_fn = jax.jit(self._epilogue).lower(abstract, pre_shapes, stacked).compile()
        self.iteration_outputs = {name: edge.node for name, edge in self.ir.outputs
                                  if edge.node in kept_shapes}  # fmt: skip

    def _placement(self, plan: LoopPlan, pre_shapes, kept_shapes) -> Callable:
        """Iterations as they run: as they are, or split over devices (`data_parallel.py`).
        Each argument is spread along the split dim where it has that axis; so, from then
        on, are the arguments the host passes (`_placed_arguments`)."""
        split = self.split
        if split is None:
            return lambda iterations: iterations
        replicated = PartitionSpec()
        carry = {m: split.spec(plan.window_axes[m], leading=1) for m in self._carry_shapes}
        in_specs = (replicated, {n: split.spec(self._axes[n]) for n in pre_shapes}, carry,
                    replicated)  # fmt: skip
        out_specs = (carry, {m: split.spec(self._kept_axes[m], leading=1) for m in kept_shapes})
        self._argument_shardings = jax.tree.map(
            split.sharding, in_specs[:3], is_leaf=lambda x: isinstance(x, PartitionSpec)
        )
        return lambda iterations: jax.shard_map(partial(iterations, split=split),
                                                mesh=split.mesh, in_specs=in_specs,
                                                out_specs=out_specs)  # fmt: skip

    def _placed_arguments(self, arrays, pre, carry) -> tuple:
        """Inputs, prologue values and carry where the split iterations take them: moved
        once, not by every call. A segmented iteration's segments find the prologue's values
        in a context: the values they read are spread in a copy of it."""
        if self.split is None:
            return arrays, pre, carry
        if not self.staged:
            return jax.device_put((arrays, pre, carry), self._argument_shardings)
        split, loop = self.split, self._staged_loop
        placed = pre.child()  # segments read the prologue's values from its context
        read = {n for segment in loop.body.segments() for n in segment.value_reads}
        placed.values = {n: Value(jax.device_put(v.array, split.sharding(split.spec(v.axes))),
                                  v.axes) for n, v in pre.values.items() if n in read}  # fmt: skip
        carry = {m: jax.device_put(a, split.sharding(split.spec(loop.window_axes[m], leading=1)))
                 for m, a in carry.items()}  # fmt: skip
        return arrays, placed, carry

    def _after_prologue(self, bounds, inputs, pre) -> Context:
        """The context of what runs after the prologue: its values, and the large zeros it
        left out computed again (XLA fuses them into their readers, or drops them)."""
        values = {n: Value(a, self._axes[n]) for n, a in pre.items()}
        ctx = _context(self.ir, bounds, inputs, self.schedule, values)
        run_steps(ctx, with_regenerated(ctx, [], set(self._regenerated)))
        return ctx

    def _prologue(self, inputs):
        ctx = _context(self.ir, self.bounds, inputs, self.schedule)
        run_steps(ctx, self._pre)
        self._axes.update({n: v.axes for n, v in ctx.values.items()})
        # Not returned, so not held for the whole run: large broadcasts of small constants
        # (DQN's replay ring starts as 613 MiB of zeros on Breakout-MinAtar with a
        # 200,000-step buffer), which the iterations no longer read once the ring is
        # carried (`jax._step_from_zeros`)
        self._regenerated = sorted(n for n in ctx.values if regenerated(ctx, n))
        return {n: v.array for n, v in ctx.values.items() if n not in self._regenerated}

    def _iterations(self, inputs, pre, carry, start, *, size: int, split: Split | None = None):
        """`size` consecutive iterations from `start` (downwards for a reverse loop); with
        `split`, those of one device's points."""
        bounds = self.bounds if split is None else split.local_bounds(self.bounds)
        ctx = self._after_prologue(bounds, inputs, pre)
        ctx.split = split
        plan = LoopPlan.make(ctx, self._loop)
        scanned = jax.lax.scan(plan.body, carry, plan.scan_inputs(start, size, self._loop.reverse))
        self._kept_axes = plan.kept_axes  # how the epilogue finds the stacks
        return scanned

    def _epilogue(self, inputs, pre, stacked):
        ctx = self._after_prologue(self.bounds, inputs, pre)
        plan = LoopPlan.make(ctx, self._loop)
        plan.kept_axes.update(self._kept_axes)
        plan.store(stacked)
        run_steps(ctx, self._post)
        return _outputs(ctx)

    # -- running ----------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        on_iteration: IterationCallback | None = None,
        on_call: Callable[[LoopState], None] | None = None,
        resume: LoopState | None = None,
    ) -> dict[str, np.ndarray]:
        """Run the program. With a host loop:
        - `on_iteration(i, outputs_at_i)` is called after each iteration; returning True
          stops the run early (outputs then cover the iterations done);
        - `on_call(state)` gets the loop state after each jitted call (for checkpoints);
        - `resume=state` continues from such a state: the same program and inputs then give
          the same values as an uninterrupted run. Outputs cover the iterations run.
        """
        arrays = check_inputs(self.input_specs, inputs or {})
        if not self.host_loop:
            if resume is not None or on_call is not None:
                raise RecurrenceError("this program has no iteration loop to resume or checkpoint")
            outputs = {k: np.asarray(v) for k, v in self._compiled(arrays).items()}
            return fire_all(self.ir.sinks, outputs)
        per_iteration = [s for s in self.ir.sinks if s.output in self.iteration_outputs]
        report = on_iteration is not None or per_iteration
        pre = self._prologue_fn(arrays)
        carry, done = zeros(self._carry_shapes), 0  # the run's own: the calls donate it
        if resume is not None:
            carry, done = self._resumed_carry(resume), resume.done
        # where the iterations take them; the epilogue takes `arrays` and `pre` as they are
        *placed, carry = self._placed_arguments(arrays, pre, carry)
        kept, started, trim = [], done, GrowthTrim()
        extent = self.bounds[self._loop.dim.bound]
        while done < extent:
            size = min(self.iterations_per_call, extent - done)
            start = extent - 1 - done if self._loop.reverse else done
            # staged iterations record their segments themselves; a jitted call is Backend
            call = self._calls[size] if self.staged else partial(profiled_call, None,
                                                                 self._calls[size])  # fmt: skip
            carry, values = call(*placed, carry, np.int32(start))
            kept.append(values)
            stop = report and self._report(values, start, size, on_iteration, per_iteration)
            # What the first call freed is handed back once its outputs are on the host:
            # later calls did not always reuse it (the first call's buffers lie among what
            # compiling and the initial state left), and kept for reuse (`heap.py`) both
            # stayed resident: after compile(devices="auto") at the scaling sweep's
            # width=256, 795 instead of 472 MiB above the idle process. Later calls trim
            # only where the heap keeps growing (`GrowthTrim`).
            trim.after_call()
            done += size
            if on_call is not None:  # after the iterations were reported: a checkpoint's
                on_call(LoopState(done, {str(k): np.asarray(v) for k, v in carry.items()}))
            if stop:
                break
        # Joined on the host: an eager jnp.concatenate is compiled for the count of calls,
        # about 10 ms per output (PPO: 45 ms of a 1.8 s run, under cProfile); staged or split
        # iterations' outputs are on the host or spread over devices anyway. They are one
        # row per iteration, and reported iterations were copied to the host already.
        names = kept[0] if kept else {}
        stacked = {m: np.concatenate([np.asarray(k[m]) for k in kept]) for m in names}
        at_end = [s for s in self.ir.sinks if s not in per_iteration]
        if done < extent or started > 0:  # a part of the loop: what each iteration computed
            outputs = self.iteration_outputs.items()
            partial_outputs = {name: stacked[node] for name, node in outputs if stacked}
            return fire_all(at_end, partial_outputs)
        if self._loop.reverse:
            stacked = {m: np.flip(a, axis=0) for m, a in stacked.items()}
        outputs = self._epilogue_fn(arrays, pre, stacked)
        return fire_all(at_end, {k: np.asarray(v) for k, v in outputs.items()})

    def call_temporaries(self) -> int:
        """Bytes of temporaries a jitted call of iterations allocates, on each device (run
        from the host, a call's largest segment's)."""
        if self.staged:
            return self._largest_segment_temporaries()
        return max((temporaries(c) for c in self._calls.values()), default=0)

    def call_flops(self) -> float:
        """Floating-point operations of a call's matrix products (`hlo_work.py`), counted in
        the compiled segments of a segmented program: what a split could share out, the
        same on every machine (`compile(devices="auto")`)."""
        if not self.staged:
            raise RecurrenceError("internal: call_flops() counts a segmented program's")
        parts = [self._staged_loop.body] if self._staged_loop else self._staged_parts
        return sum(matmul_flops(segment.compiled.as_text()) for part in parts
                   for segment in part.segments())  # fmt: skip

    def call_timer(self) -> Callable[[], float]:
        """A function that runs one jitted call of iterations from the initial state (inputs
        of zeros; results discarded) and returns its seconds: for choosing between
        compilations of one program (`compile(devices="auto")`)."""
        if self.unsplittable():  # a call of host ops would step a real environment
            raise RecurrenceError("internal: only iterations without host ops are timed")
        inputs = {n: np.zeros(spec.shape, spec.dtype) for n, spec in self.input_specs.items()}
        pre = self._prologue_fn(inputs)
        start = self.bounds[self._loop.dim.bound] - 1 if self._loop.reverse else 0
        call = self._calls[min(self._calls)]

        def seconds() -> float:
            # a carry of its own: a staged iteration's last segment donates the one it gets
            arrays, placed, carry = self._placed_arguments(inputs, pre, zeros(self._carry_shapes))
            began = time.perf_counter()
            jax.block_until_ready(call(arrays, placed, carry, np.int32(start)))
            return time.perf_counter() - began

        return seconds

    def check_resume(self, state: LoopState) -> None:
        """Raise RecurrenceError unless `run(resume=state)` can continue from `state`."""
        expected = {str(k): (v.shape, str(v.dtype)) for k, v in self._carry_shapes.items()}
        given = {k: (np.shape(v), str(np.asarray(v).dtype)) for k, v in state.carry.items()}
        if given != expected or not 0 <= state.done <= self.bounds[self._loop.dim.bound]:
            raise RecurrenceError(
                "the saved loop state does not match this program (different algorithm, "
                "configuration or rlsys version); start a new run instead of resuming"
            )

    def _resumed_carry(self, state: LoopState) -> dict[int, Any]:
        self.check_resume(state)
        return {int(k): jnp.asarray(v) for k, v in state.carry.items()}

    def _report(self, values, start: int, size: int, on_iteration: IterationCallback | None,
                sinks: list[Sink]) -> bool:  # fmt: skip
        """For each iteration of the call: its sinks, then `on_iteration`. True when that
        asks to stop; the sinks still see every iteration the call computed."""
        host = {name: np.asarray(values[node]) for name, node in self.iteration_outputs.items()}
        step = -1 if self._loop.reverse else 1
        stop = False
        for k in range(size):
            i = start + step * k
            for sink in sinks:
                fire(sink, host[sink.output][k], fixed={self._loop.dim.name: i})
            visible = {name: v[k] for name, v in host.items() if not is_sink_output(name)}
            stop = stop or (on_iteration is not None and bool(on_iteration(i, visible)))
        return stop

    def explain(self, file=None) -> list:
        """For every op: its domain, the decision per dimension, its stage; also printed."""
        from rlsys.compiler.explain import explain_rows

        rows = explain_rows(self.ir, self.schedule)
        print("\n".join(row.as_text() for row in rows), file=file)
        return rows

    def optimized_hlo(self) -> dict[str, str]:
        """The HLO XLA optimized and compiled, by call: `iterations` (one entry per call
        size) for a host iteration loop, else `whole`. Profiles name XLA's work by these
        instructions (`benchmarks/xla_breakdown.py` maps them back to loops)."""
        if self.staged:
            why = "was compiled segmented" if self.segmented else "has host ops"
            raise RecurrenceError(
                f"optimized_hlo(): this program {why}, so it runs as many jitted segments; "
                "profile it with `rlsys profile` instead"
            )
        if self.host_loop:
            return {f"iterations[{n}]": call.as_text() for n, call in self._calls.items()}
        return {"whole": self._compiled.as_text()}

    def graph(self, format: str = "dot") -> str:
        """The dependence graph as Graphviz text."""
        from rlsys.compiler.explain import to_dot

        if format != "dot":
            raise RecurrenceError(f"graph format {format!r} is not supported; use 'dot'")
        return to_dot(self.ir, self.schedule)
