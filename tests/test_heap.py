"""Compiling returns the C heap's freed memory to the OS (`rlsys.compiler.heap`)."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import psutil
import pytest

import rlsys.rt as rt
from rlsys.compiler import compile as compile_module
from rlsys.compiler.heap import release_freed_heap

MIB = 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_freed_heap_memory_leaves_the_resident_set() -> None:
    """Freed chunks between live ones stay resident until trimmed: glibc can give back
    only its heap's top by itself."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    chunk, count = 64 * 1024, 1600  # 100 MiB in chunks below glibc's mmap threshold
    chunks = [libc.malloc(chunk) for _ in range(count)]
    for address in chunks:
        ctypes.memset(address, 1, chunk)  # touched: resident
    process = psutil.Process()
    for address in chunks[:-1]:  # the last one stays, so the heap's top is not free
        libc.free(address)
    before = process.memory_info().rss
    assert release_freed_heap()
    after = process.memory_info().rss
    libc.free(chunks[-1])
    assert before - after >= 80 * MIB, (before / MIB, after / MIB)


def test_compiling_releases_the_freed_heap(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(compile_module, "release_freed_heap", lambda: calls.append(1))
    prog = rt.Program(dims=("t",))
    (t,) = prog.dims
    with prog:
        x = rt.placeholder(name="x")
        x[0] = rt.const(np.float32(1.0))
        x[t + 1] = x * 2.0
        prog.output("x", x[0:4])
    out = prog.compile(bounds={"T": 4}).run()
    np.testing.assert_array_equal(out["x"], [1.0, 2.0, 4.0, 8.0])
    assert calls == [1]
