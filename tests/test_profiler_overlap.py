"""The profiler's attribution engine: sweep-line overlap and the per-operation breakdown.

Every timeline here is hand-made from integer-ns `Event`s, so every expected time is exact.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsys.profiler import (
    CPU_PRECEDENCE,
    NO_OPERATION,
    Breakdown,
    ProcessBreakdown,
    ProfileError,
    breakdown,
    overlap,
    resolve,
    sweep,
    union_length,
)
from rlsys.profiler.overlap import totals
from rlsys.trace import Category, Event, ProcessInfo, Session

C = Category
PID = 100


def ev(name: str, category: Category, start: int, end: int, tid: int = PID, pid: int = PID,
       **kw: object) -> Event:  # fmt: skip
    return Event(name, category, start, end, pid, tid, **kw)


def op(name: str, start: int, end: int, **kw: object) -> Event:
    return ev(name, C.OPERATION, start, end, **kw)


def kernel(start: int, end: int, pid: int = PID, stream: int = 7) -> Event:
    return ev("k", C.GPU_KERNEL, start, end, tid=stream, pid=pid, device="cuda:0")


def process(pid: int, parent: int) -> ProcessInfo:
    return ProcessInfo(pid, parent, "python train.py", ("train.py",), "box", "3.11", None,
                       None, 1.7e9, 0)  # fmt: skip


def analyse(*events: Event, processes: tuple[ProcessInfo, ...] = ()) -> Breakdown:
    session = Session(processes or (process(PID, 1),), sorted(events, key=lambda e: e.start_ns))
    return breakdown(session)


def only(*events: Event) -> ProcessBreakdown:
    return analyse(*events).processes[PID]


# --- overlap -------------------------------------------------------------------------------


def test_rlscope_vector() -> None:
    intervals = {
        "A": [(3, 7), (8, 10)],
        "B": [(1, 4), (6, 9)],
        "C": [(2, 5), (7, 8), (11, 12)],
    }
    f = frozenset
    assert overlap(intervals) == {
        f("A"): 2, f("B"): 1, f("C"): 1, f("AB"): 2, f("AC"): 1, f("BC"): 2, f("ABC"): 1,
    }  # fmt: skip


def brute_force(intervals: dict[str, list[tuple[int, int]]]) -> dict[frozenset, int]:
    totals: Counter[frozenset] = Counter()
    for t in range(0, 40):
        active = frozenset(k for k, ivs in intervals.items() if any(s <= t < e for s, e in ivs))
        if active:
            totals[active] += 1
    return dict(totals)


span = st.tuples(st.integers(0, 30), st.integers(0, 8)).map(lambda p: (p[0], p[0] + p[1]))
labelled = st.dictionaries(st.sampled_from("ABCD"), st.lists(span, max_size=5), max_size=4)


@settings(max_examples=300, deadline=None)
@given(labelled)
def test_overlap_matches_unit_steps_and_sums_to_the_union(intervals) -> None:
    result = overlap(intervals)
    assert result == brute_force(intervals)
    union = {t for ivs in intervals.values() for s, e in ivs for t in range(s, e)}
    assert sum(result.values()) == len(union)
    assert union_length(iv for ivs in intervals.values() for iv in ivs) == len(union)


def unit_stretches(intervals: dict) -> list[tuple[int, int, frozenset]]:
    """Runs of one non-empty label set, stepping one time unit at a time."""
    runs: list[list] = []
    for t in range(0, 40):
        active = frozenset(k for k, ivs in intervals.items() if any(s <= t < e for s, e in ivs))
        if runs and runs[-1][1] == t and runs[-1][2] == active:
            runs[-1][1] = t + 1
        elif active:
            runs.append([t, t + 1, active])
    return [(start, end, active) for start, end, active in runs]


# More labels than one 63-bit word of the vectorized sweep holds.
many_labels = st.dictionaries(
    st.integers(0, 199), st.lists(span, max_size=2), min_size=64, max_size=140
)


@settings(max_examples=60, deadline=None)
@given(st.one_of(labelled, many_labels))
def test_sweep_stretches_and_adjacent_sets_match_unit_steps(intervals) -> None:
    expected = unit_stretches(intervals)
    assert list(sweep(intervals)) == expected
    adjacent = Counter(
        (before[2], after[2])
        for before, after in itertools.pairwise(expected)
        if before[1] == after[0]
    )
    assert totals(intervals).adjacent == dict(adjacent)
    assert totals(intervals).time == brute_force(intervals)


def test_overlap_merges_one_label_and_rejects_backward_intervals() -> None:
    assert overlap({"A": [(0, 5), (3, 8), (8, 9), (4, 4)]}) == {frozenset("A"): 9}
    with pytest.raises(ValueError, match="ends before it starts"):
        overlap({"A": [(5, 3)]})


# --- operations ----------------------------------------------------------------------------


def test_nested_operations_own_their_self_time_and_sum_to_the_traced_total() -> None:
    p = only(
        op("loop", 0, 100), op("inference", 10, 30), op("step", 40, 90),
        op("progress", 95, 95, attrs={"steps": 1, "total": 1}),
        ev("tail", C.PYTHON, 100, 110),
    )  # fmt: skip
    wall = {name: t.wall_ns for name, t in p.operations.items()}
    assert wall == {"loop": 30, "inference": 20, "step": 50, NO_OPERATION: 10}
    assert p.total_ns == 110 == sum(wall.values()) == p.total.wall_ns
    assert {n: t.calls for n, t in p.operations.items()} == {
        "loop": 1, "inference": 1, "step": 1, NO_OPERATION: 0,
    }  # fmt: skip
    assert p.operations["loop"].events["operation"] == 2  # itself and the progress instant


def test_recursive_operation_and_phases_own_no_extra_time() -> None:
    p = only(
        op("training", 0, 50, attrs={"kind": "phase"}),
        op("a", 0, 40), op("a", 10, 20), op("b", 20, 30),
        op("training", 60, 70, attrs={"kind": "phase"}),
    )  # fmt: skip
    assert {n: t.wall_ns for n, t in p.operations.items()} == {"a": 30, "b": 10, NO_OPERATION: 30}
    assert p.operations["a"].calls == 2
    assert p.phases == {"training": 60}


def test_operations_that_overlap_without_nesting_are_an_error() -> None:
    with pytest.raises(ProfileError, match=r"'inference' \[0, 10\).*'step' \[5, 15\)"):
        only(op("inference", 0, 10), op("step", 5, 15))
    # On different threads the same intervals are fine.
    only(op("inference", 0, 10), op("step", 5, 15, tid=101))


# --- CPU categories ------------------------------------------------------------------------

RLSCOPE_RULES = [
    (C.CUDA_API, C.BACKEND),
    (C.PYTHON, C.BACKEND),
    (C.PYTHON, C.CUDA_API),
    (C.SIMULATOR, C.CUDA_API),
]


@pytest.mark.parametrize(("strong", "weak"), RLSCOPE_RULES)
def test_precedence_rules_hold_whichever_event_encloses_the_other(strong, weak) -> None:
    inside = only(op("o", 0, 10), ev("w", weak, 0, 10), ev("s", strong, 2, 5))
    assert inside.total.cpu_ns[strong] == 3 and inside.total.cpu_ns[weak] == 7
    outside = only(op("o", 0, 10), ev("s", strong, 0, 10), ev("w", weak, 2, 5))
    assert outside.total.cpu_ns[strong] == 10 and outside.total.cpu_ns[weak] == 0


def test_precedence_is_one_total_order() -> None:
    assert CPU_PRECEDENCE[1:5] == (C.PYTHON, C.SIMULATOR, C.CUDA_API, C.BACKEND)
    assert set(CPU_PRECEDENCE) == set(C) - {C.OPERATION, C.GPU_KERNEL}
    for a in CPU_PRECEDENCE:
        for b in CPU_PRECEDENCE:
            assert resolve({a, b}) == resolve({b, a}) == min(a, b, key=CPU_PRECEDENCE.index)
    assert resolve(set()) == C.PYTHON


def test_uncovered_thread_time_is_python() -> None:
    p = only(op("step", 0, 10), ev("matmul", C.BACKEND, 2, 5))
    step = p.operations["step"]
    assert step.cpu_ns["python"] == 7 and step.cpu_ns["backend"] == 3
    assert sum(step.cpu_ns.values()) == step.wall_ns == 10


def test_fake_env_step_is_mostly_simulator() -> None:
    p = only(op("step", 0, 1_000_000), ev("env.step", C.SIMULATOR, 10_000, 990_000))
    step = p.operations["step"]
    assert step.cpu_ns["simulator"] / step.wall_ns >= 0.95


def test_transitions_are_counted_along_the_thread() -> None:
    p = only(
        op("loop", 0, 90),
        ev("fwd", C.BACKEND, 10, 30), ev("launch", C.CUDA_API, 15, 20),
        ev("env", C.SIMULATOR, 40, 60), ev("bwd", C.BACKEND, 70, 80),
    )  # fmt: skip
    assert p.operations["loop"].transitions == {
        ("python", "backend"): 2, ("backend", "cuda_api"): 1, ("cuda_api", "backend"): 1,
        ("backend", "python"): 2, ("python", "simulator"): 1, ("simulator", "python"): 1,
    }  # fmt: skip


# --- GPU and resources ---------------------------------------------------------------------


def test_gpu_only_versus_cpu_and_gpu() -> None:
    p = only(
        op("train", 0, 100), ev("fwd", C.BACKEND, 0, 40), ev("sync", C.WAIT, 40, 100),
        kernel(20, 60), kernel(50, 80, stream=8), kernel(90, 120),
    )  # fmt: skip
    train = p.operations["train"]
    assert train.resource_ns == {"cpu_only": 20, "cpu_gpu": 20, "gpu_only": 50, "idle": 10}
    assert train.gpu_ns == 70 and train.wall_ns == 100
    after = p.operations[NO_OPERATION]  # the last kernel outlives every CPU event
    assert after.resource_ns["gpu_only"] == after.wall_ns == 20
    assert sum(after.cpu_ns.values()) == 0  # no thread is inside its span then
    assert train.events["gpu_kernel"] == 3  # counted where they start


# --- threads and processes -----------------------------------------------------------------


def test_helper_threads_work_for_the_main_threads_operation_unless_annotated() -> None:
    p = only(
        op("backprop", 0, 100), ev("wait", C.WAIT, 0, 100),
        ev("autograd", C.BACKEND, 10, 90, tid=101),
        op("prefetch", 20, 40, tid=102), ev("read", C.COMM, 20, 40, tid=102),
    )  # fmt: skip
    assert p.main_tid == PID and p.threads == (PID, 101, 102)
    backprop, prefetch = p.operations["backprop"], p.operations["prefetch"]
    assert backprop.wall_ns == 100 and prefetch.wall_ns == 0
    assert backprop.cpu_ns["backend"] == 80 and backprop.cpu_ns["wait"] == 100
    assert prefetch.cpu_ns["comm"] == 20 and prefetch.events["comm"] == 1
    assert backprop.resource_ns == {"cpu_only": 80, "gpu_only": 0, "cpu_gpu": 0, "idle": 20}


def test_a_thread_with_only_cuda_calls_counts_only_during_them() -> None:
    # XLA's launch threads in a JAX GPU trace: their gaps are not Python (seen on an H200)
    p = only(
        op("train", 0, 100), ev("fwd", C.BACKEND, 0, 40),
        ev("cuLaunchKernel", C.CUDA_API, 10, 12, tid=201),
        ev("cuLaunchKernel", C.CUDA_API, 80, 83, tid=201),
    )  # fmt: skip
    train = p.operations["train"]
    assert train.cpu_ns["cuda_api"] == 5
    assert train.cpu_ns["python"] == 60  # the main thread's own, after fwd
    assert train.resource_ns["cpu_only"] == 100


def test_the_recorded_main_thread_owns_wall_time_even_without_events() -> None:
    # Unannotated main thread 7: the first worker to start (2) is not taken for it, so a
    # plain worker's (3) time is not put in worker 2's operation.
    main_known = dataclasses.replace(process(PID, 1), main_tid=7)
    events = (op("worker-op", 0, 50, tid=2), ev("read", C.COMM, 10, 100, tid=3))
    p = analyse(*events, processes=(main_known,)).processes[PID]
    assert p.main_tid == 7 and p.threads == (2, 3)
    worker, none = p.operations["worker-op"], p.operations[NO_OPERATION]
    assert worker.wall_ns == 0 and worker.cpu_ns["python"] == 50
    assert none.wall_ns == 100 and none.cpu_ns["comm"] == 90


def test_main_thread_is_the_earliest_when_none_has_the_pid() -> None:
    p = only(op("late", 5, 10, tid=2), op("early", 0, 8, tid=3))
    assert p.main_tid == 3
    wall = {n: t.wall_ns for n, t in p.operations.items()}
    assert wall == {"early": 8, "late": 0, NO_OPERATION: 2}
    assert p.operations["late"].cpu_ns["python"] == 5


def test_processes_are_attributed_separately_and_summed() -> None:
    result = analyse(
        op("inference", 0, 10), op("step", 10, 40),
        op("inference", 5, 25, pid=200, tid=200), ev("env", C.SIMULATOR, 5, 25, pid=200, tid=200),
        processes=(process(PID, 1), process(200, PID)),
    )  # fmt: skip
    assert result.processes[200].parent_pid == PID and result.processes[PID].parent_pid == 1
    assert result.operations["inference"].wall_ns == 30
    assert result.operations["inference"].cpu_ns["simulator"] == 20
    assert result.total_ns == 40 + 20 == result.total.wall_ns
    data = json.loads(json.dumps(result.to_dict()))
    assert data["processes"]["200"]["operations"]["inference"]["wall_ns"] == 20
    assert data["processes"]["100"]["operations"]["inference"]["transitions"] == {}


def test_pid_without_process_info_still_gets_a_breakdown() -> None:
    result = analyse(op("a", 0, 5), op("b", 0, 5, pid=300, tid=1))
    assert result.processes[300].parent_pid is None
    assert result.processes[300].operations["b"].wall_ns == 5
