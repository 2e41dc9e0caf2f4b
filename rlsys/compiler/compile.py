"""From a graph and concrete bounds to something that runs.

`compile_graph` binds the bounds (every bound the program uses must be given), checks the
program (demand analysis, then the schedule), and hands it to a lowering: "jax" (one
jitted function) or "ref" (the point-by-point reference interpreter). After a JAX compilation
it returns the heap memory XLA freed to the OS, and from then on keeps what executions free
for the next one (`heap.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import numpy as np

from rlsys.compiler.autodiff import check_first_order
from rlsys.compiler.code_pages import release_compiler_code
from rlsys.compiler.errors import ProgramTooLargeError, RecurrenceError
from rlsys.compiler.heap import (
    THREAD_HEAP_BYTES,
    keep_freed_buffers,
    keep_thread_heaps,
    release_freed_heap,
)
from rlsys.compiler.index import Bound
from rlsys.compiler.ir import Graph, concrete_shape
from rlsys.compiler.lower.jax_program import JaxExecutable
from rlsys.compiler.lower.padded import variable_axes
from rlsys.compiler.lower.ref import ReferenceInterpreter
from rlsys.compiler.passes.bind_shapes import bind_shape_params
from rlsys.compiler.passes.dce import needed_nodes
from rlsys.compiler.passes.demand import check_demand
from rlsys.compiler.pipeline import run_pipeline
from rlsys.compiler.program import InputSpec, check_inputs
from rlsys.compiler.schedule import build_schedule
from rlsys.compiler.sinks import fire_all
from rlsys.compiler.stages import is_host_op

BACKENDS = ("jax", "ref")
# devices="auto" times each placement in rounds: per round and placement, the C heap trimmed,
# one untimed call (it maps the pages the trim returned: about 12,000 page faults), one timed.
PLACEMENT_ROUNDS = 3
# A segmented program is compiled split too only when its call on one device does this many
# floating-point operations in matrix products (`lower/hlo_work.py`), counted in its compiled
# segments, so that the choice is the same on every machine and under any load. Both
# compiled segmented on the scaling sweep, alternating in one process
# (`benchmarks/data_parallel_ab.py --segmented`, AMD EPYC), ms per iteration, one device /
# split over 2: episode=125 (2.5 GFLOP a call) 28.1 / 30.7, layers=1 (0.9) 21.1 / 20.0,
# envs=64 (1.3) 21.1 / 20.4, width=16 (0.5) 17.7 / 18.0; base (5.1) 56.9 / 50.9, layers=4
# (13.5) 126.0 / 116.4. A split of a short call gains little there, while compiling it next
# to the segments raises the process's peak, which segmenting lowered. (The bound was 50 ms
# of a timed call until the thirty-second session: on an Intel Xeon the small points' calls
# took 30-53 ms, and the choice flipped from run to run; benchmarks/HISTORY.md.)
# The split of a call that long is compiled whole: one process each, segmented="auto" and
# devices="auto", ms per iteration and MiB above idle at the peak, the split segmented /
# whole: layers=4 115.4, 122.7 / 109.6, 114.6 ms and 259, 263 / 343, 328 MiB; base 57.0,
# 51.6 / 45.4, 46.5 ms and 223, 230 / 317, 320 MiB (the best baseline's: 436 and 346).
SPLIT_SEGMENTED_FLOPS = 4e9


INDEX_LIMIT = 2**31 - 1  # the longest axis JAX indexes (32-bit integers, without x64)


def bind_bounds(graph: Graph, bounds: Mapping[Bound | str, int]) -> dict[Bound, int]:
    """Bounds by symbol; also accepts their names ("T"). Every program bound is required."""
    by_name = {d.bound.name: d.bound for d in graph.dims}
    if not isinstance(bounds, Mapping):
        raise RecurrenceError(
            f"bounds must be a mapping from bound to value, got {type(bounds).__name__}; "
            f"pass prog.compile(bounds={{{', '.join(f'{n}: ...' for n in by_name)}}})"
        )
    bound_values: dict[Bound, int] = {}
    for key, value in bounds.items():
        bound = by_name.get(key) if isinstance(key, str) else key
        if bound is None or bound not in by_name.values():
            raise RecurrenceError(
                f"bound {key!r} is not a bound of this program (bounds: {', '.join(by_name)})"
            )
        # bool is an int to Python, but True for a bound is a mistake, not 1
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise RecurrenceError(f"bound {bound.name} must be a positive integer, got {value!r}")
        if value > INDEX_LIMIT:  # else a loop's int32 counter, or an array of indices, overflows
            raise ProgramTooLargeError(
                f"bound {bound.name}={value:,} is more than the {INDEX_LIMIT:,} points JAX's "
                "32-bit indices reach along a dimension"
            )
        if bound in bound_values:  # given by symbol and by name: which one was meant?
            raise RecurrenceError(f"bound {bound.name} is given twice in compile(bounds=...)")
        bound_values[bound] = int(value)
    missing = [name for name, b in by_name.items() if b not in bound_values]
    if missing:
        raise RecurrenceError(
            f"bounds missing at compile time: {', '.join(missing)}; pass them as "
            f"prog.compile(bounds={{{', '.join(f'{m}: ...' for m in missing)}}})"
        )
    return bound_values


def check_index_range(graph: Graph, bounds: Mapping[Bound, int]) -> None:
    """Refuse a `take` from a tensor with more values at one point than JAX can index: the
    gather flattens them into one axis (a minibatch's rows from a rollout, say), and tracing
    such a program took minutes before JAX failed deep inside with an OverflowError."""
    for take in graph:
        if take.op != "take":
            continue
        node = graph[take.inputs[0].node]
        shape = concrete_shape(node, bounds)
        if math.prod(shape) > INDEX_LIMIT:
            given = ", ".join(f"{b.name}={v:,}" for b, v in bounds.items())
            raise ProgramTooLargeError(
                f"{take.label()} gathers from {node.label()} of shape {shape} ({given}): "
                f"{math.prod(shape):,} values, more than the {INDEX_LIMIT:,} that JAX's "
                "32-bit indices reach"
            )


def input_specs(graph: Graph, bounds: Mapping[Bound, int]) -> dict[str, InputSpec]:
    specs = {}
    for node in graph:
        if node.op == "input":
            extents = tuple(bounds[d.bound] for d in node.domain)
            spatial = concrete_shape(node, bounds)
            specs[node.param("name")] = InputSpec(node.param("name"), extents + spatial,
                                                  node.dtype)  # fmt: skip
    return specs


class ReferenceExecutable:
    """A program run by the reference interpreter: `run(inputs)` returns outputs by name."""

    def __init__(self, graph: Graph, bounds: dict[Bound, int], specs, host_batch) -> None:
        self.graph, self.bounds, self.input_specs = graph, bounds, specs
        self.host_batch = host_batch

    def run(self, inputs: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        arrays = check_inputs(self.input_specs, inputs or {})
        interpreter = ReferenceInterpreter(self.graph, self.bounds, arrays,
                                           host_batch=self.host_batch)  # fmt: skip
        outputs = interpreter.run()
        return fire_all(self.graph.sinks, outputs)


def _faster_placement(place: Callable[..., JaxExecutable], split_whole: bool) -> JaxExecutable:
    """`devices="auto"`: the program on one device and split over all of them
    (`lower/data_parallel.py`), whichever runs its iterations faster, timed in alternate
    rounds from the initial state, by the fastest call of each. On CPU the split runs the
    acting loop on every core but waits at its collectives, and a device's temporaries above
    64 MiB are mapped afresh at every call (`heap.py`): on the scaling sweep it ran 8-12%
    faster at 4 layers and at 512 envs, and 13% slower at width 256
    (`benchmarks/data_parallel_ab.py`). So on CPU a program whose temporaries, shared out,
    would exceed a thread heap stays on one device, untimed: each device would map its share
    afresh at every call, as at width 256 (161 MiB each), and hold more memory than one
    device (500 against 465 MiB above the idle process there). A segmented program was
    segmented to lower the process's peak, which compiling a split next to it raises (the
    scaling sweep's width=16 point: 203 MiB above the idle process against 150); it stays
    on one device unless its call does SPLIT_SEGMENTED_FLOPS or more, and then its split
    is compiled whole (`split_whole`: unless segments were asked for), which ran faster than
    its segments split, for more memory (see there).
    `placement` says what was chosen, and why; `placement_seconds` holds the fastest call's
    seconds by device count."""
    one = place(devices=1)
    count = len(jax.devices())
    why = "JAX has one" if count == 1 else one.unsplittable()
    if why:
        one.placement = f"one device: {why}"
        return one
    if one.segmented and (flops := one.call_flops()) < SPLIT_SEGMENTED_FLOPS:
        one.placement = (f"one device: it is segmented, and a call of {flops / 1e9:.2f} GFLOP "
                         "is too little work for a split to pay")  # fmt: skip
        return one
    too_large = _beyond_thread_heap(one.call_temporaries() / count)  # a device's, at least
    if too_large:
        one.placement = f"one device: {too_large}"
        return one
    release_freed_heap()  # what the first compilation freed, before the second
    try:
        split = place(devices=count, segmented=one.segmented and not split_whole)
    except RecurrenceError as err:  # the program as a whole compiled: only its split cannot
        one.placement = f"one device: {err}"
        return one
    too_large = _beyond_thread_heap(split.call_temporaries())  # whole: may exceed `one`'s
    if too_large:
        one.placement = f"one device: {too_large}"
        return one
    keep_freed_buffers()  # timed with the heap as `compile_graph` leaves it (each round trims)
    keep_thread_heaps()
    timers = {1: one.call_timer(), count: split.call_timer()}
    seconds: dict[int, list[float]] = {1: [], count: []}
    for _ in range(PLACEMENT_ROUNDS):
        for devices, timer in timers.items():
            # What the other placement's calls freed goes back to the OS first, so the
            # process peaks at the larger placement's memory, not at both together.
            release_freed_heap()
            timer()
            seconds[devices].append(timer())
    best = {devices: min(s) for devices, s in seconds.items()}  # noise only ever adds
    chosen = min(best, key=best.get)
    executable = one if chosen == 1 else split
    executable.placement_seconds = best
    whole = " (compiled whole)" if one.segmented and not split.segmented else ""
    executable.placement = (f"{chosen} device(s): {1e3 * best[count]:.1f} ms per call split "
                            f"over {count}{whole}, {1e3 * best[1]:.1f} on one")  # fmt: skip
    return executable


def _beyond_thread_heap(share: float) -> str:
    """Why a split whose devices each allocate `share` bytes per call would run slower
    on CPU ("" if it would not)."""
    if jax.default_backend() == "cpu" and share > THREAD_HEAP_BYTES:
        return (f"split, each device would allocate {share / 2**20:.0f} MiB of temporaries "
                "per call, more than a thread heap keeps")  # fmt: skip
    return ""


def compile_graph(graph: Graph, bounds: Mapping[Bound | str, int], backend: str = "jax",
                  debug: bool = False, iterations_per_call: int = 1,
                  segmented: bool | str = False, devices: int | str = 1):  # fmt: skip
    if backend not in BACKENDS:
        raise RecurrenceError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    bound_values = bind_bounds(graph, bounds)
    if not graph.outputs:  # a forgotten prog.output: it ran, computed nothing and returned {}
        raise RecurrenceError(
            "the program has no outputs, so it would compute nothing; add prog.output(name, "
            "tensor) (or prog.sink(tensor, fn)) inside `with prog:`"
        )
    specs = input_specs(graph, bound_values)
    check_demand(graph, bound_values)  # on the user's graph, so errors name their tensors
    check_first_order(graph)
    graph = bind_shape_params(graph, bound_values)
    if backend == "jax":
        check_index_range(graph, bound_values)
    if backend == "ref":  # the specification runs the program as written, without passes
        schedule = build_schedule(graph, needed_nodes(graph))  # for its errors, as with jax
        host_batch = {
            n: frozenset(graph[n].domain) - frozenset(loops)
            for n, loops in schedule.loops_of.items()
            if is_host_op(graph, n)
        }
        return ReferenceExecutable(graph, bound_values, specs, host_batch)
    for name, edge in graph.outputs:
        if variable_axes(graph[edge.node]):
            raise RecurrenceError(
                f"output {name!r} ({graph[edge.node].label()}) has a size that varies from point "
                "to point (a variable-size slice); backend='jax' cannot return it. Reduce it "
                "(e.g. .sum()) or use backend='ref'"
            )
    if segmented:  # asked to lower the peak where compiling sets it: compile from less
        release_compiler_code()  # jaxlib's code that imports and earlier compiles read in
    optimized, timings = run_pipeline(graph, debug=debug)
    schedule = build_schedule(optimized, optimized.nodes)
    place = partial(JaxExecutable, optimized, bound_values, schedule, specs,
                    iterations_per_call=iterations_per_call, segmented=segmented)  # fmt: skip
    if devices == "auto":  # segmented=True asks for segments, split or not
        executable = _faster_placement(place, split_whole=segmented is not True)
    else:
        executable = place(devices=devices)
    executable.pass_timings = timings
    release_freed_heap()  # what XLA's compilation freed would stay resident otherwise
    if executable.segmented:  # and the compiler's machine code it read in (`code_pages.py`)
        release_compiler_code()
    keep_freed_buffers()  # but what its executions free is reused, not unmapped each call
    if executable.split is not None:  # and what each device's thread frees (`heap.py`)
        keep_thread_heaps()
    return executable
