"""Export a `Session` to the Chrome Trace Event format (JSON object form).

Perfetto UI (ui.perfetto.dev) and chrome://tracing load the result. Intervals become complete
events (`"ph": "X"`), instants become thread-scoped instant events (`"ph": "i"`), and every
process and thread gets a name through metadata events (`"ph": "M"`). Timestamps are
microseconds (floats, so nanoseconds survive) relative to the earliest event of the session.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

from rlsys.trace.events import Event, Session


def _event_json(event: Event, origin_ns: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "name": event.name,
        "cat": str(event.category),
        "ts": (event.start_ns - origin_ns) / 1000.0,
        "pid": event.pid,
        "tid": event.tid,
    }
    args: dict[str, Any] = {}
    if event.attrs:
        args.update(event.attrs)
    if event.region is not None:
        args["region"] = event.region
    if event.device != "cpu":
        args["device"] = event.device
    if args:
        record["args"] = args
    if event.end_ns == event.start_ns:
        record.update(ph="i", s="t")
    else:
        record.update(ph="X", dur=event.duration_ns / 1000.0)
    return record


def _metadata_events(session: Session) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for process in session.processes:
        label = f"{Path(process.argv[0]).name if process.argv else 'python'} (pid {process.pid})"
        records.append(
            {"name": "process_name", "ph": "M", "pid": process.pid, "tid": 0,
             "args": {"name": label}}
        )  # fmt: skip
    for (pid, tid), name in sorted(session.thread_names.items()):
        records.append(
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        )
    return records


def chrome_trace(session: Session) -> dict[str, Any]:
    """The session as a Chrome trace object: {"traceEvents": [...], ...}."""
    origin = _origin(session)
    events = _metadata_events(session) + [_event_json(e, origin) for e in session.events]
    return {"traceEvents": events, **_trailer(session, origin)}


def write_chrome_trace(session: Session, path: str | os.PathLike[str]) -> Path:
    """Write `chrome_trace(session)` as JSON to `path`; returns the path.

    Written a batch of events at a time, each encoded by one `json.dumps` call: `json.dump`
    of the whole object runs the pure-Python encoder (about 9 µs per event) and holds every
    event's dict at once.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    origin = _origin(session)
    events = session.events
    batches = itertools.chain(
        [_metadata_events(session)],
        ([_event_json(e, origin) for e in events[i : i + _BATCH]]
         for i in range(0, len(events), _BATCH)),
    )  # fmt: skip
    with path.open("w", encoding="utf-8") as f:
        f.write('{"traceEvents":[')
        separator = ""
        for batch in batches:
            if batch:
                f.write(separator + _dumps(batch)[1:-1])  # the records without the brackets
                separator = ","
        f.write("]," + _dumps(_trailer(session, origin))[1:])
    return path


_BATCH = 20_000


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _origin(session: Session) -> int:
    return min((e.start_ns for e in session.events), default=0)


def _trailer(session: Session, origin: int) -> dict[str, Any]:
    return {
        "displayTimeUnit": "ns",
        "otherData": {"producer": "rlsys", "complete": session.complete, "origin_ns": origin},
    }
