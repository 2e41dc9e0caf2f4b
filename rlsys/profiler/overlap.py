"""Sweep-line overlap of labelled intervals: how long each *set* of labels is active together.

The method (RL-Scope, Gleeson et al., arXiv 2102.04285, section 4): turn every interval
[start, end) into two boundaries, (start, +1, label) and (end, -1, label); sort them by time;
walk them once, keeping a count of open intervals per label. Between two consecutive boundary
times the set of labels with a positive count does not change, so all the time between them
belongs to exactly that set.

Here the walk is vectorized (NumPy), because a long recording has millions of intervals but
few labels: each label's intervals are first merged into their union, so that a label is
either open or not; a set of labels is then a bit mask (63 labels to an int64 word), each
boundary adds or subtracts its label's bit, and a cumulative sum over the boundaries in time
order gives the active set after each one. Sorting dominates: O(n log n) for n intervals.

Times are integers (nanoseconds) and intervals half-open, so every result is exact, and
adjacent intervals [a, b), [b, c) neither overlap nor leave a gap. Zero-length intervals
(instants) take no time and are ignored.

Everything time-attributing in the profiler is built on `sweep`; `overlap` is its plainest use.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

Interval = tuple[int, int]
Stretch = tuple[int, int, frozenset]

_BITS = 63  # labels per int64 word: the sum of all 63 bits still fits in a signed int64


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
    timeline = _Timeline(intervals)
    sets = timeline.sets()
    times = timeline.times.tolist()
    for k, code in enumerate(timeline.codes[:-1].tolist()):
        if sets[code]:
            yield times[k], times[k + 1], sets[code]


@dataclass(frozen=True)
class Totals:
    """What a sweep adds up to: time per label set, and how often one set directly follows
    another (the stretch of `after` starts where that of `before` ends; both non-empty)."""

    time: dict[frozenset, int]
    adjacent: dict[tuple[frozenset, frozenset], int]


def totals(intervals: Mapping[Hashable, Iterable[Interval]]) -> Totals:
    """`Totals` of the stretches `sweep(intervals)` would yield, without yielding them."""
    timeline = _Timeline(intervals)
    sets = timeline.sets()
    codes = timeline.codes
    durations = np.diff(timeline.times)
    stretch = codes[:-1]
    time = np.zeros(len(sets), dtype=np.int64)
    np.add.at(time, stretch, durations)
    by_set = {sets[code]: int(ns) for code, ns in enumerate(time.tolist()) if sets[code]}
    # Runs of one set are merged, so consecutive non-empty stretches always touch.
    empty = timeline.empty_code
    pairs = stretch[:-1] * len(sets) + stretch[1:]
    pairs = pairs[(stretch[:-1] != empty) & (stretch[1:] != empty)]
    kinds, counts = np.unique(pairs, return_counts=True)
    adjacent = {
        (sets[pair // len(sets)], sets[pair % len(sets)]): count
        for pair, count in zip(kinds.tolist(), counts.tolist(), strict=True)
    }
    return Totals(by_set, adjacent)


class _Timeline:
    """The sweep as arrays: `times[k]` is the k-th time at which the active set changes, and
    `codes[k]` indexes (in `sets()`) the set active from it to `times[k + 1]`; the last code
    is the empty set."""

    def __init__(self, intervals: Mapping[Hashable, Iterable[Interval]]) -> None:
        self.labels = list(intervals)
        words = max(1, -(-len(self.labels) // _BITS))
        times, deltas = [], []
        for index, label in enumerate(self.labels):
            starts, ends = union(intervals[label], label)
            delta = np.zeros((2 * len(starts), words), dtype=np.int64)
            delta[: len(starts), index // _BITS] = 1 << (index % _BITS)
            delta[len(starts) :, index // _BITS] = -(1 << (index % _BITS))
            times.append(np.concatenate([starts, ends]))
            deltas.append(delta)
        if not times or not sum(len(t) for t in times):
            self.times = np.zeros(1, dtype=np.int64)
            self.masks = np.zeros((1, words), dtype=np.int64)
            self.codes = np.zeros(1, dtype=np.int64)
            self.empty_code = 0
            return
        time = np.concatenate(times)
        order = np.argsort(time, kind="stable")
        time = time[order]
        masks = np.cumsum(np.concatenate(deltas)[order], axis=0)
        # The set after the last boundary of each time, then runs of one set merged.
        last = np.append(time[1:] != time[:-1], True)
        time, masks = time[last], masks[last]
        changed = np.append(True, np.any(masks[1:] != masks[:-1], axis=1))
        self.times, masks = time[changed], masks[changed]
        if words == 1:  # rows of one word sort as integers, far faster than as rows
            unique, codes = np.unique(masks[:, 0], return_inverse=True)
            self.masks = unique[:, None]
        else:
            self.masks, codes = np.unique(masks, axis=0, return_inverse=True)
        self.codes = codes.reshape(-1)
        self.empty_code = int(np.flatnonzero(~self.masks.any(axis=1))[0])

    def sets(self) -> list[frozenset]:
        """The label set of each code."""
        return [self._decode(row) for row in self.masks.tolist()]

    def _decode(self, row: list[int]) -> frozenset:
        return frozenset(
            self.labels[w * _BITS + bit]
            for w, word in enumerate(row)
            for bit in range(_BITS)
            if word >> bit & 1
        )


def union(spans: Iterable[Interval], label: Hashable = None) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the union of `spans` as disjoint, non-touching intervals, in time
    order (`label` names them in the error for an interval that ends before it starts)."""
    array = np.array(spans if isinstance(spans, list) else list(spans), dtype=np.int64)
    array = array.reshape(-1, 2)
    starts, ends = array[:, 0], array[:, 1]
    backwards = ends < starts
    if backwards.any():
        start, end = array[np.flatnonzero(backwards)[0]].tolist()
        raise ValueError(f"interval of {label!r} ends before it starts: ({start}, {end})")
    keep = ends > starts  # instants take no time
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, reach = starts[order], np.maximum.accumulate(ends[order])
    # A new piece starts where an interval starts after everything before it has ended.
    first = np.append(True, starts[1:] > reach[:-1])
    last = np.append(first[1:], True)
    return starts[first], reach[last]


def overlap(intervals: Mapping[Hashable, Iterable[Interval]]) -> dict[frozenset, int]:
    """Total time during which exactly each set of labels is active (sets with time > 0 only).

    `intervals` maps a label to its intervals, which may overlap each other (they merge). The
    values sum to the measure of the union of all intervals.
    """
    return totals(intervals).time


def union_length(intervals: Iterable[Interval]) -> int:
    """Measure of the union of `intervals` (overlapping parts count once)."""
    starts, ends = union(intervals)
    return int((ends - starts).sum())
