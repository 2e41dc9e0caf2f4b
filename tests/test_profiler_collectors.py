"""C-call collectors in-process: what events each records (no global patching here; the
end-to-end runs are in test_profiler_workloads.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import rlsys
from rlsys.profiler import hooks
from rlsys.profiler.collectors import jax_backend, torch_backend
from rlsys.trace import Category, Session


class TickClock:
    """Each read advances 10 ns: every interval has a known, non-zero length."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 10
        return self.now


def recorded(tmp_path: Path, body) -> list:
    rlsys.start_recording(tmp_path, clock=TickClock())
    try:
        body()
    finally:
        rlsys.stop_recording()
    return Session.load_dir(tmp_path).events


def kinds(events) -> Counter:
    return Counter((e.name, str(e.category)) for e in events)


def test_an_environment_wrapper_records_the_operation_and_the_simulator_interval(tmp_path):
    inner = hooks.outermost("simulation", lambda: "stepped", Category.SIMULATOR)
    outer = hooks.outermost("simulation", lambda: inner(), Category.SIMULATOR)  # a wrapper env
    events = recorded(tmp_path, outer)
    assert kinds(events) == {("simulation", "operation"): 1, ("simulator", "simulator"): 1}
    op, interval = sorted(events, key=lambda e: str(e.category))
    assert op.start_ns < interval.start_ns < interval.end_ns < op.end_ns


def test_without_annotations_the_wrapper_records_only_the_interval(tmp_path) -> None:
    step = hooks.outermost("simulation", lambda: None, Category.SIMULATOR, annotate=False)
    assert kinds(recorded(tmp_path, step)) == {("simulator", "simulator"): 1}


def test_inside_a_users_simulation_annotation_the_interval_is_still_recorded(tmp_path) -> None:
    step = hooks.outermost("simulation", lambda: None, Category.SIMULATOR)

    def body() -> None:
        with rlsys.operation("simulation"):
            step()

    assert kinds(recorded(tmp_path, body)) == {
        ("simulation", "operation"): 1,
        ("simulator", "simulator"): 1,
    }


def test_torch_records_one_backend_interval_per_outermost_call(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    mode = torch_backend._mode_class(torch)
    weight = torch.ones(3, requires_grad=True)

    def body() -> None:
        with mode():
            probs = torch.nn.functional.softmax(weight * 2.0, -1)  # calls Tensor.softmax
            probs[0].backward()

    names = Counter(e.name for e in recorded(tmp_path, body) if e.category is Category.BACKEND)
    assert names["softmax"] == 1 and names["backward"] == 1 and names["mul"] == 1
    assert "_softmax_backward_data" not in names  # the autograd engine's work is inside


def test_jitted_jax_calls_are_inference_unless_their_tracing_differentiates(tmp_path) -> None:
    jax = pytest.importorskip("jax")
    jit = jax_backend._wrap_jit(jax.jit, annotate=True, backend=True)  # not patched globally
    grad = jax_backend._wrap_differentiation(jax.grad)
    double = jit(lambda x: x * 2.0)
    step = jit(lambda x: x - 0.1 * grad(lambda y: (double(y) ** 2).sum())(x))

    def body() -> None:
        x = jax.numpy.ones(3)
        for _ in range(2):
            x = step(double(x))

    events = kinds(recorded(tmp_path, body))
    assert events[("inference", "operation")] == 2  # `double` called directly, twice
    assert events[("backpropagation", "operation")] == 2  # `step`, including its first call
    assert events[("<lambda>", "backend")] == 4  # `double` inside `step` is part of `step`
