"""The event model every part of rlsys shares: `Event`, `ProcessInfo`, `Session`.

An `Event` is one interval of time on one thread (or device queue) of one process. Times are
integer nanoseconds of one monotonic clock (`time.monotonic_ns`, CLOCK_MONOTONIC on Linux),
which all processes of a machine share, so sessions recorded in several processes combine
without clock alignment. An event whose start equals its end is an *instant* (a mark such as
a progress report).

A `Session` is plain data: the processes it covers, their events and thread names. It saves
to and loads from the JSON-lines format below, combines with the sessions of other processes,
and exports to the Chrome trace format (`rlsys.trace.chrome`).

File format `rlsys-trace`, version 2 (UTF-8, one JSON array per line, first element a tag):

    ["rlsys-trace", 2]                                   first line: magic and version
    ["process", {ProcessInfo fields}]                    one per process in the session
    ["thread", pid, tid, "name"]                         thread name, before or after its events
    ["event", name, category, start_ns, end_ns, pid, tid, device, region, attrs]
    ["intervals", category, pid, tid, n, {"code": name, ...}, "base64"]
    ["end", {"events": n}]                               footer, written on a clean close

An `intervals` record packs n events of one category and thread (device "cpu", no region,
no attrs), as collectors of very many short intervals record them (one per torch call): the
base64 text holds 3n little-endian int64, `code, start_ns, end_ns` per event, and the
object maps each code (as text) to the event's name. Version 1 files (no `intervals`
records) load too.

Writers append lines in batches and flush each batch, so a process that dies loses at most the
batch it had not yet written; a file without the footer loads with `complete=False`, and a
torn last line (the process died mid-write) is dropped. Readers given `on_skip` also skip
unreadable lines, and `load_dir` unreadable files, saying so in one line per file.
"""

from __future__ import annotations

import array
import base64
import contextlib
import enum
import importlib.metadata
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

FORMAT_NAME = "rlsys-trace"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

clock_ns = time.monotonic_ns
"""The one clock of rlsys events. Tests pass a fake clock to recorders instead."""


class Category(enum.StrEnum):
    """What an interval of time was spent on."""

    PYTHON = "python"  # interpreter time not inside any of the others
    SIMULATOR = "simulator"  # inside an environment's native code
    BACKEND = "backend"  # inside the ML framework (PyTorch ops, JAX dispatch/execution)
    CUDA_API = "cuda_api"  # CPU time in CUDA runtime / driver calls
    GPU_KERNEL = "gpu_kernel"  # kernels, memcpy, memset on a GPU
    OPERATION = "operation"  # a user or automatic annotation: inference, simulation, ...
    COMPILE = "compile"  # tracing / compiling a program
    COMM = "comm"  # moving data between processes or machines
    WAIT = "wait"  # blocked on a queue, lock or another process
    OVERHEAD = "overhead"  # the profiler's own bookkeeping


class TraceFormatError(ValueError):
    """A file is not a readable rlsys trace; the message says which file, line and why."""


@dataclass(frozen=True, slots=True)
class Event:
    """One interval [start_ns, end_ns] on thread `tid` of process `pid`.

    `device` is "cpu" for host threads and e.g. "cuda:0" for GPU activity; `region` names the
    enclosing phase or compiled region when one is known; `attrs` holds small JSON values.
    """

    name: str
    category: Category
    start_ns: int
    end_ns: int
    pid: int
    tid: int
    device: str = "cpu"
    region: str | None = None
    attrs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            raise ValueError(
                f"event {self.name!r} ends before it starts "
                f"(start_ns={self.start_ns}, end_ns={self.end_ns})"
            )

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_record(self) -> list[Any]:
        return [
            "event", self.name, str(self.category), self.start_ns, self.end_ns,
            self.pid, self.tid, self.device, self.region,
            dict(self.attrs) if self.attrs else None,
        ]  # fmt: skip

    @classmethod
    def from_record(cls, record: list[Any], strings: dict[str, str] | None = None) -> Event:
        """The event of a `to_record` list; names and devices taken from `strings` where
        equal ones are there (and added), so that a long trace's events share them."""
        _, name, category, start, end, pid, tid, device, region, attrs = record
        if strings is not None:
            name, device = strings.setdefault(name, name), strings.setdefault(device, device)
        return cls(name, _category(category), start, end, pid, tid, device, region, attrs)


