"""Close the recording of a process that is ended by SIGTERM.

`multiprocessing.Pool.terminate` (what leaving `with Pool() as pool:` does) ends its workers
with SIGTERM, and so do `rlsys profile`'s time limit and most process managers. SIGTERM's
default action skips atexit and multiprocessing's finalizers, so the events a worker still
buffered, and the record that says its file is complete, were lost. A recording process whose
SIGTERM does the default therefore gets a handler that closes the recording and then dies of
SIGTERM as it would have (same exit status).

A Python handler runs only once the main thread is back in the interpreter. A process stuck
in C code (a lock that a fork left held, say) would then never die, and `Pool.terminate`,
which joins its workers, would wait forever. So a watcher thread, woken through the signal
module's wakeup fd (written by the C-level handler, whatever the main thread does), SIGKILLs
the process if the handler has not finished `GRACE_S` after the signal: the default's outcome,
late, without the lost events.

Installed only from the main thread, where SIGTERM has its default action and no one else
uses the wakeup fd; a handler the program installs later replaces this one (and the watcher
then leaves the process alone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

GRACE_S = 2.0
WAKE_S = 0.1  # see _Installed._watch
# How long the handler waits for the recorder's write lock while another thread writes (the
# handler's own thread is never waited for: see Recorder.close_at_signal).
LOCK_TIMEOUT_S = 0.5
_STOP = b"\0"  # no signal has number 0


class _Installed:
    def __init__(self, close: Callable[[], bool]) -> None:
        self.close = close
        self.handler_done = threading.Event()
        self.handling = False
        self.deferred = False
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # signal.set_wakeup_fd requires it
        self.watcher = threading.Thread(target=self._watch, name="rlsys-sigterm", daemon=True)

    def on_sigterm(self, signum: int, frame: object) -> None:
        if self.handling:  # signalled again while closing (the watcher's wake-up, say)
            return
        self.handling = True
        try:
            closed = self.close()
        except BaseException:  # dying anyway, as the default action would have
            closed = True
        if not closed:  # it interrupted the trace's own write: `run_deferred` resumes after it
            self.handling, self.deferred = False, True
            return
        self.die()

    def die(self) -> None:
        self.handler_done.set()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _watch(self) -> None:
        # Python runs a handler in the main thread only, and only once that thread is back in
        # the interpreter. The kernel runs the C-level handler on any thread that does not
        # block the signal; if that is not the main thread, a main thread asleep in a system
        # call (a worker waiting for its next task) is not woken and never runs the handler.
        # So this thread blocks SIGTERM, and wakes the main thread if the handler is late.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        main_thread = threading.main_thread().ident
        read_fd = self.read_fd
        try:
            while (received := os.read(read_fd, 64)) and _STOP not in received:
                if signal.SIGTERM not in received or not self._handler_is_ours():
                    continue
                if not self.handler_done.wait(WAKE_S) and main_thread is not None:
                    signal.pthread_kill(main_thread, signal.SIGTERM)
                if not self.handler_done.wait(GRACE_S) and self._handler_is_ours():
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os.close(read_fd)

    def _handler_is_ours(self) -> bool:
        return signal.getsignal(signal.SIGTERM) == self.on_sigterm


_installed: _Installed | None = None


def close_on_sigterm(close: Callable[[], bool]) -> None:
    """Run `close` when SIGTERM ends this process (see the module docstring for when).

    `close` returns False if the signal interrupted the very write it would do; the writer
    then calls `run_deferred` once done.
    """
    global _installed
    uninstall()
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return
    installed = _Installed(close)
    try:
        previous_fd = signal.set_wakeup_fd(installed.write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        previous_fd = -1
    if previous_fd != -1:  # someone else's (asyncio, say): leave theirs
        signal.set_wakeup_fd(previous_fd)
        os.close(installed.read_fd)
        os.close(installed.write_fd)
        return
    signal.signal(signal.SIGTERM, installed.on_sigterm)
    installed.watcher.start()
    _installed = installed


def run_deferred() -> None:
    """The end of a write that a SIGTERM's handler waited for: close, then die."""
    installed = _installed
    if installed is not None and installed.deferred:
        installed.deferred = False
        installed.on_sigterm(signal.SIGTERM, None)


def uninstall() -> None:
    """Undo `close_on_sigterm`, where what it set is still in place."""
    global _installed
    installed, _installed = _installed, None
    if installed is None:
        return
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == installed.on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        previous_fd = signal.set_wakeup_fd(-1)
        if previous_fd not in (installed.write_fd, -1):  # someone else's since: keep it
            signal.set_wakeup_fd(previous_fd)
    with contextlib.suppress(OSError):
        os.write(installed.write_fd, _STOP)
    os.close(installed.write_fd)


def forget_after_fork() -> None:
    """In a forked child: the parent's watcher thread does not exist here, and its pipe is
    shared with the parent, so drop both without signalling (the caller installs anew)."""
    global _installed
    installed, _installed = _installed, None
    if installed is None:
        return
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    if signal.getsignal(signal.SIGTERM) == installed.on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.close(installed.read_fd)
    os.close(installed.write_fd)
