"""Close the recording of a process that is ended by SIGTERM (or SIGHUP).

`multiprocessing.Pool.terminate` (what leaving `with Pool() as pool:` does) ends its workers
with SIGTERM, and so do `rlsys profile`'s time limit and most process managers. SIGTERM's
default action skips atexit and multiprocessing's finalizers, so the events a worker still
buffered, and the record that says its file is complete, were lost. A recording process whose
SIGTERM does the default therefore gets a handler that closes the recording and then dies of
SIGTERM as it would have (same exit status).

A Python handler runs only once the main thread is back in the interpreter. A process stuck
in C code (a lock that a fork left held, say) would then never die, and `Pool.terminate`,
which joins its workers, would wait forever. So a watcher thread, woken through the signal
module's wakeup fd (written by the C-level handler, whatever the main thread does), closes the
recording itself and SIGKILLs the process if the handler has not finished `GRACE_S` after the
signal: the default's outcome, late (exit status -9), without the lost events. It needs the
GIL: C code that holds it delays the end until it returns, as it would a Python handler.

SIGHUP (a closed terminal or SSH session) is handled the same way where its action is the
default (not under `nohup`, which ignores it), and its process dies of SIGHUP.

Installed only from the main thread, for the signals with their default action, where no one
else uses the wakeup fd; a handler the program installs later replaces this one (and the
watcher then leaves the process alone).
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
# Signals whose default action ends a process without its exit handlers, and that a process
# is ended by in the normal course of things (not SIGKILL, which cannot be handled).
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _Installed:
    def __init__(self, close: Callable[[], bool], signals: tuple[int, ...]) -> None:
        self.close = close
        self.signals = signals
        self.pid = os.getpid()
        self.handler_done = threading.Event()
        self.handling = False
        self.deferred = 0  # the signal whose handler waits for a write to end (0: none)
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # signal.set_wakeup_fd requires it
        self.watcher = threading.Thread(target=self._watch, name="rlsys-sigterm", daemon=True)

    def on_sigterm(self, signum: int, frame: object) -> None:
        """The handler of each of `signals` (named for the usual one)."""
        if os.getpid() != self.pid:  # a forked child's copy: the recording is not its own
            self.die(signum)
        if self.handling:  # signalled again while closing (the watcher's wake-up, say)
            return
        self.handling = True
        try:
            closed = self.close()
        except BaseException:  # dying anyway, as the default action would have
            closed = True
        if not closed:  # it interrupted the trace's own write: `run_deferred` resumes after it
            self.handling, self.deferred = False, signum
            return
        self.die(signum)

    def die(self, signum: int) -> None:
        self.handler_done.set()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _watch(self) -> None:
        # Python runs a handler in the main thread only, and only once that thread is back in
        # the interpreter. The kernel runs the C-level handler on any thread that does not
        # block the signal; if that is not the main thread, a main thread asleep in a system
        # call (a worker waiting for its next task) is not woken and never runs the handler.
        # So this thread blocks the signals, and wakes the main thread if the handler is late.
        signal.pthread_sigmask(signal.SIG_BLOCK, set(self.signals))
        main_thread = threading.main_thread().ident
        read_fd = self.read_fd
        try:
            while (received := os.read(read_fd, 64)) and _STOP not in received:
                signum = next((s for s in self.signals if s in received), None)
                if signum is None or not self._handler_is_ours(signum):
                    continue
                if not self.handler_done.wait(WAKE_S) and main_thread is not None:
                    signal.pthread_kill(main_thread, signum)
                if not self.handler_done.wait(GRACE_S) and self._handler_is_ours(signum):
                    with contextlib.suppress(Exception):
                        self.close()  # the main thread is stuck, perhaps not holding the GIL
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os.close(read_fd)

    def _handler_is_ours(self, signum: int) -> bool:
        return signal.getsignal(signum) == self.on_sigterm

    def restore_defaults(self) -> None:
        """Give each signal whose handler is still this one its default action back."""
        for signum in self.signals:
            if self._handler_is_ours(signum):
                signal.signal(signum, signal.SIG_DFL)

    def stop_watcher(self) -> None:
        """End the watcher thread (it closes the read end)."""
        with contextlib.suppress(OSError):
            os.write(self.write_fd, _STOP)
        os.close(self.write_fd)

    def drop(self) -> None:
        """Close both ends without signalling: a forked child's copy, or one never started."""
        os.close(self.read_fd)
        os.close(self.write_fd)


