"""Run a command as a profiled child process: environment, signals, time limit, exit code.

The child gets RLSYS_TRACE_DIR (every Python process of it records `<pid>.jsonl` there) and
the bootstrap directory first on PYTHONPATH (its `sitecustomize` installs the automatic
operations, `rlsys.profiler.hooks`). Both are inherited by the child's own children.

Signals: a signal that came before the command starts (`run_child`'s `asked`) means it is
not started (`Interrupted`). SIGINT and SIGTERM sent to `rlsys profile` go to the child,
which ends as it would on its own (Python raises KeyboardInterrupt, closes its trace at
exit); the profile is then marked partial. Ctrl-C in a terminal already reaches the child,
which shares our process group, so the first SIGINT is not forwarded when our process group
is the terminal's foreground group; any later one is, and a third is sent as SIGTERM, a
fourth as SIGKILL (a command that ignores SIGINT would otherwise hold `rlsys profile` until
it is itself killed, and go on running without it). `max_seconds`: SIGINT at the limit,
SIGTERM `GRACE_S` later, SIGKILL `GRACE_S` after that (a killed process leaves its trace
loadable, partial). What we send goes to the child's descendants too (its own workers, which
a terminal's Ctrl-C reaches as members of the group), and any of them still running once the
child has ended are sent SIGTERM, then SIGKILL: stopping the command leaves none of it
behind.

Descendants that outlive the child (multiprocessing's forkserver and resource tracker exit
just after it) are re-parented to this process, a Linux "child subreaper", rather than to
init, so that we can find them: a command that ends on its own is done once they are too (up
to `GRACE_S`), and its profile does not read their traces half-written. Those still running
after `GRACE_S` (a server or daemon the command started) are left running, and named in
`ChildRun.left_running`, which `rlsys profile` prints as one warning line.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from rlsys.trace.annotate import TRACE_DIR_ENV

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
GRACE_S = 5.0
FORWARDED_SIGNALS = 2  # then the next is sent as SIGTERM, and any after it as SIGKILL
POLL_S = 0.05


class CommandError(RuntimeError):
    """The command could not be started (one line: which command and why)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped `rlsys profile` itself; `exit_code` is 128 + the signal."""

    def __init__(self, message: str = "", exit_code: int = 128 + signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextlib.contextmanager
def signals_interrupt():
    """While entered, SIGINT and SIGTERM raise `Interrupted`: SIGTERM's default would end the
    process at once, leaving a temporary file behind (`rlsys.profiler.atomic`)."""

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(exit_code=128 + signum)

    previous = _install(interrupt)
    try:
        yield
    finally:
        _restore(previous)


@dataclass(frozen=True)
class ChildRun:
    exit_code: int  # the child's code; 128+N when a signal N ended it
    stopped_by: str | None  # None, "interrupt" or "max-seconds"
    wall_seconds: float
    left_running: tuple[str, ...] = ()  # "PID (command line)" of each still running after it


def child_environment(trace_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: os.environ) plus RLSYS_TRACE_DIR and the bootstrap on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env[TRACE_DIR_ENV] = str(trace_dir.resolve())
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *([previous] if previous else [])])
    return env


def _terminal_sends_to_our_group() -> bool:
    """Whether a terminal Ctrl-C reaches our whole process group (so the child got it too)."""
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (AttributeError, OSError, ValueError):
        return False


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run_child(command: list[str], env: Mapping[str, str], max_seconds: float | None,
              asked: Callable[[], int | None] | None = None) -> ChildRun:  # fmt: skip
    """Run `command` to its end (see the module docstring for signals and the time limit).

    `asked()`: a signal that came before (its number, else None); then the command is not
    started (Interrupted). Our handlers go in before that check and before the command
    starts, so that no signal falls between ours and the caller's and is lost.
    """
    started = time.monotonic()
    ours_before = {p.pid for p in psutil.Process().children()}
    state = {"stopped_by": None, "signals": 0}
    running: tuple[str, ...] = ()
    stopped: dict[int, psutil.Process] = {}  # every descendant a stop was sent to
    started_child: list[subprocess.Popen] = []  # the child, once it has started

    def send(signum: int) -> None:
        if started_child:
            stopped.update(_send_to_tree(started_child[0].pid, signum))

    def forward(signum: int, frame: object) -> None:
        state["signals"] += 1
        state["stopped_by"] = state["stopped_by"] or "interrupt"
        first_ctrl_c = signum == signal.SIGINT and state["signals"] == 1
        if first_ctrl_c and _terminal_sends_to_our_group():
            return
        if state["signals"] > FORWARDED_SIGNALS:  # a command that will not stop
            stronger = signal.SIGTERM if state["signals"] == FORWARDED_SIGNALS + 1 else None
            os.write(2, b"\nrlsys profile: the command goes on: SIGTERM (once more: SIGKILL)\n"
                     if stronger else b"\nrlsys profile: SIGKILL\n")  # fmt: skip
            signum = stronger or signal.SIGKILL
        send(signum)

    previous = _install(forward)
    _adopt_orphans(True)
    try:
        signum = asked() if asked is not None else None
        if signum is not None:
            raise Interrupted("before the command started", 128 + signum)
        try:
            child = subprocess.Popen(command, env=dict(env))
        except OSError as err:
            reason = err.strerror or str(err)
            raise CommandError(f"cannot start {command[0]!r}: {reason}") from None
        started_child.append(child)
        if state["signals"]:  # came while it started: it may not have reached the child
            send(signal.SIGINT)
        escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
        next_at = started + max_seconds if max_seconds is not None else None
        while True:
            try:
                returncode = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if next_at is not None and time.monotonic() >= next_at and escalation:
                if state["stopped_by"] is None:
                    state["stopped_by"] = "max-seconds"
                send(escalation.pop(0))
                next_at = time.monotonic() + GRACE_S
        left = {p.pid: p for p in _orphans_adopted(ours_before)}
        if state["stopped_by"] is None:
            _, alive = psutil.wait_procs(list(left.values()), timeout=GRACE_S)
            running = tuple(filter(None, map(_describe, sorted(alive, key=lambda p: p.pid))))
        else:
            _end(list({**stopped, **left}.values()))
    finally:
        _adopt_orphans(False)
        _restore(previous)
    return ChildRun(_exit_code(returncode), state["stopped_by"], time.monotonic() - started,
                    running)  # fmt: skip


def _describe(process: psutil.Process, width: int = 60) -> str | None:
    """ "PID (command line)", the command line cut to `width`; None once it has ended."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        line = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return None
    if len(line) > width:
        line = line[: width - 1] + "\u2026"
    return f"{process.pid} ({line})"


