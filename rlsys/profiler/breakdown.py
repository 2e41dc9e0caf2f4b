"""Attribute a session's time to (process, operation, CPU category, resource), after RL-Scope.

Per process, one sweep (`rlsys.profiler.overlap.sweep`) over labelled intervals cuts the
traced span (first to last event of the process) into stretches in which nothing changes.
Each stretch of length d is then attributed by these rules:

    main_op = innermost operation open on the main thread, else NO_OPERATION
    for each thread whose span (its first to its last event; a native thread's: its
            calls) covers the stretch:
        category = resolve(CPU categories open on that thread)    # PYTHON if none
        op = innermost operation open on that thread, else main_op
        operations[op].cpu_ns[category] += d                      # thread time
    operations[main_op].wall_ns += d                              # wall time, once
    operations[main_op].resource_ns[resource(any thread not idle, any GPU activity)] += d

Why the main thread owns wall time: each instant must belong to exactly one operation so that
operation times add up to the traced total. Why other threads fall back to the main thread's
operation: threads without annotations usually work for whatever the main thread waits on
(PyTorch's autograd threads run the backward pass while the main thread sits in
"backpropagation"). GPU activity is attributed by time overlap, like CPU time: a kernel
belongs to the operation open on the main thread while it runs, not to the one that launched
it (events carry no launch correlation).

Native threads: a thread other than the main one whose only events are CUDA API calls (those
of XLA's launch threads in a JAX GPU trace, of PyTorch's autograd device threads in a Kineto
one) runs no Python: the profilers see it only inside those calls. Its time between them is
not interpreter time but unknown to rlsys, so it is counted only during its calls.
Seen on an H200, a JAX PPO run of 13.9 s otherwise showed 37 s of "Python" thread time.

Operations are OPERATION events with a duration that are not phases (`attrs["kind"] ==
"phase"`); on one thread they must nest. Phases and instants (e.g. "progress") own no time;
phases get their own totals.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Iterable

from rlsys.profiler.overlap import Interval, sweep, union_length
from rlsys.profiler.result import NO_OPERATION, Breakdown, ProcessBreakdown, Times, sum_times
from rlsys.trace import Category, Event, ProcessInfo, Session

CPU_PRECEDENCE: tuple[Category, ...] = (
    Category.OVERHEAD,  # the profiler's own time stays separate wherever it falls (calibration)
    Category.PYTHON,  # RL-Scope: Python beats Backend and CUDA
    Category.SIMULATOR,  # RL-Scope: Simulator beats CUDA (hence, transitively, Backend)
    Category.CUDA_API,  # RL-Scope: CUDA beats Backend (a CUDA call made inside a backend op)
    Category.BACKEND,
    Category.COMPILE,  # coarse spans around finer work: whatever finer runs inside wins
    Category.COMM,
    Category.WAIT,  # blocked: anything that did run in the same instant wins
)
"""CPU categories, strongest first: an instant of a thread belongs to the first one open.