_installed: _Installed | None = None
_fork = threading.local()  # .mask: the forking thread's signal mask before `before_fork`


def close_on_sigterm(close: Callable[[], bool]) -> None:
    """Run `close` when SIGTERM or SIGHUP ends this process (see the module docstring).

    `close` returns False if the signal interrupted the very write it would do; the writer
    then calls `run_deferred` once done. Installing again replaces the handler at once (no
    moment with the default action, which would drop a SIGTERM already received).
    """
    previous = _install(close)
    if previous is not None:
        previous.stop_watcher()


def _install(close: Callable[[], bool], forked_child: bool = False) -> _Installed | None:
    """`close_on_sigterm` less ending the previous watcher; returns the one replaced.

    In a `forked_child`, a wakeup fd it inherited is the parent's (the forkserver's, say),
    of no use here: it is taken over."""
    global _installed
    previous = _installed
    if threading.current_thread() is not threading.main_thread():
        return None
    ours = (signal.SIG_DFL, previous.on_sigterm if previous else signal.SIG_DFL)
    signals = tuple(s for s in SIGNALS if signal.getsignal(s) in ours)
    if not signals:
        return None
    installed = _Installed(close, signals)
    try:
        previous_fd = signal.set_wakeup_fd(installed.write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        previous_fd = None
    theirs = previous_fd not in (-1, previous and previous.write_fd) and not forked_child
    if previous_fd is None or theirs:
        if previous_fd is not None:  # someone else's (asyncio, say): leave theirs
            signal.set_wakeup_fd(previous_fd)
        installed.drop()
        return None
    for signum in signals:
        signal.signal(signum, installed.on_sigterm)
    installed.watcher.start()
    _installed = installed
    return previous


def reclaim_wakeup_fd() -> None:
    """Point the signal wakeup fd at the watcher again where it was cleared since."""
    installed = _installed
    if installed is None or threading.current_thread() is not threading.main_thread():
        return
    previous_fd = signal.set_wakeup_fd(installed.write_fd, warn_on_full_buffer=False)
    if previous_fd not in (-1, installed.write_fd):  # someone else's since: leave theirs
        signal.set_wakeup_fd(previous_fd)


def run_deferred() -> None:
    """The end of a write that a SIGTERM's handler waited for: close, then die. (Only the
    handler's thread, the main one, defers; other threads' writes end here too.)"""
    installed = _installed
    if installed is None or threading.current_thread() is not threading.main_thread():
        return
    if installed.deferred:
        signum, installed.deferred = installed.deferred, 0
        installed.on_sigterm(signum, None)


def uninstall() -> None:
    """Undo `close_on_sigterm`, where what it set is still in place."""
    global _installed
    installed, _installed = _installed, None
    if installed is None:
        return
    if threading.current_thread() is threading.main_thread():
        installed.restore_defaults()
        previous_fd = signal.set_wakeup_fd(-1)
        if previous_fd not in (installed.write_fd, -1):  # someone else's since: keep it
            signal.set_wakeup_fd(previous_fd)
    installed.stop_watcher()


def before_fork() -> None:
    """Block the signals in the forking thread until the child has its own handler and pipe.

    A child inherits the parent's handler and wakeup pipe: a SIGTERM it received before
    `after_fork_in_child` would write into the parent's pipe (whose watcher would then
    signal the parent) and could run the parent's handler. Blocked, it waits in the kernel
    and arrives once the child is set up.
    """
    if _installed is not None:
        _fork.mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))


def after_fork_in_parent() -> None:
    mask = getattr(_fork, "mask", None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _fork.mask = None


def after_fork_in_child(close: Callable[[], bool] | None) -> None:
    """In a forked child: forget the parent's watcher (its thread does not exist here; its
    pipe is the parent's), install anew if `close` is given, then let the signals in."""
    global _installed
    parents = _installed
    if parents is not None:
        # _install swaps the handlers in place; if it installs nothing, back to the defaults
        # (where the parent's handlers are still set: not where the program set its own).
        if close is None or _install(close, forked_child=True) is None:
            _installed = None
            parents.restore_defaults()
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(-1)
        parents.drop()
    after_fork_in_parent()  # the same restoration of the forking thread's mask
