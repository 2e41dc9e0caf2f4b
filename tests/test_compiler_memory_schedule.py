"""XLA:CPU's memory scheduler is tried only for programs with large temporaries, and kept
only when it needs fewer (`lower/memory_schedule.py`); every program is compiled with its
backend's options (`lower/backend_options.py`), segments too; on a GPU, programs are
compiled once."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_programs import DOUBLINGS, doubling_program

import rlsys.rt as rt
from rlsys.compiler.errors import ProgramTooLargeError
from rlsys.compiler.lower import jax_staged, memory_schedule
from rlsys.compiler.lower.backend_options import backend_options
from rlsys.compiler.lower.cpu_convolutions import CPU_CONVOLUTION_OPTIONS
from rlsys.compiler.lower.cpu_copies import CPU_COPY_OPTIONS
from rlsys.compiler.lower.gpu_launch import GPU_LAUNCH_OPTIONS
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
        frugal = any(key in (compiler_options or {}) for key in MEMORY_SCHEDULER)
        return _Compiled(self.frugal if frugal else self.default, compiler_options)


CPU_OPTIONS = {**CPU_COPY_OPTIONS, **CPU_CONVOLUTION_OPTIONS}  # what every CPU program gets
WITH_SCHEDULER = {**CPU_OPTIONS, **MEMORY_SCHEDULER}


def test_small_temporaries_are_compiled_once_as_xla_would() -> None:
    lowered = _Lowered(default=100 * MiB, frugal=50 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [CPU_OPTIONS]
    assert compiled.options == CPU_OPTIONS


def test_large_temporaries_keep_the_memory_scheduler_when_it_needs_fewer() -> None:
    lowered = _Lowered(default=382 * MiB, frugal=318 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [CPU_OPTIONS, WITH_SCHEDULER]
    assert compiled.options == WITH_SCHEDULER


def test_large_temporaries_keep_the_default_when_the_memory_scheduler_needs_as_many() -> None:
    lowered = _Lowered(default=200 * MiB, frugal=200 * MiB)
    compiled = compile_frugally(lowered)
    assert lowered.calls == [CPU_OPTIONS, WITH_SCHEDULER]
    assert compiled.options == CPU_OPTIONS


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


def test_each_backend_gets_its_own_options(monkeypatch) -> None:
    assert jax.default_backend() == "cpu"  # the test suite runs on the CPU
    assert backend_options() == CPU_OPTIONS
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert backend_options() == GPU_LAUNCH_OPTIONS
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert backend_options() == {}


def test_segments_are_compiled_with_the_backend_options(monkeypatch) -> None:
    """A segmented program's segments are compiled in `jax_staged`, not `compile_frugally`."""
    asked = []

    def options() -> dict[str, object]:
        asked.append(1)
        return dict(CPU_OPTIONS)

    monkeypatch.setattr(jax_staged, "backend_options", options)
    exe = doubling_program().compile(bounds={"T": 4}, segmented=True)
    assert exe.segmented
    np.testing.assert_array_equal(exe.run()["x"], DOUBLINGS)
    assert asked


def test_region_analysis_leaves_a_loop_counter_uncopied_and_computes_the_same() -> None:
    """A scan writing each step's state into a stack at its counter: XLA's default copy
    insertion copies the counter every trip, the region analysis proves it need not."""

    def program(x):
        def step(carry, t):
            state, stack = carry
            state = jnp.tanh(state * 1.01 + t)
            return (state, jax.lax.dynamic_update_slice(stack, state[None], (t, 0))), None

        (_, stack), _ = jax.lax.scan(step, (x, jnp.zeros((16, x.shape[0]))), jnp.arange(16))
        return stack

    x = jnp.linspace(-1.0, 1.0, 8)
    lowered = jax.jit(program).lower(x)
    ours, plain = compile_frugally(lowered), lowered.compile()
    assert ours.as_text().count(" copy(") < plain.as_text().count(" copy(")
    np.testing.assert_array_equal(ours(x), plain(x))


@dataclass
class _CallAnalysis:
    argument_size_in_bytes: int
    output_size_in_bytes: int
    temp_size_in_bytes: int
    alias_size_in_bytes: int


def test_a_call_holds_its_arguments_results_and_temporaries_donated_ones_once() -> None:
    class Compiled:
        def memory_analysis(self):
            return _CallAnalysis(100, 30, 500, 20)  # 20 of the results written in place

    assert memory_schedule.call_bytes(Compiled()) == 610


def test_available_memory_is_free_ram_and_swap_or_the_cgroup_s_remainder(tmp_path) -> None:
    meminfo = tmp_path / "proc/meminfo"
    meminfo.parent.mkdir()
    meminfo.write_text("MemTotal: 9000 kB\nMemAvailable:    1000 kB\nSwapFree: 24 kB\n")
    assert memory_schedule.available_bytes(tmp_path) == 1024 * 1024
    cgroup = tmp_path / "sys/fs/cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text("max\n")  # no limit
    (cgroup / "memory.current").write_text("300000\n")
    assert memory_schedule.available_bytes(tmp_path) == 1024 * 1024
    (cgroup / "memory.max").write_text("500000\n")
    assert memory_schedule.available_bytes(tmp_path) == 200000
    meminfo.write_text("no numbers here\n")
    assert memory_schedule.available_bytes(tmp_path) is None


def test_a_program_whose_call_does_not_fit_is_refused_when_compiled(monkeypatch) -> None:
    x = jnp.zeros((1024, 256), "float32")  # 1 MiB in, 1 MiB out
    lowered = jax.jit(lambda x: jnp.tanh(x) * 2.0).lower(x)
    monkeypatch.setattr(memory_schedule, "available_bytes", lambda: 3 * MiB)
    compile_frugally(lowered)
    monkeypatch.setattr(memory_schedule, "available_bytes", lambda: MiB)
    with pytest.raises(ProgramTooLargeError, match=r"needs 0\.0 GiB .* has 0\.0 GiB free"):
        compile_frugally(lowered)
    monkeypatch.setenv("RLSYS_SKIP_MEMORY_CHECK", "1")
    compile_frugally(lowered)


def test_a_gather_from_more_values_than_32_bit_indices_reach_is_refused_before_tracing() -> None:
    prog = rt.Program(dims=("b",))
    (b,) = prog.dims
    B = prog.bounds[0]
    with prog:
        # two values a point: past 32-bit indices with a bound that is not (bounds past them
        # are refused as such)
        x = rt.placeholder(shape=(2,), dtype="float32", domain=(b,), name="x")
        x[b] = rt.const(np.ones(2, "float32")) * b
        rows = x[0:B].take(rt.const(np.array([2, 0], "int32")))
        prog.output("rows", rows)
    assert prog.compile(bounds={"B": 5}).run()["rows"].tolist() == [[2.0, 2.0], [0.0, 0.0]]
    with pytest.raises(
        ProgramTooLargeError, match=r"gathers from index#\d+ of shape \(1600000000, 2\)"
    ):
        prog.compile(bounds={"B": 1_600_000_000})
