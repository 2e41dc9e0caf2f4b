"""Ctrl-C (SIGINT) and SIGTERM while `rlsys train` runs: stop cleanly, with a checkpoint
(`StopRequests`); and before `rlsys profile` starts its command (`HeldStops`).

The first signal only asks to stop: training checks between jitted calls (`check`) and
stops there, after checkpointing what the finished calls did. Raising from the handler at
once would not be safe: the signal lands wherever the main thread is, and Python drops an
exception raised inside a callback (JAX's garbage-collection hook, seen in the first second
of a run), so training went on to its end. A second signal stops at once (a call can take
long). A checkpoint being written (`deferred`) is finished first, so that no signal leaves
one half-written; a signal mask would not do, as JAX's threads would take the signal. Once
the run is stopping (Stopped raised), any further signal ends the process at once by the
signal's default action: raised again on the way out (in `__exit__`, or in JAX's exit
handlers), it printed a traceback instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """Training stopped by a signal; `exit_code` is the shell's for it (130, 143)."""

    def __init__(self, message: str = "", exit_code: int = 128 + signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class StopRequests:
    """While entered (in the main thread), SIGINT and SIGTERM ask to stop (`requested`)."""

    def __init__(self) -> None:
        self.requested: int | None = None  # the signal that asked
        self._previous: dict[int, object] = {}
        self._deferring = False
        self._deferred: int | None = None  # a second signal while deferring
        self._stopping = False  # Stopped was raised: the process is on its way out

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self._stopping:  # already on its way out, with what it saved: end now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.requested is not None and self._deferring:
            self._deferred = signum
            return
        if self.requested is not None:
            self._stop(signum)  # the second time: at once
        self.requested = signum
        # os.write, not print: the handler may run in the middle of a print
        os.write(2, b"\nstopping after the call in progress (once more: at once)\n")

    def _stop(self, signum: int, message: str = "") -> None:
        self._stopping = True
        raise Stopped(message, exit_code=128 + signum)

    def check(self, message: str) -> None:
        """Raise Stopped(message) if a signal asked to stop."""
        if self.requested is not None:
            self._stop(self.requested, message)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Finish the block before a second signal stops the run."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._deferred is not None:
            self._stop(self._deferred)


class HeldStops(StopRequests):
    """Until `rlsys profile` starts its command (which then gets the signals): the first
    SIGINT or SIGTERM is only remembered (`requested`; the profile checks it before it
    starts the command), and a second raises Stopped at once. Raising at the first would
    not do: the signal lands in the middle of importing JAX, whose garbage-collection hook
    dropped the exception (the Ctrl-C was lost) or whose import printed it as a traceback."""

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested is not None:
            self._stop(signum)
        self.requested = signum
