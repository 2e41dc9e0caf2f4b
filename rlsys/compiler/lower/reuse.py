"""A gradient's re-run taking the activations the program computed anyway.

A gradient re-runs the ops between its parameter and its loss (`_loss_and_grad` in
`jax.py`). When the loss reads the policy that acted (A2C, REINFORCE: one gradient step on
the rollout, with the parameters that collected it), the acting loop has already computed
every hidden activation the re-run's forward pass computes again, from the same parameters
and observations. TimeRL keeps them for the backward pass instead; so does this module, for
activations whose derivative is a function of their output alone (tanh: 1 - y^2): the
re-run reads the loop's stored output y, and the derivative flows to the op's input z as
if z had been recomputed. Nothing reads z's value then, so XLA drops the products that
computed it: at 256-wide layers, the actor's forward pass over the whole rollout. At the
scaling sweep's width=256 point an iteration took 380 ms instead of 416, with the same
losses to 1.2e-7 (`python benchmarks/reuse_ab.py width=256`): the stored activations come
from the acting loop's per-step products, whose rounding may differ in the last bit.

The loop then stacks those activations, one more store per step, and the re-run reads them
back from memory. Where layers are narrow the re-run is cheaper in cache, a chunk at a time
(`chunked_grad.py`), and reading stored activations there was slower (layers=4, 64 wide,
chunked: 129 against 120 ms with `--min-width 1`; at 512 envs, 109.0 against 99.5 in the
eighteenth session). So activations are reused only where the acting loop's are at least
MIN_WIDTH wide, where products are compute-bound and nothing is chunked, on the backends
that chunk (CPU); on a GPU it has not been measured.
"""

from __future__ import annotations

from functools import partial

import jax

from rlsys.compiler.ir import Graph
from rlsys.compiler.lower import chunked_grad

MIN_WIDTH = chunked_grad.MAX_WIDTH + 1  # narrower activations are recomputed (docstring)
# d output / d input, as a function of the output
DERIVATIVE_OF_OUTPUT = {
    "tanh": lambda y: 1.0 - y * y,
    "relu": lambda y: (y > 0).astype(y.dtype),
    "sigmoid": lambda y: y * (1.0 - y),
    "exp": lambda y: y,
}


def reusable(graph: Graph, path: set[int], loops_of, loops) -> frozenset[int]:
    """The nodes of a gradient's re-run `path` whose stored outputs it takes instead of
    recomputing them. Only where it reads activations that a loop nested in the gradient's
    `loops` computed (the acting loop inside the iteration; `loops_of`: node -> its loops'
    dims, the schedule's), one of them MIN_WIDTH wide or more, on a backend that chunks
    gradients; then the path's activations computed at the gradient's own level too (the
    critic's, for GAE): XLA does not merge all of their recomputation either (width=256:
    382.6 against 392.8 ms per iteration, alternating in one process)."""
    if jax.default_backend() not in chunked_grad.CHUNKED_BACKENDS:
        return frozenset()
    candidates = [n for n in path if graph[n].op in DERIVATIVE_OF_OUTPUT]
    inner = [n for n in candidates if len(loops_of.get(n, ())) > len(loops)]
    if not inner or max(_width(graph[n].shape) for n in inner) < MIN_WIDTH:
        return frozenset()
    return frozenset(candidates)


def _width(shape) -> int:
    """A layer's width: the last axis of an activation (a vector per point, a matrix's rows)."""
    return shape[-1] if shape and isinstance(shape[-1], int) else 1


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def with_stored_output(op: str, z, y):
    """`op(z)` given its value `y`: y, with the derivative of op at z passed on to z (y is
    data: nothing flows back to it)."""
    return y


@with_stored_output.defjvp
def _with_stored_output_jvp(op: str, primals, tangents):
    _, y = primals
    dz, _ = tangents
    return y, dz * DERIVATIVE_OF_OUTPUT[op](y)
