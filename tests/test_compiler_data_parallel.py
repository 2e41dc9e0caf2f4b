"""A program's envs split over two CPU devices (`compile(devices=2)`) computes what it does on
one: acting to the bit, reductions over the envs and gradients to float rounding; programs
whose envs are not independent get a clear error. The test session runs JAX with two CPU
devices (`conftest.py`)."""

from __future__ import annotations

import numpy as np
import pytest

import rlsys.rt as rt
from rlsys.algos.a2c import build_a2c
from rlsys.algos.config import A2CConfig
from rlsys.compiler import compile as compile_module
from rlsys.compiler import heap, use_cpu_devices
from rlsys.compiler.lower import chunked_grad, jax_program
from rlsys.compiler.lower.jax_program import LoopState

ENVS, STEPS, ITERATIONS = 8, 12, 4


def _a2c(devices, **options):
    config = A2CConfig(env=f"trivial:4:{STEPS}", num_envs=ENVS, num_steps=STEPS,
                       total_steps=ITERATIONS * ENVS * STEPS, hidden_size=16, hidden_layers=2,
                       iterations_per_call=1, seed=3).validate()  # fmt: skip
    built = build_a2c(config)
    return built.program.compile(bounds=built.bounds, devices=devices, **options)


def _per_iteration(exe, **run_options) -> dict[str, list[float]]:
    seen: dict[str, list[float]] = {"loss": [], "episode_return_sum": [], "episodes": []}

    def on_iteration(i, outputs) -> None:
        for name, values in seen.items():
            values.append(float(outputs[name]))

    exe.run(on_iteration=on_iteration, **run_options)
    return seen


@pytest.mark.parametrize("chunked", [False, True])
def test_a2c_split_over_two_devices_learns_as_on_one(chunked: bool, monkeypatch) -> None:
    if chunked:  # the gradient re-run a chunk of each device's envs at a time
        monkeypatch.setattr(chunked_grad, "CHUNK_BYTES", 16 * 4 * 16)
        monkeypatch.setattr(chunked_grad, "MIN_ROWS", 16)
        monkeypatch.setattr(chunked_grad, "WHOLE_BYTES", 0)
    one, split = _per_iteration(_a2c(1)), _per_iteration(_a2c(2))
    # The first iteration acts with the initial parameters: the same episodes to the bit.
    assert split["episode_return_sum"][0] == one["episode_return_sum"][0]
    assert split["episodes"] == one["episodes"]
    np.testing.assert_allclose(split["loss"], one["loss"], rtol=1e-4)
    np.testing.assert_allclose(split["episode_return_sum"], one["episode_return_sum"], rtol=1e-4)


def test_split_program_resumes_as_if_uninterrupted() -> None:
    exe = _a2c(2)
    whole = _per_iteration(exe)
    states: list[LoopState] = []
    exe.run(on_iteration=lambda i, outputs: i == 1, on_call=states.append)
    rest = _per_iteration(exe, resume=states[-1])
    assert whole["loss"][2:] == rest["loss"]
    assert whole["episode_return_sum"][2:] == rest["episode_return_sum"]


def _spread_program(reduce: str):
    """Per env a random value each iteration; outputs its reduction over the envs."""
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    _, envs = prog.bounds
    with prog:
        x = rt.random.normal(rt.random.key(0).fold_in(i).fold_in(b))
        total = rt.placeholder(domain=(i,), name="total")
        total[0] = 0.0
        total[i + 1] = total + getattr(x[i, 0:envs], reduce)()
        prog.output("total", total)
    return prog


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_reductions_over_split_envs_combine_across_devices(reduce: str) -> None:
    prog = _spread_program(reduce)
    one = prog.compile(bounds={"I": 5, "B": 6}).run()["total"]
    split = prog.compile(bounds={"I": 5, "B": 6}, devices=2).run()["total"]
    np.testing.assert_allclose(split, one, rtol=1e-6)
    assert np.ptp(one) > 0  # the values vary: a wrong combination would show


def _neighbour_program():
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    _, envs = prog.bounds
    with prog:
        x = rt.random.normal(rt.random.key(0).fold_in(i).fold_in(b))
        y = x + x[i, envs - 1 - b]  # the mirror env's value: another device's
        total = rt.placeholder(domain=(i,), name="total")
        total[0] = 0.0
        total[i + 1] = total + y[i, 0:envs].sum()
        prog.output("total", total)
    return prog


def test_reading_another_envs_value_cannot_be_split() -> None:
    with pytest.raises(rt.RecurrenceError, match=r"devices=1") as err:
        _neighbour_program().compile(bounds={"I": 3, "B": 4}, devices=2)
    assert "not along b" in str(err.value)


def test_envs_that_do_not_divide_over_the_devices_get_a_clear_error() -> None:
    with pytest.raises(rt.RecurrenceError, match=r"B = 5 is not a multiple of 2"):
        _spread_program("sum").compile(bounds={"I": 3, "B": 5}, devices=2)


