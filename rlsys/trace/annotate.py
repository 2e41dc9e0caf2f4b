"""Annotations: `operation(name)`, `phase(name)`, `progress(steps, total)`, and the recorder.

    import rlsys
    with rlsys.operation("inference"):
        action = policy(obs)
    rlsys.progress(step, total_steps)

When nothing records (the normal case), `operation` and `phase` return one shared do-nothing
context manager and `progress` returns at once: the cost is a function call and an attribute
read (measured in benchmarks/RESULTS.md, "annotation overhead").

When a `Recorder` is active (`start_recording(dir)`, or `rlsys profile`), each annotation
becomes an `Event` of category OPERATION; a phase is an operation with `attrs={"kind":
"phase"}`, and operations inside a phase carry its name as their `region`. Annotations nest
like a stack per thread; closing one that is not the innermost open one raises
`AnnotationNestingError` (only while recording: the disabled path checks nothing, by design).
Annotations still open when the recorder closes (the process exits or is terminated inside
one, a daemon thread is inside one at exit) are recorded as ending then, with
`attrs["unfinished"] = True`.

Processes: the recorder writes `<dir>/<pid>.jsonl`. A forked child starts its own file (its
parent's buffered events stay with the parent) with no annotation open (those open at the
fork are the parent's calls, recorded by the parent); a spawned child that imports rlsys starts
recording because `start_recording` exports RLSYS_TRACE_DIR to the environment.
"""

from __future__ import annotations

import array
import atexit
import collections
import contextlib
import functools
import json
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rlsys.trace import termination
from rlsys.trace.events import (
    Category,
    Event,
    ProcessInfo,
    SessionWriter,
    clock_ns,
    pack_intervals,
)

TRACE_DIR_ENV = "RLSYS_TRACE_DIR"

FLUSH_AFTER_NS = 500_000_000
"""Pending events are written once an event ends this long after the last timed flush: a
process that dies without closing its recording (`os._exit` in a forked child, SIGHUP,
SIGKILL) loses at most about this much of it, not up to `flush_every` events (a whole short
recording). Checked against the times the emitters read anyway: no clock read, no thread."""


class AnnotationNestingError(RuntimeError):
    """An annotation was closed while an annotation opened inside it was still open."""


class _ThreadState:
    __slots__ = ("stack", "tid")

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.stack: list[_Span] = []


