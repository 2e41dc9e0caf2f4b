"""The compiler's machine code, handed back to the OS around a compilation meant to lower the
process's peak memory (`compile(segmented=True or "auto")`).

jaxlib's libraries (libjax_common.so above all: XLA, MLIR and LLVM) are mapped from disk,
and every page of code that runs is read in and counted in the process's resident memory
from then on. After compiling the scaling sweep's width=16 program, 108 MiB of the process's
resident memory were pages of libjax_common.so, and running the program needs few of them.
`release_compiler_code()` asks the kernel to reclaim those pages (`madvise(MADV_PAGEOUT)`,
Linux 5.4 and later): they are unmodified copies of the file, so nothing is written
anywhere, and a page that runs again is read back on its first use.

`compile` calls it before compiling a program it was asked to segment (the pages importing
JAX, building the program and earlier compilations read in; the compilation reads back what
it runs) and after compiling one that stayed segmented (the iterations read back what they
run). At the scaling sweep's width=16 and envs=64 points (segmented="auto", one device), the
peak RSS above the idle process, set by compiling: 131-140 MiB with the release after
compiling only, 98-108 with both (3 runs each); without either, the iterations' 142-162 set
it. The cost is reading the code back: a small program's compile and first call took
600-650 ms with a release after each compilation against 140-180 without, so programs
compiled unsegmented (the default) keep their pages.

Only pages that no one wrote (mappings without write permission) are given back. Set
RLSYS_KEEP_CODE_PAGES=1 to keep them; where the kernel cannot reclaim (not Linux, or older
than 5.4), nothing happens.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterator

from rlsys.compiler.heap import libc_function
from rlsys.compiler.opt_out import opted_out

ENV_VAR = "RLSYS_KEEP_CODE_PAGES"
_MADV_PAGEOUT = 21  # linux/mman.h
_MAPS = "/proc/self/maps"


@functools.cache
def _madvise():
    madvise = libc_function("madvise")
    if madvise is not None:
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def read_only_mappings(directory: str) -> Iterator[tuple[int, int]]:
    """(start, end) of this process's mappings without write permission of files under
    `directory`, from /proc/self/maps (none where it does not exist)."""
    if not os.path.exists(_MAPS):
        return
    prefix = os.path.join(os.path.realpath(directory), "")
    with open(_MAPS) as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "w" not in fields[1] and fields[5].startswith(prefix):
                start, end = (int(address, 16) for address in fields[0].split("-"))
                yield start, end


def release_compiler_code() -> int:
    """Ask the kernel to reclaim the resident pages of jaxlib's read-only mappings (module
    docstring); the bytes of the mappings it accepted, 0 if opted out or not possible."""
    madvise = _madvise()
    if madvise is None or opted_out(ENV_VAR):
        return 0
    import jaxlib

    released = 0
    for start, end in read_only_mappings(os.path.dirname(jaxlib.__file__)):
        if madvise(start, end - start, _MADV_PAGEOUT) == 0:
            released += end - start
    return released
