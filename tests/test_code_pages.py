"""jaxlib's machine code handed back to the OS around segmented compilations
(`rlsys.compiler.code_pages`)."""

from __future__ import annotations

import os
import sys

import jax
import jaxlib
import numpy as np
import pytest
from tiny_programs import DOUBLINGS, doubling_program

from rlsys.compiler import code_pages
from rlsys.compiler import compile as compile_module

MIB = 2**20


def _resident_jaxlib_bytes() -> int:
    """Resident bytes of this process's read-only mappings of jaxlib's files (smaps)."""
    spans = set(code_pages.read_only_mappings(os.path.dirname(jaxlib.__file__)))
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                start, end = (int(a, 16) for a in fields[0].split("-"))
                inside = (start, end) in spans
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_PAGEOUT)")
def test_released_code_leaves_the_resident_set(monkeypatch) -> None:
    monkeypatch.delenv(code_pages.ENV_VAR, raising=False)
    jax.jit(lambda x: np.float32(2) * x + 1)(np.ones(3, "float32")).block_until_ready()
    before = _resident_jaxlib_bytes()
    assert before > 20 * MIB  # a compilation ran much of XLA's code
    assert code_pages.release_compiler_code() > before  # the mappings' sizes, resident or not
    assert _resident_jaxlib_bytes() < before / 4
    monkeypatch.setenv(code_pages.ENV_VAR, "1")  # the opt-out
    assert code_pages.release_compiler_code() == 0


@pytest.mark.parametrize("segmented", [False, True])
def test_only_a_segmented_compilation_releases_the_code(monkeypatch, segmented) -> None:
    calls = []
    monkeypatch.setattr(compile_module, "release_compiler_code", lambda: calls.append(1))
    exe = doubling_program().compile(bounds={"T": 4}, segmented=segmented)
    np.testing.assert_array_equal(exe.run()["x"], DOUBLINGS)
    assert exe.segmented == segmented
    assert len(calls) == (2 if segmented else 0)  # before compiling, and after
