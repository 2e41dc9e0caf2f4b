"""Data-parallel placement: a program's points split over several devices along one dim.

XLA:CPU runs a loop body one op at a time, and an acting step's products (256 envs x 64)
are too small for its intra-op threads: the acting loop of the scaling sweep uses one core
of two (`benchmarks/HISTORY.md`, "Twenty-second session"). Given several CPU devices
(`use_cpu_devices`, one per core), `compile(devices=N)` splits the environment dim over
them: each device holds 1/N of every value along that dim and runs the whole iteration on
those points (acting, returns, the gradient's re-run) in one `shard_map` program, each on
a core of its own. Values without the dim (parameters, optimizer state) are computed on
every device alike. Where the program reduces over all points of the dim (a loss's mean
over (b, t), an episode count), each device reduces its own points and the devices combine
the results (`psum`, `pmean`, ...); the gradient of such a loss is taken over each
device's points and combined once.

Each device computes its points with the dim's local extent and local coordinates, as the
chunked gradient does with its chunks (`chunked_grad.py`); only `dim_value` (an env's
random key, `fold_in(b)`) sees the global coordinate, so acting is the same to the bit as
on one device. That is exact when every read along the dim is at the same point, or a
whole-range slice that a sum, mean, max or min reduces over, and every definition covers
the dim's whole range: `plan_split` checks this and says which read stops it. The sums
over devices add in another order than one device's, so losses and parameters agree with
a one-device run to float rounding, not to the bit.

A segmented program (`segmented=True`, `jax_staged.py`) is split segment by segment: each of
its jitted segments is such a `shard_map` program, and the values one passes to the next stay
spread over the devices. At the scaling sweep's 4-layer point that ran 116.4 ms per
iteration against 126.0 on one device (`benchmarks/data_parallel_ab.py layers=4 --segmented`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlsys.compiler.errors import RecurrenceError, UnsplittableError
from rlsys.compiler.index import Bound, Dim, Slice, as_expr
from rlsys.compiler.ir import Graph, Node
from rlsys.compiler.rules.base import normalize_axes
from rlsys.compiler.schedule import Schedule, is_same_point

AXIS = "points"  # the mesh axis the split dim's points are spread over
COMBINE = {"sum": jax.lax.psum, "mean": jax.lax.pmean, "max": jax.lax.pmax,
           "min": jax.lax.pmin}  # fmt: skip


def use_cpu_devices(count: int | None = None) -> int:
    """Give JAX's CPU backend `count` devices (by default one per core this process may
    use), for `compile(devices=count)`; returns the count. Call it before anything runs on
    JAX: the backend reads it when it starts. (The same as
    XLA_FLAGS=--xla_force_host_platform_device_count=COUNT.)"""
    count = len(os.sched_getaffinity(0)) if count is None else count
    if count < 1:
        raise RecurrenceError(f"use_cpu_devices: count must be at least 1, got {count}")
    if jax.config.jax_num_cpu_devices == count:
        return count
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        raise RecurrenceError(
            f"use_cpu_devices({count}): JAX has already started, with "
            f"{len(jax.devices('cpu'))} CPU device(s); call it first thing, before anything "
            "runs on JAX (or set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{count} before starting Python)"
        ) from None
    return count


@dataclass(frozen=True)
class Split:
    dim: Dim
    devices: int
    extent: int  # the dim's extent over all devices
    reductions: Mapping[int, str]  # node -> its op: reduces all points of dim, then combined

    @property
    def local_extent(self) -> int:
        return self.extent // self.devices

    @property
    def mesh(self) -> Mesh:
        return Mesh(np.array(jax.devices()[: self.devices]), (AXIS,))

    def local_bounds(self, bounds: Mapping[Bound, int]) -> dict[Bound, int]:
        return {**bounds, self.dim.bound: self.local_extent}

    def offset(self):
        """This device's first point along the dim (inside the shard_map)."""
        return jax.lax.axis_index(AXIS) * self.local_extent

    def combine(self, node: int, array):
        """A reduction over this device's points made the reduction over all of them."""
        return COMBINE[self.reductions[node]](array, AXIS)

    def varying(self, array, axes: tuple[Dim, ...]):
        """`array`, the same on every device, typed as differing from device to device if
        `axes` has the split dim (a loop's carry must keep one type)."""
        return jax.lax.pcast(array, AXIS, to="varying") if self.dim in axes else array

    def without(self, node: int) -> Split:
        """The same split with `node` reducing this device's points only."""
        return replace(self, reductions={n: op for n, op in self.reductions.items() if n != node})

    def spec(self, axes: tuple[Dim, ...], leading: int = 0) -> PartitionSpec:
        """How an array whose axes after `leading` others are `axes` is spread."""
        return PartitionSpec(*([None] * leading), *(AXIS if d is self.dim else None for d in axes))

    def sharding(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.mesh, spec)