class Recorder:
    """Collects events of this process and streams them to `<directory>/<pid>.jsonl`.

    Events are buffered and written every `flush_every` events, once an event ends at or
    after `flush_at` (`flush_after_ns` after the last timed flush), and at `close`: a crash
    loses at most one buffer (one of `emit_raw`'s and one per `interval_buffer`), and at most
    about `flush_after_ns` of events. `clock` is injectable so that tests are exact.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        flush_every: int = 4096,
        flush_after_ns: int = FLUSH_AFTER_NS,
        clock: Callable[[], int] = clock_ns,
        command: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.flush_every = flush_every
        self.clock = clock
        self.pid = os.getpid()
        self.process = ProcessInfo.current(command=command, start_ns=clock())
        self.flush_after_ns = flush_after_ns
        self.flush_at = self.process.start_ns + flush_after_ns  # see FLUSH_AFTER_NS
        self.writer = SessionWriter(self.directory / f"{self.pid}.jsonl", self.process)
        # Pending events as plain tuples (name, category, start_ns, end_ns, tid, region,
        # attrs): building an Event (a frozen dataclass) would cost more than the rest of an
        # annotation. deque: append and popleft are atomic, so threads emit without a lock.
        self._pending: collections.deque[tuple] = collections.deque()
        self._buffers: list[_IntervalBuffer] = []  # see `interval_buffer`
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._states: list[_ThreadState] = []  # every thread's, for the spans open at close

    @property
    def path(self) -> Path:
        return self.writer.path

    def thread_state(self) -> _ThreadState:
        try:
            return self._local.state
        except AttributeError:
            thread = threading.current_thread()
            state = _ThreadState(threading.get_native_id())
            self._local.state = state
            with self._writing():
                self._states.append(state)
                self.writer.write_thread(self.pid, state.tid, thread.name)
            return state

    def emit(self, event: Event) -> None:
        """Record an event of this process (from any collector)."""
        self.emit_raw(event.name, str(event.category), event.start_ns, event.end_ns, event.tid,
                      event.region, event.attrs, event.device)  # fmt: skip

    def emit_raw(
        self,
        name: str,
        category: str,
        start_ns: int,
        end_ns: int,
        tid: int,
        region: str | None = None,
        attrs: Any = None,
        device: str = "cpu",
    ) -> None:
        """`emit` without building an Event: the annotations' hot path."""
        self._pending.append((name, category, start_ns, end_ns, tid, region, attrs, device))
        if len(self._pending) >= self.flush_every or end_ns >= self.flush_at:
            self.flush(end_ns)

    def interval_buffer(self, category: str, tid: int, names: Sequence[str]) -> array.array:
        """An array to append intervals of `category` on thread `tid` to, three integers
        each: `code, start_ns, end_ns`, where `names[code]` is the event's name (`names` may
        grow; it is read at each flush).

        For collectors that record very many short intervals (one per torch call): three
        appends are several times cheaper than an `emit_raw` call, and a flush writes them
        as one packed `intervals` record (their bytes, base64), not a line each. Why
        integers in an array, not a list of `(name, start, end)` tuples: thousands of tuples
        alive until the next flush make Python's garbage collector run, promote them and
        sweep the whole heap again and again, while an array's integers are not objects
        the collector tracks. (The CleanRL-style PPO recording its torch calls, in-process,
        min of 5 rounds against its unrecorded loop: 1.28x with tuples, 1.00x with tuples
        and the collector disabled; 1.17x with the array, and the same with the collector
        disabled.)
        Each `flush` drains the buffer; the caller calls `flush(end_ns)` when it holds
        `flush_every` intervals or an interval ends at or after `flush_at`, so a crash loses
        at most one buffer of each. Its events are not `emit_raw` calls (a patch of
        `emit_raw` does not see them).
        """
        buffer = _IntervalBuffer(category, self.pid, tid, names)
        with self._writing():
            self._buffers.append(buffer)
        return buffer.times

    def thread_intervals(self, category: str, names: Sequence[str]) -> array.array:
        """This thread's `interval_buffer` of `category`, made at its first use (the caller
        flushes as `interval_buffer` says)."""
        buffers = getattr(self._local, "intervals", None)
        if buffers is None:
            buffers = self._local.intervals = {}
        times = buffers.get(category)
        if times is None:
            tid = self.thread_state().tid
            times = buffers[category] = self.interval_buffer(category, tid, names)
        return times

    def instant(self, name: str, attrs: dict[str, Any] | None = None) -> None:
        now = self.clock()
        self.emit_raw(name, _OPERATION, now, now, self.thread_state().tid, None, attrs)

    def flush(self, now_ns: int | None = None) -> None:
        """Write what is pending; with `now_ns` (the clock's time, as the emitters read it),
        the next timed flush is due `flush_after_ns` after it."""
        if now_ns is not None:
            self.flush_at = now_ns + self.flush_after_ns
        with self._writing():
            self._write_pending()

    def close(self) -> None:
        """Write what is pending and the file's end; idempotent."""
        with self._writing():
            self._finish()

    def close_at_signal(self) -> bool:
        """`close` from a signal handler. Returns False, having done nothing, when the handler
        interrupted this thread's own write, or its wait to write (waiting for it would wait
        forever): the write then runs `termination.run_deferred` when done. Gives up (True,
        file not closed) after `termination.LOCK_TIMEOUT_S` if another thread holds the
        write lock."""
        if getattr(self._local, "writing", False):
            return False
        if self._write_lock.acquire(timeout=termination.LOCK_TIMEOUT_S):
            try:
                self._finish()
            finally:
                self._write_lock.release()
        return True

    def _finish(self) -> None:
        self._end_open_spans()
        self._write_pending()
        self.writer.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        # Marked before the lock is taken and unmarked after its release: a SIGTERM handler
        # that interrupts this thread anywhere in between must not wait for the lock.
        local = self._local
        local.writing = True
        try:
            with self._write_lock:
                yield
        finally:
            local.writing = False
        termination.run_deferred()

    def _end_open_spans(self) -> None:
        """Record the annotations still open (a process ended inside one, a daemon thread at
        exit) as ending now, marked `unfinished`, rather than dropping them."""
        if self.writer.closed:
            return
        now = self.clock()
        for state in self._states:
            for span in list(state.stack):
                if not hasattr(span, "start_ns"):  # the signal came inside its __enter__
                    continue
                attrs = {**(span.attrs or {}), "unfinished": True}
                self._pending.append((span.name, _OPERATION, span.start_ns, now, state.tid,
                                      span.region, attrs, "cpu"))  # fmt: skip

    def _write_pending(self) -> None:
        if self.writer.closed:  # other threads' events after a close (at exit, say): dropped
            self._pending.clear()
            for buffer in self._buffers:
                buffer.drain_into([])
            return
        lines = []
        while self._pending:
            lines.append(_event_line(self.pid, self._pending.popleft()))
        events = len(lines)
        for buffer in self._buffers:
            events += buffer.drain_into(lines)
        if lines:
            self.writer.write_event_lines(lines, events)

    def restart_in_child(self) -> Recorder:
        """After fork: a recorder for this new process, in which none of the annotations
        open in the forking thread are open: they are the parent's calls (recorded by the
        parent), not the child's. The child may still leave their `with` blocks: that
        records nothing and checks only their nesting among themselves."""
        child = Recorder(self.directory, flush_every=self.flush_every,
                         flush_after_ns=self.flush_after_ns, clock=self.clock)  # fmt: skip
        inherited = getattr(self._local, "state", None)
        if inherited is not None and inherited.stack:
            detached = _ThreadState(inherited.tid)
            detached.stack = list(inherited.stack)
            discard = _Discard(self.clock)
            for span in detached.stack:
                # Not the parent's recorder: its lock may have been held by another thread
                # at the fork, and its events are not this process's.
                span.recorder, span.state = discard, detached
        # The parent's file object was copied by fork: drop it without writing to it.
        self.writer._file = None
        _close_when_multiprocessing_child_exits(child)
        return child


