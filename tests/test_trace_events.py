"""Session save/load/combine round-trips and crash tolerance of the streaming format."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsys.trace import Category, Event, ProcessInfo, Session, SessionWriter, TraceFormatError


def make_process(pid: int = 100, parent: int = 1) -> ProcessInfo:
    return ProcessInfo(
        pid=pid, parent_pid=parent, command="python train.py", argv=("train.py", "--x"),
        host="box", python="3.11.7", jax="0.10.2", torch=None,
        start_wall_time=1.7e9, start_ns=5,
    )  # fmt: skip


def make_session(pid: int = 100, n: int = 5) -> Session:
    events = [
        Event(f"op{k}", Category.OPERATION, 10 * k, 10 * k + 7, pid, 7, region="training",
              attrs={"k": k})
        for k in range(n)
    ]  # fmt: skip
    events.append(Event("kernel", Category.GPU_KERNEL, 3, 4, pid, 99, device="cuda:0"))
    return Session((make_process(pid),), events, {(pid, 7): "MainThread"})


def test_save_load_round_trip(tmp_path: Path) -> None:
    session = make_session()
    loaded = Session.load(session.save(tmp_path / "s.jsonl"))
    assert loaded == session
    assert loaded.complete


def test_event_rejects_negative_duration() -> None:
    with pytest.raises(ValueError, match="ends before it starts"):
        Event("x", Category.PYTHON, 10, 9, 1, 1)


def test_combine_merges_processes_sorted_and_round_trips(tmp_path: Path) -> None:
    parent, child = make_session(100, 3), make_session(200, 2)
    combined = Session.combine([parent, child])
    assert [p.pid for p in combined.processes] == [100, 200]
    assert len(combined.events) == len(parent.events) + len(child.events)
    starts = [e.start_ns for e in combined.events]
    assert starts == sorted(starts)
    assert combined.thread_names == {(100, 7): "MainThread", (200, 7): "MainThread"}
    assert Session.load(combined.save(tmp_path / "c.jsonl")) == combined


def test_combine_puts_enclosing_interval_first_at_equal_start() -> None:
    outer = Event("outer", Category.OPERATION, 0, 10, 1, 1)
    inner = Event("inner", Category.OPERATION, 0, 5, 1, 1)
    session = Session((make_process(1),), [inner, outer])
    assert [e.name for e in Session.combine([session]).events] == ["outer", "inner"]


def test_combine_refuses_conflicting_pids() -> None:
    a = make_session(100)
    b = Session((make_process(100, parent=55),), [])
    with pytest.raises(ValueError, match="pid 100"):
        Session.combine([a, b])


def test_missing_footer_loads_as_partial(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    writer = SessionWriter(path, make_process())
    writer.write_events(make_session().events[:2])
    writer.abandon()
    loaded = Session.load(path)
    assert not loaded.complete
    assert [e.name for e in loaded.events] == ["op0", "op1"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_stops_the_recording_with_a_warning_not_the_program(capsys) -> None:
    writer = SessionWriter("/dev/full", make_process())  # every write: no space left
    writer.write_events(make_session().events)
    writer.write_event_lines(['["op"]\n'])
    writer.close()
    assert writer.failed and writer.closed
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings == ["rlsys: recording stopped: cannot write /dev/full: No space left on device"]


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_any_cut_after_the_header_loads_a_prefix(tmp_path_factory, cut: int) -> None:
    """A file cut at any byte (a crash mid-write) loads the events written before the cut."""
    path = tmp_path_factory.mktemp("cut") / "s.jsonl"
    session = make_session(n=40)
    data = session.save(path).read_bytes()
    header_end = data.index(b"\n", data.index(b'["process"')) + 1
    cut = header_end + cut % (len(data) - header_end + 1)
    path.write_bytes(data[:cut])
    loaded = Session.load(path)
    assert loaded.events == session.events[: len(loaded.events)]
    # Only the newline of the footer may be missing for the session to count as complete.
    assert loaded.complete == (cut >= len(data) - 1)


def test_corrupt_middle_line_is_a_clear_error(tmp_path: Path) -> None:
    path = make_session().save(tmp_path / "s.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = "garbage\n"
    path.write_text("".join(lines))
    with pytest.raises(TraceFormatError, match=r"s\.jsonl:4: not a JSON line"):
        Session.load(path)


def test_load_dir_with_on_skip_skips_stray_files_and_bad_lines(tmp_path: Path) -> None:
    session = make_session(n=10)
    damaged = session.save(tmp_path / "1.jsonl")
    lines = damaged.read_text().splitlines(keepends=True)
    lines[5], lines[7] = "garbage\n", '["event", "too short"]\n'
    damaged.write_text("".join(lines) + '["event", "torn')
    (tmp_path / "notes.jsonl").write_text("not a trace\n")
    (tmp_path / "newer.jsonl").write_text('["rlsys-trace", 99]\n')
    told: list[str] = []
    loaded = Session.load_dir(tmp_path, on_skip=told.append)
    kept = [e for i, e in enumerate(session.events) if i not in (2, 4)]  # lines 5 and 7
    assert sorted(loaded.events, key=str) == sorted(kept, key=str)
    assert told == [
        f"{damaged}: skipped 2 unreadable line(s), the first at line 6 (not JSON)",
        f"{tmp_path / 'newer.jsonl'}: format version 99, this rlsys reads versions (1, 2); "
        "upgrade rlsys to read it; file skipped",
        f"{tmp_path / 'notes.jsonl'}: not an rlsys-trace file (first line is not the magic); "
        "file skipped",
    ]
    damaged.unlink()
    with pytest.raises(TraceFormatError, match=r"none of its 2 \*\.jsonl files is a readable"):
        Session.load_dir(tmp_path, on_skip=told.append)


def test_a_file_with_skipped_lines_is_partial_even_with_its_footer(tmp_path: Path) -> None:
    # Its skipped lines' events are missing, as a dead writer's are.
    path = make_session(n=4).save(tmp_path / "1.jsonl")
    assert Session.load(path, on_skip=print).complete
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = "garbage\n"
    path.write_text("".join(lines))
    assert not Session.load(path, on_skip=lambda message: None).complete


def test_wrong_magic_and_newer_version_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(TraceFormatError, match="not an rlsys-trace file"):
        Session.load(path)
    path.write_text('["rlsys-trace", 99]\n')
    with pytest.raises(TraceFormatError, match="version 99"):
        Session.load(path)


def test_load_dir_without_sessions_says_how_to_record(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="start_recording"):
        Session.load_dir(tmp_path)


def test_unserializable_attribute_does_not_crash_the_writer(tmp_path: Path) -> None:
    event = Event("x", Category.OPERATION, 1, 2, 1, 1, attrs={"obj": object()})
    session = Session((make_process(1),), [event])
    loaded = Session.load(session.save(tmp_path / "s.jsonl"))
    assert loaded.events[0].attrs["obj"].startswith("<object object")


CHILD = textwrap.dedent(
    """
    import sys
    import rlsys
    rlsys.start_recording(sys.argv[1], flush_every=50)
    print("started", flush=True)
    i = 0
    while True:
        with rlsys.operation("step"):
            i += 1
    """
)


def test_killed_child_leaves_a_loadable_partial_session(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "started"
        path = tmp_path / f"{child.pid}.jsonl"
        deadline = time.monotonic() + 30
        while path.stat().st_size < 20_000 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    session = Session.load_dir(tmp_path)
    assert not session.complete
    assert len(session.events) >= 50
    assert {e.name for e in session.events} == {"step"}
    assert session.processes[0].pid == child.pid
    # Each event that made it to disk is whole.
    assert all(e.end_ns >= e.start_ns > 0 for e in session.events)
    json.dumps([e.to_record() for e in session.events])


def test_packed_intervals_load_as_events_and_a_wrong_count_is_an_error(tmp_path: Path) -> None:
    import array

    from rlsys.trace.events import pack_intervals

    names = {"0": "mm", "5": "add"}
    packed = pack_intervals(array.array("q", [5, 10, 25, 0, 30, 2**40]))
    path = make_session().save(tmp_path / "s.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    record = ["intervals", "backend", 100, 8, 2, names, packed]
    lines.insert(2, json.dumps(record) + "\n")
    path.write_text("".join(lines))
    loaded = Session.load(path)
    backend = [e for e in loaded.events if e.category == Category.BACKEND]
    assert backend == [
        Event("add", Category.BACKEND, 10, 25, 100, 8),
        Event("mm", Category.BACKEND, 30, 2**40, 100, 8),
    ]
    lines[2] = json.dumps(["intervals", "backend", 100, 8, 3, names, packed]) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(TraceFormatError, match=r"s\.jsonl:3: bad record: 3 intervals announced"):
        Session.load(path)


def test_version_1_files_still_load(tmp_path: Path) -> None:
    path = make_session().save(tmp_path / "s.jsonl")
    text = path.read_text()
    path.write_text(text.replace('["rlsys-trace",2]', '["rlsys-trace",1]', 1))
    assert path.read_text() != text  # the header was rewritten
    assert Session.load(path) == make_session()


def test_files_read_in_chunks_keep_line_numbers_and_torn_tails(tmp_path, monkeypatch) -> None:
    """The reader parses a chunk of lines per call (long profiles): errors still name the
    file's line, and a cut anywhere still loads the prefix, whichever chunk it falls in."""
    from rlsys.trace import events as events_module

    monkeypatch.setattr(events_module, "_PARSE_CHUNK_LINES", 7)
    session = make_session(n=40)
    path = session.save(tmp_path / "s.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    assert Session.load(path) == session
    for cut_line in (9, 13, 14, 15, 30):  # in the middle, last and first lines of a chunk
        # Cut after the line's first character, or only its newline missing (a whole record).
        for keep, whole in ((1, 0), (len(lines[cut_line]) - 1, 1)):
            path.write_text("".join(lines[:cut_line]) + lines[cut_line][:keep])
            loaded = Session.load(path)
            assert not loaded.complete
            assert loaded.events == session.events[: len(loaded.events)]
            assert len(loaded.events) == cut_line - 3 + whole  # after magic, process, thread
    broken = list(lines)
    broken[11] = "garbage\n"
    path.write_text("".join(broken))
    with pytest.raises(TraceFormatError, match=r"s\.jsonl:12: not a JSON line"):
        Session.load(path)
