"""C-call collectors in-process: what events each records (no global patching here; the
end-to-end runs are in test_profiler_workloads.py)."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path

import pytest

import rlsys
from rlsys.profiler import hooks
from rlsys.profiler.breakdown import breakdown
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


@contextlib.contextmanager
def torch_wrapped():
    """torch's entry points wrapped for the test (left as found: an earlier in-process
    profile may have installed them for good)."""
    torch = pytest.importorskip("torch")
    already = getattr(torch, "__rlsys_backend_wrappers__", None) is not None
    torch_backend.install(torch)
    try:
        yield torch
    finally:
        if not already:
            torch_backend.uninstall(torch)


def test_torch_records_one_backend_interval_per_native_call(tmp_path) -> None:
    with torch_wrapped() as torch:
        weight = torch.ones(3, requires_grad=True)

        def body() -> None:
            probs = torch.nn.functional.softmax(weight * 2.0, -1)  # Python; calls .softmax
            probs[0].backward()
            torch.autograd.grad(torch.tanh(weight).sum(), weight)

        events = recorded(tmp_path, body)
    names = Counter(e.name for e in events if e.category is Category.BACKEND)
    expected = {"mul": 1, "softmax": 1, "getitem": 1, "backward": 2, "tanh": 1, "sum": 1}
    assert {name: names[name] for name in expected} == expected
    # The rest is what torch's Python calls natively (the backward passes' `ones_like` seeds),
    # never its dispatch checks.
    assert not [name for name in names if name.startswith("has_torch_function")]


def test_uninstall_puts_the_originals_back() -> None:
    torch = pytest.importorskip("torch")
    # An earlier in-process profile may have installed them for good: start from the originals.
    already = getattr(torch, "__rlsys_backend_wrappers__", None) is not None
    torch_backend.uninstall(torch)
    try:
        originals = (torch.tanh, torch.Tensor.add, torch.nn.functional.linear,
                     torch.Tensor.__mul__)  # fmt: skip
        engine = torch.autograd.variable.Variable._execution_engine
        with torch_wrapped():
            assert torch.tanh is not originals[0] and torch.tanh.__wrapped__ is originals[0]
            assert torch.Tensor.__mul__ is not originals[3]
        assert (torch.tanh, torch.Tensor.add, torch.nn.functional.linear,
                torch.Tensor.__mul__) == originals  # fmt: skip
        assert torch.autograd.variable.Variable._execution_engine is engine
    finally:
        if already:
            torch_backend.install(torch)


def test_wrapped_torch_still_scripts_and_pickles() -> None:
    import pickle

    with torch_wrapped() as torch:
        scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()))
        assert scripted(torch.zeros(3)).shape == (2,)
        assert pickle.loads(pickle.dumps(torch.tanh)) is torch.tanh
        assert pickle.loads(pickle.dumps(torch.Tensor.add)) is torch.Tensor.add


def test_torch_wrappers_with_nothing_recording_just_call(tmp_path) -> None:
    # Installed before (or without) any recorder: `rlsys profile`'s disabled state.
    with torch_wrapped() as torch:
        total = (torch.ones(3) * 2.0).sum()
        assert float(total) == 6.0
        names = Counter(e.name for e in recorded(tmp_path, lambda: None))
    assert not names.get("mul")


def test_torch_calls_on_two_threads_go_to_their_own_threads(tmp_path) -> None:
    import threading

    with torch_wrapped() as torch:
        x = torch.ones(3)

        def body() -> None:
            x.add(1.0)
            other = threading.Thread(target=lambda: x.mul(2.0))
            other.start()
            other.join()

        events = recorded(tmp_path, body)
    tids = {e.name: e.tid for e in events if e.category is Category.BACKEND}
    assert set(tids) == {"add", "mul"} and tids["add"] != tids["mul"]


def test_torch_trivial_calls_are_not_recorded_and_their_time_stays_python(tmp_path) -> None:
    with torch_wrapped() as torch:
        x = torch.ones(3, requires_grad=True)

        def body() -> None:
            with rlsys.operation("inference"):
                # Metadata reads and grad-mode flips: not wrapped, no clock read.
                assert x.shape == (3,) and x.dim() == 1 and x.size(0) == 3 and len(x) == 3
                assert x.grad is None and x.requires_grad and not x.is_complex()
                assert not torch.is_complex(x) and torch.numel(x) == 3
                with torch.no_grad():  # torch._C._set_grad_enabled, twice
                    y = x * 2.0
                y.sum()

        rlsys.start_recording(tmp_path, clock=TickClock())
        try:
            body()
        finally:
            rlsys.stop_recording()
    session = Session.load_dir(tmp_path)
    backend = [e for e in session.events if e.category is Category.BACKEND]
    assert Counter(e.name for e in backend) == {"mul": 1, "sum": 1}
    # Clock reads (10 ns apart): enter, mul start/end, sum start/end, exit.
    inference = breakdown(session).operations["inference"]
    assert inference.wall_ns == 50
    assert inference.cpu_ns["backend"] == 20 and inference.cpu_ns["python"] == 30
    assert sum(inference.cpu_ns.values()) == inference.wall_ns
    assert inference.events["backend"] == 2


def test_torch_intervals_are_flushed_every_flush_every_calls(tmp_path) -> None:
    with torch_wrapped() as torch:
        x = torch.ones(3)
        recorder = rlsys.start_recording(tmp_path, flush_every=5)
        try:
            for _ in range(12):
                x.add(1.0)
            records = [json.loads(line) for line in recorder.path.read_text().splitlines()]
            packed = [r for r in records if r[0] == "intervals"]
            on_disk = sum(r[4] for r in packed if set(r[5].values()) == {"add"})
        finally:
            rlsys.stop_recording()
    assert on_disk == 10  # two full buffers written, two intervals still buffered
    assert kinds(Session.load_dir(tmp_path).events) == {("add", "backend"): 12}


def test_torch_intervals_are_flushed_once_flush_after_ns_has_passed(tmp_path) -> None:
    ticks = iter(range(0, 10**12, 400_000_000))  # 0.4 s a clock read
    with torch_wrapped() as torch:
        x = torch.ones(3)
        recorder = rlsys.start_recording(tmp_path, clock=lambda: next(ticks))
        try:
            x.add(1.0)  # from 0.4 s to 0.8 s: past the first timed flush, due at 0.5 s
            records = [json.loads(line) for line in recorder.path.read_text().splitlines()]
        finally:
            rlsys.stop_recording()
    assert [r[4] for r in records if r[0] == "intervals"] == [1]


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