class _Discard:
    """The recorder of annotations a forked child inherited open: their end records nothing."""

    __slots__ = ("clock",)

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock

    def emit_raw(self, *event: Any) -> None:
        pass


class _Span:
    """An open annotation; records one event when it closes."""

    __slots__ = ("attrs", "name", "recorder", "region", "start_ns", "state")

    def __init__(self, recorder: Recorder, name: str, attrs: dict[str, Any] | None) -> None:
        self.recorder = recorder
        self.name = name
        self.attrs = attrs

    def __enter__(self) -> _Span:
        state = self.recorder.thread_state()
        self.state = state
        self.region = _innermost_phase(state.stack)
        state.stack.append(self)
        self.start_ns = self.recorder.clock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        end = self.recorder.clock()
        stack = self.state.stack
        if not stack or stack[-1] is not self:
            inner = stack[-1].name if stack else None
            raise AnnotationNestingError(
                f"annotation {self.name!r} was closed while {inner!r} (opened inside it) is "
                "still open; close annotations in the reverse order of opening, e.g. with "
                "nested `with` blocks"
            )
        stack.pop()
        rec = self.recorder
        rec.emit_raw(self.name, _OPERATION, self.start_ns, end, self.state.tid, self.region,
                     self.attrs)  # fmt: skip


_OPERATION = str(Category.OPERATION)


