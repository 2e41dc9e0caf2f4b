"""The C heap under XLA:CPU: what a compilation freed goes back to the OS, what an execution
frees stays for the next one.

Compiling a program with XLA allocates and frees 100–200 MiB on the C heap. glibc keeps freed
memory in its heaps for reuse, so that much stays in the process's resident memory for the
whole training run, and the first executions put their buffers on top of it (measured on the
A2C scaling sweep's base point: peak RSS 368 MiB above the idle process without a trim, 229
MiB with one). `malloc_trim(0)` hands every free page back; it takes milliseconds and runs
once per compiled program.

Executions are the opposite case. XLA:CPU allocates a program's temporary buffers with
`malloc` at every call and frees them after it. glibc serves blocks above its mmap threshold
(at most 32 MiB) with a fresh `mmap` and unmaps them on `free`, and shrinks the heap's top
past its trim threshold, so every call of a program with large temporaries touched fresh
pages: the scaling sweep's A2C iteration (256 envs x 250 steps) took 25,700 page faults and
43–48 ms of kernel time per iteration (of about 80 ms wall). `keep_freed_buffers()` turns
both off for the process (`mallopt`: no mmap'd blocks, no automatic trim), so freed buffers
stay mapped and the next call reuses them: 0 page faults and about 46 ms per iteration, with
the same peak RSS (the freed blocks are reused, not added to). Compilations still trim.
Set RLSYS_MALLOC_DEFAULTS=1 to keep glibc's behaviour.

Reused in place, a program's temporaries (XLA allocates them as one block per call) must
find their old place free again. In some runs they do not: the block goes to the top of the
heap, which grows by the whole block while the old place stays resident. At the scaling
sweep's envs=64 point (its learner's temporaries: one 33 MB block per call) the main heap
grew so by 32 MiB at the third iteration in 5 of 16 runs, whose peak RSS went from about
143 MiB above the idle process to 172-174 (traced with an allocation-logging preload).
With glibc's fastbins off (`M_MXFAST` 0: a freed small chunk merges with its free
neighbours at once instead of waiting in a list for reuse), 0 of 28 runs grew so, so
`keep_freed_buffers()` turns them off too. Why the fastbins make the difference was not
traced further.

XLA's worker threads allocate from glibc's per-thread heaps of at most 64 MiB each. The
calling thread allocates a one-device program's temporaries, but a program split over
devices (`lower/data_parallel.py`) runs each device's share on a worker thread, which
allocates that device's temporaries. A block filling most of a heap gets a heap of its own,
and glibc unmaps a heap once it is all free unless its top pad says to keep that much: the
scaling sweep's iteration split over two devices at 512 envs (43 MiB of temporaries each)
took 22,000 page faults and 40–45 ms of kernel time per iteration. `keep_thread_heaps()`
sets the top pad to a heap's size, once a program is split: no faults after the first
iteration, and 87 instead of 99 ms per iteration there (one-device alternating, in one
process). A block above 64 MiB fits no thread heap: glibc maps it afresh at every call
whatever the settings (the width=256 point's 161 MiB per device: 82,000 faults and 150 ms
of kernel time per iteration). One heap for all threads (`M_ARENA_MAX=1`, set before the
threads start) would cover it, but made the sweep's iterations 20–30% slower (lock
contention).

Where the C library has neither `malloc_trim` nor `mallopt` (not glibc), nothing happens.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

from rlsys.compiler.opt_out import opted_out

ENV_VAR = "RLSYS_MALLOC_DEFAULTS"
# glibc's mallopt parameters (malloc.h)
_M_MXFAST = 1
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_TOP_PAD = -2
THREAD_HEAP_BYTES = 64 * 2**20  # glibc's largest per-thread heap (HEAP_MAX_SIZE, 64-bit)
_NEVER_TRIM = 2**31 - 1  # bytes of free heap top to keep; mallopt takes an int


def libc_function(name: str) -> Callable[..., int] | None:
    """The process's C library function `name` (ctypes), or None where there is none (not
    glibc, not Linux). Shared with `code_pages.py`."""
    try:
        return getattr(ctypes.CDLL(None), name)  # the process's own C library
    except (OSError, AttributeError):
        return None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    return libc_function("malloc_trim")


def release_freed_heap() -> bool:
    """Return the C heap's free pages to the OS; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def resident_bytes() -> int | None:
    """The process's resident memory (Linux's /proc/self/statm), or None where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


GROWTH_ALLOWED = 0.25  # of the resident memory after the second call, before a trim
GROWTH_ALLOWED_BYTES = 64 * 2**20  # and at least this much


class GrowthTrim:
    """Bounds what kept freed buffers add to resident memory over a run of many calls.

    Kept freed buffers (`keep_freed_buffers`) are reused in place only where the next call's
    blocks fit the freed ones. PPO on Atari (blocks of 100-220 MB, among the host loop's
    NumPy arrays) did not settle: its resident memory grew from 1.6 to 2.8 GB over 30
    iterations (6.2 GB after 60 in one run), where with glibc's defaults it stayed near
    0.8 GB (peak 1.36) at 9-13% more time per iteration. So after each call the heap is
    trimmed once resident memory exceeds its level after the second call (a call's freed
    blocks kept) by GROWTH_ALLOWED: runs whose heap settles, like the scaling sweep's, never
    trim; a trim costs the next call its page faults. The first call is always followed by a
    trim (`JaxExecutable.run` says why)."""

    def __init__(self) -> None:
        self.calls, self.settled = 0, None

    def after_call(self) -> bool:
        """Trim if due; True if it trimmed."""
        self.calls += 1
        if self.calls == 1:
            return release_freed_heap()
        resident = resident_bytes()
        if resident is None:
            return False
        if self.settled is None:
            self.settled = resident
            return False
        if resident > self.settled + max(GROWTH_ALLOWED_BYTES, int(GROWTH_ALLOWED * self.settled)):
            return release_freed_heap()
        return False


def _set_malloc_options(*options: tuple[int, int]) -> bool:
    """`mallopt` each (parameter, value), unless the user opted out; False where that is not
    possible, or opted out."""
    mallopt = None if opted_out(ENV_VAR) else libc_function("mallopt")
    return mallopt is not None and all([bool(mallopt(*option)) for option in options])


@functools.cache
def keep_freed_buffers() -> bool:
    """From now on, memory freed in this process stays mapped for reuse (see the module
    docstring); False where that is not possible or the user opted out. Once per process."""
    return _set_malloc_options((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NEVER_TRIM), (_M_MXFAST, 0))


@functools.cache
def keep_thread_heaps() -> bool:
    """From now on, a per-thread heap that is all free stays mapped for reuse (see the module
    docstring), for programs split over devices; False where that is not possible or the
    user opted out. Once per process."""
    return _set_malloc_options((_M_TOP_PAD, THREAD_HEAP_BYTES))
