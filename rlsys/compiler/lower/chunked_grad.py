"""A gradient over many points, taken a chunk of points at a time.

A loss that is the mean (or sum) over many points, `loss[i] = mean(l[i, 0:B, 0:T])`, is
differentiated by re-running the ops between the parameter and `l` over every point at once
(`_loss_and_grad` in `jax.py`). With B·T in the tens of thousands, every layer's activations
over all of them (64,000 rows of 64 floats: 16 MB) go out to memory in the forward pass and
come back in the backward one, and XLA:CPU's weight-gradient products Xᵀ·dY over that many
rows run at half the speed of the forward products. The same gradient is the sum of the
gradients over chunks of the points (the mean's: their mean), so here the re-run goes chunk
by chunk in a loop, a few thousand rows each (about 4,000 at width 64), whose activations stay in
the CPU's caches.
The scaling sweep's iteration, compiled both ways in one process and run alternating: 4
layers 137 ms whole, 123 chunked; 512 envs 122 and 104; episodes of 500 steps 135 and 114
(`benchmarks/HISTORY.md`, "Sixteenth and seventeenth sessions").
On a GPU the loop only adds launches and loop-condition round trips: on an H200 every sweep
point ran 11-25% slower chunked (`benchmarks/gpu/device_check.sh chunks`), so only the
backends in `CHUNKED_BACKENDS` chunk.

It applies when nothing on the re-run's path mixes points along the chunked dim except the
final gather into the mean or sum: every other read along it is at the same point, so each
chunk's loss depends on its own points only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp

from rlsys.compiler.index import Dim, Slice, as_expr
from rlsys.compiler.ir import Graph
from rlsys.compiler.schedule import Compute, is_same_point

CHUNK_BYTES = 2**20  # the widest activation over one chunk: about a CPU's L2 cache
WHOLE_BYTES = 4 * 2**20  # a widest activation over all points under this stays whole
# Wider layers' products are compute-bound and run slower on short chunks: at the sweep's
# width=256 point, 487 ms per iteration chunked against 438 whole (one process, alternating).
MAX_WIDTH = 128
MIN_ROWS, MAX_ROWS = 1024, 8192  # points per chunk
CHUNKED_BACKENDS = ("cpu",)  # where caches, not launches, decide (see the docstring)


@dataclass(frozen=True)
class Chunking:
    dim: Dim  # the dim whose range is split
    count: int  # chunks, each extent // count points along dim
    mean: bool  # the loss is a mean (else a sum): chunks' losses and gradients are averaged


def row_chunking(graph: Graph, bounds, grad_node, path: set[int], steps, values,
                 windows) -> Chunking | None:  # fmt: skip
    """How to split the re-run of `grad_node`'s `path`, or None to run it whole."""
    if jax.default_backend() not in CHUNKED_BACKENDS:
        return None
    loss = graph[grad_node.inputs[0].node]
    if loss.op not in ("mean", "sum") or loss.param("axis") is not None:
        return None
    gather = graph[loss.inputs[0].node]
    if gather.op != "index" or len(gather.inputs) != 1 or gather.id not in path:
        return None
    per_point = graph[gather.inputs[0].node]
    whole = [d for d, item in zip(per_point.domain, gather.inputs[0].index, strict=True)
             if isinstance(item, Slice) and item.start.constant_value() == 0
             and item.stop == as_expr(d.bound)]  # fmt: skip
    if not whole or any(not isinstance(step, Compute) for step in steps):
        return None  # a loop on the path may carry values from point to point
    rows = math.prod(bounds[d.bound] for d in per_point.domain if d in whole)
    widest = max(math.prod(_ints(graph[n].shape)) for n in path
                 if set(whole) <= set(graph[n].domain))  # fmt: skip
    target = min(MAX_ROWS, max(MIN_ROWS, CHUNK_BYTES // (4 * max(widest, 1))))
    if rows < 2 * target or 4 * rows * widest < WHOLE_BYTES or widest > MAX_WIDTH:
        return None  # cached as it is, or a chunk or two: the loop would cost compile memory
    for dim in whole:
        if _splittable(graph, dim, path - {gather.id, loss.id}, values, windows):
            count = _chunk_count(bounds[dim.bound], rows, target)
            if count > 1:
                return Chunking(dim, count, loss.op == "mean")
    return None


def _ints(shape) -> tuple[int, ...]:
    return tuple(extent if isinstance(extent, int) else 1 for extent in shape)


def _splittable(graph: Graph, dim: Dim, nodes: set[int], values, windows) -> bool:
    """Every read by `nodes` of a value along `dim` is at the same point, and the values they
    read from outside hold whole axes along it (a chunk of them is a slice)."""
    if sum(1 for d in graph.dims if d.bound == dim.bound) != 1:
        return False  # another dim's extent would shrink with the chunk's
    for n in nodes:
        node = graph[n]
        if node.op in ("dim_value", "lazy_where") or _ints(node.shape) != node.shape:
            return False  # reads its point's coordinates, runs others' ops, or varies in size
        for edge in node.all_edges():
            producer = graph[edge.node]
            if dim in producer.domain:
                item = edge.index[producer.domain.index(dim)]
                if not is_same_point(item, dim) or edge.node in windows:
                    return False
                if edge.node not in nodes and (edge.node not in values
                                               or dim not in values[edge.node].axes):  # fmt: skip
                    return False
    return True


def _chunk_count(extent: int, rows: int, target: int) -> int:
    """The number of equal chunks along a dim of `extent` points (`rows` points in all) that
    brings a chunk closest to `target` points; 1 if the extent does not split."""
    divisors = [k for k in range(2, extent + 1) if extent % k == 0]
    if not divisors:
        return 1
    return min(divisors, key=lambda k: abs(math.log(rows / k / target)))


def chunk_values(values, dim: Dim, start, size: int, reads) -> dict:
    """The values `reads` with their axis along dim cut to [start, start + size)."""
    return {
        n: replace(value, array=jax.lax.dynamic_slice_in_dim(
            value.array, start, size, value.axes.index(dim)))
        for n in reads
        if (value := values.get(n)) is not None and dim in value.axes
    }  # fmt: skip


def summed_over_chunks(chunking: Chunking, extent: int, run_chunk):
    """Sum (or mean) over the chunks of `run_chunk(start, size)`'s outputs (a pytree), in a
    loop: one chunk's work at a time."""
    size = extent // chunking.count
    _, per_chunk = jax.lax.scan(lambda carry, k: (carry, run_chunk(k * size, size)), None,
                                jnp.arange(chunking.count))  # fmt: skip
    reduce = jnp.mean if chunking.mean else jnp.sum
    return jax.tree.map(lambda stacked: reduce(stacked, axis=0), per_chunk)
