"""XLA:CPU's memory scheduler is tried only for programs with large temporaries, and kept
only when it needs fewer (`lower/memory_schedule.py`); on a GPU, programs are compiled once
with `lower/gpu_launch.py`'s options."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.compiler.lower import memory_schedule
from rlsys.compiler.lower.gpu_launch import GPU_LAUNCH_OPTIONS, launch_options
from rlsys.compiler.lower.memory_schedule import MEMORY_SCHEDULER, compile_frugally

MiB = 2**20


@dataclass
class _Analysis:
    temp_size_in_bytes: int


@dataclass
class _Compiled:
    temporaries: int
    options: dict | None

    def memory_analysis(self) -> _Analysis:
        return _Analysis(self.temporaries)


@dataclass
class _Lowered:
    """A lowered program whose compilations need `default` or `frugal` bytes of temporaries."""

    default: int
    frugal: int
    calls: list = field(default_factory=list)

    def compile(self, compiler_options=None) -> _Compiled:
        self.calls.append(compiler_options)
        return _Compiled(self.frugal if compiler_options else self.default, compiler_options)


def test_small_temporaries_are_compiled_once_as_xla_would() -> None:
    lowered = _Lowered(default=100 * MiB, frugal=50 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [None]
    assert compiled.options is None


def test_large_temporaries_keep_the_memory_scheduler_when_it_needs_fewer() -> None:
    lowered = _Lowered(default=382 * MiB, frugal=318 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [None, MEMORY_SCHEDULER]
    assert compiled.options == MEMORY_SCHEDULER


def test_large_temporaries_keep_the_default_when_the_memory_scheduler_needs_as_many() -> None:
    lowered = _Lowered(default=200 * MiB, frugal=200 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [None, MEMORY_SCHEDULER]
    assert compiled.options is None


def test_a_real_program_compiled_with_the_memory_scheduler_computes_the_same(monkeypatch) -> None:
    monkeypatch.setattr(memory_schedule, "LARGE_TEMPORARIES", -1)  # always try it

    def program(x):
        a, b = jnp.tanh(x) @ x.T, jnp.sin(x) @ x.T  # two independent products
        return (a * b).sum(axis=0)

    x = jnp.asarray(np.random.default_rng(0).normal(size=(256, 32)), "float32")
    lowered = jax.jit(program).lower(x)
    frugal = compile_frugally(lowered)
    plain = lowered.compile()
    assert frugal.memory_analysis().temp_size_in_bytes <= plain.memory_analysis().temp_size_in_bytes
    np.testing.assert_allclose(frugal(x), plain(x), rtol=1e-6)


def test_on_a_gpu_programs_are_compiled_once_with_the_launch_options(monkeypatch) -> None:
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    lowered = _Lowered(default=382 * MiB, frugal=318 * MiB)  # large: no CPU scheduler there
    compiled = compile_frugally(lowered)
    assert lowered.calls == [GPU_LAUNCH_OPTIONS]
    assert compiled.options == {"xla_gpu_graph_min_graph_size": 1}


def test_off_the_gpu_there_are_no_launch_options() -> None:
    assert jax.default_backend() == "cpu"  # the test suite runs on the CPU
    assert launch_options() == {}
