"""Sweep-line overlap of labelled intervals: how long each *set* of labels is active together.

The method (RL-Scope, Gleeson et al., arXiv 2102.04285, section 4): turn every interval
[start, end) into two boundaries, (start, +1, label) and (end, -1, label); sort them by time;
walk them once, keeping a count of open intervals per label. Between two consecutive boundary
times the set of labels with a positive count does not change, so all the time between them
belongs to exactly that set. Sorting dominates: O(n log n) for n intervals, plus O(k) per
stretch to copy its k active labels. Counting open intervals per label (rather than a flag)
is what merges overlapping intervals of one label.

Times are integers (nanoseconds) and intervals half-open, so every result is exact, and
adjacent intervals [a, b), [b, c) neither overlap nor leave a gap. Zero-length intervals
(instants) take no time and are ignored.

Everything time-attributing in the profiler is built on `sweep`; `overlap` is its plainest use.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Iterable, Iterator, Mapping

Interval = tuple[int, int]
Stretch = tuple[int, int, frozenset]


def sweep(intervals: Mapping[Hashable, Iterable[Interval]]) -> Iterator[Stretch]:
    """Yield (start, end, active) for each maximal stretch where a non-empty label set holds.

    Stretches come in time order and do not overlap. Meaning, as the slow loop that the tests
    compare against (integer times, one unit at a time):

        for t in range(lo, hi):
            active = frozenset(label for label, ivs in intervals.items()
                               if any(s <= t < e for s, e in ivs))
            # runs of equal, non-empty `active` are the stretches

    Raises ValueError for an interval that ends before it starts.
    """
    counts: dict[Hashable, int] = {}
    active: set[Hashable] = set()
    current: frozenset = frozenset()
    since = 0
    for time, group in itertools.groupby(_boundaries(intervals), key=operator.itemgetter(0)):
        touched = set()
        for _, delta, label in group:
            counts[label] = counts.get(label, 0) + delta
            touched.add(label)
        for label in touched:
            if counts[label] > 0:
                active.add(label)
            else:
                active.discard(label)
                del counts[label]
        if active == current:
            continue  # e.g. [a, b) followed by [b, c) of the same label
        if current:
            yield since, time, current
        current, since = frozenset(active), time


Boundary = tuple[int, int, Hashable]  # (time, +1 opens / -1 closes, label)


def _boundaries(intervals: Mapping[Hashable, Iterable[Interval]]) -> list[Boundary]:
    points = []
    for label, spans in intervals.items():
        for start, end in spans:
            if end < start:
                raise ValueError(f"interval of {label!r} ends before it starts: ({start}, {end})")
            if end > start:
                points.append((start, 1, label))
                points.append((end, -1, label))
    # Sort on time alone: labels need not be comparable, and order within one time is
    # irrelevant because the active set is read only after the whole group is applied.
    points.sort(key=operator.itemgetter(0))
    return points


def overlap(intervals: Mapping[Hashable, Iterable[Interval]]) -> dict[frozenset, int]:
    """Total time during which exactly each set of labels is active (sets with time > 0 only).

    `intervals` maps a label to its intervals, which may overlap each other (they merge). The
    values sum to the measure of the union of all intervals.
    """
    totals: dict[frozenset, int] = {}
    for start, end, labels in sweep(intervals):
        totals[labels] = totals.get(labels, 0) + (end - start)
    return totals


def union_length(intervals: Iterable[Interval]) -> int:
    """Measure of the union of `intervals` (overlapping parts count once)."""
    return sum(end - start for start, end, _ in sweep({None: intervals}))
