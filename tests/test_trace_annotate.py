"""Annotations: exact times with a fake clock, nesting errors, threads and child processes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlsys
from rlsys.trace import AnnotationNestingError, Category, Session, annotate


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[annotate.Recorder]:
    ticks = itertools.count(start=1000, step=10)
    recorder = rlsys.start_recording(tmp_path, clock=lambda: next(ticks))
    try:
        yield recorder
    finally:
        rlsys.stop_recording()


def test_disabled_annotations_record_nothing_and_are_shared() -> None:
    assert annotate.active_recorder() is None
    first, second = rlsys.operation("a"), rlsys.phase("b")
    assert first is second  # one shared do-nothing object: no allocation per call
    with first, rlsys.operation("c"):
        rlsys.progress(1, 10)


def test_nested_operations_have_exact_fake_clock_times(recording, tmp_path: Path) -> None:
    # Clock reads, in order: [recorder start], loop enter, inference enter, inference exit,
    # step enter, step exit, loop exit.
    with rlsys.operation("loop"):
        with rlsys.operation("inference"):
            pass
        with rlsys.operation("step"):
            pass
    rlsys.stop_recording()
    session = Session.load(tmp_path / f"{os.getpid()}.jsonl")
    spans = {e.name: (e.start_ns, e.end_ns) for e in session.events}
    assert spans == {"loop": (1010, 1060), "inference": (1020, 1030), "step": (1040, 1050)}
    assert session.complete
    assert all(e.category == Category.OPERATION for e in session.events)
    assert session.thread_names[(os.getpid(), threading.get_native_id())] == "MainThread"


def test_phase_becomes_the_region_of_operations_inside_it(recording, tmp_path: Path) -> None:
    with rlsys.phase("training"), rlsys.operation("learn"):
        pass
    with rlsys.operation("eval"):
        pass
    rlsys.progress(5, 10)
    rlsys.stop_recording()
    events = {e.name: e for e in Session.load_dir(tmp_path).events}
    assert events["training"].attrs == {"kind": "phase"}
    assert events["learn"].region == "training"
    assert events["eval"].region is None
    assert events["progress"].start_ns == events["progress"].end_ns
    assert events["progress"].attrs == {"steps": 5, "total": 10}


def test_closing_out_of_order_is_a_clear_error(recording) -> None:
    outer, inner = rlsys.operation("outer"), rlsys.operation("inner")
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(AnnotationNestingError, match="'outer' was closed while 'inner'"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)


def test_exception_inside_an_operation_still_records_it(recording, tmp_path: Path) -> None:
    with pytest.raises(KeyError), rlsys.operation("failing"):
        raise KeyError("boom")
    rlsys.stop_recording()
    assert [e.name for e in Session.load_dir(tmp_path).events] == ["failing"]


def test_interval_buffers_become_events_at_each_flush(recording, tmp_path: Path) -> None:
    tid = threading.get_native_id()
    names = ["mm", "add"]
    times = recording.interval_buffer("backend", tid, names)
    times.extend([0, 10, 25, 1, 30, 31])
    recording.flush()
    assert len(times) == 0  # drained into the file
    times.extend([0, 40])  # half an interval: its owner was between appends
    recording.flush()
    assert list(times) == [0, 40]  # left for the next flush
    times.append(60)
    rlsys.stop_recording()  # closing flushes the rest
    events = Session.load(tmp_path / f"{os.getpid()}.jsonl").events
    assert [(e.name, e.category, e.start_ns, e.end_ns, e.tid) for e in events] == [
        ("mm", Category.BACKEND, 10, 25, tid),
        ("add", Category.BACKEND, 30, 31, tid),
        ("mm", Category.BACKEND, 40, 60, tid),
    ]
    assert all(e.device == "cpu" and e.region is None and e.attrs is None for e in events)
    footer = (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines()[-1]
    assert json.loads(footer) == ["end", {"events": 3}]  # events, not packed lines


def test_events_are_written_once_flush_after_ns_has_passed(tmp_path: Path) -> None:
    # A process that dies without closing (os._exit, SIGHUP, SIGKILL) must lose at most about
    # `flush_after_ns` of events, not every event of a recording shorter than `flush_every`.
    recorder = rlsys.start_recording(tmp_path, clock=lambda: 0)
    second = 1_000_000_000

    def on_disk() -> list[str]:
        return [e.name for e in Session.load(recorder.path).events]

    try:
        annotate.record_operation("early", 0, 10)
        assert on_disk() == []  # buffered
        annotate.record_operation("late", 20, second)
        assert on_disk() == ["early", "late"]
        annotate.record_operation("next", second, second + 10)
        assert on_disk() == ["early", "late"]  # the next timed flush is due a while later
        times = recorder.thread_intervals("backend", ["mm"])
        times.extend([0, second, 2 * second])  # as a collector appends, then checks:
        assert 2 * second >= recorder.flush_at
        recorder.flush(2 * second)
        assert on_disk() == ["early", "late", "next", "mm"]
    finally:
        rlsys.stop_recording()


def test_threads_have_their_own_stacks(tmp_path: Path) -> None:
    rlsys.start_recording(tmp_path, flush_every=7)
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        barrier.wait()  # all threads hold open annotations at the same time
        for _ in range(100):
            with rlsys.operation(f"outer{k}"), rlsys.operation(f"inner{k}"):
                pass

    threads = [threading.Thread(target=work, args=(k,), name=f"w{k}") for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rlsys.stop_recording()
    session = Session.load_dir(tmp_path)
    assert len(session.events) == 4 * 100 * 2
    assert sorted(session.thread_names.values()) == ["w0", "w1", "w2", "w3"]
    by_thread = {}
    for event in session.events:
        by_thread.setdefault(event.tid, set()).add(event.name[-1])
    assert sorted(len(names) for names in by_thread.values()) == [1, 1, 1, 1]


CHILD_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys
    import rlsys

    def work():
        with rlsys.operation("child-op"):
            pass

    if __name__ == "__main__":
        rlsys.start_recording(sys.argv[1])
        with rlsys.operation("parent-op"):
            child = multiprocessing.get_context(sys.argv[2]).Process(target=work)
            child.start()
            child.join(60)
        rlsys.stop_recording()
        print(child.pid, child.exitcode)
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_processes_record_their_own_session(tmp_path: Path, method: str) -> None:
    # A fresh interpreter: forking this test process, which has JAX's threads, could hang.
    script = tmp_path / "parent.py"
    script.write_text(CHILD_SCRIPT)
    traces = tmp_path / "traces"
    result = subprocess.run([sys.executable, str(script), str(traces), method],
                            capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    child_pid, exitcode = map(int, result.stdout.split())
    assert exitcode == 0
    session = Session.load_dir(traces)
    pids = {p.pid: p for p in session.processes}
    parent_pid = next(pid for pid in pids if pid != child_pid)
    assert set(pids) == {parent_pid, child_pid}
    assert pids[child_pid].parent_pid == parent_pid
    names = {(e.pid, e.name) for e in session.events}
    assert (parent_pid, "parent-op") in names
    assert (child_pid, "child-op") in names
    assert session.complete


FORK_INSIDE_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import rlsys

    rlsys.start_recording(sys.argv[1])
    with rlsys.phase("training"), rlsys.operation("parent-op"):
        pid = os.fork()
        with rlsys.operation("child-op" if pid == 0 else "parent-inner"):
            pass
    if pid == 0:  # it left the parent's blocks too
        rlsys.stop_recording()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    rlsys.stop_recording()
    print(pid, os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_does_not_inherit_the_open_annotations(tmp_path: Path) -> None:
    # They are the parent's calls: the child recording them too counted them twice.
    script = tmp_path / "fork.py"
    script.write_text(FORK_INSIDE_SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    child_pid, exitcode = map(int, result.stdout.split())
    assert exitcode == 0
    session = Session.load_dir(tmp_path / "t")
    assert session.complete
    by_pid: dict[int, list[str]] = {}
    for event in session.events:
        by_pid.setdefault(event.pid, []).append(event.name)
    assert by_pid.pop(child_pid) == ["child-op"]
    assert list(by_pid.values()) == [["training", "parent-op", "parent-inner"]]
    # Its main thread is the forking one (tid == pid on Linux), not the parent's.
    assert {p.pid: p.main_tid for p in session.processes}[child_pid] == child_pid


def test_the_main_thread_is_recorded_when_another_starts_the_recording(tmp_path) -> None:
    # It may have no events at all; the breakdown needs it to attribute wall time.
    def record() -> None:
        rlsys.start_recording(tmp_path)
        with rlsys.operation("worker-op"):
            pass
        rlsys.stop_recording()

    worker = threading.Thread(target=record)
    worker.start()
    worker.join()
    session = Session.load_dir(tmp_path)
    assert [p.main_tid for p in session.processes] == [threading.get_native_id()]
    assert [e.tid for e in session.events] == [worker.native_id]


def test_start_twice_is_an_error(recording, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="already recording"):
        rlsys.start_recording(tmp_path / "other")


OWN_RECORDING_SCRIPT = textwrap.dedent(
    """
    import sys
    import rlsys

    rlsys.start_recording(sys.argv[1])
    with rlsys.operation("before-stop"):
        pass
    print(rlsys.stop_recording())
    with rlsys.operation("after-stop"):
        pass
    """
)


def test_a_script_recording_itself_runs_unchanged_under_the_profiler(tmp_path: Path) -> None:
    # `rlsys profile` starts the recording from RLSYS_TRACE_DIR; the script's own
    # start_recording/stop_recording must neither fail nor end the profile's recording.
    script = tmp_path / "own.py"
    script.write_text(OWN_RECORDING_SCRIPT)
    profile_dir, own_dir = tmp_path / "profile", tmp_path / "own"
    env = {**os.environ, annotate.TRACE_DIR_ENV: str(profile_dir)}
    result = subprocess.run([sys.executable, str(script), str(own_dir)], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"already recorded into {profile_dir}" in result.stderr
    assert result.stdout.strip().startswith(str(profile_dir))
    assert not own_dir.exists()
    session = Session.load_dir(profile_dir)
    assert {e.name for e in session.events} >= {"before-stop", "after-stop"}
    assert session.complete


def test_annotations_open_at_close_are_recorded_as_unfinished(tmp_path: Path) -> None:
    ticks = itertools.count(start=1000, step=10)
    rlsys.start_recording(tmp_path, clock=lambda: next(ticks))
    outer = rlsys.phase("training")
    outer.__enter__()  # 1010
    with rlsys.operation("done"):  # 1020 .. 1030
        pass
    inner = rlsys.operation("open")
    inner.__enter__()  # 1040
    rlsys.stop_recording()  # both end at 1050
    inner.__exit__(None, None, None)  # after the close: nothing more is written
    outer.__exit__(None, None, None)
    events = {e.name: e for e in Session.load_dir(tmp_path).events}
    done = events["done"]
    assert (done.start_ns, done.end_ns, done.attrs) == (1020, 1030, None)
    assert (events["open"].start_ns, events["open"].end_ns) == (1040, 1050)
    assert events["open"].attrs == {"unfinished": True}
    assert events["open"].region == "training"
    assert events["training"].attrs == {"kind": "phase", "unfinished": True}