RL-Scope gives four pairwise rules (Python > Backend, Python > CUDA, CUDA > Backend,
Simulator > CUDA). They leave only Python vs Simulator open; Python wins, as it does against
the other native layers: Python events are interpreter time measured at the Python/C
boundary, so a Python event inside a simulator call is a callback that really ran then. The
categories RL-Scope lacks rank below those four, being coarse spans (a compile, a transfer,
a blocking wait) around finer, more specific work; OVERHEAD ranks first so that the
profiler's own cost can be subtracted exactly where it occurred.
"""

IDLE_CATEGORIES: frozenset[Category] = frozenset({Category.WAIT})
"""CPU categories in which a thread is blocked: its CPU counts as not busy (see `resource`)."""

UNCOVERED_CATEGORY = Category.PYTHON
"""Thread time (inside the thread's span) under no CPU event is interpreter time.

Collectors record native calls (simulator, backend, CUDA API); what runs on a thread between
them is the interpreter, as in RL-Scope, which measures Python time as the gaps between them.
"""


class ProfileError(ValueError):
    """A session cannot be attributed (e.g. operations of one thread overlap without nesting)."""


def resolve(categories: Collection[Category]) -> Category:
    """The category that owns an instant at which `categories` are open on one thread.

    for category in CPU_PRECEDENCE: if category in categories: return category
    return UNCOVERED_CATEGORY
    """
    if not categories:
        return UNCOVERED_CATEGORY
    return min(categories, key=CPU_PRECEDENCE.index)


def resource(cpu_busy: bool, gpu_busy: bool) -> str:
    """The entry of `RESOURCES` for an instant."""
    if cpu_busy:
        return "cpu_gpu" if gpu_busy else "cpu_only"
    return "gpu_only" if gpu_busy else "idle"


def breakdown(session: Session) -> Breakdown:
    """Attribute every event of `session`: one `ProcessBreakdown` per pid with events.

    Raises ProfileError when the operations of a thread overlap without nesting.
    """
    by_pid: dict[int, list[Event]] = {}
    for event in session.events:
        by_pid.setdefault(event.pid, []).append(event)
    infos = {p.pid: p for p in session.processes}
    processes = [_process(pid, by_pid[pid], infos.get(pid)) for pid in sorted(by_pid)]
    return Breakdown.combine(processes, complete=session.complete)


def _on_device(event: Event) -> bool:
    return event.category is Category.GPU_KERNEL or event.device != "cpu"


def _is_phase(event: Event) -> bool:
    if event.category is not Category.OPERATION or event.attrs is None:
        return False
    return event.attrs.get("kind") == "phase"


def _owns_time(event: Event) -> bool:
    timed = event.category is Category.OPERATION and event.end_ns > event.start_ns
    return timed and not _is_phase(event)


def _process(pid: int, events: list[Event], info: ProcessInfo | None) -> ProcessBreakdown:
    threads: dict[int, list[Event]] = {}
    for event in events:
        if not _on_device(event):
            threads.setdefault(event.tid, []).append(event)
    main = _main_thread(pid, threads)
    native = {tid for tid, evs in threads.items()
              if tid != main and all(e.category is Category.CUDA_API for e in evs)}  # fmt: skip
    lines = {tid: _OperationTimeline(pid, tid, evs) for tid, evs in threads.items()}
    acc = _Accumulator(main)
    for start, end, active in sweep(_labelled(events, threads, lines, native)):
        acc.add(start, end, active)
    acc.finish()
    acc.count_events(events, lines)
    return ProcessBreakdown(
        pid=pid,
        parent_pid=info.parent_pid if info else None,
        command=info.command if info else None,
        start_ns=min(e.start_ns for e in events),
        end_ns=max(e.end_ns for e in events),
        main_tid=main,
        threads=tuple(sorted(threads)),
        operations=acc.operations,
        phases=_phases(events),
        total=sum_times(acc.operations.values()),
    )


def _main_thread(pid: int, threads: dict[int, list[Event]]) -> int | None:
    """tid == pid (the main thread's native id on Linux), else the earliest thread to start."""
    if not threads:
        return None
    if pid in threads:
        return pid
    return min(threads, key=lambda tid: (min(e.start_ns for e in threads[tid]), tid))


def _span(events: Iterable[Event]) -> Interval:
    events = list(events)
    return min(e.start_ns for e in events), max(e.end_ns for e in events)


def _labelled(
    events: list[Event],
    threads: dict[int, list[Event]],
    lines: dict[int, _OperationTimeline],
    native: set[int],
) -> dict[tuple, list[Interval]]:
    """The sweep's input: ("process",), ("span", tid), ("cpu", tid, category), ("op", tid,
    name) for the innermost-operation pieces, and ("gpu",)."""
    labelled: dict[tuple, list[Interval]] = {("process",): [_span(events)]}
    for tid, thread_events in threads.items():
        if tid in native:
            labelled[("span", tid)] = [(e.start_ns, e.end_ns) for e in thread_events]
        else:
            labelled[("span", tid)] = [_span(thread_events)]
        for e in thread_events:
            if e.category in CPU_PRECEDENCE:
                labelled.setdefault(("cpu", tid, e.category), []).append((e.start_ns, e.end_ns))
        for start, end, name in lines[tid].pieces:
            labelled.setdefault(("op", tid, name), []).append((start, end))
    labelled[("gpu",)] = [(e.start_ns, e.end_ns) for e in events if _on_device(e)]
    return labelled


class _OperationTimeline:
    """One thread's operations cut into disjoint pieces, each owned by its innermost operation."""

    def __init__(self, pid: int, tid: int, events: Iterable[Event]) -> None:
        ops = sorted((e for e in events if _owns_time(e)), key=lambda e: (e.start_ns, -e.end_ns))
        self.pieces = _innermost_pieces(ops, pid, tid)
        self.starts = [start for start, _, _ in self.pieces]
        self.calls = Counter(e.name for e in ops)

    def at(self, time: int) -> str | None:
        """The innermost operation open at `time` (half-open: not one that ends at `time`)."""
        i = bisect_right(self.starts, time) - 1
        if i >= 0 and time < self.pieces[i][1]:
            return self.pieces[i][2]
        return None


def _innermost_pieces(ops: list[Event], pid: int, tid: int) -> list[tuple[int, int, str]]:
    """Walk operations in start order with a stack of the open ones.

    Before an operation opens, every open one that has ended by then is closed (the time up
    to its end was its own); the time up to the new start belongs to the top of the stack.
    """
    pieces: list[tuple[int, int, str]] = []
    stack: list[Event] = []
    cursor = 0
    for op in ops:
        cursor = _close_ended(stack, op.start_ns, cursor, pieces)
        if stack and stack[-1].end_ns < op.end_ns:
            raise _nesting_error(stack[-1], op, pid, tid)
        if stack and op.start_ns > cursor:
            pieces.append((cursor, op.start_ns, stack[-1].name))
        cursor = op.start_ns
        stack.append(op)
    _close_ended(stack, None, cursor, pieces)
    return pieces


def _close_ended(stack: list[Event], time: int | None, cursor: int, pieces: list) -> int:
    """Pop the operations ending by `time` (all if None), emitting their last pieces."""
    while stack and (time is None or stack[-1].end_ns <= time):
        top = stack.pop()
        if top.end_ns > cursor:
            pieces.append((cursor, top.end_ns, top.name))
        cursor = top.end_ns
    return cursor


def _nesting_error(outer: Event, inner: Event, pid: int, tid: int) -> ProfileError:
    return ProfileError(
        f"operations {outer.name!r} [{outer.start_ns}, {outer.end_ns}) ns and {inner.name!r} "
        f"[{inner.start_ns}, {inner.end_ns}) ns on thread {tid} of process {pid} overlap "
        "without nesting; operations on one thread must close in the reverse order of opening"
    )


class _Accumulator:
    """Adds the stretches of one process's sweep into per-operation `Times` (module docstring).

    A long recording's sweep has millions of stretches but few distinct label sets, so `add`
    only sums the time of each set and counts which set directly follows which; `finish`
    then attributes each set's time, and each such pair's category changes, once.
    """

    def __init__(self, main_tid: int | None) -> None:
        self.main_tid = main_tid
        self.operations: dict[str, Times] = {}
        self._ns: dict[frozenset, int] = {}
        self._adjacent: dict[tuple[frozenset, frozenset], int] = {}
        self._previous: tuple[int, frozenset] | None = None  # (end, active) of the last stretch

    def times(self, name: str) -> Times:
        if name not in self.operations:
            self.operations[name] = Times()
        return self.operations[name]

    def add(self, start: int, end: int, active: frozenset) -> None:
        self._ns[active] = self._ns.get(active, 0) + end - start
        previous = self._previous
        if previous is not None and previous[0] == start:
            pair = (previous[1], active)
            self._adjacent[pair] = self._adjacent.get(pair, 0) + 1
        self._previous = (end, active)

    def finish(self) -> None:
        plans = {active: self._plan(active) for active in self._ns}
        for active, ns in self._ns.items():
            threads, main_op, busy, gpu = plans[active]
            for _, category, name in threads:
                self.times(name).cpu_ns[category] += ns
            owner = self.times(main_op)
            owner.wall_ns += ns
            owner.gpu_ns += ns if gpu else 0
            owner.resource_ns[resource(busy, gpu)] += ns
        # A thread's category changes between two adjacent stretches it is busy in both.
        for (before, after), count in self._adjacent.items():
            was = {tid: category for tid, category, _ in plans[before][0]}
            for tid, category, name in plans[after][0]:
                if was.get(tid, category) != category:
                    key = (str(was[tid]), str(category))
                    transitions = self.times(name).transitions
                    transitions[key] = transitions.get(key, 0) + count

    def _plan(self, active: frozenset) -> tuple[list[tuple[int, Category, str]], str, bool, bool]:
        """Where a stretch of `active` goes: each thread's category and operation, the main
        thread's operation, whether a CPU and a GPU are busy."""
        spans, ops, cpu, gpu = _parse(active)
        main_op = ops.get(self.main_tid, NO_OPERATION)
        threads = []
        for tid in sorted(spans):
            category = resolve(cpu.get(tid, ()))
            threads.append((tid, category, ops.get(tid, main_op)))
        busy = any(category not in IDLE_CATEGORIES for _, category, _ in threads)
        return threads, main_op, busy, gpu

    def count_events(self, events: list[Event], lines: dict[int, _OperationTimeline]) -> None:
        """Count each event in the operation its thread (else the main thread) is in at its start.

        Calls of an operation are its events; instants count in the operation around them.
        `cost_events` count an operation in the one around it (open just before its start).
        """
        main = lines.get(self.main_tid) if self.main_tid is not None else None
        for e in events:
            category = str(e.category)
            owner = self._owner(e, e.start_ns, lines, main)
            self.times(owner).events[category] += 1
            if _owns_time(e):
                owner = self._owner(e, e.start_ns - 1, lines, main)
            self.times(owner).cost_events[category] += 1
        for line in lines.values():
            for name, calls in line.calls.items():
                self.times(name).calls += calls

    @staticmethod
    def _owner(
        e: Event, time: int, lines: dict[int, _OperationTimeline], main: _OperationTimeline | None
    ) -> str:
        owner = None if _on_device(e) else lines[e.tid].at(time)
        if owner is None and main is not None:
            owner = main.at(time)
        return owner or NO_OPERATION


def _parse(active: frozenset) -> tuple[set[int], dict[int, str], dict[int, set[Category]], bool]:
    spans: set[int] = set()
    ops: dict[int, str] = {}
    cpu: dict[int, set[Category]] = {}
    gpu = False
    for label in active:
        kind = label[0]
        if kind == "span":
            spans.add(label[1])
        elif kind == "op":
            ops[label[1]] = label[2]
        elif kind == "cpu":
            cpu.setdefault(label[1], set()).add(label[2])
        elif kind == "gpu":
            gpu = True
    return spans, ops, cpu, gpu


def _phases(events: list[Event]) -> dict[str, int]:
    spans: dict[str, list[Interval]] = {}
    for e in events:
        if _is_phase(e):
            spans.setdefault(e.name, []).append((e.start_ns, e.end_ns))
    return {name: union_length(intervals) for name, intervals in spans.items()}