@functools.lru_cache(maxsize=4096)
def _json_text(value: str) -> str:
    return json.dumps(value)  # names and regions repeat: format each once


@functools.lru_cache(maxsize=4096)
def _line_head(name: str, category: str) -> str:
    return f'["event",{_json_text(name)},"{category}",'


@functools.lru_cache(maxsize=4096)
def _line_tail(pid: int, tid: int, device: str, region: str | None) -> str:
    region_text = "null" if region is None else _json_text(region)
    return f",{pid},{tid},{_json_text(device)},{region_text},"


def _event_line(pid: int, event: tuple) -> str:
    """One `["event", ...]` line of the trace format (as Event.to_record gives), fast.

    Everything but the times and attributes repeats from event to event: those parts are
    formatted once per distinct value (cached) and joined around the times.
    """
    name, category, start, end, tid, region, attrs, device = event
    attrs_text = "null" if not attrs else json.dumps(dict(attrs), separators=(",", ":"),
                                                     default=str)  # fmt: skip
    return (f"{_line_head(name, category)}{start},{end}"
            f"{_line_tail(pid, tid, device, region)}{attrs_text}]\n")  # fmt: skip


class _IntervalBuffer:
    """`Recorder.interval_buffer`'s array, and how its intervals become one packed line."""

    __slots__ = ("category", "names", "pid", "tid", "times")

    def __init__(self, category: str, pid: int, tid: int, names: Sequence[str]) -> None:
        self.category, self.pid, self.tid = category, pid, tid
        self.names = names
        self.times = array.array("q")  # code, start_ns, end_ns, code, ...

    def drain_into(self, lines: list[str]) -> int:
        """Append an `intervals` record (see `rlsys.trace.events`) and return how many
        intervals it holds: the integers as bytes, not one JSON line per interval, whose
        formatting cost the profiled program about 0.4 us per torch call; the loader
        expands them."""
        # The owning thread may append while we drain: take the first n values, n a multiple
        # of 3 (it may be between the appends of one interval), and delete exactly those
        # (each array operation is atomic), never what arrived meanwhile.
        times = self.times
        n = len(times) - len(times) % 3
        if not n:
            return 0
        taken = times[:n]
        del times[:n]
        names = {str(code): self.names[code] for code in set(taken[0::3])}
        head = json.dumps(["intervals", self.category, self.pid, self.tid, n // 3, names],
                          separators=(",", ":"))  # fmt: skip
        # Base64 needs no escaping: joined as is, not scanned again by json.dumps.
        lines.append(f'{head[:-1]},"{pack_intervals(taken)}"]\n')
        return n // 3


def _innermost_phase(stack: list[_Span]) -> str | None:
    for span in reversed(stack):
        if span.attrs is _PHASE_ATTRS:
            return span.name
    return None


_PHASE_ATTRS = {"kind": "phase"}


class _Disabled:
    """The shared do-nothing annotation used while nothing records."""

    __slots__ = ()

    def __enter__(self) -> _Disabled:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


_DISABLED = _Disabled()


class _Active:
    """The recorder of this process, if any.

    Process-wide on purpose: annotations from every thread must reach the same recorder, and
    threads do not inherit `contextvars` values, so a ContextVar would lose them.
    """

    recorder: Recorder | None = None
    # True when the recorder was started from RLSYS_TRACE_DIR (by `rlsys profile`, or by a
    # parent's `start_recording`): the process's own start/stop calls then leave it running.
    from_environment: bool = False


def operation(name: str) -> _Span | _Disabled:
    """Annotate the enclosed code as operation `name` (e.g. "inference", "simulation")."""
    recorder = _Active.recorder
    if recorder is None:
        return _DISABLED
    return _Span(recorder, name, None)


def phase(name: str) -> _Span | _Disabled:
    """Annotate a coarse phase of the run (e.g. "warmup", "training", "evaluation")."""
    recorder = _Active.recorder
    if recorder is None:
        return _DISABLED
    return _Span(recorder, name, _PHASE_ATTRS)


def progress(steps: int, total: int | None = None) -> None:
    """Report that `steps` of `total` units of work (env steps, iterations) are done."""
    recorder = _Active.recorder
    if recorder is not None:
        recorder.instant("progress", {"steps": steps, "total": total})


def record_operation(name: str, start_ns: int, end_ns: int) -> None:
    """Record operation `name` on this thread after the fact, from times of `clock_ns`.

    For work whose boundaries are known only once it is done (e.g. the parts of a compiled
    call, timed by its host callbacks). It must nest with this thread's other operations.
    """
    recorder = _Active.recorder
    if recorder is not None:
        state = recorder.thread_state()
        region = _innermost_phase(state.stack)
        recorder.emit_raw(name, _OPERATION, start_ns, end_ns, state.tid, region)


def active_recorder() -> Recorder | None:
    return _Active.recorder


def start_recording(directory: str | os.PathLike[str], **options: Any) -> Recorder:
    """Record this process (and children that import rlsys) into `directory`.

    Under `rlsys profile` (or in a child of a recording process) this process already records
    into the profile's folder; then that recording goes on, `directory` is not used, and a
    warning says where the events go, so that a script runs unchanged with or without the
    profiler.
    """
    active = _Active.recorder
    if active is not None and _Active.from_environment:
        warnings.warn(
            f"start_recording({str(directory)!r}): this process is already recorded into "
            f"{active.directory} (by `rlsys profile` or a recording parent process), which "
            "keeps the events; stop_recording() will leave that recording running",
            RuntimeWarning,
            stacklevel=2,
        )
        return active
    if active is not None:
        raise RuntimeError(
            f"already recording into {active.directory}; call stop_recording() first"
        )
    recorder = Recorder(directory, **options)
    _Active.recorder = recorder
    os.environ[TRACE_DIR_ENV] = str(recorder.directory.resolve())
    termination.close_on_sigterm(_close_at_sigterm)
    return recorder


def stop_recording() -> Path | None:
    """Flush and close the active recorder; returns the file it wrote, or None.

    A recording started from the environment (see `start_recording`) is flushed, not closed:
    whoever started it closes it when this process exits.
    """
    recorder = _Active.recorder
    if recorder is None:
        return None
    if _Active.from_environment:
        recorder.flush()
        return recorder.path
    _Active.recorder = None
    os.environ.pop(TRACE_DIR_ENV, None)
    termination.uninstall()
    recorder.close()
    return recorder.path


def _close_when_multiprocessing_child_exits(recorder: Recorder) -> None:
    # multiprocessing ends a forked child with os._exit, which skips atexit, but runs its own
    # finalizers first. It also clears them right after the fork and then runs its after-fork
    # hooks, so the finalizer is registered from such a hook.
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.register_after_fork(recorder, _close_at_multiprocessing_exit)


def _close_at_multiprocessing_exit(recorder: Recorder) -> None:
    sys.modules["multiprocessing.util"].Finalize(None, recorder.close, exitpriority=0)
    termination.reclaim_wakeup_fd()  # the forkserver's child cleared it after the fork


def _after_fork_in_child() -> None:
    if _Active.recorder is not None:
        _Active.recorder = _Active.recorder.restart_in_child()
    termination.after_fork_in_child(_close_at_sigterm if _Active.recorder else None)


def _close_at_exit() -> None:
    if _Active.recorder is not None:
        _Active.recorder.close()


def _close_at_sigterm() -> bool:
    return _Active.recorder is None or _Active.recorder.close_at_signal()


def _start_from_environment() -> None:
    directory = os.environ.get(TRACE_DIR_ENV)
    if directory and _Active.recorder is None:
        _Active.recorder = Recorder(directory)
        _Active.from_environment = True
        termination.close_on_sigterm(_close_at_sigterm)


os.register_at_fork(
    before=termination.before_fork,
    after_in_parent=termination.after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
atexit.register(_close_at_exit)
_start_from_environment()
