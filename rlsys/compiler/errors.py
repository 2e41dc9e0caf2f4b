"""Errors of recurrent-tensor programs, raised at build or compile time.

Each names the tensor, the index and the line of the user's program where it applies, and
says how to fix it: a bad program never reaches JAX.
"""

from __future__ import annotations


class RecurrenceError(Exception):
    """A recurrent-tensor program that cannot be built, compiled or run as written."""


class IndexExprError(RecurrenceError):
    """An index expression that cannot be built."""