def _installed_version(distribution: str) -> str | None:
    # Read package metadata instead of importing: importing torch costs seconds.
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class ProcessInfo:
    """Who recorded a session: one process, its command and the versions that matter."""

    pid: int
    parent_pid: int
    command: str
    argv: tuple[str, ...]
    host: str
    python: str
    jax: str | None
    torch: str | None
    start_wall_time: float  # seconds since the epoch, for humans
    start_ns: int  # the event clock at the same moment, to relate the two
    # The main thread's tid (native id), whose operations own wall time; recorded because
    # it may have no events (unannotated), when no thread's events tell which it is. None:
    # unknown (files of older rlsys).
    main_tid: int | None = None

    @classmethod
    def current(cls, command: str | None = None, start_ns: int | None = None) -> ProcessInfo:
        argv = tuple(sys.argv)
        return cls(
            pid=os.getpid(),
            parent_pid=os.getppid(),
            command=command if command is not None else " ".join(argv),
            argv=argv,
            host=socket.gethostname(),
            python=platform.python_version(),
            jax=_installed_version("jax"),
            torch=_installed_version("torch"),
            start_wall_time=time.time(),
            start_ns=clock_ns() if start_ns is None else start_ns,
            main_tid=main_thread_native_id(),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessInfo:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["argv"] = tuple(values.get("argv", ()))
        return cls(**values)


def main_thread_native_id() -> int | None:
    """The main thread's native id, in a forked child too."""
    if threading.current_thread() is threading.main_thread():
        # Right after a fork (from any thread), Python 3.11's main_thread().native_id is
        # still the parent's forking thread's.
        return threading.get_native_id()
    return threading.main_thread().native_id


def _dump_line(record: list[Any]) -> str:
    # default=str: an attribute that JSON cannot hold must never crash the traced program.
    return json.dumps(record, separators=(",", ":"), default=str) + "\n"


class SessionWriter:
    """Streams a session to disk: header at open, batches of records, footer at close.

    A write that fails (a full disk) stops the recording with one warning on stderr and
    leaves the file without its footer (a partial profile): it runs inside the traced
    program, which must not die of its profiler's disk."""

    def __init__(self, path: str | os.PathLike[str], process: ProcessInfo) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = self.path.open("w", encoding="utf-8")
        self._events_written = 0
        self.failed = False
        self._write([[FORMAT_NAME, FORMAT_VERSION], ["process", asdict(process)]])

    def _write(self, records: Iterable[list[Any]]) -> None:
        self._append("".join(_dump_line(r) for r in records))

    def _append(self, text: str) -> None:
        if self.failed:
            return
        if self._file is None:
            raise ValueError(f"session writer for {self.path} is already closed")
        try:
            self._file.write(text)
            self._file.flush()
        except OSError as err:
            self.failed = True
            self.abandon()
            sys.stderr.write(f"rlsys: recording stopped: cannot write {self.path}: "
                             f"{err.strerror or err}\n")  # fmt: skip

    def write_events(self, events: Iterable[Event]) -> None:
        records = [e.to_record() for e in events]
        self._events_written += len(records)
        self._write(records)

    def write_event_lines(self, lines: list[str], events: int | None = None) -> None:
        """Append event records already formatted as JSON lines (the recorder's fast path);
        `events`: how many events they hold (default: one per line)."""
        self._events_written += len(lines) if events is None else events
        self._append("".join(lines))

    def write_thread(self, pid: int, tid: int, name: str) -> None:
        self._write([["thread", pid, tid, name]])

    @property
    def closed(self) -> bool:
        return self._file is None

    def close(self) -> None:
        if self._file is not None:
            self._write([["end", {"events": self._events_written}]])
        if self._file is not None:  # (a failed write closed it)
            self._file.close()
            self._file = None

    def abandon(self) -> None:
        """Close without the footer (the file stays loadable, marked incomplete)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


@dataclass
class Session:
    """Events plus the processes and thread names they came from."""

    processes: tuple[ProcessInfo, ...]
    events: list[Event] = field(default_factory=list)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    complete: bool = True  # False when a writer died before its footer (partial profile)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole session in the streaming format; returns the path."""
        path = Path(path)
        first, *others = self.processes
        writer = SessionWriter(path, first)
        for process in others:
            writer._write([["process", asdict(process)]])
        for (pid, tid), name in sorted(self.thread_names.items()):
            writer.write_thread(pid, tid, name)
        writer.write_events(self.events)
        if self.complete:
            writer.close()
        else:
            writer.abandon()
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], on_skip: OnSkip | None = None) -> Session:
        """Read a session file; a missing footer or a torn last line means `complete=False`.

        A line that is not a record raises TraceFormatError; with `on_skip`, such lines are
        skipped and `on_skip` gets one line that names the file and says how many.
        """
        return _read_session(Path(path), on_skip)

    @classmethod
    def load_dir(cls, directory: str | os.PathLike[str], on_skip: OnSkip | None = None) -> Session:
        """Load and combine every `*.jsonl` session of a recording directory.

        With `on_skip`, a file that is not a readable session (a stray file in the folder)
        is skipped rather than failing the whole directory, as are unreadable lines (see
        `load`); `on_skip` gets one line per such file. TraceFormatError if none is left.
        """
        paths = sorted(Path(directory).glob("*.jsonl"))
        if not paths:
            raise TraceFormatError(
                f"{directory}: no *.jsonl session files; record into it with "
                "rlsys.trace.start_recording(directory) or `rlsys profile --out`"
            )
        if on_skip is None:
            return cls.combine(cls.load(p) for p in paths)
        sessions = []
        for path in paths:
            try:
                sessions.append(cls.load(path, on_skip))
            except TraceFormatError as err:
                on_skip(f"{err}; file skipped")
        if not sessions:
            raise TraceFormatError(f"{directory}: none of its {len(paths)} *.jsonl files is "
                                   "a readable session")  # fmt: skip
        return cls.combine(sessions)

    @classmethod
    def combine(cls, sessions: Iterable[Session]) -> Session:
        """Merge sessions of several processes into one, events ordered by start time."""
        sessions = list(sessions)
        if not sessions:
            raise ValueError("Session.combine needs at least one session")
        processes: dict[int, ProcessInfo] = {}
        for session in sessions:
            for process in session.processes:
                if processes.setdefault(process.pid, process) != process:
                    raise ValueError(
                        f"two different sessions both claim pid {process.pid}; combine "
                        "recordings of one run only (pids are reused across runs)"
                    )
        events = [e for s in sessions for e in s.events]
        # Longer first at equal starts, so an enclosing interval precedes what it contains.
        events.sort(key=lambda e: (e.start_ns, -e.end_ns))
        threads = {k: v for s in sessions for k, v in s.thread_names.items()}
        return cls(
            processes=tuple(processes.values()),
            events=events,
            thread_names=threads,
            complete=all(s.complete for s in sessions),
        )