def plan_split(graph: Graph, schedule: Schedule, bounds: Mapping[Bound, int], devices: int,
               iteration_dim: Dim) -> Split:  # fmt: skip
    """The split of the program's points over `devices` devices, along the first dim (other
    than the iteration dim) where it is exact; a RecurrenceError says why none is."""
    available = len(jax.devices())
    if devices > available:
        raise RecurrenceError(
            f"compile(devices={devices}): JAX has {available} {jax.default_backend()} "
            f"device(s). On CPU, call rlsys.compiler.use_cpu_devices({devices}) before "
            "anything runs on JAX (one device per core to use)"
        )
    reasons = []
    for dim in graph.dims:
        if dim is iteration_dim:
            continue
        found = _reductions_if_splittable(graph, schedule, bounds, dim, devices)
        if isinstance(found, str):
            reasons.append(f"not along {dim.name}: {found}")
        else:
            return Split(dim, devices, bounds[dim.bound], found)
    raise UnsplittableError(
        devices,
        "this program's points cannot be split over devices "
        f"({'; '.join(reasons) or 'it has no dim besides the iteration dim'})",
    )


def _reductions_if_splittable(graph: Graph, schedule: Schedule, bounds, dim: Dim,
                              devices: int) -> dict[int, str] | str:  # fmt: skip
    """The reductions over all of dim's points to combine across devices, or why the split
    along dim would not be exact."""
    extent = bounds[dim.bound]
    if extent % devices:
        return f"its extent {dim.bound.name} = {extent} is not a multiple of {devices}"
    if any(dim in loops for loops in schedule.loops_of.values()):
        return "a loop runs along it (a value there depends on another point's)"
    if not any(dim in node.domain for node in graph):
        return "no value varies along it"
    gathers = set()
    for node in graph:
        if node.op == "input" and dim in node.domain:
            return f"input {node.param('name')!r} varies along it"
        for lo, hi in _regions_along(node, dim):
            if lo.constant_value() != 0 or hi != as_expr(dim.bound):
                return f"{node.label()} is defined on part of its range ({_at(node)})"
        for edge in node.all_edges():
            producer = graph[edge.node]
            if dim not in producer.domain:
                continue
            item = edge.index[producer.domain.index(dim)]
            if is_same_point(item, dim):
                continue
            if node.op == "index" and _whole(item, dim):
                gathers.add(node.id)
                continue
            return (f"{node.label()} reads {producer.label()} at {dim.name} = {item}, another "
                    f"point's value ({_at(node)})")  # fmt: skip
    return _combined_reductions(graph, dim, gathers)


def _combined_reductions(graph: Graph, dim: Dim, gathers: set[int]) -> dict[int, str] | str:
    """Each gather of all of dim's points must be reduced over them (then the devices
    combine their reductions), and never read otherwise."""
    consumers = graph.consumers()
    outputs = {edge.node for _, edge in graph.outputs}
    reductions = {}
    for gather in sorted(gathers):
        node = graph[gather]
        index = node.inputs[0].index
        position = sum(
            isinstance(i, Slice)  # the slice's axis among the gather's
            for i in index[: graph[node.inputs[0].node].domain.index(dim)]
        )
        if dim in node.domain:
            return f"{node.label()} reads all of {dim.name}'s points at each one ({_at(node)})"
        for reader in map(graph.__getitem__, consumers[gather]):
            axes = normalize_axes(reader.op, reader.param("axis"), len(node.shape))
            if reader.op not in COMBINE or position not in axes:
                return (f"{reader.label()} uses all of {dim.name}'s points of {node.label()} "
                        f"other than by their sum, mean, max or min ({_at(reader)})")  # fmt: skip
            reductions[reader.id] = reader.op
        if gather in outputs:
            return f"the output {node.label()} holds all of {dim.name}'s points"
    return reductions


def _regions_along(node: Node, dim: Dim):
    if dim in node.domain:
        for branch in node.branches:
            yield branch.region[node.domain.index(dim)]


def _whole(item, dim: Dim) -> bool:
    return (isinstance(item, Slice) and item.start.constant_value() == 0
            and item.stop == as_expr(dim.bound))  # fmt: skip


def _at(node: Node) -> str:
    return f"at {node.source}" if node.source else "in the program"
