"""Attribute a session's time to (process, operation, CPU category, resource), after RL-Scope.

Per process, one sweep (`rlsys.profiler.overlap.totals`) over labelled intervals cuts the
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

from collections import Counter
from collections.abc import Collection

import numpy as np

from rlsys.profiler.overlap import Interval, Totals, totals, union_length
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


_CATEGORIES: tuple[Category, ...] = tuple(Category)
_CODES = {category: code for code, category in enumerate(_CATEGORIES)}


def _is_phase(event: Event) -> bool:
    if event.category is not Category.OPERATION or event.attrs is None:
        return False
    return event.attrs.get("kind") == "phase"


class _Columns:
    """One process's events as arrays (index i is `events[i]`), so that the work per event
    runs in NumPy: a long recording has millions of events."""

    def __init__(self, events: list[Event]) -> None:
        n = len(events)
        self.start = np.fromiter((e.start_ns for e in events), np.int64, n)
        self.end = np.fromiter((e.end_ns for e in events), np.int64, n)
        self.category = np.fromiter((_CODES[e.category] for e in events), np.int8, n)
        on_device = (e.category is Category.GPU_KERNEL or e.device != "cpu" for e in events)
        self.on_device = np.fromiter(on_device, bool, n)
        operation = self.is_(Category.OPERATION)
        phase_indices = [i for i in np.flatnonzero(operation).tolist() if _is_phase(events[i])]
        self.phases = [events[i] for i in phase_indices]
        phase = np.zeros(n, bool)
        phase[phase_indices] = True
        self.owns_time = operation & (self.end > self.start) & ~phase
        """Operations with a duration that are not phases: they own time (module docstring)."""
        host = np.flatnonzero(~self.on_device)
        tids = np.fromiter((events[i].tid for i in host.tolist()), np.int64, len(host))
        order = np.argsort(tids, kind="stable")
        tids, host = tids[order], host[order]
        cuts = np.flatnonzero(tids[1:] != tids[:-1]) + 1
        self.threads: dict[int, np.ndarray] = {
            int(group_tids[0]): group
            for group_tids, group in zip(np.split(tids, cuts), np.split(host, cuts), strict=True)
            if len(group)
        }
        """Each thread's events (indices, in event order); device events belong to none."""

    def is_(self, category: Category) -> np.ndarray:
        return self.category == _CODES[category]

    def intervals(self, where: np.ndarray) -> np.ndarray:
        """The (start, end) rows of the events at indices or mask `where`."""
        return np.stack([self.start[where], self.end[where]], axis=1)


def _process(pid: int, events: list[Event], info: ProcessInfo | None) -> ProcessBreakdown:
    columns = _Columns(events)
    threads = columns.threads
    main = _main_thread(pid, columns, info)
    cuda_api = columns.is_(Category.CUDA_API)
    native = {tid for tid, idx in threads.items() if tid != main and cuda_api[idx].all()}
    names: dict[str, int] = {}
    lines = {
        tid: _OperationTimeline(pid, tid, [events[i] for i in idx[columns.owns_time[idx]]], names)
        for tid, idx in threads.items()
    }
    acc = _Accumulator(main)
    acc.attribute(totals(_labelled(columns, lines, native)))
    acc.count_events(columns, lines, list(names))
    return ProcessBreakdown(
        pid=pid,
        parent_pid=info.parent_pid if info else None,
        command=info.command if info else None,
        start_ns=int(columns.start.min()),
        end_ns=int(columns.end.max()),
        main_tid=main,
        threads=tuple(sorted(threads)),
        operations=acc.operations,
        phases=_phases(columns.phases),
        total=sum_times(acc.operations.values()),
    )


def _main_thread(pid: int, columns: _Columns, info: ProcessInfo | None) -> int | None:
    """The main thread the recorder saw (even without events: then no operation owns the
    wall time, not a worker thread's); for older files, tid == pid (the main thread's
    native id on Linux), else the earliest thread to start."""
    if info is not None and info.main_tid is not None:
        return info.main_tid
    threads = columns.threads
    if not threads:
        return None
    if pid in threads:
        return pid
    return min(threads, key=lambda tid: (int(columns.start[threads[tid]].min()), tid))