OnSkip = Callable[[str], None]
"""Told, in one line naming the file, what a reader skipped (see `Session.load_dir`)."""

_PARSE_CHUNK_LINES = 10_000


def _read_session(path: Path, on_skip: OnSkip | None = None) -> Session:
    """Read a session file a chunk of lines at a time (a long profile's file holds millions
    of lines: holding its text, its lines and all their parsed records at once took about
    1 KB per event), each chunk parsed by one `json.loads` call."""
    reader = _SessionReader(path, skip=on_skip is not None)
    try:
        with path.open(encoding="utf-8", errors="replace", newline="\n") as file:
            chunk: list[str] = []
            for line in file:
                # A full chunk is parsed only once another line follows: the last chunk then
                # holds the last line, the one that may be torn.
                if len(chunk) == _PARSE_CHUNK_LINES:
                    reader.add_lines(chunk)
                    chunk = []
                chunk.append(line)
            reader.add_lines(chunk, last=True)
    except OSError as err:
        raise TraceFormatError(f"{path}: cannot read session file: {err.strerror}") from None
    session = reader.session()
    if reader.skipped and on_skip is not None:
        number, why = reader.first_skipped
        on_skip(f"{path}: skipped {reader.skipped} unreadable line(s), the first at line "
                f"{number} ({why})")  # fmt: skip
    return session


