"""Run one child process and measure it from outside: wall time, peak RSS of its tree, result.

Peak RSS is the maximum over time of the summed RSS of the child and all its descendants,
polled every `poll_s`. Summing matters because the systems under test spread their memory
over worker processes (vector envs, Ray, data loaders); measuring only the top process would
reward a system for hiding memory in workers. Every descendant ever seen stays tracked even
after its parent exits, so a double fork does not escape; the child also gets its own
session, so that anything left in it can be killed as a group. Finding descendants means a
scan of all of /proc (about 0.7 ms here), so it runs every `discover_s`, not at every poll:
the poller's CPU time is taken from the 2 cores the system under test also runs on. Sums of
RSS count pages shared between processes once per process (the usual upper bound); a spike
shorter than the poll interval, or a process living less than `discover_s`, can be missed.
The kernel's own peak (ru_maxrss from wait4) is no help: on Linux it includes the runner's
memory, which the child had between fork and exec.

The child is reaped by a waiter thread blocked in `os.waitpid`, so its exit time is exact
rather than rounded to the poll interval. On timeout, Ctrl-C or normal exit, everything still
alive in the tree is killed: a benchmark leaves no processes behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from rlsys.bench.child import RESULT_ENV

STDERR_TAIL_LINES = 20


@dataclass
class Measurement:
    """What one child run produced. `result` is the child's `report()`, or None."""

    returncode: int | None
    wall_s: float
    peak_rss_bytes: int
    result: dict | None
    output_tail: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None and not self.timed_out

    def failure(self) -> str | None:
        """Why this run failed, in a few words, or None if it did not."""
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s (process tree killed)"
        if self.returncode != 0:
            return f"exited with code {self.returncode}"
        if self.result is None:
            return "exited 0 but reported no result (rlsys.bench.report was not called)"
        return None


class _Tree:
    """The processes of one child's tree, remembered once seen."""

    def __init__(self, root: psutil.Process) -> None:
        self.root = root
        self.seen: dict[int, psutil.Process] = {root.pid: root}

    def rss_bytes(self) -> int:
        """Summed RSS of every live process of the tree found so far."""
        total = 0
        for pid, proc in list(self.seen.items()):
            try:
                total += proc.memory_info().rss  # a zombie's is 0
            except psutil.NoSuchProcess:
                if pid != self.root.pid:
                    del self.seen[pid]
            except psutil.Error:
                continue
        return total

    def discover(self) -> None:
        """Track the processes forked since the last call."""
        # One scan of /proc finds the root's descendants; only processes orphaned out of the
        # root's tree (their parent exited) need a scan of their own.
        below_root = {self.root.pid}
        with contextlib.suppress(psutil.Error):
            for proc in self.root.children(recursive=True):
                self.seen.setdefault(proc.pid, proc)
                below_root.add(proc.pid)
        for pid, proc in list(self.seen.items()):
            if pid in below_root:
                continue
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    self.seen.setdefault(child.pid, child)

    def kill(self) -> None:
        """SIGKILL the whole tree (and the child's session), then wait for it to go."""
        self.discover()  # pick up anything forked since the last poll
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root.pid, signal.SIGKILL)
        alive = []
        for proc in self.seen.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()
                alive.append(proc)
        _wait_dead([p for p in alive if p.pid != self.root.pid], timeout_s=5.0)


def _wait_dead(procs: list[psutil.Process], timeout_s: float) -> None:
    """Wait until each process is gone or a zombie. A killed orphan stays a zombie until
    init reaps it, which some inits do only every second or so; a zombie runs nothing and
    holds no memory, so it need not be waited for."""
    deadline = time.monotonic() + timeout_s
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if _running(p)]
        if procs:
            time.sleep(0.01)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _Waiter(threading.Thread):
    """Blocks in waitpid on the child; records its exit time and exit code."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name=f"rlsys-bench-wait-{pid}")
        self.pid = pid
        self.done = threading.Event()
        self.end = 0.0
        self.returncode: int | None = None

    def run(self) -> None:
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            pass
        self.end = time.perf_counter()
        self.done.set()


def run_measured(
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    poll_s: float = 0.025,
    discover_s: float = 0.25,
    cwd: str | os.PathLike[str] | None = None,
) -> Measurement:
    """Run `command` to completion (or `timeout_s`), measuring it; never leaves it running."""
    with tempfile.TemporaryDirectory(prefix="rlsys-bench-") as tmp:
        result_path = Path(tmp) / "result.json"
        log_path = Path(tmp) / "output.log"
        child_env = dict(os.environ if env is None else env)
        child_env[RESULT_ENV] = str(result_path)
        with open(log_path, "wb") as log:
            start = time.perf_counter()
            proc = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=child_env, cwd=cwd, start_new_session=True,
            )  # fmt: skip
        waiter = _Waiter(proc.pid)
        waiter.start()
        tree = _Tree(psutil.Process(proc.pid))  # the pid stays ours until the waiter reaps it
        peak, timed_out, discovered = 0, False, time.perf_counter()
        try:
            peak = tree.rss_bytes()
            while not waiter.done.wait(poll_s):
                if time.perf_counter() - discovered >= discover_s:
                    tree.discover()
                    discovered = time.perf_counter()
                peak = max(peak, tree.rss_bytes())
                if time.perf_counter() - start > timeout_s:
                    timed_out = True
                    break
        finally:
            tree.kill()  # on timeout, Ctrl-C, or leftovers of a child that exited
            waiter.join()
            proc.returncode = waiter.returncode  # reaped by the waiter, not by Popen
        wall = (waiter.end if not timed_out else time.perf_counter()) - start
        return Measurement(
            returncode=waiter.returncode,
            wall_s=wall,
            peak_rss_bytes=peak,
            result=_read_result(result_path),
            output_tail=_tail(log_path, STDERR_TAIL_LINES),
            timed_out=timed_out,
        )


def _read_result(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_bytes()[-64_000:].decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
