"""Test-session setup shared by all tests."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

import pytest

_CACHE_HOME = tempfile.mkdtemp(prefix="rlsys-test-cache-")
CPU_DEVICES = 2  # for programs split over devices (test_compiler_data_parallel.py)


def pytest_configure(config) -> None:
    # What the tests cache (compiled programs of `rlsys train`, calibrations) goes to a folder
    # of this session, for the tests' processes and their children, not to ~/.cache.
    os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
    # Several tests check what Ctrl-C does (SIGINT to `rlsys profile`, the bench harness and
    # their children). A test run started in the background of a non-interactive shell
    # (`make test &`, `nohup`) inherits SIGINT ignored, and ignored signals stay ignored in
    # every child: restore Python's handler (children then get the default at exec).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Before any test runs JAX: the CPU backend reads it when it starts.
    from rlsys.compiler import use_cpu_devices

    use_cpu_devices(CPU_DEVICES)


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE_HOME, ignore_errors=True)


@pytest.fixture
def staged_loops(monkeypatch) -> list:
    """Every host loop (`StagedLoop`) compiled while the test runs, in order."""
    import rlsys.compiler.lower.jax_staged as jax_staged

    loops = []
    init = jax_staged.StagedLoop.__init__

    def recorded(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        loops.append(self)

    monkeypatch.setattr(jax_staged.StagedLoop, "__init__", recorded)
    return loops


@pytest.fixture
def xla_compilations() -> list:
    """The durations of the XLA compilations made while the test runs (JAX's monitoring
    events): clear it, run something, and it holds what that compiled."""
    from jax import monitoring

    seen: list[float] = []

    def record(event: str, duration: float, **kwargs) -> None:
        if event.endswith("backend_compile_duration"):
            seen.append(duration)

    monitoring.register_event_duration_secs_listener(record)
    yield seen
    monitoring.unregister_event_duration_listener(record)