class _SessionReader:
    """Builds a Session from a file's lines, in order; names and devices are shared strings."""

    def __init__(self, path: Path, skip: bool = False) -> None:
        self.path = path
        self.skip = skip  # unreadable lines after the header: skipped (counted), not raised
        self.skipped = 0
        self.first_skipped: tuple[int, str] = (0, "")
        self.number = 0  # lines read so far
        self.processes: list[ProcessInfo] = []
        self.events: list[Event] = []
        self.threads: dict[tuple[int, int], str] = {}
        self.complete = False
        self._header_seen = False
        self._strings: dict[str, str] = {}

    def add_lines(self, lines: list[str], last: bool = False) -> None:
        torn_tail = last and bool(lines) and not lines[-1].endswith("\n")
        kept = [line for line in lines if line.strip()]
        try:
            records = json.loads("[" + ",".join(kept) + "]")
        except json.JSONDecodeError:
            records = None  # find the bad line, one at a time
        start = self.number
        self.number += len(lines)
        if records is not None and len(records) == len(kept):
            numbered = zip(_numbers(lines, start), records, strict=True)
        else:
            numbered = self._parse_one_by_one(lines, start, torn_tail)
        for number, record in numbered:
            self._add(number, record)

    def _parse_one_by_one(self, lines: list[str], start: int, torn_tail: bool):
        for offset, line in enumerate(lines):
            if not line.strip():
                continue
            number = start + offset + 1
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError:
                if torn_tail and offset == len(lines) - 1:
                    return  # the writer died mid-line: drop that one line
                if not self._header_seen:  # not a trace at all, whatever `skip` says
                    _check_header(self.path, None)
                if self._skipped(number, "not JSON"):
                    continue
                raise TraceFormatError(
                    f"{self.path}:{number}: not a JSON line; the file is corrupt (only a torn "
                    "last line is tolerated)"
                ) from None

    def _add(self, number: int, record: Any) -> None:
        if not self._header_seen:
            _check_header(self.path, record)
            self._header_seen = True
            return
        try:
            tag = record[0]
            if tag == "event":
                self.events.append(Event.from_record(record, self._strings))
            elif tag == "intervals":
                self.events.extend(_unpack_intervals(record))
            elif tag == "thread":
                self.threads[(record[1], record[2])] = record[3]
            elif tag == "process":
                self.processes.append(ProcessInfo.from_dict(record[1]))
            elif tag == "end":
                self.complete = True
            else:
                raise ValueError(f"unknown record tag {tag!r}")
        except (ValueError, TypeError, IndexError, KeyError) as err:
            if not self._skipped(number, f"bad record: {err}"):
                raise TraceFormatError(f"{self.path}:{number}: bad record: {err}") from None

    def _skipped(self, number: int, why: str) -> bool:
        """Count line `number` as skipped, if lines may be skipped."""
        if self.skip:
            if not self.skipped:
                self.first_skipped = (number, why)
            self.skipped += 1
        return self.skip

    def session(self) -> Session:
        if not self._header_seen:
            _check_header(self.path, None)
        if not self.processes:
            raise TraceFormatError(
                f"{self.path}: no process record; the file was cut in its header"
            )
        # A skipped line's events are missing, as a dead writer's are: a partial session.
        complete = self.complete and not self.skipped
        return Session(tuple(self.processes), self.events, self.threads, complete)


_CATEGORIES = {str(c): c for c in Category}


def _category(name: str) -> Category:
    category = _CATEGORIES.get(name)
    return Category(name) if category is None else category  # Category raises a clear error


def _numbers(lines: list[str], start: int):
    return (start + i + 1 for i, line in enumerate(lines) if line.strip())


def _check_header(path: Path, header: Any) -> None:
    if not (isinstance(header, list) and len(header) == 2 and header[0] == FORMAT_NAME):
        raise TraceFormatError(f"{path}: not an {FORMAT_NAME} file (first line is not the magic)")
    if header[1] not in READABLE_VERSIONS:
        raise TraceFormatError(
            f"{path}: format version {header[1]}, this rlsys reads versions "
            f"{READABLE_VERSIONS}; upgrade rlsys to read it"
        )


def pack_intervals(values: array.array) -> str:
    """`intervals` records' text for int64 `values` (code, start_ns, end_ns, ...)."""
    if sys.byteorder != "little":
        values = array.array("q", values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _unpack_intervals(record: list[Any]) -> list[Event]:
    _, category, pid, tid, count, names, packed = record
    values = array.array("q", base64.b64decode(packed, validate=True))
    if sys.byteorder != "little":
        values.byteswap()
    if len(values) != 3 * count:
        raise ValueError(f"{count} intervals announced, {len(values) / 3:g} packed")
    kind = Category(category)
    triples = iter(values)
    return [Event(names[str(code)], kind, start, end, pid, tid)
            for code, start, end in zip(triples, triples, triples, strict=True)]  # fmt: skip
