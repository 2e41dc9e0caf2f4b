"""Relate a profiler's wall-clock timestamps to the event clock (`rlsys.trace.clock_ns`).

Kineto stamps events in Unix-epoch time; rlsys events use CLOCK_MONOTONIC. One reference pair
(epoch ns, monotonic ns) read back to back converts between them; the pair with the shortest
read interval of a few tries bounds the error by that interval (typically well under 1 us).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockReference:
    """The same instant on the wall clock and on the event clock, both in integer ns."""

    wall_ns: int
    monotonic_ns: int

    def to_monotonic(self, wall_ns: int) -> int:
        return wall_ns - self.wall_ns + self.monotonic_ns

    @classmethod
    def now(
        cls,
        wall: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], int] = time.monotonic_ns,
        tries: int = 5,
    ) -> ClockReference:
        best: tuple[int, ClockReference] | None = None
        for _ in range(tries):
            before = monotonic()
            wall_ns = wall()
            after = monotonic()
            pair = (after - before, cls(wall_ns, (before + after) // 2))
            if best is None or pair[0] < best[0]:
                best = pair
        assert best is not None
        return best[1]


def us_to_ns(us: float) -> int:
    """Microseconds (a trace's float "ts") to integer ns, exact to the float's own precision.

    Whole microseconds are converted apart from the fraction: 1000 * ts of an epoch time
    (~1.8e15 us) would exceed float64's exact integers and be off by hundreds of ns.
    """
    whole = int(us)
    return whole * 1000 + round((us - whole) * 1000)
