"""Chrome Trace Event export, checked against the format's required fields.

The rules below are written from the Trace Event Format document (JSON object form): every
event has `ph`, `pid`, `tid`, and apart from metadata a `ts` in microseconds; complete events
(`X`) have a non-negative `dur`; instant events (`i`) have scope `s` in {g, p, t}; metadata
events (`M`) named process_name / thread_name carry `args.name`.
"""

from __future__ import annotations

import json
from numbers import Real
from pathlib import Path

from rlsys.trace import Category, Event, ProcessInfo, Session, write_chrome_trace


def check_chrome_trace(trace: dict) -> None:
    assert isinstance(trace["traceEvents"], list)
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str), event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        ph = event["ph"]
        if ph == "M":
            assert event["name"] in {"process_name", "thread_name"}, event
            assert isinstance(event["args"]["name"], str), event
            continue
        assert isinstance(event["ts"], Real) and event["ts"] >= 0, event
        assert isinstance(event.get("cat", ""), str)
        if ph == "X":
            assert isinstance(event["dur"], Real) and event["dur"] >= 0, event
        elif ph == "i":
            assert event["s"] in {"g", "p", "t"}, event
        else:
            raise AssertionError(f"unexpected phase {ph!r} in {event}")
        if "args" in event:
            assert isinstance(event["args"], dict)


def two_process_session() -> Session:
    def process(pid: int) -> ProcessInfo:
        return ProcessInfo(pid, 1, "python x.py", ("/usr/bin/x.py",), "h", "3.11", None, None,
                           0.0, 0)  # fmt: skip

    events = [
        Event("loop", Category.OPERATION, 5_000, 9_500, 10, 1, region="training"),
        Event("progress", Category.OPERATION, 6_000, 6_000, 10, 1, attrs={"steps": 3}),
        Event("gemm", Category.GPU_KERNEL, 7_000, 7_250, 10, 2, device="cuda:0"),
        Event("step", Category.SIMULATOR, 5_500, 8_000, 20, 3),
    ]
    return Session((process(10), process(20)), events, {(10, 1): "MainThread", (20, 3): "env"})


def test_export_satisfies_the_required_fields(tmp_path: Path) -> None:
    path = write_chrome_trace(two_process_session(), tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    check_chrome_trace(trace)
    assert trace["displayTimeUnit"] == "ns"


def test_times_are_microseconds_from_the_first_event() -> None:
    from rlsys.trace import chrome_trace

    events = {e["name"]: e for e in chrome_trace(two_process_session())["traceEvents"]}
    assert events["loop"]["ph"] == "X"
    assert events["loop"]["ts"] == 0.0
    assert events["loop"]["dur"] == 4.5
    assert events["gemm"]["ts"] == 2.0 and events["gemm"]["dur"] == 0.25
    assert events["gemm"]["args"]["device"] == "cuda:0"
    assert events["progress"]["ph"] == "i"
    assert events["loop"]["args"]["region"] == "training"


def test_every_process_and_thread_is_named() -> None:
    from rlsys.trace import chrome_trace

    meta = [e for e in chrome_trace(two_process_session())["traceEvents"] if e["ph"] == "M"]
    process_names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
                    if e["name"] == "thread_name"}  # fmt: skip
    assert process_names == {10: "x.py (pid 10)", 20: "x.py (pid 20)"}
    assert thread_names == {(10, 1): "MainThread", (20, 3): "env"}
