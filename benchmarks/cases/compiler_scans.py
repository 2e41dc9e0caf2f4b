"""Returns and GAE compiled by rlsys vs hand-written `lax.scan`, at T = 1k and 10k.

Both sides compute the same thing for 8 environments: discounted returns with episode ends,
and GAE with terminations (and truncation bootstrap values), from the same random inputs.
rlsys compiles the recurrence `ret[b, t] = r + gamma (1 - done) ret[b, t + 1]` (a reverse
scan over t, vectorized over b); the baseline is a jitted reverse `lax.scan` over t of
vectors of 8. Reported: compile time, and the median time of one call (`run_ms`).
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.bench import Case, System, child_main, report

ENVS, GAMMA, LAMBDA = 8, 0.99, 0.95


def _data(horizon: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (ENVS, horizon)
    return {
        "r": rng.normal(size=shape).astype("float32"),
        "v": rng.normal(size=shape).astype("float32"),
        "nv": rng.normal(size=shape).astype("float32"),
        "term": (rng.random(shape) < 0.01).astype("float32"),
        "done": (rng.random(shape) < 0.02).astype("float32"),
    }


def _rlsys(kind: str, horizon: int):
    import rlsys.rt as rt

    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    _, T = prog.bounds
    with prog:
        r, v, nv, term, done = (rt.input(k) for k in ("r", "v", "nv", "term", "done"))
        x = r if kind == "returns" else r + GAMMA * nv * (1.0 - term) - v
        decay = GAMMA if kind == "returns" else GAMMA * LAMBDA
        out = rt.placeholder()
        out[b, T - 1] = x[b, T - 1]
        out[b, t] = x + decay * (1.0 - done) * out[b, t + 1]
        prog.output("out", out)
    exe = prog.compile(bounds={"B": ENVS, "T": horizon})
    return lambda data: exe.run(data)["out"]


def _lax(kind: str, horizon: int):
    def fn(data):
        r, v, nv, term, done = (data[k].T for k in ("r", "v", "nv", "term", "done"))
        x = r if kind == "returns" else r + GAMMA * nv * (1.0 - term) - v
        decay = GAMMA if kind == "returns" else GAMMA * LAMBDA

        def step(carry, inputs):
            value, cont = inputs
            carry = value + decay * cont * carry
            return carry, carry

        _, ys = jax.lax.scan(step, jnp.zeros(ENVS), (x, 1.0 - done), reverse=True)
        return ys.T

    jitted = jax.jit(fn)
    compiled = jitted.lower({k: jax.ShapeDtypeStruct((ENVS, horizon), "float32")
                             for k in ("r", "v", "nv", "term", "done")}).compile()  # fmt: skip
    return lambda data: np.asarray(compiled(data))


def run(*, quick: bool, seed: int, impl: str, kind: str, horizon: int) -> None:
    data = _data(horizon, seed)
    start = time.perf_counter()
    fn = (_rlsys if impl == "rlsys" else _lax)(kind, horizon)
    compile_seconds = time.perf_counter() - start
    fn(data)  # warm up
    calls = 5 if quick else 30
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        fn(data)
        times.append(time.perf_counter() - began)
    report(env_steps=calls * ENVS * horizon, seconds=sum(times),
           compile_seconds=compile_seconds, run_ms=1000 * statistics.median(times))  # fmt: skip


def _system(impl: str, kind: str, horizon: int) -> System:
    name = f"{impl}-{kind}-{horizon // 1000}k"
    text = "rlsys recurrence" if impl == "rlsys" else "hand-written lax.scan"
    return System(name, run=run, params={"impl": impl, "kind": kind, "horizon": horizon},
                  description=f"{kind}, T={horizon}, {ENVS} envs: {text}")  # fmt: skip


CASE = Case(
    name="compiler_scans",
    description=(
        "Discounted returns and GAE over T = 1k and 10k steps for 8 environments: rlsys's "
        "compiled recurrence vs a hand-written jitted reverse lax.scan. Compare each rlsys "
        "row with the lax row of the same computation and T."
    ),
    baseline="lax-returns-1k",
    unit="env steps",
    systems=[
        _system(impl, kind, horizon)
        for horizon in (1000, 10000)
        for kind in ("returns", "gae")
        for impl in ("rlsys", "lax")
    ],
)

if __name__ == "__main__":
    child_main(CASE)