def _adopt_orphans(on: bool) -> None:
    """Make this process the child subreaper of its descendants (Linux; elsewhere nothing)."""
    pr_set_child_subreaper = 36
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(pr_set_child_subreaper, int(on), 0, 0, 0)


def _orphans_adopted(ours_before: set[int]) -> list[psutil.Process]:
    """The command's descendants still running after it (now our children), and theirs."""
    left = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            if child.pid not in ours_before:
                left.append(child)
                with contextlib.suppress(psutil.Error):
                    left.extend(child.children(recursive=True))
    return left


def _send_to_tree(pid: int, signum: int) -> dict[int, psutil.Process]:
    """Send `signum` to `pid` and its descendants (listed first: once it has ended, its
    children are no longer its); returns the descendants."""
    try:
        root = psutil.Process(pid)
        descendants = {p.pid: p for p in root.children(recursive=True)}
    except psutil.Error:
        return {}
    for process in (root, *descendants.values()):
        with contextlib.suppress(psutil.Error):  # already gone
            process.send_signal(signum)
    return descendants


def _end(processes: list[psutil.Process]) -> None:
    """Those still running after `GRACE_S`: SIGTERM, and SIGKILL `GRACE_S` later."""
    _, alive = psutil.wait_procs(processes, timeout=GRACE_S)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for process in alive:
            with contextlib.suppress(psutil.Error):  # gone, or its pid reused
                process.send_signal(signum)
        _, alive = psutil.wait_procs(alive, timeout=GRACE_S)


def _install(handler) -> dict[int, object]:
    previous: dict[int, object] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread: signals stay as they are
            break
    return previous


def _restore(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]
