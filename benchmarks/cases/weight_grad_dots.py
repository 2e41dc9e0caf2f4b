"""The matrix products of an MLP's training step: XLA:CPU against PyTorch (1 thread).

Why rlsys and the PureJaxRL-style code fall short of their goals on this machine
(`HISTORY.md`, "Where the time goes inside XLA:CPU"): the weight gradient of a dense layer,
Xᵀ·dY contracted over the batch rows, is much slower in XLA:CPU than the forward product
X·W of the same size. XLA hands a dot to YNNPACK only when the left operand's contracted
dimension is its last one, which Xᵀ·dY's never is, and runs it in its own (Eigen) kernel.

Each system times one float32 product at 256 rows (a PPO minibatch) or 64,000 rows (the
scaling sweep's batch), 64 inputs and 64 outputs:

* `xla-forward-N`: X·W, jitted (YNNPACK);
* `xla-wgrad-N`: Xᵀ·dY as `jax.grad` emits it (lhs contracting dimension 0);
* `xla-wgrad-pretransposed-N`: the same product with Xᵀ already laid out as (64, N), so
  that YNNPACK takes it; producing that layout is extra work this does not count;
* `torch-forward-N`, `torch-wgrad-N`: the same two products in PyTorch with 1 thread;
* `xla-wgrad1-64000`, `xla-chunked1-64000`, `torch-wgrad1-64000`: a value head's weight
  gradient (one output): Xᵀ·dy as `jax.grad` emits it, the sum over chunks of rows that
  rlsys's matmul rule uses instead (`rlsys/compiler/rules/reduce.py`), and PyTorch's;
* `xla-blocked-64000`: Xᵀ·dY as rlsys's matmul rule takes it on CPU for such a layer, a
  sum over blocks of rows, each block transposed into a copy (`_blocked_rows_times`).

The rest measure what the machine's libraries reach at the sweep's shapes and at their
best, for the roofline of the scaling sweep's 5× goal (`benchmarks/roofline.py`):
`-64000x256` the sweep's width=256 layer (256 inputs, 256 outputs), `-2048x2048` a square
product, the fastest shape for any library; `torch2-` PyTorch with both cores (2 threads).
XLA:CPU uses every core.

The XLA products run inside a `fori_loop` that scales an input every trip (X, or the
one-output forms' narrow dy) so that nothing is hoisted, and the loop alone is timed and
subtracted, so that dispatch does not count; the torch ones are called from Python,
whose call costs about 2 µs each. The products of those wider shapes (8 GFLOP or more)
are called one by one in XLA too: there the loop's scaled input fuses into YNNPACK's
product, and the square one ran at a quarter of its speed so. Freed memory stays mapped
(`keep_freed_buffers`, as rlsys runs): otherwise a 65 MB output is mapped afresh page by page
at every call, which took XLA's 64000x256 forward product from 171 to 75 GFLOP/s. Reported:
`us_per_product` (median of 7 rounds).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from rlsys.bench import Case, System, child_main, installed, report

WIDTH = 64  # inputs and outputs of the layer, unless a system names another
ROUNDS = 7
FORMS = [("xla", "forward"), ("xla", "wgrad"), ("xla", "pretransposed"),
         ("torch", "forward"), ("torch", "wgrad")]  # fmt: skip
ONE_OUTPUT_FORMS = [("xla", "wgrad1"), ("xla", "chunked1"), ("torch", "wgrad1")]
CEILING_IMPLS = ("xla", "torch", "torch2")
CEILING_SHAPES = [(64_000, 256), (2048, 2048)]  # (rows, width)


def _data(rows: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((rows, width), dtype=np.float32)
    dy = rng.random((rows, width), dtype=np.float32)
    return x, dy


def _xla_seconds(form: str, x: np.ndarray, dy: np.ndarray, reps: int) -> list[float]:
    import jax
    import jax.numpy as jnp

    from rlsys.compiler.rules.reduce import _blocked_rows_times, _chunked_rows_times

    width = x.shape[1]
    products = {
        "forward": lambda a, b: a @ b[:width].T,  # (N, width)·(width, width)
        "wgrad": lambda a, b: a.T @ b,
        "pretransposed": lambda a, b: a @ b,  # a is Xᵀ, (64, N)
        "wgrad1": lambda a, b: a.T @ b,  # b is dy's first column
        "chunked1": _chunked_rows_times,
        "blocked": _blocked_rows_times,
        "none": lambda a, b: a[:width, : b.shape[1]] + b[:width],
    }
    a = np.ascontiguousarray(x.T) if form == "pretransposed" else x
    one_output = form.endswith("1")
    if one_output:
        dy = np.ascontiguousarray(dy[:, :1])
    if form != "forward":  # the forms of one gradient compute the same values
        got = np.asarray(jax.jit(products[form])(a, dy))
        expected = x.T.astype(np.float64) @ dy
        np.testing.assert_allclose(got, expected, rtol=1e-4)

    if width > WIDTH:  # 8 GFLOP or more a product: a call's dispatch (µs) does not count
        product = jax.jit(products[form]).lower(a, dy).compile()
        return _called_seconds(lambda: product(a, dy).block_until_ready(), reps)

    def timed(product):
        def loop(a, b):
            def body(i, total):  # an input changes every trip: nothing can be hoisted
                scale = 1.0 + i.astype(jnp.float32) * 1e-6
                if one_output:  # scaling the narrow dy costs next to nothing
                    return total + jnp.sum(product(a, b * scale))
                return total + jnp.sum(product(a * scale, b))

            return jax.lax.fori_loop(0, reps, body, jnp.float32(0.0))

        compiled = jax.jit(loop).lower(a, dy).compile()
        compiled(a, dy).block_until_ready()
        times = []
        for _ in range(ROUNDS):
            began = time.perf_counter()
            compiled(a, dy).block_until_ready()
            times.append((time.perf_counter() - began) / reps)
        return times

    loop_only = statistics.median(timed(products["none"]))
    return [t - loop_only for t in timed(products[form])]


def _called_seconds(product: Callable[[], object], reps: int) -> list[float]:
    """Seconds per call of `product` (done when it returns), per round: once, then timed."""
    product()
    times = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(reps):
            product()
        times.append((time.perf_counter() - began) / reps)
    return times


def _torch_seconds(form: str, x: np.ndarray, dy: np.ndarray, reps: int,
                   threads: int) -> list[float]:  # fmt: skip
    import torch

    torch.set_num_threads(threads)
    a, b = torch.from_numpy(x), torch.from_numpy(dy)
    w = b[: x.shape[1]].T.contiguous()
    b = b[:, :1].contiguous() if form == "wgrad1" else b
    product = (lambda: a @ w) if form == "forward" else (lambda: a.T @ b)
    return _called_seconds(product, reps)


def run(*, quick: bool, seed: int, impl: str, form: str, rows: int, width: int = WIDTH) -> None:
    from rlsys.compiler.heap import keep_freed_buffers

    # A product's output (65 MB at 64000x256) would be mapped afresh, page by page, at every
    # call: for either library, time the product as an iteration reuses its buffers.
    keep_freed_buffers()
    x, dy = _data(rows, width, seed)
    if width > WIDTH:  # a product of 8 GFLOP or more: about 0.1 s
        reps = 1 if quick else 3
    else:
        reps = (20 if quick else 200) if rows < 10_000 else (2 if quick else 10)
    if impl == "xla":
        times = _xla_seconds(form, x, dy, reps)
    else:
        times = _torch_seconds(form, x, dy, reps, threads=2 if impl == "torch2" else 1)
    seconds = statistics.median(times)
    flops = 2 * rows * width * (1 if form.endswith("1") else width)
    report(env_steps=flops, seconds=seconds, us_per_product=seconds * 1e6)


def _system(impl: str, form: str, rows: int, width: int = WIDTH) -> System:
    labels = {"forward": "X·W", "wgrad": "Xᵀ·dY", "pretransposed": "Xᵀ·dY with Xᵀ laid out",
              "wgrad1": "Xᵀ·dy, one output", "chunked1": "Xᵀ·dy, one output, chunked",
              "blocked": "Xᵀ·dY summed over blocks of rows"}  # fmt: skip
    shape = f"{rows}" if width == WIDTH else f"{rows}x{width}"
    return System(f"{impl}-{form}-{shape}", run=run,
                  params={"impl": impl, "form": form, "rows": rows, "width": width},
                  description=f"{labels[form]}, {rows} rows of {width}, {impl}",
                  available=None if impl == "xla" else installed("torch"))  # fmt: skip


CASE = Case(
    name="weight_grad_dots",
    description=(
        "One dense layer's forward product X·W and weight gradient Xᵀ·dY (64 inputs, 64 "
        "outputs) at 256 and 64,000 rows, and a one-output layer's Xᵀ·dy at 64,000: XLA:CPU "
        "(jitted, in a loop) vs PyTorch with 1 thread (torch2: 2 threads). Then the machine's "
        "ceiling: the sweep's width=256 layer (64000x256) and a square 2048x2048 product. "
        "Compare rows and outputs of the same size; the FLOP/s column is the product's rate."
    ),
    baseline="torch-wgrad-64000",
    unit="FLOP",
    systems=[_system(impl, form, rows) for rows in (256, 64_000) for impl, form in FORMS]
    + [_system(impl, form, 64_000) for impl, form in ONE_OUTPUT_FORMS]
    + [_system("xla", "blocked", 64_000)]
    + [_system("torch2", form, 64_000) for form in ("forward", "wgrad")]
    + [
        _system(impl, form, rows, width)
        for rows, width in CEILING_SHAPES
        for form in ("forward", "wgrad")[: 1 if rows == width else 2]  # square: Xᵀ·dY alike
        for impl in CEILING_IMPLS
    ],
)

if __name__ == "__main__":
    child_main(CASE)
