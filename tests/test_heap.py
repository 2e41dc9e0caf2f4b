"""The C heap under compiled programs (`rlsys.compiler.heap`): compiling returns what it freed
to the OS; executions reuse what earlier ones freed."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import psutil
import pytest
from tiny_programs import DOUBLINGS, doubling_program

from rlsys.compiler import compile as compile_module
from rlsys.compiler import heap
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
    out = doubling_program().compile(bounds={"T": 4}).run()
    np.testing.assert_array_equal(out["x"], DOUBLINGS)
    assert calls == [1]


# A2C on the trivial env at 1,024 envs x 250 steps (four times the scaling sweep's base
# point): 36 MiB of temporaries per iteration in one block, above the largest threshold (32
# MiB) under which glibc's malloc would keep a freed block for reuse by itself (its gradient
# runs a chunk of points at a time); or 2,048 envs split over two CPU devices: 37 MiB per
# device, allocated by each device's thread. Prints the page faults each iteration took.
_SWEEP_ITERATIONS = """
import resource
from rlsys.compiler import use_cpu_devices
use_cpu_devices({devices})
from rlsys.algos.a2c import build_a2c
from rlsys.algos.config import A2CConfig
config = A2CConfig(env="trivial:16:250", num_envs={envs}, num_steps=250,
                   total_steps=6 * {envs} * 250, iterations_per_call=1).validate()
built = build_a2c(config)
exe = built.program.compile(bounds=built.bounds, iterations_per_call=1, devices={devices})
faults, last = [], [resource.getrusage(resource.RUSAGE_SELF).ru_minflt]
def count(i, outputs):
    now = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    faults.append(now - last[0])
    last[0] = now
exe.run(on_iteration=count)
print(*faults)
"""


def _output_of(program: str, **env: str) -> str:
    """What `program` prints, run in a fresh Python with `env` (and without the opt-out
    unless `env` sets it)."""
    environ = {k: v for k, v in os.environ.items() if k != heap.ENV_VAR}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env={**environ, **env}, timeout=300, check=True)  # fmt: skip
    return done.stdout


def _faults_per_iteration(envs: int = 1024, devices: int = 1, **env: str) -> list[int]:
    program = _SWEEP_ITERATIONS.replace("{envs}", str(envs)).replace("{devices}", str(devices))
    return [int(n) for n in _output_of(program, **env).split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_iterations_reuse_the_buffers_earlier_ones_freed() -> None:
    """After the first iteration, iterations touch no fresh pages for their temporaries;
    with glibc's defaults (the opt-out) each one maps them afresh (9,200 faults)."""
    pages = 36 * MIB // 4096
    kept, default = _faults_per_iteration(), _faults_per_iteration(**{heap.ENV_VAR: "1"})
    assert len(kept) == len(default) == 6
    assert max(kept[2:]) < pages // 20, kept
    assert min(default[2:]) > pages // 2, default


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_split_iterations_reuse_what_each_devices_thread_freed() -> None:
    """Split over two devices, each device's thread allocates its 37 MiB of temporaries from
    a per-thread heap of its own; kept mapped (`keep_thread_heaps`), no fresh pages after
    the first iterations; with glibc's defaults each iteration maps them afresh."""
    pages = 2 * 37 * MIB // 4096
    kept = _faults_per_iteration(envs=2048, devices=2)
    default = _faults_per_iteration(envs=2048, devices=2, **{heap.ENV_VAR: "1"})
    assert len(kept) == len(default) == 6
    # A device's work may land on a pool thread that has not run it before, whose heap then
    # grows once (seen in a full test run: 28225 22542 11125 21 19 14 faults); so less than
    # one iteration's pages over iterations 3-6, and none to speak of in the last two.
    assert sum(kept[2:]) < pages and max(kept[4:]) < pages // 20, kept
    assert min(default[2:]) > pages // 2, default


# Frees every other one of 2,000 small chunks (so that none merges with a neighbour) and
# prints the bytes glibc then holds in fastbins (mallinfo2's fsmblks).
_FASTBIN_BYTES = """
import ctypes
from rlsys.compiler.heap import keep_freed_buffers
keep_freed_buffers()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
chunks = [libc.malloc(48) for _ in range(2000)]
for address in chunks[::2]:
    libc.free(address)
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
print(libc.mallinfo2().fsmblks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_kept_buffers_leave_no_small_chunk_waiting_in_a_fastbin() -> None:
    """Freed small chunks merge with their free neighbours at once (`M_MXFAST` 0), so that a
    call's block of temporaries finds its old place whole (module docstring); with glibc's
    defaults (the opt-out) they wait in fastbins."""
    assert int(_output_of(_FASTBIN_BYTES)) == 0
    assert int(_output_of(_FASTBIN_BYTES, **{heap.ENV_VAR: "1"})) > 10_000


def test_a_run_whose_heap_keeps_growing_is_trimmed(monkeypatch) -> None:
    """After the first call (always trimmed) and the second (its level is the settled one),
    a call trims only once resident memory has grown past that level by the allowance:
    kept freed buffers that are not reused in place (PPO on Atari) would grow without end."""
    trims = []
    monkeypatch.setattr(heap, "release_freed_heap", lambda: trims.append(len(trims)) or True)
    settled = 1000 * MIB
    allowed = max(heap.GROWTH_ALLOWED_BYTES, int(heap.GROWTH_ALLOWED * settled))
    levels = iter([settled, settled + allowed, settled + allowed + 1, settled + allowed + 1])
    monkeypatch.setattr(heap, "resident_bytes", lambda: next(levels))
    growth = heap.GrowthTrim()
    trimmed = [growth.after_call() for _ in range(5)]
    assert trimmed == [True, False, False, True, True]
    assert growth.settled == settled
    assert len(trims) == 3
