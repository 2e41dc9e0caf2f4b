"""Errors that reach the user as one clear line, not a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: the CLI prints it as one line plus a hint and exits 2."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
