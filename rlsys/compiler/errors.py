"""Errors of recurrent-tensor programs, raised at build or compile time.

Each names the tensor, the index and the line of the user's program where it applies, and
says how to fix it: a bad program never reaches JAX.
"""

from __future__ import annotations


class RecurrenceError(Exception):
    """A recurrent-tensor program that cannot be built, compiled or run as written."""


class IndexExprError(RecurrenceError):
    """An index expression that cannot be built."""


class UnsplittableError(RecurrenceError):
    """`compile(devices=N)` of a program that cannot be split over N devices; `why` says
    what stops each way of splitting it, `host_ops` whether host ops (a host environment)
    do."""

    def __init__(self, devices: int, why: str, host_ops: bool = False) -> None:
        super().__init__(f"compile(devices={devices}): {why}. Compile it with devices=1")
        self.why, self.host_ops = why, host_ops


class ProgramTooLargeError(RecurrenceError, MemoryError):
    """A compiled program whose call needs more memory than the machine has free: running it
    would get the process killed by the kernel, not a MemoryError (memory is overcommitted,
    and fails only when touched)."""