def test_more_devices_than_jax_has_says_how_to_get_them() -> None:
    with pytest.raises(rt.RecurrenceError, match=r"use_cpu_devices\(3\)"):
        _spread_program("sum").compile(bounds={"I": 3, "B": 6}, devices=3)


def test_bad_devices_value_is_a_clear_error() -> None:
    with pytest.raises(rt.RecurrenceError, match=r"positive integer or 'auto'"):
        _spread_program("sum").compile(bounds={"I": 3, "B": 6}, devices=0)


def test_cpu_devices_cannot_change_once_jax_started() -> None:
    use_cpu_devices(2)  # what it already has: nothing to do
    with pytest.raises(rt.RecurrenceError, match=r"already started"):
        use_cpu_devices(4)


def test_auto_placement_times_both_and_says_which_it_chose() -> None:
    exe = _a2c("auto")
    assert exe.placement.startswith(("1 device(s)", "2 device(s)")), exe.placement
    assert "split over 2" in exe.placement and "on one" in exe.placement
    np.testing.assert_allclose(_per_iteration(exe)["loss"], _per_iteration(_a2c(1))["loss"],
                               rtol=1e-4)  # fmt: skip


def test_auto_placement_keeps_one_device_when_the_envs_are_not_independent() -> None:
    exe = _neighbour_program().compile(bounds={"I": 3, "B": 4}, devices="auto")
    assert exe.placement.startswith("one device:") and "not along b" in exe.placement


def test_auto_placement_keeps_a_small_segmented_program_on_one_device() -> None:
    exe = _a2c("auto", segmented="auto")  # small temporaries: the segments are kept
    assert exe.segmented and exe.devices == 1
    assert exe.placement.startswith("one device: it is segmented, and a call of ")
    assert "GFLOP is too little work" in exe.placement
    assert 0 < exe.call_flops() < compile_module.SPLIT_SEGMENTED_FLOPS
    assert exe.placement_seconds == {}  # the split was not compiled


def test_auto_placement_times_a_whole_split_of_a_long_segmented_program(monkeypatch) -> None:
    monkeypatch.setattr(compile_module, "SPLIT_SEGMENTED_FLOPS", 0.0)  # every call is large
    exe = _a2c("auto", segmented="auto")
    assert set(exe.placement_seconds) == {1, 2}
    assert "split over 2 (compiled whole)" in exe.placement, exe.placement
    # the segments on one device, or the split compiled whole
    assert exe.segmented == (exe.devices == 1), exe.placement
    np.testing.assert_allclose(
        _per_iteration(exe)["loss"], _per_iteration(_a2c(1, segmented=True))["loss"], rtol=1e-4
    )


def test_auto_placement_keeps_the_segments_asked_for(monkeypatch) -> None:
    monkeypatch.setattr(compile_module, "SPLIT_SEGMENTED_FLOPS", 0.0)  # every call is large
    exe = _a2c("auto", segmented=True)
    assert exe.segmented and set(exe.placement_seconds) == {1, 2}
    assert "compiled whole" not in exe.placement, exe.placement


def test_segmented_program_split_over_two_devices_learns_as_on_one() -> None:
    split = _a2c(2, segmented=True)  # asked for explicitly: each segment is split
    assert split.segmented and split.devices == 2
    one, two = _per_iteration(_a2c(1, segmented=True)), _per_iteration(split)
    assert two["episode_return_sum"][0] == one["episode_return_sum"][0]
    assert two["episodes"] == one["episodes"]
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4)
    np.testing.assert_allclose(two["episode_return_sum"], one["episode_return_sum"], rtol=1e-4)
    states: list[LoopState] = []
    split.run(on_iteration=lambda i, outputs: i == 1, on_call=states.append)
    rest = _per_iteration(split, resume=states[-1])
    assert rest["loss"] == two["loss"][2:]  # resumed from the saved carry, as uninterrupted


def test_auto_placement_may_split_what_auto_segmentation_compiled_whole(monkeypatch) -> None:
    monkeypatch.setattr(jax_program, "SEGMENTED_TEMPORARIES", 0)  # every segment counts as large
    exe = _a2c("auto", segmented="auto")
    assert not exe.segmented and exe.placement.startswith(("1 device(s)", "2 device(s)"))


def test_auto_placement_does_not_split_temporaries_larger_than_a_thread_heap(monkeypatch) -> None:
    monkeypatch.setattr(compile_module, "THREAD_HEAP_BYTES", 1024)
    exe = _a2c("auto")
    assert exe.devices == 1 and "more than a thread heap keeps" in exe.placement
    assert exe.placement_seconds == {}  # decided without timing


def test_run_trims_the_heap_once_after_its_first_call(monkeypatch) -> None:
    """Its heap settles, so later calls do not trim (`heap.GrowthTrim`)."""
    exe = _a2c(1)
    trims: list[int] = []
    seen: list[int] = []
    monkeypatch.setattr(heap, "release_freed_heap", lambda: trims.append(len(seen)))
    exe.run(on_iteration=lambda i, outputs: seen.append(i) and None)
    assert seen == list(range(ITERATIONS)) and trims == [1]  # after iteration 0 was reported
