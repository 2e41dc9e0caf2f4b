"""The matrix products of an MLP's training step: XLA:CPU against PyTorch (1 thread).

Why rlsys and the PureJaxRL-style code fall short of their goals on this machine
(`RESULTS.md`, "Where the time goes inside XLA:CPU"): the weight gradient of a dense layer,
Xᵀ·dY contracted over the batch rows, is much slower in XLA:CPU than the forward product
X·W of the same size. XLA hands a dot to YNNPACK only when the left operand's contracted
dimension is its last one, which Xᵀ·dY's never is, and runs it in its own (Eigen) kernel.

Each system times one product at 256 rows (a PPO minibatch) or 64,000 rows (the scaling
sweep's batch), 64 inputs, 64 outputs, with float32 data:

* `xla-forward-N`: X·W, jitted (YNNPACK);
* `xla-wgrad-N`: Xᵀ·dY as `jax.grad` emits it (lhs contracting dimension 0);
* `xla-wgrad-pretransposed-N`: the same product with Xᵀ already laid out as (64, N), so
  that YNNPACK takes it; producing that layout is extra work this does not count;
* `torch-forward-N`, `torch-wgrad-N`: the same two products in PyTorch with 1 thread.

The XLA products run inside a `fori_loop` (the loop's scaling of its input, timed alone,
is subtracted), so that dispatch does not count; the torch ones are called from Python,
whose call costs about 2 µs each. Reported: `us_per_product` (median of 7 rounds).
"""

from __future__ import annotations

import importlib.util
import statistics
import time

import numpy as np

from rlsys.bench import Case, System, child_main, report

INPUTS = OUTPUTS = 64
ROUNDS = 7
FORMS = [("xla", "forward"), ("xla", "wgrad"), ("xla", "pretransposed"),
         ("torch", "forward"), ("torch", "wgrad")]  # fmt: skip


def _data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((rows, INPUTS), dtype=np.float32)
    dy = rng.random((rows, OUTPUTS), dtype=np.float32)
    return x, dy


def _xla_seconds(form: str, x: np.ndarray, dy: np.ndarray, reps: int) -> list[float]:
    import jax
    import jax.numpy as jnp

    products = {
        "forward": lambda a, b: a @ b[:INPUTS].T,  # (N, 64)·(64, 64)
        "wgrad": lambda a, b: a.T @ b,
        "pretransposed": lambda a, b: a @ b,  # a is Xᵀ, (64, N)
        "none": lambda a, b: a[:INPUTS, :OUTPUTS] + b[:INPUTS, :OUTPUTS],
    }
    a = np.ascontiguousarray(x.T) if form == "pretransposed" else x
    if form in ("wgrad", "pretransposed"):  # both forms compute the same weight gradient
        got = np.asarray(jax.jit(products[form])(a, dy))
        np.testing.assert_allclose(got, x.T.astype(np.float64) @ dy, rtol=1e-4)

    def timed(product):
        def loop(a, b):
            def body(i, total):  # a changes every trip: nothing can be hoisted
                scaled = a * (1.0 + i.astype(jnp.float32) * 1e-6)
                return total + jnp.sum(product(scaled, b))

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


def _torch_seconds(form: str, x: np.ndarray, dy: np.ndarray, reps: int) -> list[float]:
    import torch

    torch.set_num_threads(1)
    a, b = torch.from_numpy(x), torch.from_numpy(dy)
    w = b[:INPUTS].T.contiguous()
    product = (lambda: a @ w) if form == "forward" else (lambda: a.T @ b)
    product()
    times = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(reps):
            product()
        times.append((time.perf_counter() - began) / reps)
    return times


def run(*, quick: bool, seed: int, impl: str, form: str, rows: int) -> None:
    x, dy = _data(rows, seed)
    reps = (20 if quick else 200) if rows < 10_000 else (2 if quick else 10)
    measure = _xla_seconds if impl == "xla" else _torch_seconds
    seconds = statistics.median(measure(form, x, dy, reps))
    flops = 2 * rows * INPUTS * OUTPUTS
    report(env_steps=flops, seconds=seconds, us_per_product=seconds * 1e6)


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def _system(impl: str, form: str, rows: int) -> System:
    labels = {"forward": "X·W", "wgrad": "Xᵀ·dY", "pretransposed": "Xᵀ·dY with Xᵀ laid out"}
    return System(f"{impl}-{form}-{rows}", run=run,
                  params={"impl": impl, "form": form, "rows": rows},
                  description=f"{labels[form]}, {rows} rows, {impl}",
                  available=None if impl == "xla" else _has_torch)  # fmt: skip


CASE = Case(
    name="weight_grad_dots",
    description=(
        "One dense layer's forward product X·W and weight gradient Xᵀ·dY (64 inputs, 64 "
        "outputs) at 256 and 64,000 rows: XLA:CPU (jitted, in a loop) vs PyTorch with 1 "
        "thread. Compare rows of the same size; the FLOP/s column is the product's rate."
    ),
    baseline="torch-wgrad-64000",
    unit="FLOP",
    systems=[_system(impl, form, rows) for rows in (256, 64_000) for impl, form in FORMS],
)

if __name__ == "__main__":
    child_main(CASE)