def _labelled(
    columns: _Columns, lines: dict[int, _OperationTimeline], native: set[int]
) -> dict[tuple, list[Interval] | np.ndarray]:
    """The sweep's input: ("process",), ("span", tid), ("cpu", tid, category), ("op", tid,
    name) for the innermost-operation pieces, and ("gpu",)."""
    start, end = columns.start, columns.end
    labelled: dict[tuple, list[Interval] | np.ndarray] = {
        ("process",): [(int(start.min()), int(end.max()))]
    }
    for tid, idx in columns.threads.items():
        if tid in native:
            labelled[("span", tid)] = columns.intervals(idx)
        else:
            labelled[("span", tid)] = [(int(start[idx].min()), int(end[idx].max()))]
        for category in CPU_PRECEDENCE:
            of_category = idx[columns.category[idx] == _CODES[category]]
            if len(of_category):
                labelled[("cpu", tid, category)] = columns.intervals(of_category)
        for piece_start, piece_end, name in lines[tid].pieces:
            labelled.setdefault(("op", tid, name), []).append((piece_start, piece_end))
    labelled[("gpu",)] = columns.intervals(columns.on_device)
    return labelled


class _OperationTimeline:
    """One thread's operations cut into disjoint pieces, each owned by its innermost operation.

    `codes` numbers operation names across a process's threads (shared, added to here).
    """

    def __init__(self, pid: int, tid: int, ops: list[Event], codes: dict[str, int]) -> None:
        ops = sorted(ops, key=lambda e: (e.start_ns, -e.end_ns))
        self.pieces = _innermost_pieces(ops, pid, tid)
        self.starts = np.array([start for start, _, _ in self.pieces], dtype=np.int64)
        self.ends = np.array([end for _, end, _ in self.pieces], dtype=np.int64)
        self.codes = np.array(
            [codes.setdefault(name, len(codes)) for _, _, name in self.pieces], dtype=np.int64
        )
        self.calls = Counter(e.name for e in ops)

    def owners(self, times: np.ndarray) -> np.ndarray:
        """The code of the innermost operation open at each time, -1 where none is
        (half-open: not one that ends at that time)."""
        owners = np.full(len(times), -1, dtype=np.int64)
        if not len(self.starts):
            return owners
        i = np.searchsorted(self.starts, times, side="right") - 1
        inside = (i >= 0) & (times < self.ends[np.maximum(i, 0)])
        owners[inside] = self.codes[i[inside]]
        return owners


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

    A long recording's sweep has millions of stretches but few distinct label sets, so
    `attribute` takes each set's total time, and how often one set directly follows another,
    and attributes each set, and each such pair's category changes, once.
    """

    def __init__(self, main_tid: int | None) -> None:
        self.main_tid = main_tid
        self.operations: dict[str, Times] = {}

    def times(self, name: str) -> Times:
        if name not in self.operations:
            self.operations[name] = Times()
        return self.operations[name]

    def attribute(self, stretches: Totals) -> None:
        plans = {active: self._plan(active) for active in stretches.time}
        for active, ns in stretches.time.items():
            threads, main_op, busy, gpu = plans[active]
            for _, category, name in threads:
                self.times(name).cpu_ns[category] += ns
            owner = self.times(main_op)
            owner.wall_ns += ns
            owner.gpu_ns += ns if gpu else 0
            owner.resource_ns[resource(busy, gpu)] += ns
        # A thread's category changes between two adjacent stretches it is busy in both.
        for (before, after), count in stretches.adjacent.items():
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

    def count_events(
        self, columns: _Columns, lines: dict[int, _OperationTimeline], names: list[str]
    ) -> None:
        """Count each event in the operation its thread (else the main thread) is in at its start.

        Calls of an operation are its events; instants count in the operation around them.
        `cost_events` count an operation in the one around it (open just before its start).
        `names[code]` is the operation of a code of `lines`.
        """
        at_start = columns.start
        before_own = at_start - columns.owns_time
        main = lines.get(self.main_tid) if self.main_tid is not None else None
        for field, times in (("events", at_start), ("cost_events", before_own)):
            owners = np.full(len(times), -1, dtype=np.int64)
            for tid, idx in columns.threads.items():
                owners[idx] = lines[tid].owners(times[idx])
            if main is not None:
                missing = np.flatnonzero(owners < 0)
                owners[missing] = main.owners(times[missing])
            keys = (owners + 1) * len(_CATEGORIES) + columns.category
            kinds, counts = np.unique(keys, return_counts=True)
            for key, count in zip(kinds.tolist(), counts.tolist(), strict=True):
                owner, category = divmod(key, len(_CATEGORIES))
                name = (names[owner - 1] if owner else None) or NO_OPERATION
                getattr(self.times(name), field)[str(_CATEGORIES[category])] += count
        for line in lines.values():
            for name, calls in line.calls.items():
                self.times(name).calls += calls


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


def _phases(phases: list[Event]) -> dict[str, int]:
    spans: dict[str, list[Interval]] = {}
    for e in phases:
        spans.setdefault(e.name, []).append((e.start_ns, e.end_ns))
    return {name: union_length(intervals) for name, intervals in spans.items()}
